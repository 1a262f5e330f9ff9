package ledger_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/sink/ledger"
)

// openExplained is a ledger whose sessions send each statement's plan
// back as a notice (auto_explain, verbose: a generic plan names its
// parameters, $1 and on; a custom plan shows their values), in exec mode
// mode; it skips the test where auto_explain cannot be loaded.
func openExplained(t *testing.T, mode pgx.QueryExecMode) (*ledger.Postgres, *pgxpool.Pool, *planNotices) {
	t.Helper()
	pool, notices := explainedPool(t, open(t).Pool().Config().ConnString(), `SET auto_explain.log_verbose = on`,
		func(pc *pgxpool.Config) { pc.ConnConfig.DefaultQueryExecMode = mode })
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
			batch, started := aReplay(t, l, "generic", 40)
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

// A pool whose sessions set their own plan_cache_mode (here
// force_custom_plan, in the connection string's options) keeps it for
// every statement of the ledger's but the read by runs: on its one
// session, after every batch of the read by runs (generic), the read
// one by one is planned for its values every time, past the five custom
// plans PostgreSQL's own choice would give, and the session still shows
// its setting.
func TestTheReadByRunsLeavesASessionsOwnPlanCacheModeToItsNextStatements(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe} {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := context.Background()
			pool, notices := explainedPool(t, open(t).Pool().Config().ConnString(), `SET auto_explain.log_verbose = on`, func(pc *pgxpool.Config) {
				pc.MaxConns = 1
				pc.ConnConfig.DefaultQueryExecMode = mode
				pc.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
			})
			l := ledger.NewFromPool(pool)
			batch, started := aReplay(t, l, "own-mode", 40)
			for range 8 {
				claim(t, l, batch...)
				if err := l.MarkStarted(ctx, started); err != nil {
					t.Fatal(err)
				}
				want(t, claim(t, l, batch[0], batch[10], batch[20], batch[30]), decide.VerdictDuplicate, decide.VerdictDuplicate,
					decide.VerdictDuplicate, decide.VerdictDuplicate)
			}
			byRuns := notices.of(ledger.StartedByRangeSQL)
			if len(byRuns) < 8 {
				t.Fatalf("the read by runs sent back %d plans, want 8 at least", len(byRuns))
			}
			for i, p := range byRuns {
				if !generic(p, ledger.StartedByRangeSQL) {
					t.Errorf("batch %d of the read by runs ran a custom plan:\n%s", i+1, p)
					break
				}
			}
			oneByOne := notices.of(ledger.StartedSQL)
			if len(oneByOne) < 6 {
				t.Fatalf("the read one by one sent back %d plans, want 6 at least (past the five custom ones)", len(oneByOne))
			}
			for i, p := range oneByOne {
				if generic(p, ledger.StartedSQL) {
					t.Errorf("batch %d of the read one by one, after a read by runs on its session, ran a generic plan; the session's own plan_cache_mode is force_custom_plan:\n%s", i+1, p)
					break
				}
			}
			var plans string
			if err := pool.QueryRow(ctx, `SHOW plan_cache_mode`, pgx.QueryExecModeSimpleProtocol).Scan(&plans); err != nil || plans != "force_custom_plan" {
				t.Errorf("the session's plan_cache_mode %q (%v), want its own, force_custom_plan", plans, err)
			}
		})
	}
}

