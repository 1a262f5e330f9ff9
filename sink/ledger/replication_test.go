package ledger_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dedupio/dedup/internal/testsupport/pgcluster"
	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/sink/ledger"
)

// The ledger reads, from the server, whether its acknowledged commits wait
// for a standby: a lone server, one with an asynchronous standby, one with
// a synchronous and an asynchronous standby, as a superuser and as a role
// that may not see the standbys' details, and a role whose sessions
// commit with synchronous_commit local.
func TestReplicationReadsWhatTheServerAcknowledges(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Stop() })
	read := func(url string) ledger.Replication {
		t.Helper()
		cfg := ledger.DefaultConfig()
		cfg.URL = url
		l, err := ledger.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		r, err := l.Replication(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	if r := read(primary.URL()); r.Synchronous() || r.Standbys() != 0 || r.SynchronousCommit != "on" || !r.DetailsVisible {
		t.Errorf("a lone server: %+v, want no standby, synchronous_commit on, not synchronous", r)
	}

	async, err := primary.StartStandby(ctx, pgcluster.StandbyOptions{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = async.Stop() })
	if r := read(primary.URL()); r.Synchronous() || r.Senders != 1 || !slices.Equal(r.Async, []string{"b"}) {
		t.Errorf("with an asynchronous standby: %+v, want 1 sender, b async, not synchronous", r)
	}

	sync, err := primary.StartStandby(ctx, pgcluster.StandbyOptions{Name: "a", Synchronous: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sync.Stop() })
	admin, err := pgx.Connect(ctx, primary.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = admin.Close(ctx) }()
	if _, err := admin.Exec(ctx, `SELECT pg_create_physical_replication_slot('gone')`); err != nil {
		t.Fatal(err)
	}
	r := read(primary.URL())
	if !r.Synchronous() || r.SynchronousStandbyNames != `"a"` || r.Senders != 2 || r.IdleSlots != 1 || !slices.Equal(r.Async, []string{"b"}) {
		t.Errorf("with a synchronous and an asynchronous standby and an idle slot: %+v, want synchronous, 2 senders, 1 idle slot, b async", r)
	}

	login := pgtest.NewLogin(t, primary.URL(), "")
	if r := read(login); !r.Synchronous() || r.DetailsVisible || r.Senders != 2 || len(r.Async) != 0 {
		t.Errorf("as a role without pg_read_all_stats: %+v, want synchronous, 2 senders seen, no details", r)
	}
	var role string
	conn, err := pgx.Connect(ctx, login)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT current_user`).Scan(&role); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)
	if _, err := admin.Exec(ctx, `ALTER ROLE `+pgx.Identifier{role}.Sanitize()+` SET synchronous_commit = local`); err != nil {
		t.Fatal(err)
	}
	if r := read(login); r.Synchronous() || r.SynchronousCommit != "local" {
		t.Errorf("a role whose sessions commit with synchronous_commit local: %+v, want not synchronous", r)
	}
}
