// Package audit is the activity-idempotency audit (the seed "Temporal
// workflows/activities missing idempotency guarantees") as runnable dedup
// task types: the five audited activities, each made safe to retry with the
// pattern the audit names, and each with its guarantee written on it.
//
//	| task type              | pattern                                  | a retry ...                                   |
//	|------------------------|------------------------------------------|-----------------------------------------------|
//	| create_tenant_schema   | CREATE SCHEMA IF NOT EXISTS              | finds the schema and returns the same result  |
//	| run_tenant_migrations  | check-then-act with a guard (lock + log) | applies no migration twice, same version      |
//	| send_welcome_email     | idempotency key (worker.Step)            | returns the stored send, sends no second mail |
//	| drop_tenant_schema     | DROP SCHEMA IF EXISTS                    | finds it gone and returns the same result     |
//	| soft_delete_tenant     | check-then-act with a guard (WHERE)      | returns the first deletion's time             |
//
// Register them with worker.Activities{Tasks: tenants.TaskTypes()}; a route
// lists them in its definition, e.g. onboarding [create_tenant_schema,
// run_tenant_migrations, send_welcome_email] and offboarding
// [drop_tenant_schema, soft_delete_tenant]. A definition's tasks run in
// parallel, so none of these depends on another having run first
// (run_tenant_migrations creates the schema too). The event's data is the
// Tenant.
package audit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupio/dedup/worker"
)

// Tenant is the event's data for every task of this package.
type Tenant struct {
	ID    string `json:"tenant_id"` // [a-z0-9_]{1,40}: the schema is tenant_{id}
	Name  string `json:"name"`
	Email string `json:"email"` // the welcome email's recipient
}

// Tenants runs the tasks against one database and one SMTP server.
type Tenants struct {
	Pool *pgxpool.Pool
	// SMTPAddr is the mail server (host:port) the welcome email goes to;
	// From is its sender.
	SMTPAddr string
	From     string

	afterSend func() error // tests: a crash after the mail server took the message
}

// TaskTypes are the five task types, for worker.Activities.Tasks.
func (t *Tenants) TaskTypes() []worker.TaskType {
	return []worker.TaskType{
		worker.NewTaskType("create_tenant_schema", t.CreateTenantSchema),
		worker.NewTaskType("run_tenant_migrations", t.RunTenantMigrations),
		worker.NewTaskType("send_welcome_email", t.SendWelcomeEmail),
		worker.NewTaskType("drop_tenant_schema", t.DropTenantSchema),
		worker.NewTaskType("soft_delete_tenant", t.SoftDeleteTenant),
	}
}