// The read by runs answers as a look-up of each ID by its key on a
// generic plan too, and on one a prepared statement made while the
// ledger was small and kept while it grew 40 times (no ANALYZE between),
// and after an ANALYZE: random ledgers and batches (rows started,
// pending, re-run, under another key, claimed by another record; IDs of
// another payload, retried at another offset, never claimed; runs that
// hold some of the IDs, gaps, several partitions and topics), each
// answer compared row for row with the key look-up's.
func TestTheReadByRunsOnAGenericPlanCachedBeforeTheLedgerGrewAnswersAsEachIDsKeyLookUp(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	generic := poolOn(t, l.Pool().Config().ConnString(), func(pc *pgxpool.Config) {
		pc.MaxConns = 1
		pc.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	})
	rng := rand.New(rand.NewPCG(73, 7))
	var rows []readRow
	topics := []string{"events", "audit"}
	fill := func(from, to int64) {
		t.Helper()
		b := &pgx.Batch{}
		for _, topic := range topics {
			for part := range int32(3) {
				for off := from; off < to; off++ {
					for r := range 1 + rng.IntN(2) {
						id := fmt.Sprintf("activity-g%d:%s-%d-%d", r, topic, part, off)
						x := readRow{id: id, topic: topic, part: part, off: off, hash: sha256.Sum256([]byte(id))}
						state, gen, key, stored := "started", 1, schemas.LedgerKey(id), off
						switch rng.IntN(10) {
						case 0:
							state = "pending"
						case 1:
							gen = 2
						case 2:
							key = schemas.LedgerKey(id + "-not")
						case 3:
							stored += 100000 // claimed by another record
						}
						var runID, started any
						if state == "started" {
							runID, started = "r", "2026-12-06"
						}
						b.Queue(`INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset, key, state, run_id, started_at, generation)
							VALUES ($1, 'a', $1, 'field', $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
							id, x.hash[:], topic, part, stored, key, state, runID, started, gen)
						rows = append(rows, x)
					}
				}
			}
		}
		if err := l.Pool().SendBatch(ctx, b).Close(); err != nil {
			t.Fatal(err)
		}
	}
	batches := func(phase string, span int) {
		t.Helper()
		for batch := range 15 {
			b := randomReadBatch(rng, rows, span/4+1, span+1)
			want := readAnswers(t, l.Pool(), byKeySQL, b.keyArgs()...)
			got := readAnswers(t, generic, ledger.StartedByRangeSQL, b.runArgs()...)
			if !slices.Equal(got, want) {
				t.Fatalf("%s, batch %d (%d IDs, %d runs): the read by runs on a generic plan answers %d rows, the key look-up %d\nby runs: %v\nby key:  %v",
					phase, batch, len(b.ids), len(b.rts), len(got), len(want), got, want)
			}
		}
	}
	fill(0, 10)
	if _, err := l.Pool().Exec(ctx, `ANALYZE dedup_ledger`); err != nil {
		t.Fatal(err)
	}
	batches("a small ledger", 10)
	fill(10, 400)
	batches("the ledger grown 40 times, the plan kept", 400)
	if _, err := l.Pool().Exec(ctx, `ANALYZE dedup_ledger`); err != nil {
		t.Fatal(err)
	}
	batches("after ANALYZE", 400)
	var gplans, cplans int64
	if err := generic.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`,
		ledger.StartedByRangeSQL).Scan(&gplans, &cplans); err != nil {
		t.Fatal(err)
	}
	if gplans < 45 || cplans != 0 {
		t.Errorf("the read by runs ran %d generic plans and %d custom ones, want 45 generic", gplans, cplans)
	}
}

// A session whose read by runs holds a generic plan (a prepared
// statement's, kept for the session) when a migration widens a column it
// answers (generation to bigint: "cached plan must not change result
// type") answers the next replay batch as before, after preparing it
// again, and leaves its session's plan_cache_mode its own.
func TestTheReadByRunsPreparedWithAGenericPlanAnswersAfterAMigrationWidensAColumn(t *testing.T) {
	l0 := open(t)
	ctx := context.Background()
	pool := poolOn(t, l0.Pool().Config().ConnString(), func(pc *pgxpool.Config) { pc.MaxConns = 1 })
	l := ledger.NewFromPool(pool)
	batch, started := aReplay(t, l, "widen", 40)
	claim(t, l, batch...)
	if err := l.MarkStarted(ctx, started); err != nil {
		t.Fatal(err)
	}
	all := make([]decide.Verdict, len(batch))
	for i := range all {
		all[i] = decide.VerdictDuplicate
	}
	want(t, claim(t, l, batch...), all...) // the read by runs, prepared with a generic plan
	if _, err := l0.Pool().Exec(ctx, `ALTER TABLE dedup_ledger ALTER COLUMN generation TYPE bigint`); err != nil {
		t.Fatal(err)
	}
	other := batch[5]
	other.PayloadHash[0]++ // a conflict, answered by the read
	batch[5] = other
	all[5] = decide.VerdictConflict
	cl, err := l.Claim(ctx, batch)
	if err != nil {
		t.Fatalf("the replay's batch after the migration: %v", err)
	}
	for i, c := range cl {
		if c.Verdict != all[i] {
			t.Errorf("intent %d after the migration: %v, want %v", i, c.Verdict, all[i])
		}
	}
	var plans string
	if err := pool.QueryRow(ctx, `SHOW plan_cache_mode`, pgx.QueryExecModeSimpleProtocol).Scan(&plans); err != nil || plans != "auto" {
		t.Errorf("the session's plan_cache_mode %q (%v), want auto", plans, err)
	}
}

// A session's read by runs keeps the generic plan its prepared statement
// made on its first batch (genericplan.go: once a session): made while
// the ledger was small, it must still read a run by its offsets, not
// scan the ledger, once the ledger has grown (here 200,000 rows of
// another partition, no ANALYZE since).
func TestTheReadByRunsPlanMadeOnASmallLedgerScansNoWholeLedgerOnceItGrew(t *testing.T) {
	l0 := open(t)
	ctx := context.Background()
	pool, notices := explainedPool(t, l0.Pool().Config().ConnString(), `SET auto_explain.log_verbose = on; SET auto_explain.log_analyze = on`,
		func(pc *pgxpool.Config) { pc.MaxConns = 1 })
	l := ledger.NewFromPool(pool)
	batch, started := aReplay(t, l, "small", 40)
	claim(t, l, batch...)
	if err := l.MarkStarted(ctx, started); err != nil {
		t.Fatal(err)
	}
	claim(t, l, batch...)
	if _, err := l0.Pool().Exec(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset, key, state, run_id, started_at, generation)
		SELECT 'g-' || x, 'a', 'g-' || x, 'field', '\x00', 'events', x % 4 + 1, x, md5(x::text)::uuid, 'started', 'r', now(), 1 FROM generate_series(1, 200000) x`); err != nil {
		t.Fatal(err)
	}
	notices.mu.Lock()
	notices.plans = nil
	notices.mu.Unlock()
	claim(t, l, batch...)
	byRuns := notices.of(ledger.StartedByRangeSQL)
	if len(byRuns) == 0 {
		t.Fatal("no plan of the read by runs")
	}
	t.Logf("%s", byRuns[len(byRuns)-1])
	if strings.Contains(byRuns[len(byRuns)-1], "Seq Scan on public.dedup_ledger") {
		t.Errorf("the read by runs scans the whole ledger")
	}
}

// generic, the check of TestTheReplaysReadByRunsIsPlannedWithoutItsBatchsValuesFromItsFirstBatch,
// tells a custom plan of the read by runs from a generic one: the same
// statement, run through pgx by a session forcing each, is told apart.
func TestGenericTellsACustomPlanOfTheReadByRunsFromAGenericOne(t *testing.T) {
	l, pool, notices := openExplained(t, pgx.QueryExecModeCacheStatement)
	_ = l
	ctx := context.Background()
	args := []any{[]string{"a"}, [][]byte{{1}}, [][16]byte{{1}}, []string{""}, []int32{1}, []int64{1}, []int64{1},
		[]string{"events"}, []int32{1}, []int64{0}, []int64{10}}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec(ctx, `SET plan_cache_mode = `+mode); err != nil {
			t.Fatal(err)
		}
		notices.mu.Lock()
		notices.plans = nil
		notices.mu.Unlock()
		rows, err := c.Query(ctx, ledger.StartedByRangeSQL, args...)
		if err != nil {
			t.Fatal(err)
		}
		rows.Close()
		if _, err := c.Exec(ctx, `RESET plan_cache_mode`); err != nil {
			t.Fatal(err)
		}
		c.Release()
		ps := notices.of(ledger.StartedByRangeSQL)
		if len(ps) != 1 {
			t.Fatalf("%s: %d plans", mode, len(ps))
		}
		if got := generic(ps[0], ledger.StartedByRangeSQL); got != (mode == "force_generic_plan") {
			t.Errorf("%s: generic says %v:\n%s", mode, got, ps[0])
		}
	}
}
