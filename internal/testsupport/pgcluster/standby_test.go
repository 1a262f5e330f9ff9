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

// A primary killed in the middle of writing a WAL record leaves the
// standby with the record's beginning: it can never replay it, so its
// replay position stays behind its receive position for good. CaughtUp
// returns once the standby has replayed every whole record it received.
func TestCaughtUpReturnsWhenTheLastReceivedRecordIsCutOff(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	primary, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = primary.Stop() }()
	standby, err := primary.StartStandby(ctx, StandbyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = standby.Stop() }()
	before, err := primary.WALPosition(ctx)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, primary.URL())
	if err != nil {
		t.Fatal(err)
	}
	// One WAL record of 1000 MiB (a record's limit is 1020): the backend
	// reserves its space at once and copies it in, the WAL is flushed
	// page by page behind the copy, and the primary streams what is
	// flushed. The primary is killed once the standby has the record's
	// first MiB.
	go func() {
		_, _ = conn.Exec(ctx, `SELECT pg_logical_emit_message(false, 'cut', repeat('x', 1000*1024*1024))`)
	}()
	if err := standby.until(ctx, "the standby to receive the record's first MiB", func(c *pgx.Conn) (bool, error) {
		var ok bool
		err := c.QueryRow(ctx, `SELECT pg_last_wal_receive_lsn() - $1::pg_lsn > 1024*1024`, before).Scan(&ok)
		return ok, err
	}); err != nil {
		t.Fatal(err)
	}
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	var cut bool
	if err := standby.query(ctx, func(c *pgx.Conn) error {
		return c.QueryRow(ctx, `SELECT pg_last_wal_receive_lsn() - $1::pg_lsn < 1000*1024*1024`, before).Scan(&cut)
	}); err != nil {
		t.Fatal(err)
	}
	if !cut {
		t.Skip("the standby received the whole record before the kill: nothing cut off (a faster machine: make the record larger)")
	}
	began := time.Now()
	if _, err := standby.CaughtUp(ctx); err != nil {
		t.Fatalf("after %s: %v", time.Since(began).Round(time.Millisecond), err)
	}
	var replayed, received string
	if err := standby.query(ctx, func(c *pgx.Conn) error {
		return c.QueryRow(ctx, `SELECT pg_last_wal_replay_lsn()::text, pg_last_wal_receive_lsn()::text`).Scan(&replayed, &received)
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("caught up in %s: replayed to %s, received to %s", time.Since(began).Round(time.Millisecond), replayed, received)
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
}
