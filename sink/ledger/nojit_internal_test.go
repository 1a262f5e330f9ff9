package ledger

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupio/dedup/internal/testsupport/pgbouncer"
	"github.com/dedupio/dedup/internal/testsupport/pgtest"
)

// pipelineModes are the exec modes queryEncoded runs in: prepared, and
// the two a transaction pooler's setting gives.
var pipelineModes = []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec}

// onePipelined is a Postgres on a pool of one session, in exec mode mode,
// whose session sets jit on itself (its own setting, which no batch
// statement may change), and its pool.
func onePipelined(t *testing.T, mode pgx.QueryExecMode) (*Postgres, *pgxpool.Pool) {
	return onePipelinedWith(t, mode, nil)
}

// onePipelinedWith is onePipelined whose session starts with the
// run-time parameters params too (its own settings).
func onePipelinedWith(t *testing.T, mode pgx.QueryExecMode, params map[string]string) (*Postgres, *pgxpool.Pool) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 1
	pc.ConnConfig.DefaultQueryExecMode = mode
	for k, v := range params {
		pc.ConnConfig.RuntimeParams[k] = v
	}
	pc.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, `SET jit = on`)
		return err
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return NewFromPool(pool), pool
}

func int8Param(x int64) [][]byte { return [][]byte{binary.BigEndian.AppendUint64(nil, uint64(x))} }

// sessionOf is the pool's one session's backend PID.
func sessionOf(t *testing.T, pool *pgxpool.Pool) uint32 {
	t.Helper()
	c, err := pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	return c.Conn().PgConn().PID()
}

// cleanSession fails the test unless the pool's one session is idle, out
// of any transaction, with its own jit setting (on) and plan_cache_mode
// (auto), and is still the session pid (0: any).
func cleanSession(t *testing.T, pool *pgxpool.Pool, pid uint32, after string) {
	t.Helper()
	ctx := context.Background()
	c, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	pc := c.Conn().PgConn()
	if pc.IsClosed() || pc.IsBusy() || pc.TxStatus() != 'I' {
		t.Errorf("after %s: the session is closed %v, busy %v, in transaction status %q; want an idle session", after, pc.IsClosed(), pc.IsBusy(), pc.TxStatus())
	}
	if pid != 0 && pc.PID() != pid {
		t.Errorf("after %s: the pool's session is backend %d, want %d (the session was dropped)", after, pc.PID(), pid)
	}
	var jit, plans string
	if err := c.Conn().QueryRow(ctx, `SELECT current_setting('jit'), current_setting('plan_cache_mode')`, pgx.QueryExecModeSimpleProtocol).Scan(&jit, &plans); err != nil || jit != "on" || plans != "auto" {
		t.Errorf("after %s: the session's jit is %q and plan_cache_mode %q (%v), want its own settings, on and auto", after, jit, plans, err)
	}
}

// series runs through queryEncoded the statement sql of one int8
// parameter, n, and calls row with each answer row's first column. It
// runs it after genericPlanSQL, which sets what jitOffSQL sets and
// plan_cache_mode too: neither may outlive the statement.
func series(ctx context.Context, p *Postgres, name, sql string, n int64, row func(i int, col []byte) error) error {
	i := 0
	return p.queryEncoded(ctx, genericPlanSQL, name, sql, []uint32{oidInt8}, int8Param(n), func() []any { return []any{n} }, func(cols [][]byte) error {
		i++
		return row(i, cols[0])
	})
}

