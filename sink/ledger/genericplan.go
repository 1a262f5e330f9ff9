package ledger

import (
	"context"
	"database/sql"
	"fmt"
)

// The replay's read by runs (startedByRangeSQL) runs with a generic plan,
// one made without its batch's values: queryEncoded sends genericPlanSQL
// before it, as jitOffSQL before the ledger's other batch statements, in
// the same pipeline and implicit transaction, so that the setting is the
// statement's own and ends with it (nojit.go). Its JIT stays off too.
//
// A plan made for a batch's values (custom: PostgreSQL's first five for
// a prepared statement, and for as long after as they look cheaper)
// counts the batch's input rows, 1,000 for a replay's poll, but cannot
// count a run's ledger rows: the run's offsets come from the input, so
// the planner takes a range of them to hold 0.5% of a partition's rows,
// 20,986 a run at 50M rows against the 83 it reads. It then hashes the
// ledger's side of the FULL JOIN (251,832 rows estimated, 35 MB, over
// work_mem: 8 batches written to temp files, for 1,000 rows), and as
// that plan never looks dearer than a generic one, PostgreSQL makes it
// again for every batch. At 50M rows every batch of a replay did both
// (auto_explain's plans of a run, docs/bench/ledger.md). A generic plan
// counts a few elements in each array and hashes the input, in one
// batch, whatever the ledger's size; a prepared statement
// (QueryExecModeCacheStatement) makes it once a session. With it a replay
// at 50M rows claimed 286,571 and 267,099 rows/s (0.86 and 0.84 of its
// rate at 0.1M), and the build before it 183,587 and 157,469, in runs
// that alternated (docs/bench/ledger.md).
//
// Only the read by runs: the read of started rows one by one (startedSQL)
// goes down an index per ID, and a plan for its values did better at 50M
// rows (0.99 of its 0.1M rate against 0.65 with generic plans), as it
// does for the claim and the mark, which keep the server's choice.
// TestTheReplaysReadByRunsIsPlannedWithoutItsBatchsValuesFromItsFirstBatch
// holds it in every exec mode a postgres.pooler setting gives. The
// setting came in PostgreSQL 12: on an older server every batch of a
// replay's read by runs would fail, so the ledger refuses one where it
// migrates, at every process's start (checkServer).
const genericPlanSQL = `SELECT set_config('jit', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true)`

// checkServer refuses a server without plan_cache_mode (before PostgreSQL
// 12), naming its version.
func checkServer(ctx context.Context, db *sql.DB) error {
	var (
		num     int
		version string
	)
	if err := db.QueryRowContext(ctx, `SELECT current_setting('server_version_num')::int, current_setting('server_version')`).Scan(&num, &version); err != nil {
		return fmt.Errorf("reading the server's version: %w", err)
	}
	return serverSupported(num, version)
}

// serverSupported is checkServer's verdict on a server_version_num and
// server_version.
func serverSupported(num int, version string) error {
	if num < 120000 {
		return fmt.Errorf("the ledger's server is PostgreSQL %s: dedup needs PostgreSQL 12 or later "+
			"(a replay's read sets plan_cache_mode, which came in 12; 11 is out of support since November 2023)", version)
	}
	return nil
}
