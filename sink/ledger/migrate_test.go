package ledger_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

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
