package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/sink/ledger/pooler"
)

// Migrate applies the embedded migrations up to the newest, then
// GrantsSQL. A schema already current is not migrated: reading
// goose_db_version, which dedup's roles may (a router connecting with
// dedup_router checks it at every start), and GrantsSQL under an advisory
// lock, which grants only on the tables the user owns (none, for a
// process's own role). A schema behind (or absent) that
// the user may not change is an error with ErrMayNotMigrate in it, naming
// `dedup migrate`: the migrations are the schema owner's to run, not
// granted to every process.
func Migrate(ctx context.Context, url string) error {
	pc, err := pgx.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("parsing postgres url: %w", err)
	}
	return migrateWith(ctx, pc, true)
}

// MigrateCommand is `dedup migrate`: Migrate over cfg's connection. It is
// refused under postgres.pooler: transaction, before connecting: the
// migrations' lock is a session advisory lock, which a transaction pooler
// leaves on a server session that other clients then use (the lock no
// longer serialises the migrators, and stays held), and a migration
// without a transaction spans several. Run it with a direct URL.
func MigrateCommand(ctx context.Context, cfg Config) error {
	if cfg.Pooler == pooler.Transaction {
		return fmt.Errorf("postgres.pooler: transaction: `dedup migrate` holds a session advisory lock across transactions, "+
			"which a transaction pooler cannot keep (%w): run it with a direct URL to PostgreSQL (postgres.url or DATABASE_URL "+
			"to the server itself, postgres.pooler: none or session); docs/runbook.md, Behind PgBouncer", ErrMigrationsNeedSession)
	}
	cc, err := cfg.ConnConfig()
	if err != nil {
		return err
	}
	return migrateWith(ctx, cc, true)
}

// MigrateAtStart is the migration check of a process's start (routers,
// the worker, the scheduler's commands): Migrate over cfg's connection,
// except that under postgres.pooler: transaction it applies no
// migration (see MigrateCommand): a schema behind this dedup is then an
// error with ErrMigrationsNeedSession in it, and a current one is only
// granted (GrantsSQL: one statement, a transaction-scoped lock).
func MigrateAtStart(ctx context.Context, cfg Config) error {
	cc, err := cfg.ConnConfig()
	if err != nil {
		return err
	}
	return migrateWith(ctx, cc, cfg.Pooler != pooler.Transaction)
}

// ErrMigrationsNeedSession is in the error of MigrateCommand and
// MigrateAtStart under a transaction pooler: the migrations need a
// session of their own. Waiting does not fix it; `dedup migrate` over a
// direct URL does.
var ErrMigrationsNeedSession = errors.New("the migrations need a direct connection, not a transaction pooler")

// migrateWith opens database/sql over cc, migrates (or, when apply is
// false, only checks that nothing is pending) and grants.
func migrateWith(ctx context.Context, cc *pgx.ConnConfig, apply bool) error {
	db := stdlib.OpenDB(*cc)
	err := migrate(ctx, db, apply)
	if cerr := db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("closing the migration connection: %w", cerr)
	}
	return err
}

func migrate(ctx context.Context, db *sql.DB, apply bool) error {
	if err := checkServer(ctx, db); err != nil {
		return err
	}
	sub, err := fs.Sub(schemas.Migrations, "migrations")
	if err != nil {
		return err
	}
	// Replicas and workers that start together on a new database all get
	// here at once: a session-level advisory lock makes one apply the
	// migrations while the others wait, then find nothing to do.
	// It is polled every second, for up to 5 minutes (a long first
	// migration on a big ledger).
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 300))
	if err != nil {
		return fmt.Errorf("creating migration lock: %w", err)
	}
	prov, err := goose.NewProvider(goose.DialectPostgres, db, sub, goose.WithSessionLocker(locker))
	if err != nil {
		return fmt.Errorf("loading migrations: %w", err)
	}
	if !apply {
		// HasPending creates goose_db_version where there is none: a
		// check that may not migrate reads whether it is there first.
		var versioned bool
		if err := db.QueryRowContext(ctx, `SELECT to_regclass('goose_db_version') IS NOT NULL`).Scan(&versioned); err != nil {
			return fmt.Errorf("reading the ledger's schema version: %w", err)
		}
		if !versioned {
			return fmt.Errorf("postgres.pooler: transaction: the ledger has no schema yet, "+
				"and dedup does not migrate through a transaction pooler (%w): run `dedup migrate` with a direct URL "+
				"(postgres.pooler: none), then start again", ErrMigrationsNeedSession)
		}
	}
	// HasPending first: Up takes the migration lock and, on a schema
	// without goose_db_version, creates it; a schema already current
	// needs neither.
	pending, err := prov.HasPending(ctx)
	if err != nil {
		return mayNotMigrate(ctx, db, prov, fmt.Errorf("reading the ledger's schema version: %w", err))
	}
	if pending && !apply {
		cur, target, err := prov.GetVersions(ctx)
		if err != nil {
			return fmt.Errorf("reading the ledger's schema version: %w", err)
		}
		return fmt.Errorf("postgres.pooler: transaction: the ledger's schema is at version %d, this dedup needs %d, "+
			"and dedup does not migrate through a transaction pooler (%w): run `dedup migrate` with a direct URL "+
			"(postgres.pooler: none), then start again", cur, target, ErrMigrationsNeedSession)
	}
	if pending {
		if _, err := prov.Up(ctx); err != nil {
			return mayNotMigrate(ctx, db, prov, fmt.Errorf("applying migrations: %w", err))
		}
	}
	if _, err := db.ExecContext(ctx, GrantsSQL); err != nil {
		return fmt.Errorf("granting dedup's roles their privileges (grants.sql): %w", err)
	}
	return nil
}

// mayNotMigrate turns a refused privilege (SQLSTATE 42501: on the schema,
// or "must be owner of table") met while migrating into an error that says
// what to do; any other error is returned as it is.
func mayNotMigrate(ctx context.Context, db *sql.DB, prov *goose.Provider, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		return err
	}
	var user string
	if qerr := db.QueryRowContext(ctx, `SELECT current_user`).Scan(&user); qerr != nil {
		user = "?"
	}
	schema := "the ledger has no schema yet"
	if cur, target, verr := prov.GetVersions(ctx); verr == nil {
		schema = fmt.Sprintf("the ledger's schema is at version %d, this dedup needs %d", cur, target)
	}
	return fmt.Errorf("postgres.url: %s, and postgres user %q may not change it (%w): run `dedup migrate` "+
		"with the URL of the schema's owner (a member of dedup_owner; docs/security.md, Least privilege), then start again: %w",
		schema, user, ErrMayNotMigrate, err)
}
