package ledger_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/sink/ledger"
)

// Which PostgreSQL errors heal by waiting (the router retries them) and
// which do not (the router stops: processor/health.go calls fatal on a
// permanent ledger error). A failover, a restart, a lock held by someone
// else or a serialization conflict must never end the process.
func TestTransientSQLStates(t *testing.T) {
	for _, c := range []struct {
		code      string
		what      string
		transient bool
	}{
		// Failover and restarts: the server we talk to is not (or no
		// longer) a primary, or is going away.
		{"25006", "read_only_sql_transaction (a demoted primary, a standby)", true},
		{"57P01", "admin_shutdown", true},
		{"57P02", "crash_shutdown", true},
		{"57P03", "cannot_connect_now (starting up, in recovery)", true},
		{"57P05", "idle_session_timeout", true},
		{"57014", "query_canceled (statement_timeout)", true},
		{"25P03", "idle_in_transaction_session_timeout", true},
		{"25P04", "transaction_timeout", true},
		{"08000", "connection_exception", true},
		{"08003", "connection_does_not_exist", true},
		{"08006", "connection_failure", true},
		{"08001", "sqlclient_unable_to_establish_sqlconnection", true},
		{"08004", "sqlserver_rejected_establishment_of_sqlconnection", true},
		{"08P01", "protocol_violation (PgBouncer's pooler errors)", true},
		// Contention: someone else holds what we need, for now.
		{"55P03", "lock_not_available (lock_timeout, NOWAIT)", true},
		{"55006", "object_in_use", true},
		{"40001", "serialization_failure (also a standby's recovery conflict)", true},
		{"40P01", "deadlock_detected", true},
		{"40003", "statement_completion_unknown", true},
		{"40000", "transaction_rollback", true},
		// Resources and system errors: the server is overloaded or its
		// disk is full; an operator or time frees them.
		{"53300", "too_many_connections", true},
		{"53100", "disk_full", true},
		{"53200", "out_of_memory", true},
		{"58030", "io_error", true},

		// A setting, the schema or the data: waiting does not fix them.
		{"40002", "transaction_integrity_constraint_violation (a deferred constraint)", false},
		{"42P01", "undefined_table (a migration missing)", false},
		{"42703", "undefined_column", false},
		{"42501", "insufficient_privilege", false},
		{"3D000", "invalid_catalog_name (no such database)", false},
		{"28P01", "invalid_password", false},
		{"23505", "unique_violation", false},
		{"22P02", "invalid_text_representation", false},
		{"25P02", "in_failed_sql_transaction (a bug)", false},
		{"0A000", "feature_not_supported", false},
		{"XX000", "internal_error", false},
		{"XX001", "data_corrupted", false},
	} {
		err := fmt.Errorf("claiming 3 intents: %w", &pgconn.PgError{Code: c.code, Message: c.what})
		if got := ledger.Transient(err); got != c.transient {
			t.Errorf("Transient(SQLSTATE %s %s) = %v, want %v", c.code, c.what, got, c.transient)
		}
	}
}

// A migration that changes a column a prepared statement returns fails
// that statement once (0A000, "cached plan must not change result type"):
// pgx prepares its cached statements again after the error, so the claim
// after it answers, and the error is transient (the router retries),
// not the permanent error that ends the router. Any other 0A000 stays
// permanent.
func TestAClaimWhosePlanAMigrationChangedIsTransientAndTheNextAnswers(t *testing.T) {
	if !ledger.Transient(&pgconn.PgError{Code: "0A000", Routine: "RevalidateCachedQuery", Message: "le plan en cache ne doit pas changer le type du résultat"}) {
		t.Error("a cached plan a migration changed (in another lc_messages) is not transient")
	}
	if ledger.Transient(&pgconn.PgError{Code: "0A000", Routine: "transformAggregateCall", Message: "feature_not_supported"}) {
		t.Error("another feature_not_supported is transient")
	}
	l := open(t)
	ctx := context.Background()
	a, b := intent("plan-a", "p"), intent("plan-b", "p")
	want(t, claim(t, l, a), decide.VerdictNew) // the claim statement, prepared on the session
	if _, err := l.Pool().Exec(ctx, `ALTER TABLE dedup_ledger ALTER COLUMN generation TYPE bigint`); err != nil {
		t.Fatal(err)
	}
	for try := range 5 { // a session of the pool's may still have the statement prepared before the ALTER
		v, err := l.Claim(ctx, []decide.Intent{b})
		if err == nil {
			if v[0].Verdict != decide.VerdictNew {
				t.Fatalf("the claim after a migration changed its plan: %s, want %s", v[0].Verdict, decide.VerdictNew)
			}
			return
		}
		if processor.IsPermanent(err) {
			t.Fatalf("the claim after a migration changed its plan: %v, permanent (the router ends)", err)
		}
		t.Logf("try %d: %v", try, err)
	}
	t.Fatal("no claim answered after the migration")
}