// Setup creates the example's tenants table. Idempotent: IF NOT EXISTS.
func Setup(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS tenants (
	id         text PRIMARY KEY,
	name       text NOT NULL,
	email      text NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	deleted_at timestamptz
)`)
	if err != nil {
		return fmt.Errorf("creating the tenants table: %w", err)
	}
	return nil
}

var tenantID = regexp.MustCompile(`^[a-z0-9_]{1,40}$`)

// schema is the tenant's schema name, quoted for SQL. A tenant ID that
// cannot name a schema fails the task for good.
func schema(in Tenant) (name, quoted string, err error) {
	if !tenantID.MatchString(in.ID) {
		return "", "", worker.Permanent(fmt.Errorf("tenant_id %q: want [a-z0-9_]{1,40}", in.ID))
	}
	name = "tenant_" + in.ID
	return name, pgx.Identifier{name}.Sanitize(), nil
}

// SchemaResult names the tenant's schema.
type SchemaResult struct {
	Schema string `json:"schema"`
}

// CreateTenantSchema creates the tenant's schema.
//
// Guarantee: CREATE SCHEMA IF NOT EXISTS. A retry (after a crash, or after
// the schema was created and the answer lost) finds the schema and returns
// the same result; it never fails because the schema exists. (Two attempts
// at the very same moment can still race inside PostgreSQL's catalog: the
// loser gets a unique violation, a retryable error, and its retry finds the
// schema.)
func (t *Tenants) CreateTenantSchema(ctx context.Context, in Tenant) (SchemaResult, error) {
	name, q, err := schema(in)
	if err != nil {
		return SchemaResult{}, err
	}
	if _, err := t.Pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+q); err != nil {
		return SchemaResult{}, fmt.Errorf("creating schema %s: %w", name, err)
	}
	return SchemaResult{Schema: name}, nil
}

// migrations are the tenant schema's versions, in order. %s is the quoted
// schema. Version 3 is not idempotent by itself (a second run would add a
// second row): only the guard keeps it to once.
var migrations = []string{
	1: `CREATE TABLE %s.projects (id bigserial PRIMARY KEY, name text NOT NULL)`,
	2: `CREATE TABLE %s.settings (key text PRIMARY KEY, value text NOT NULL)`,
	3: `INSERT INTO %s.projects (name) VALUES ('Getting started')`,
}

// MigrationResult is the tenant schema's version after the migrations.
type MigrationResult struct {
	Schema  string `json:"schema"`
	Version int    `json:"version"`
}

// RunTenantMigrations brings the tenant's schema to the latest version
// (creating the schema if needed).
//
// Guarantee: check-then-act with a guard, as Alembic's version table does.
// In one transaction, a transaction-scoped advisory lock on the schema
// (the guard: a concurrent attempt waits), then the applied versions are
// read from {schema}.schema_migrations, and each missing migration is
// applied together with its row there. A retry applies nothing that was
// applied (a migration and its row commit together or not at all) and
// returns the same version.
func (t *Tenants) RunTenantMigrations(ctx context.Context, in Tenant) (MigrationResult, error) {
	name, q, err := schema(in)
	if err != nil {
		return MigrationResult{}, err
	}
	err = pgx.BeginFunc(ctx, t.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('tenant-migrations:' || $1))`, name); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+q); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.schema_migrations (
	version    integer PRIMARY KEY,
	applied_at timestamptz NOT NULL DEFAULT now())`, q)); err != nil {
			return err
		}
		var current int
		if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT coalesce(max(version), 0) FROM %s.schema_migrations`, q)).Scan(&current); err != nil {
			return err
		}
		for v := current + 1; v < len(migrations); v++ {
			if _, err := tx.Exec(ctx, fmt.Sprintf(migrations[v], q)); err != nil {
				return fmt.Errorf("version %d: %w", v, err)
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s.schema_migrations (version) VALUES ($1)`, q), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return MigrationResult{}, fmt.Errorf("migrating schema %s: %w", name, err)
	}
	return MigrationResult{Schema: name, Version: len(migrations) - 1}, nil
}

// EmailResult is a sent welcome email.
type EmailResult struct {
	MessageID string `json:"message_id"`
	To        string `json:"to"`
}

// SendWelcomeEmail sends the tenant's welcome email.
//
// Guarantee: an idempotency key. The send is the step "send" of the task,
// under the key {task_id}:send (worker.Step): a retry after the mail server
// accepted the message returns the stored result and sends nothing; a
// retry after a failed send sends again. The Message-ID derives from the
// key, so the one case the store cannot see (the server accepted the
// message, then the worker died before storing it) resends the same
// Message-ID, which a receiving mailbox can drop. A recipient or message
// the server refuses for good (5xx) fails the task at once.
func (t *Tenants) SendWelcomeEmail(ctx context.Context, in Tenant) (EmailResult, error) {
	if in.Email == "" || strings.ContainsAny(in.Email, "\r\n<>") {
		return EmailResult{}, worker.Permanent(fmt.Errorf("email %q: not an address", in.Email))
	}
	return worker.Step(ctx, "send", in, func(ctx context.Context, key string) (EmailResult, error) {
		sum := sha256.Sum256([]byte(key))
		res := EmailResult{MessageID: "<" + hex.EncodeToString(sum[:16]) + "@dedup.invalid>", To: in.Email}
		msg := fmt.Sprintf("From: %s\r\nTo: %s\r\nSubject: Welcome to %s\r\nMessage-ID: %s\r\nX-Idempotency-Key: %s\r\n"+
			"Content-Type: text/plain; charset=utf-8\r\n\r\nWelcome, %s. Your workspace is ready.\r\n",
			t.From, in.Email, in.Name, res.MessageID, key, in.Name)
		if err := t.send(ctx, in.Email, msg); err != nil {
			return EmailResult{}, err
		}
		if t.afterSend != nil {
			if err := t.afterSend(); err != nil {
				return EmailResult{}, err
			}
		}
		return res, nil
	})
}

// send delivers msg over SMTP within ctx's deadline; 5xx answers are
// permanent, everything else retryable.
func (t *Tenants) send(ctx context.Context, to, msg string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", t.SMTPAddr)
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", t.SMTPAddr, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	} else {
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
	}
	c := smtp.NewClient(conn)
	defer func() { _ = c.Close() }() // after Quit, or on a failure already returned
	err = func() error {
		if err := c.Mail(t.From, nil); err != nil {
			return err
		}
		if err := c.Rcpt(to, nil); err != nil {
			return err
		}
		w, err := c.Data()
		if err != nil {
			return err
		}
		if _, err := w.Write([]byte(msg)); err != nil {
			return err
		}
		return w.Close() // the server's answer to the message
	}()
	if err != nil {
		var se *smtp.SMTPError
		if errors.As(err, &se) && se.Code/100 == 5 {
			return worker.Permanent(fmt.Errorf("sending the welcome email to %s: %w", to, err))
		}
		return fmt.Errorf("sending the welcome email to %s: %w", to, err)
	}
	_ = c.Quit() // accepted: a failed goodbye does not unsend it
	return nil
}

// DropResult says the tenant's schema is gone.
type DropResult struct {
	Schema  string `json:"schema"`
	Dropped bool   `json:"dropped"` // always true: the schema does not exist after the task
}

// DropTenantSchema drops the tenant's schema and everything in it.
//
// Guarantee: DROP SCHEMA IF EXISTS. A retry finds the schema gone and
// returns the same result; it never fails because the schema is missing.
func (t *Tenants) DropTenantSchema(ctx context.Context, in Tenant) (DropResult, error) {
	name, q, err := schema(in)
	if err != nil {
		return DropResult{}, err
	}
	if _, err := t.Pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+q+" CASCADE"); err != nil {
		return DropResult{}, fmt.Errorf("dropping schema %s: %w", name, err)
	}
	return DropResult{Schema: name, Dropped: true}, nil
}

// DeleteResult is when the tenant was (soft) deleted.
type DeleteResult struct {
	TenantID  string    `json:"tenant_id"`
	DeletedAt time.Time `json:"deleted_at"`
}

// SoftDeleteTenant marks the tenant deleted.
//
// Guarantee: check-then-act with a guard. The update sets deleted_at only
// WHERE deleted_at IS NULL (the check and the act are one statement, so
// two attempts cannot both act); if it changed nothing, the tenant was
// deleted before and the first deletion's time is returned: a retry returns
// the same result and never moves the time. An unknown tenant fails the
// task for good.
func (t *Tenants) SoftDeleteTenant(ctx context.Context, in Tenant) (DeleteResult, error) {
	var at time.Time
	err := t.Pool.QueryRow(ctx, `UPDATE tenants SET deleted_at = now() WHERE id = $1 AND deleted_at IS NULL RETURNING deleted_at`, in.ID).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		var prev *time.Time
		err = t.Pool.QueryRow(ctx, `SELECT deleted_at FROM tenants WHERE id = $1`, in.ID).Scan(&prev)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return DeleteResult{}, worker.Permanent(fmt.Errorf("tenant %q does not exist", in.ID))
		case err == nil && prev == nil:
			return DeleteResult{}, fmt.Errorf("tenant %q was restored meanwhile", in.ID) // retryable: the next attempt deletes it
		case err == nil:
			at = *prev
		}
	}
	if err != nil {
		return DeleteResult{}, fmt.Errorf("soft-deleting tenant %s: %w", in.ID, err)
	}
	return DeleteResult{TenantID: in.ID, DeletedAt: at.UTC()}, nil
}
