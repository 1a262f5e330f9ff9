package tenants

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"net/mail"
	"regexp"
	"strings"
	"time"

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

// Tenants runs the tasks against one database and one mail server.
type Tenants struct {
	Pool *pgxpool.Pool
	Mail *Mailer

	afterSend func() error // tests: a crash after the mail server took the message
}

// New makes the task types' runner from the worker.tenants section
// (prefix names it in errors): it reads the SMTP files once.
func New(pool *pgxpool.Pool, c Config, prefix string) (*Tenants, error) {
	m, err := NewMailer(c.SMTP, prefix+".smtp")
	if err != nil {
		return nil, err
	}
	return &Tenants{Pool: pool, Mail: m}, nil
}

// TaskTypes are the five task types, for worker.Activities.Tasks.
func (t *Tenants) TaskTypes() []worker.TaskType {
	return []worker.TaskType{
		worker.NewTaskType("create_tenant_schema", t.CreateTenantSchema),
		worker.NewTaskType("run_migrations", t.RunMigrations),
		worker.NewTaskType("send_welcome_email", t.SendWelcomeEmail),
		worker.NewTaskType("drop_tenant_schema", t.DropTenantSchema),
		worker.NewTaskType("soft_delete_tenant", t.SoftDeleteTenant),
	}
}

// Setup creates the tenants table. Idempotent: IF NOT EXISTS.
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

// CreateTenantSchema records the tenant (the row soft_delete_tenant
// marks) and creates its schema, in one transaction.
//
// Guarantee: INSERT ... ON CONFLICT (id) DO NOTHING and CREATE SCHEMA IF
// NOT EXISTS. A retry (after a crash, or after both were done and the
// answer lost) finds the tenant and the schema and returns the same
// result; it never fails because they exist, and never changes a tenant
// recorded before (a tenant soft-deleted stays deleted). (Two attempts at
// the very same moment can still race inside PostgreSQL's catalog: the
// loser gets a unique violation, a retryable error, and its retry finds
// the schema.)
func (t *Tenants) CreateTenantSchema(ctx context.Context, in Tenant) (SchemaResult, error) {
	name, q, err := schema(in)
	if err != nil {
		return SchemaResult{}, err
	}
	err = pgx.BeginFunc(ctx, t.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO tenants (id, name, email) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING`,
			in.ID, in.Name, in.Email); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+q)
		return err
	})
	if err != nil {
		return SchemaResult{}, fmt.Errorf("creating tenant %s and schema %s: %w", in.ID, name, err)
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

// RunMigrations brings the tenant's schema to the latest version
// (creating the schema if needed).
//
// Guarantee: check-then-act with a guard, as Alembic's version table does.
// In one transaction, a transaction-scoped advisory lock on the schema
// (the guard: a concurrent attempt waits), then the applied versions are
// read from {schema}.schema_migrations, and each missing migration is
// applied together with its row there. A retry applies nothing that was
// applied (a migration and its row commit together or not at all) and
// returns the same version.
func (t *Tenants) RunMigrations(ctx context.Context, in Tenant) (MigrationResult, error) {
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
// the server refuses for good (5xx) fails the task at once, and so does
// an address or name that cannot go into a header.
func (t *Tenants) SendWelcomeEmail(ctx context.Context, in Tenant) (EmailResult, error) {
	to, err := mail.ParseAddress(in.Email)
	if err != nil || to.Name != "" || strings.ContainsAny(in.Email, "\r\n<>") {
		return EmailResult{}, worker.Permanent(fmt.Errorf("email %q: not an address", in.Email))
	}
	if strings.ContainsAny(in.Name, "\r\n") {
		return EmailResult{}, worker.Permanent(fmt.Errorf("name %q: a line break cannot go into the subject", in.Name))
	}
	return worker.Step(ctx, "send", in, func(ctx context.Context, key string) (EmailResult, error) {
		sum := sha256.Sum256([]byte(key))
		res := EmailResult{MessageID: "<" + hex.EncodeToString(sum[:16]) + "@dedup.invalid>", To: to.Address}
		msg := fmt.Sprintf("From: %s\r\nTo: %s\r\nSubject: %s\r\nMessage-ID: %s\r\nX-Idempotency-Key: %s\r\n"+
			"MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nWelcome, %s. Your workspace is ready.\r\n",
			t.Mail.From(), to.Address, mime.QEncoding.Encode("utf-8", "Welcome to "+in.Name), res.MessageID, key, in.Name)
		if err := t.Mail.Send(ctx, to.Address, msg); err != nil {
			return EmailResult{}, fmt.Errorf("sending the welcome email: %w", err)
		}
		if t.afterSend != nil {
			if err := t.afterSend(); err != nil {
				return EmailResult{}, err
			}
		}
		return res, nil
	})
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
