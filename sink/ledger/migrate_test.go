package ledger_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dedupio/dedup/internal/testsupport/pgbouncer"
	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/sink/ledger"
	"github.com/dedupio/dedup/sink/ledger/pooler"
)

// Routers and workers that start together on an empty database all run
// the migrations at once: none may fail (goose serialises them with a
// PostgreSQL advisory lock).
func TestMigrateConcurrently(t *testing.T) {
	for round := 0; round < 10; round++ {
		url := pgtest.NewDatabase(t)
		var wg sync.WaitGroup
		errs := make(chan error, 6)
		for i := 0; i < 6; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); errs <- ledger.Migrate(context.Background(), url) }()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}

// `dedup migrate` through a transaction pooler is refused before it
// changes anything: its lock is a session's.
func TestMigrateCommandThroughTransactionPoolerIsRefused(t *testing.T) {
	url := pgtest.NewDatabase(t)
	b := pgbouncer.Start(t, url, pgbouncer.Options{Mode: pgbouncer.Transaction})
	cfg := ledger.DefaultConfig()
	cfg.URL, cfg.Pooler = b.URL(url), pooler.Transaction
	err := ledger.MigrateCommand(context.Background(), cfg)
	if !errors.Is(err, ledger.ErrMigrationsNeedSession) || !strings.Contains(err.Error(), "direct URL") {
		t.Fatalf("migrate through a transaction pooler: %v, want a refusal that says to use a direct URL", err)
	}
	if schemaVersioned(t, url) {
		t.Fatal("the refused migration created goose_db_version")
	}
}

// The start-up check through a transaction pooler applies no migration: a
// schema behind is an error naming `dedup migrate`; once migrated
// directly, processes starting together through the pooler all pass it
// (grants.sql's lock is a transaction's).
func TestMigrateAtStartThroughTransactionPoolerOnlyChecks(t *testing.T) {
	url := pgtest.NewDatabase(t)
	b := pgbouncer.Start(t, url, pgbouncer.Options{Mode: pgbouncer.Transaction})
	cfg := ledger.DefaultConfig()
	cfg.URL, cfg.Pooler = b.URL(url), pooler.Transaction
	ctx := context.Background()
	if err := ledger.MigrateAtStart(ctx, cfg); !errors.Is(err, ledger.ErrMigrationsNeedSession) || !strings.Contains(err.Error(), "dedup migrate") {
		t.Fatalf("start-up check on an empty database: %v, want an error naming dedup migrate", err)
	}
	if schemaVersioned(t, url) {
		t.Fatal("the start-up check through a transaction pooler created goose_db_version")
	}
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- ledger.MigrateAtStart(ctx, cfg) }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("start-up check on a current schema through the pooler: %v", err)
		}
	}
}

// Through a session pooler the migrations run as on a direct connection,
// several at once.
func TestMigrateConcurrentlyThroughSessionPooler(t *testing.T) {
	url := pgtest.NewDatabase(t)
	b := pgbouncer.Start(t, url, pgbouncer.Options{Mode: pgbouncer.Session})
	cfg := ledger.DefaultConfig()
	cfg.URL, cfg.Pooler = b.URL(url), pooler.Session
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- ledger.MigrateCommand(context.Background(), cfg) }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if !schemaVersioned(t, url) {
		t.Fatal("no goose_db_version after the migrations")
	}
}

// schemaVersioned: the database at url has goose_db_version.
func schemaVersioned(t *testing.T, url string) bool {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('goose_db_version') IS NOT NULL`).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// Migration 00015 builds dedup_ledger_by_record CONCURRENTLY; a build
// cancelled while it waits (a router's start cancelled during a rollout, an
// operator's Ctrl-C) leaves an INVALID index, and the next Migrate drops
// it and builds it again: the migration converges by being run again, and
// the replay's read has a valid index to go along.
func TestRecordIndexBuildCancelledConvergesOnTheNextMigrate(t *testing.T) {
	ctx := deadline(t, 3*time.Minute)
	url := pgtest.NewDatabase(t)
	prov, _ := provider(t, url)
	if _, err := prov.UpTo(ctx, 14); err != nil {
		t.Fatal(err)
	}
	side := sidePool(t, url)
	if _, err := side.Exec(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset, state, run_id, started_at)
		SELECT 'activity-a:' || g, 'a', g::text, 'field', sha256(g::text::bytea), 'events', 0, g, 'started', 'r', now() FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	// A transaction with a snapshot (a report, a backup): the concurrent
	// build waits for it before it marks the index valid.
	snap := held(t, side, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if _, err := snap.Exec(ctx, `SELECT txid_current()`); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ledger.Migrate(mctx, url) }()
	waitBlockedHere(t, side, "dedup_ledger_by_record ON")
	cancel()
	if _, err := side.Exec(ctx, `SELECT pg_cancel_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'CREATE INDEX CONCURRENTLY%dedup_ledger_by_record%'`); err != nil {
		t.Fatal(err)
	}
	t.Logf("cancelled Migrate: %v", within(t, done, 2*time.Minute, "Migrate after its cancel"))
	_ = snap.Rollback(ctx)
	var valid *bool
	if err := side.QueryRow(ctx, `SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass('dedup_ledger_by_record')`).Scan(&valid); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	if valid == nil || *valid {
		t.Fatalf("after the cancel the index is valid=%v (nil: absent), want an INVALID index left behind", valid)
	}
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatalf("Migrate again after a cancel during the index build: %v", err)
	}
	if err := side.QueryRow(ctx, `SELECT indisvalid FROM pg_index WHERE indexrelid = 'dedup_ledger_by_record'::regclass`).Scan(&valid); err != nil {
		t.Fatal(err)
	}
	if !*valid {
		t.Fatal("after the second Migrate dedup_ledger_by_record is still INVALID")
	}
}
