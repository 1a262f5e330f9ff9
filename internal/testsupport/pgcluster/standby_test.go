package pgcluster

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// failover runs a primary with one standby, commits one row the standby
// surely has, then (detached: after Detach) commits 100 more, kills the
// primary with kill -9 and promotes the standby; it returns how many of
// the 101 acknowledged rows the promoted standby has.
func failover(t *testing.T, sync, detached bool) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = primary.Stop() }()
	standby, err := primary.StartStandby(ctx, StandbyOptions{Synchronous: sync})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = standby.Stop() }()
	conn, err := pgx.Connect(ctx, primary.URL())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE acked (n int); INSERT INTO acked VALUES (0)`); err != nil {
		t.Fatal(err)
	}
	// The standby has the first row once it replayed past the primary's
	// position after it.
	at, err := primary.WALPosition(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := standby.until(ctx, "the standby to replay the first row", func(c *pgx.Conn) (bool, error) {
		var ok bool
		err := c.QueryRow(ctx, `SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn`, at).Scan(&ok)
		return ok, err
	}); err != nil {
		t.Fatal(err)
	}
	if detached {
		if _, err := standby.Detach(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 100; i++ { // 100 commits, each acknowledged
		if _, err := conn.Exec(ctx, `INSERT INTO acked VALUES ($1)`, i); err != nil {
			t.Fatal(err)
		}
	}
	_ = conn.Close(ctx)
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := standby.CaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	promoted, err := pgx.Connect(ctx, standby.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = promoted.Close(ctx) }()
	var n int
	if err := promoted.QueryRow(ctx, `INSERT INTO acked VALUES (-1) RETURNING (SELECT count(*) FROM acked)`).Scan(&n); err != nil {
		t.Fatalf("writing on the promoted standby: %v", err)
	}
	return n
}

func TestPromotedSynchronousStandbyHasEveryAcknowledgedCommit(t *testing.T) {
	if n := failover(t, true, false); n != 101 {
		t.Fatalf("the promoted synchronous standby has %d of 101 acknowledged rows", n)
	}
}

// Detach makes the loss deterministic: every commit acknowledged after it
// is missing on the promoted standby, whatever the timing.
func TestPromotedDetachedStandbyLacksCommitsAcknowledgedAfterDetach(t *testing.T) {
	if n := failover(t, false, true); n != 1 {
		t.Fatalf("the promoted standby has %d of 101 acknowledged rows, want 1 (the 100 committed after Detach lost)", n)
	}
}
