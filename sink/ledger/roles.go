package ledger

import (
	"context"
	_ "embed" // roles.sql, grants.sql
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// RolesSQL creates dedup's NOLOGIN group roles (dedup_owner, dedup_router,
// dedup_worker, dedup_ingress, dedup_reader, dedup_operator) and gives
// them the ledger's schema: what an administrator runs once per database,
// before GrantsSQL (psql -f roles.sql -f grants.sql, or ApplyRoles).
// Idempotent. See the file's comment and docs/security.md.
//
//go:embed roles.sql
var RolesSQL string

// GrantsSQL gives each of dedup's group roles exactly the privileges its
// process needs on each of the ledger's tables. Migrate applies it after
// every run by a user that holds the tables' owner's privileges, so that
// tables created by a migration are granted with it; it skips roles and
// tables that do not exist, and tables the session may not grant on.
//
//go:embed grants.sql
var GrantsSQL string

// ApplyRoles runs RolesSQL and then GrantsSQL in the database at url, as
// a superuser (or a role with CREATEROLE that may grant on the schema).
func ApplyRoles(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connecting to apply roles: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, RolesSQL); err != nil {
		return fmt.Errorf("creating dedup's roles (roles.sql): %w", err)
	}
	if _, err := conn.Exec(ctx, GrantsSQL); err != nil {
		return fmt.Errorf("granting dedup's roles (grants.sql): %w", err)
	}
	return nil
}

// ErrMayNotMigrate is in Migrate's error when the ledger's schema is
// behind this dedup (or absent) and the user Migrate connects as may not
// change it (SQLSTATE 42501): a router, worker or operator connecting with
// its least-privilege role before `dedup migrate` ran as the schema's
// owner. Waiting does not fix it; running the migrations does.
var ErrMayNotMigrate = errors.New("this postgres user may not change the ledger's schema")
