package ledger_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/sink/ledger"
)

// A failover demotes the primary under the pool's feet: the server
// restarts read-only (here: the database turns default_transaction_read_only
// on and its sessions are ended), the pool reconnects to it, and every
// claim fails with SQLSTATE 25006. That is transient (the router waits,
// reporting PostgreSQL down), and it heals: once the server takes writes
// again (the new primary is reached, here: the setting is reset), the next
// claim succeeds, although the read-only sessions themselves stay
// read-only for their whole life.
func TestReadOnlyServerIsTransientAndHeals(t *testing.T) {
	l := open(t)
	ctx := deadline(t, time.Minute)
	claim(t, l, intent("e1", "A")) // the pool holds read-write sessions

	admin, err := pgx.Connect(ctx, l.Pool().Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = admin.Close(ctx) }()
	db := pgx.Identifier{l.Pool().Config().ConnConfig.Database}.Sanitize()
	if _, err := admin.Exec(ctx, `ALTER DATABASE `+db+` SET default_transaction_read_only = on`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(ctx, `ALTER DATABASE `+db+` RESET default_transaction_read_only`) })
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()`); err != nil {
		t.Fatal(err)
	}

	// The first claims may meet the ended sessions (57P01, a closed
	// connection); then the pool's new sessions are read-only.
	var readOnly error
	for i := 0; i < 20 && readOnly == nil; i++ {
		_, err := l.Claim(ctx, []decide.Intent{intent("e2", "B")})
		if err == nil {
			t.Fatal("a claim on a read-only server succeeded")
		}
		if !ledger.Transient(err) || processor.IsPermanent(err) {
			t.Fatalf("claim %d during the failover: %v (Transient %v, permanent %v), want transient",
				i, err, ledger.Transient(err), processor.IsPermanent(err))
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "25006" {
			readOnly = err
		}
	}
	if readOnly == nil {
		t.Fatal("no claim met the read-only server (SQLSTATE 25006)")
	}
	t.Logf("on the read-only server: %v (transient)", readOnly)

	// The failover ends: the server takes writes again.
	if _, err := admin.Exec(ctx, `ALTER DATABASE `+db+` RESET default_transaction_read_only`); err != nil {
		t.Fatal(err)
	}
	var last error
	for i := 0; i < 3; i++ {
		if _, last = l.Claim(ctx, []decide.Intent{intent("e2", "B")}); last == nil {
			return
		}
		if !ledger.Transient(last) {
			t.Fatalf("claim after the failover: %v, want success or a transient error", last)
		}
	}
	t.Fatalf("the ledger did not heal after the server took writes again (the pool keeps its read-only sessions): %v", last)
}
