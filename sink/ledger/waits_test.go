package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Waits of the tests that pace a session against another.

// waitBlocked waits until a backend running a statement containing part
// waits for a lock.
func waitBlocked(t *testing.T, pool *pgxpool.Pool, part string) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < 500; i++ {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()`, part).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no statement with %q ever waited for a lock", part)
}

// waitBlockedHere is waitBlocked within side's database only; on timeout
// it shows what the database's sessions do.
func waitBlockedHere(t *testing.T, side *pgxpool.Pool, part string) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < 1000; i++ {
		var n int
		if err := side.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()`, part).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	rows, _ := side.Query(ctx, `SELECT pid, state, coalesce(wait_event_type, ''), coalesce(wait_event, ''), left(query, 100) FROM pg_stat_activity WHERE datname = current_database()`)
	for rows.Next() {
		var pid int
		var st, wt, we, q string
		_ = rows.Scan(&pid, &st, &wt, &we, &q)
		t.Logf("%d %s %s/%s %s", pid, st, wt, we, q)
	}
	rows.Close()
	t.Fatalf("no statement with %q ever waited for a lock", part)
}
