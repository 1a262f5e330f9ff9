package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/dedupio/dedup/schemas"
)

// Migrate applies the embedded migrations up to the newest.
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
	if _, err := prov.Up(ctx); err != nil {
		return fmt.Errorf("applying migrations: %w", err)
	}
	return nil
}