// A statement queryEncoded runs in a pipeline after jitOffSQL may end
// in every way a statement ends: its reader refuses a row mid-answer,
// stops reading early, the server fails it after some rows, or fails its
// implicit transaction's commit (a deferred constraint) after all of
// them. Each is answered as pgx's own Query would answer it, and leaves
// the session where it was: the same session, idle, out of any
// transaction, with its own jit setting, and the next statement on it
// answers whole.
func TestEveryEndOfAPipelinedStatementLeavesItsSessionCleanAndUsable(t *testing.T) {
	for _, mode := range pipelineModes {
		t.Run(mode.String(), func(t *testing.T) {
			p, pool := onePipelined(t, mode)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := pool.Exec(ctx, `CREATE TABLE u (x int8 UNIQUE DEFERRABLE INITIALLY DEFERRED); INSERT INTO u VALUES (1)`); err != nil {
				t.Fatal(err)
			}
			pid := sessionOf(t, pool)
			const seriesSQL = `SELECT x FROM generate_series(1, $1::int8) x`
			whole := func(after string) {
				t.Helper()
				rows := 0
				if err := series(ctx, p, "test_series", seriesSQL, 5, func(int, []byte) error { rows++; return nil }); err != nil || rows != 5 {
					t.Errorf("after %s: the next statement answered %d rows (%v), want 5", after, rows, err)
				}
				cleanSession(t, pool, pid, after)
			}
			whole("nothing")

			refused := errors.New("a row refused")
			err := series(ctx, p, "test_series", seriesSQL, 5, func(i int, _ []byte) error {
				if i == 2 {
					return refused
				}
				return nil
			})
			if !errors.Is(err, refused) {
				t.Errorf("a row refused mid-answer: %v, want the row's error", err)
			}
			whole("a row refused mid-answer")

			rows := 0
			err = series(ctx, p, "test_series", seriesSQL, 5, func(int, []byte) error {
				if rows++; rows == 2 {
					return errStopReading
				}
				return nil
			})
			if err != nil || rows != 2 {
				t.Errorf("a read stopped at row 2: %d rows read, %v; want 2, no error", rows, err)
			}
			whole("a read stopped early")

			rows = 0
			err = series(ctx, p, "test_div", `SELECT 1 / (3 - x) FROM generate_series(1, $1::int8) x`, 5, func(int, []byte) error { rows++; return nil })
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "22012" || rows != 2 {
				t.Errorf("a statement the server failed after 2 rows: %d rows, %v; want 2 and SQLSTATE 22012", rows, err)
			}
			whole("a statement failed after rows")

			rows = 0
			err = series(ctx, p, "test_deferred", `INSERT INTO u SELECT $1::int8 RETURNING x`, 1, func(int, []byte) error { rows++; return nil })
			if !errors.As(err, &pe) || pe.Code != "23505" {
				t.Errorf("a statement whose commit failed (a deferred unique constraint): %v after %d rows, want SQLSTATE 23505", err, rows)
			}
			var n int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM u`).Scan(&n); err != nil || n != 1 {
				t.Errorf("%d rows in u after the failed commit (%v), want 1", n, err)
			}
			whole("a commit that failed")
		})
	}
}

// The settings hold for the statement and for it only (nojit.go,
// genericplan.go): the statement itself sees jit off and plan_cache_mode
// force_generic_plan, on its first run and on the run after
// its prepared statement went missing from its session (DEALLOCATE ALL,
// DISCARD ALL), and the session sees its own settings after either.
func TestAPipelinedStatementSeesJITOffAndItsSessionNeverDoes(t *testing.T) {
	for _, mode := range pipelineModes {
		t.Run(mode.String(), func(t *testing.T) {
			p, pool := onePipelined(t, mode)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			pid := sessionOf(t, pool)
			seen := func(what string) {
				t.Helper()
				var jit string
				err := series(ctx, p, "test_jit", `SELECT current_setting('jit') || ' ' || current_setting('plan_cache_mode') || $1::int8::text`, 0, func(_ int, col []byte) error {
					jit = string(col)
					return nil
				})
				if err != nil || jit != "off force_generic_plan0" {
					t.Errorf("%s: the statement saw jit and plan_cache_mode %q (%v), want off force_generic_plan", what, jit, err)
				}
				cleanSession(t, pool, 0, what)
			}
			seen("the first run")
			seen("the second run")
			for _, forget := range []string{`DEALLOCATE ALL`, `DISCARD ALL`} {
				if _, err := pool.Exec(ctx, forget, pgx.QueryExecModeSimpleProtocol); err != nil {
					t.Fatal(err)
				}
				if _, err := pool.Exec(ctx, `SET jit = on`, pgx.QueryExecModeSimpleProtocol); err != nil { // DISCARD ALL reset it to the server's
					t.Fatal(err)
				}
				seen("a run after " + forget)
				if sessionOf(t, pool) != pid {
					t.Errorf("after %s: the session was dropped", forget)
				}
			}
		})
	}
}

// A statement whose context ends while the server runs it ends with the
// context's error, and the pool then serves a session with its own jit
// setting, out of any transaction, whose next statement answers.
func TestAPipelinedStatementWhoseContextEndsLeavesThePoolServing(t *testing.T) {
	for _, mode := range pipelineModes {
		t.Run(mode.String(), func(t *testing.T) {
			p, pool := onePipelined(t, mode)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			err := series(ctx, p, "test_sleep", `SELECT 1 FROM pg_sleep(30), generate_series(1, $1::int8)`, 1, func(int, []byte) error { return nil })
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("a statement past its deadline: %v, want context.DeadlineExceeded", err)
			}
			rows := 0
			if err := series(context.Background(), p, "test_nosleep", `SELECT 1 FROM pg_sleep(0), generate_series(1, $1::int8)`, 3, func(int, []byte) error { rows++; return nil }); err != nil || rows != 3 {
				t.Errorf("the next statement: %d rows, %v; want 3", rows, err)
			}
			cleanSession(t, pool, 0, "a statement past its deadline")
		})
	}
}

// Behind PgBouncer in transaction pooling the server session a batch
// statement ran on goes to the next client as soon as its implicit
// transaction ends: the settings sent before it (jitOffSQL,
// genericPlanSQL) must end with it, whether the statement
// answered, was read only in part, failed after rows, or failed its
// commit. Here PgBouncer has one server session, so the other client's
// statements after each run on the very session the ledger's ran on, and
// see the server's jit setting (on) and plan_cache_mode (auto), never the
// ledger's statement's, which itself sees jit off.
func TestNoBatchStatementLeavesJITOffOnTheServerSessionATransactionPoolerHandsOn(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	direct, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = direct.Close(context.Background()) }()
	if _, err := direct.Exec(ctx, `CREATE TABLE u (x int8 UNIQUE DEFERRABLE INITIALLY DEFERRED); INSERT INTO u VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	var serverJIT string
	if err := direct.QueryRow(ctx, `SHOW jit`).Scan(&serverJIT); err != nil || serverJIT != "on" {
		t.Skipf("the server's jit is %q (%v): the case needs it on", serverJIT, err)
	}
	b := pgbouncer.Start(t, url, pgbouncer.Options{Mode: pgbouncer.Transaction, PoolSize: 1})
	other, err := pgx.Connect(ctx, b.URL(url))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Close(context.Background()) }()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec} {
		t.Run(mode.String(), func(t *testing.T) {
			pc, err := pgxpool.ParseConfig(b.URL(url))
			if err != nil {
				t.Fatal(err)
			}
			pc.ConnConfig.DefaultQueryExecMode = mode
			pool, err := pgxpool.NewWithConfig(ctx, pc)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			p := NewFromPool(pool)
			var ledgerPID uint32
			check := func(after string) {
				t.Helper()
				var jit, plans string
				var pid uint32
				if err := other.QueryRow(ctx, `SELECT current_setting('jit'), current_setting('plan_cache_mode'), pg_backend_pid()`, pgx.QueryExecModeSimpleProtocol).Scan(&jit, &plans, &pid); err != nil {
					t.Fatalf("after %s: the other client: %v", after, err)
				}
				if pid != ledgerPID {
					t.Fatalf("after %s: the other client ran on server session %d, the ledger's statement on %d: the case did not happen", after, pid, ledgerPID)
				}
				if jit != "on" || plans != "auto" {
					t.Errorf("after %s: the next client of the server session sees jit %q and plan_cache_mode %q, want the server's, on and auto", after, jit, plans)
				}
			}
			pidOf := func(_ int, col []byte) error {
				ledgerPID = binary.BigEndian.Uint32(col)
				return nil
			}
			var inside string
			if err := series(ctx, p, "test_jit", `SELECT current_setting('jit') FROM generate_series(1, $1::int8)`, 1, func(_ int, col []byte) error {
				inside = string(col)
				return nil
			}); err != nil || inside != "off" {
				t.Errorf("through the pooler the statement saw jit %q (%v), want off", inside, err)
			}
			if err := series(ctx, p, "test_pid", `SELECT pg_backend_pid() FROM generate_series(1, $1::int8)`, 3, pidOf); err != nil {
				t.Fatal(err)
			}
			check("a statement that answered")
			rows := 0
			if err := series(ctx, p, "test_pid", `SELECT pg_backend_pid() FROM generate_series(1, $1::int8)`, 3, func(i int, col []byte) error {
				_ = pidOf(i, col)
				if rows++; rows == 1 {
					return errStopReading
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			check("a read stopped early")
			err = series(ctx, p, "test_div", `SELECT pg_backend_pid() / (3 - x)::int4 FROM generate_series(1, $1::int8) x`, 5, func(i int, col []byte) error {
				return pidOf(i, col)
			})
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "22012" {
				t.Fatalf("a statement failed after rows: %v, want SQLSTATE 22012", err)
			}
			if err := series(ctx, p, "test_pid", `SELECT pg_backend_pid() FROM generate_series(1, $1::int8)`, 1, pidOf); err != nil {
				t.Fatal(err)
			}
			check("a statement that failed after rows")
			err = series(ctx, p, "test_deferred", `INSERT INTO u SELECT $1::int8 RETURNING pg_backend_pid()`, 1, pidOf)
			if !errors.As(err, &pe) || pe.Code != "23505" {
				t.Fatalf("a statement whose commit failed: %v, want SQLSTATE 23505", err)
			}
			check("a statement whose commit failed")
		})
	}
}

// A statement whose session the server ends while it runs (an
// administrator's pg_terminate_backend, a fast shutdown: a FATAL error in
// the middle of the pipeline, then the connection closed) ends with that
// error, transient, and the pool then serves a session with its own jit
// setting whose next statement answers.
func TestAPipelinedStatementWhoseSessionTheServerEndsIsTransientAndThePoolServes(t *testing.T) {
	for _, mode := range pipelineModes {
		t.Run(mode.String(), func(t *testing.T) {
			p, pool := onePipelined(t, mode)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			pid := sessionOf(t, pool)
			side, err := pgx.Connect(ctx, pool.Config().ConnString())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = side.Close(context.Background()) }()
			done := make(chan error, 1)
			go func() {
				done <- series(ctx, p, "test_sleep", `SELECT 1 FROM pg_sleep(30), generate_series(1, $1::int8)`, 1, func(int, []byte) error { return nil })
			}()
			for {
				var n int
				if err := side.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND query LIKE '%pg_sleep(30)%' AND state = 'active'`, pid).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n == 1 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if _, err := side.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
				t.Fatal(err)
			}
			err = <-done
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "57P01" || !Transient(err) {
				t.Errorf("a statement whose session was terminated: %v (transient %v), want SQLSTATE 57P01, transient", err, Transient(err))
			}
			rows := 0
			if err := series(ctx, p, "test_after", `SELECT x FROM generate_series(1, $1::int8) x`, 3, func(int, []byte) error { rows++; return nil }); err != nil || rows != 3 {
				t.Errorf("the next statement: %d rows, %v; want 3", rows, err)
			}
			cleanSession(t, pool, 0, "a terminated session")
		})
	}
}

// A session whose own plan_cache_mode is not the server's (a pool's
// AfterConnect, or a connection string's options=-c plan_cache_mode=...)
// keeps it after every end of a statement run after genericPlanSQL (the
// replay's read by runs): answered, a row refused, a read stopped early,
// failed after rows, a commit that failed, a run after its prepared
// statement went missing (DEALLOCATE ALL), and a run past its deadline.
// The statement itself sees force_generic_plan every time.
func TestTheReadByRunsLeavesTheSessionsOwnPlanCacheModeAfterEveryEnd(t *testing.T) {
	for _, mode := range pipelineModes {
		t.Run(mode.String(), func(t *testing.T) {
			p, pool := onePipelinedWith(t, mode, map[string]string{"plan_cache_mode": "force_custom_plan"})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := pool.Exec(ctx, `CREATE TABLE u (x int8 UNIQUE DEFERRABLE INITIALLY DEFERRED); INSERT INTO u VALUES (1)`); err != nil {
				t.Fatal(err)
			}
			own := func(after string) {
				t.Helper()
				var jit, plans string
				if err := pool.QueryRow(ctx, `SELECT current_setting('jit'), current_setting('plan_cache_mode')`, pgx.QueryExecModeSimpleProtocol).Scan(&jit, &plans); err != nil {
					t.Fatalf("after %s: %v", after, err)
				}
				if jit != "on" || plans != "force_custom_plan" {
					t.Errorf("after %s: the session's jit %q and plan_cache_mode %q, want its own, on and force_custom_plan", after, jit, plans)
				}
				var inside string
				if err := series(ctx, p, "test_inside", `SELECT current_setting('plan_cache_mode') || $1::int8::text`, 0, func(_ int, col []byte) error {
					inside = string(col)
					return nil
				}); err != nil || inside != "force_generic_plan0" {
					t.Errorf("after %s: the next statement saw plan_cache_mode %q (%v), want force_generic_plan", after, inside, err)
				}
			}
			own("nothing")
			const seriesSQL = `SELECT x FROM generate_series(1, $1::int8) x`
			if err := series(ctx, p, "test_series", seriesSQL, 5, func(int, []byte) error { return nil }); err != nil {
				t.Fatal(err)
			}
			own("a statement that answered")
			refused := errors.New("refused")
			if err := series(ctx, p, "test_series", seriesSQL, 5, func(i int, _ []byte) error {
				if i == 2 {
					return refused
				}
				return nil
			}); !errors.Is(err, refused) {
				t.Fatalf("a row refused: %v", err)
			}
			own("a row refused mid-answer")
			if err := series(ctx, p, "test_series", seriesSQL, 5, func(i int, _ []byte) error {
				if i == 2 {
					return errStopReading
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			own("a read stopped early")
			if err := series(ctx, p, "test_div", `SELECT 1 / (3 - x) FROM generate_series(1, $1::int8) x`, 5, func(int, []byte) error { return nil }); err == nil {
				t.Fatal("a division by zero answered")
			}
			own("a statement failed after rows")
			if err := series(ctx, p, "test_deferred", `INSERT INTO u SELECT $1::int8 RETURNING x`, 1, func(int, []byte) error { return nil }); err == nil {
				t.Fatal("a deferred unique violation committed")
			}
			own("a commit that failed")
			if _, err := pool.Exec(ctx, `DEALLOCATE ALL`, pgx.QueryExecModeSimpleProtocol); err != nil {
				t.Fatal(err)
			}
			if err := series(ctx, p, "test_series", seriesSQL, 5, func(int, []byte) error { return nil }); err != nil {
				t.Fatalf("a run after DEALLOCATE ALL: %v", err)
			}
			own("a run after DEALLOCATE ALL")
			short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
			err := series(short, p, "test_sleep", `SELECT 1 FROM pg_sleep(30), generate_series(1, $1::int8)`, 1, func(int, []byte) error { return nil })
			stop()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("past its deadline: %v", err)
			}
			own("a statement past its deadline")
		})
	}
}
