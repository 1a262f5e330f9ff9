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
	db := stdlib.OpenDB(*pc)
	err = migrate(ctx, db)
	if cerr := db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("closing the migration connection: %w", cerr)
	}
	return err
}

func migrate(ctx context.Context, db *sql.DB) error {
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
	// HasPending first: Up takes the migration lock and, on a schema
	// without goose_db_version, creates it; a schema already current
	// needs neither.
	pending, err := prov.HasPending(ctx)
	if err != nil {
		return mayNotMigrate(ctx, db, prov, fmt.Errorf("reading the ledger's schema version: %w", err))
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
