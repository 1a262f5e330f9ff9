package ledger_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Waits of the tests that pace a session against another, and the
// sessions they hold. A test that fails while it holds a transaction (a
// wait ran out, a statement was refused) must end with its message, not
// hang: pgxpool's Close waits for every connection to come back, and a
// statement in another goroutine may wait for the held transaction's
// locks. So a held transaction is rolled back by the test's cleanup,
// before the pool it came from is closed (cleanups run last in, first
// out), and each wait for another goroutine has a bound.

// lockWaitPatience bounds how long a test waits for a statement to queue
// for a lock: a loaded CI machine takes seconds to bring a migration to
// the statement that queues; a wait that is met returns at once.
const lockWaitPatience = time.Minute

// sidePool is a pool of url's database for the test's own sessions,
// closed by the test's cleanup.
func sidePool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// held begins a transaction on pool that the test's cleanup rolls back,
// whatever the test did with it: a rollback after a commit or a rollback
// does nothing.
func held(t *testing.T, pool *pgxpool.Pool, opts pgx.TxOptions) pgx.Tx {
	t.Helper()
	tx, err := pool.BeginTx(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tx.Rollback(ctx)
	})
	return tx
}

// within receives from ch, or fails the test after d, naming what it
// waited for.
func within[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("%s: nothing after %s", what, d)
		panic("unreachable")
	}
}

// waitBlocked waits until a backend running a statement containing part
// waits for a lock.
func waitBlocked(t *testing.T, pool *pgxpool.Pool, part string) {
	t.Helper()
	waitLockQueue(t, pool, part, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()`)
}

// waitBlockedHere is waitBlocked within side's database only.
func waitBlockedHere(t *testing.T, side *pgxpool.Pool, part string) {
	t.Helper()
	waitLockQueue(t, side, part, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()`)
}

// waitBlockedBy is waitBlockedHere for a statement containing part that
// waits for a backend running a statement containing holder's.
func waitBlockedBy(t *testing.T, side *pgxpool.Pool, part, holder string) {
	t.Helper()
	waitLockQueue(t, side, part, `SELECT count(*) FROM pg_stat_activity w, pg_stat_activity h
	WHERE w.datname = current_database() AND w.wait_event_type = 'Lock' AND w.query LIKE '%' || $1 || '%'
	AND h.pid = ANY (pg_blocking_pids(w.pid)) AND h.query LIKE '%`+strings.ReplaceAll(holder, "'", "''")+`%'
	AND w.pid <> pg_backend_pid() AND h.pid <> pg_backend_pid()`)
}

// waitLockQueue polls count (of the statements with part that wait for a
// lock) until it is above zero, for up to lockWaitPatience; on timeout it
// shows what the database's sessions do.
func waitLockQueue(t *testing.T, pool *pgxpool.Pool, part, count string) {
	t.Helper()
	ctx := context.Background()
	for end := time.Now().Add(lockWaitPatience); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		var n int
		if err := pool.QueryRow(ctx, count, part).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
	}
	t.Fatalf("no statement with %q waited for a lock in %s; the database's sessions:\n%s", part, lockWaitPatience, sessions(pool))
}

// sessions lists what the sessions of pool's database do.
func sessions(pool *pgxpool.Pool) string {
	rows, err := pool.Query(context.Background(), `SELECT pid, coalesce(state, ''), coalesce(wait_event_type, ''), coalesce(wait_event, ''), left(query, 100) FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var out string
	for rows.Next() {
		var pid int
		var st, wt, we, q string
		if err := rows.Scan(&pid, &st, &wt, &we, &q); err != nil {
			return out + err.Error()
		}
		out += fmt.Sprintf("  %d %s %s/%s %s\n", pid, st, wt, we, q)
	}
	return out
}

// holdRows begins a transaction on pool that locks table's rows of
// workflow ID id (FOR UPDATE) until the test rolls it back, or its
// cleanup does: it paces a statement that waits for them.
func holdRows(t *testing.T, pool *pgxpool.Pool, table, id string) pgx.Tx {
	t.Helper()
	tx := held(t, pool, pgx.TxOptions{})
	if _, err := tx.Exec(context.Background(), `SELECT 1 FROM `+table+` WHERE workflow_id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	return tx
}

// waiterOf is the process ID of the one backend of side's database whose
// statement waits for a lock tx's session holds (a row tx locked, or its
// uncommitted insert of a key).
func waiterOf(t *testing.T, side *pgxpool.Pool, tx pgx.Tx) uint32 {
	t.Helper()
	holder := tx.Conn().PgConn().PID()
	var pids []uint32
	rows, err := side.Query(context.Background(), `SELECT pid::int8 FROM pg_stat_activity
	WHERE datname = current_database() AND $1::int4 = ANY (pg_blocking_pids(pid))`, int64(holder))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var pid int64
		if err := rows.Scan(&pid); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, uint32(pid))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(pids) != 1 {
		t.Fatalf("backends waiting for the test's session %d: %v, want one; the database's sessions:\n%s", holder, pids, sessions(side))
	}
	return pids[0]
}

// waitMovedOn waits, once the test released the lock that held backend
// pid's statement, until that statement has gone on to its next lock and
// stopped there or gone past it: it waits for a backend running a
// statement containing holder (in the tests of lock order, the other
// product statement: the first half of the cycle that statements locking
// in orders of their own would close), or it has ended (done is closed:
// it took its remaining rows, nothing held them).
func waitMovedOn(t *testing.T, side *pgxpool.Pool, pid uint32, holder string, done <-chan struct{}) {
	t.Helper()
	ctx := context.Background()
	q := `SELECT count(*) FROM pg_stat_activity w, pg_stat_activity h
	WHERE w.pid = $1 AND w.wait_event_type = 'Lock' AND h.pid = ANY (pg_blocking_pids(w.pid))
	AND h.query LIKE '%' || $2 || '%' AND h.pid <> pg_backend_pid()`
	for end := time.Now().Add(lockWaitPatience); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		select {
		case <-done:
			return
		default:
		}
		var n int
		if err := side.QueryRow(ctx, q, int64(pid), holder).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
	}
	t.Fatalf("backend %d neither ended its statement nor waited for one with %q in %s; the database's sessions:\n%s", pid, holder, lockWaitPatience, sessions(side))
}
