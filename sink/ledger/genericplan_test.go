package ledger_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/sink/ledger"
)

// openExplained is a ledger whose sessions send each statement's plan
// back as a notice (auto_explain, verbose: a generic plan names its
// parameters, $1 and on; a custom plan shows their values), in exec mode
// mode; it skips the test where auto_explain cannot be loaded.
func openExplained(t *testing.T, mode pgx.QueryExecMode) (*ledger.Postgres, *pgxpool.Pool, *planNotices) {
	t.Helper()
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(open(t).Pool().Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	notices := &planNotices{}
	pc.ConnConfig.DefaultQueryExecMode = mode
	pc.ConnConfig.OnNotice = notices.add
	pc.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, `LOAD 'auto_explain'`)
		if err == nil {
			_, err = c.Exec(ctx, `SET auto_explain.log_min_duration = 0; SET auto_explain.log_level = notice;
				SET auto_explain.log_verbose = on; SET client_min_messages = notice`)
		}
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pool.Ping(ctx); err != nil {
		t.Skipf("auto_explain cannot be loaded here (LOAD needs a superuser): %v", err)
	}
	return ledger.NewFromPool(pool), pool, notices
}

// The replay's read by runs is planned without its batch's values (a
// generic plan), from its first batch on, in every exec mode a pooler
// setting gives: a custom plan's estimate of a run grows with the ledger
// (0.5% of a partition's rows), and at 50M rows PostgreSQL kept planning
// every batch again and hashed the ledger's side of its join, in 8
// batches with temp files (docs/bench/ledger.md). The setting is the
// statement's own (genericplan.go): the read of started rows one by one
// keeps the server's choice (custom plans first), and the pool's session
// keeps its own plan_cache_mode.
func TestTheReplaysReadByRunsIsPlannedWithoutItsBatchsValuesFromItsFirstBatch(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec} {
		t.Run(mode.String(), func(t *testing.T) {
			l, pool, notices := openExplained(t, mode)
			ctx := context.Background()
			var batch []decide.Intent
			var started []processor.Started
			for off := range int64(40) {
				in := intent(fmt.Sprintf("generic-%d", off), "p")
				in.Offset = off
				batch = append(batch, in)
				started = append(started, processor.Started{WorkflowID: in.WorkflowID, RunID: "r", Generation: 1})
			}
			want(t, claim(t, l, batch[0]), decide.VerdictNew)
			if err := l.MarkStarted(ctx, started[:1]); err != nil {
				t.Fatal(err)
			}
			want(t, claim(t, l, batch[0]), decide.VerdictDuplicate) // a replay from here
			for range 3 {
				claim(t, l, batch...) // the first claims, the rest read by runs
				if err := l.MarkStarted(ctx, started); err != nil {
					t.Fatal(err)
				}
				// Records 10 offsets apart: read one by one (startedSQL).
				want(t, claim(t, l, batch[0], batch[10], batch[20], batch[30]), decide.VerdictDuplicate, decide.VerdictDuplicate,
					decide.VerdictDuplicate, decide.VerdictDuplicate)
			}
			byRuns := notices.of(ledger.StartedByRangeSQL)
			if len(byRuns) < 3 {
				t.Fatalf("the read by runs sent back %d plans, want one for each of its 3 batches at least", len(byRuns))
			}
			for i, p := range byRuns {
				if !generic(p, ledger.StartedByRangeSQL) {
					t.Errorf("batch %d of the read by runs ran a plan made for its values (custom), want a generic one:\n%s", i+1, p)
					break
				}
			}
			oneByOne := notices.of(ledger.StartedSQL)
			if len(oneByOne) == 0 {
				t.Fatal("the read of started rows one by one sent back no plan")
			}
			if generic(oneByOne[0], ledger.StartedSQL) {
				t.Errorf("the read one by one ran its first batch with a generic plan, want the server's choice (custom for the first five):\n%s", oneByOne[0])
			}
			var mode string
			if err := pool.QueryRow(ctx, `SHOW plan_cache_mode`, pgx.QueryExecModeSimpleProtocol).Scan(&mode); err != nil || mode != "auto" {
				t.Errorf("the pool's session has plan_cache_mode %q (%v), want its own, auto", mode, err)
			}
		})
	}
}

// generic tells whether the plan auto_explain sent back for the statement
// sql (verbose) was made without its parameters' values: its function
// calls name them ($1), where a custom plan's show the values.
func generic(notice, sql string) bool {
	_, plan, ok := strings.Cut(notice, strings.TrimSpace(sql))
	return ok && strings.Contains(plan, "unnest($1")
}
