package ledger_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/sink/ledger"
)

// BenchmarkClaimByExecMode is the cost of one claim of 100 new events in
// each of pgx's exec modes, on a direct connection: the named prepared
// statement of pgx's default (which a transaction pooler cannot keep)
// against CacheDescribe, which needs none (postgres.pooler: transaction
// uses it). pgx's third such mode, Exec, cannot run the claim at all: it
// guesses each parameter's type from its Go type and has none for the
// keys ([][16]byte as uuid[]). docs/runbook.md ("Behind PgBouncer") has the
// figures.
func BenchmarkClaimByExecMode(b *testing.B) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe} {
		b.Run(mode.String(), func(b *testing.B) {
			url := pgtest.NewDatabase(b)
			ctx := context.Background()
			if err := ledger.Migrate(ctx, url); err != nil {
				b.Fatal(err)
			}
			pc, err := pgxpool.ParseConfig(url)
			if err != nil {
				b.Fatal(err)
			}
			pc.ConnConfig.DefaultQueryExecMode = mode
			pool, err := pgxpool.NewWithConfig(ctx, pc)
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			l := ledger.NewFromPool(pool)
			in := make([]decide.Intent, 100)
			b.ResetTimer()
			for n := range b.N {
				for i := range in {
					in[i] = intent(fmt.Sprintf("b%d-e%d", n, i), "p")
				}
				if _, err := l.Claim(ctx, in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
