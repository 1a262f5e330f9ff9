package ledger_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/sink/ledger"
)

// BenchmarkClaimByExecMode is the cost of one claim of 100 new events in
// each of pgx's exec modes, on a direct connection: the named prepared
// statement of pgx's default (which a transaction pooler cannot keep)
// against CacheDescribe, which needs none (postgres.pooler: transaction
// uses it). The claim's parameters are encoded by the ledger (arrays.go),
// so both modes send the same bytes. docs/runbook.md ("Behind PgBouncer")
// has the figures.
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

// BenchmarkClaimStartedRows is a replay's claim: 1,000 intents of 800
// records (a fifth of them with two routes), a quarter of the records
// copies of an earlier one in the batch (a producer's retries), every row
// started with the intent's payload. With no memory of started rows, each
// claim reads them all (the read of started rows, startedread.go). Its
// cost is the client's: what the router spends on a duplicate's claim
// besides the round trip (integration/bench/instructions.sh counts it).
func BenchmarkClaimStartedRows(b *testing.B) {
	benchClaimStartedRows(b, func(rec int) (int32, int64) { return int32(rec % 8), int64(rec) })
}

// BenchmarkClaimStartedRowsOfAPoll is BenchmarkClaimStartedRows as a
// router's poll brings them: each of the 8 partitions' records at
// consecutive offsets, read by their runs (startedByRangeSQL).
func BenchmarkClaimStartedRowsOfAPoll(b *testing.B) {
	benchClaimStartedRows(b, func(rec int) (int32, int64) { return int32(rec / 100 % 8), int64(rec) })
}

func benchClaimStartedRows(b *testing.B, record func(rec int) (int32, int64)) {
	url := pgtest.NewDatabase(b)
	ctx := context.Background()
	if err := ledger.Migrate(ctx, url); err != nil {
		b.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	l := ledger.NewFromPool(pool)
	var in []decide.Intent
	for rec := 0; len(in) < 1000; rec++ {
		ev := rec
		if rec%4 == 3 {
			ev = rec - 2 // a retry: an earlier record's event again
		}
		for r := range 1 + min(rec%5/4, 1) {
			x := intent(fmt.Sprintf("route%d-evt-%09d", r, ev), fmt.Sprintf("payload %d", ev))
			x.Partition, x.Offset = record(rec)
			in = append(in, x)
		}
	}
	in = in[:1000]
	if _, err := l.Claim(ctx, in); err != nil {
		b.Fatal(err)
	}
	started := make([]processor.Started, len(in))
	for i, x := range in {
		started[i] = processor.Started{WorkflowID: x.WorkflowID, RunID: "r", Generation: 1}
	}
	if err := l.MarkStarted(ctx, started); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		v, err := l.Claim(ctx, in)
		if err != nil {
			b.Fatal(err)
		}
		if v[0].Verdict != decide.VerdictDuplicate || v[len(v)-1].Verdict != decide.VerdictDuplicate {
			b.Fatalf("a claim of started rows: %s, %s", v[0].Verdict, v[len(v)-1].Verdict)
		}
	}
}
