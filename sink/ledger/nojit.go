package ledger

// The ledger's batch statements (the claim, the mark and the two reads of
// a replay, each run by queryEncoded) run with PostgreSQL's JIT off:
// queryEncoded sends jitOffSQL before each of them (before the read by
// runs genericPlanSQL, which sets plan_cache_mode too: genericplan.go) in
// one pipeline, ended by one Sync, so that both are one implicit transaction and the setting
// (set_config's is_local) ends with it. Nothing is left on the session,
// so a transaction pooler may hand it to any client next, and a server's
// or database's own jit setting holds for every other statement.
//
// The JIT (on by default since PostgreSQL 12) compiles a statement whose
// estimated cost passes jit_above_cost (100,000), and the estimate of the
// replay's read by runs (startedByRangeSQL) grows with the ledger, not
// with what it reads: a run's offsets are parameters, so the planner takes
// a range of them to hold 0.5% of a partition's rows (20,947 rows a run
// at 50M rows, against 83 read). At 50M rows every batch of a replay was
// compiled, for 300 to 550 ms each, and the replay claimed 1,938 records
// a second against 152,933 with the JIT off (docs/bench/ledger.md). The
// claim's and the mark's estimates grow with their batch. None of them
// runs long enough for compiled expressions to pay for their compilation.
// TestTheLedgersBatchStatementsAreNeverJITCompiled holds it, in every exec
// mode a postgres.pooler setting gives; the tests in nojit_internal_test.go
// that every end of such a statement (an error, a stop, a cancel, a
// session ended) leaves its session as it found it, jit included, behind
// PgBouncer too. Every server the ledger runs on has the setting: it came
// in PostgreSQL 11, with sha256(), which migration 00012 needs
// (plan_cache_mode in 12).
const jitOffSQL = `SELECT set_config('jit', 'off', true)`
