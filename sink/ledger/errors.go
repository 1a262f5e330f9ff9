package ledger

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/sink/ledger/pooler"
)

// Transient reports whether err is worth retrying: whether waiting heals
// it. A permanent ledger error ends the router (processor/health.go), so
// the cost of a wrong answer is asymmetric: an error that heals taken for
// permanent turns a failover or a busy minute into a crash loop, while an
// error that does not heal taken for transient stalls the router, loudly
// (PostgreSQL reported down), until someone fixes it. The rule, by
// SQLSTATE:
//
// Transient:
//   - the server is not (or no longer) a writable primary, or is going
//     away: 25006 read_only_sql_transaction (a failover demoted the
//     primary, or the pool reached a standby), class 57 operator
//     intervention (57P01 admin_shutdown, 57P02 crash_shutdown, 57P03
//     cannot_connect_now, 57014 query_canceled by statement_timeout, 57P05
//     idle_session_timeout, and 57P04 database_dropped, whose reconnect
//     then meets 3D000), class 08 connection exceptions (08P01 included:
//     PgBouncer's pooler errors), 25P03 and 25P04 (a session or
//     transaction timeout ended the session);
//   - contention: class 40 transaction rollback (40001
//     serialization_failure, also a standby's recovery conflict, 40P01
//     deadlock_detected, 40003 statement_completion_unknown), 55P03
//     lock_not_available (lock_timeout, NOWAIT), 55006 object_in_use;
//   - resources and system errors: class 53 (too many connections, disk
//     full, out of memory) and class 58 (I/O errors);
//   - no server error at all: the dial or the connection failed, a
//     deadline passed (unless the server's certificate does not verify).
//
// Permanent: every other SQLSTATE, a setting, the schema or the data that
// only a person fixes: 42xxx (a missing table or column, a missing
// privilege), 3D000 (no such database), 28xxx (credentials), 23xxx and
// 40002 (a constraint, also when checked at commit), 22xxx (bad data),
// 25P02 and other bugs, 0A000 (but a cached plan a migration changed:
// replannable), XX (internal errors, corruption).
func Transient(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return transientSQLState(pgErr.Code) || replannable(pgErr)
	}
	// No server error: the connection or dial failed; waiting may heal
	// that, unless the server's certificate does not verify (another CA,
	// another host name): a setting to fix, not an outage to wait out.
	return !errors.Is(err, context.Canceled) && !certificateRefused(err)
}

// transientSQLState is Transient's rule for a server error's SQLSTATE.
func transientSQLState(code string) bool {
	switch code {
	case "25006", // read_only_sql_transaction: a demoted primary, a standby
		"25P03", "25P04", // idle_in_transaction_session_timeout, transaction_timeout
		"55P03", "55006": // lock_not_available, object_in_use
		return true
	case "40002": // transaction_integrity_constraint_violation: a constraint
		return false
	}
	if len(code) != 5 {
		return false
	}
	switch code[:2] {
	case "08", "40", "53", "57", "58": // connection, txn rollback, resources, operator intervention, system
		return true
	}
	return false
}

// replannable: a statement prepared before a migration changed a column
// it returns (0A000 "cached plan must not change result type", raised by
// PostgreSQL's RevalidateCachedQuery, whatever lc_messages says). The
// statement is prepared again next time (pgx invalidates its cached one on
// the error; the ledger's read of started rows, arrays.go, does the same),
// so waiting heals it; every other 0A000 is permanent.
func replannable(e *pgconn.PgError) bool {
	return e.Code == "0A000" && e.Routine == "RevalidateCachedQuery"
}

// certificateRefused: the server's certificate did not verify.
func certificateRefused(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname) || errors.As(err, &invalid)
}

// classify marks the errors that retrying cannot fix (permission denied,
// a missing table, a constraint): the router stops on them instead of
// reporting PostgreSQL down forever.
//
// A read-only answer (25006) also resets the pool: the session that gave
// it is connected to a server that is not a writable primary (a demoted
// primary that still serves, a standby reached through a stale DNS
// answer), and stays read-only for its whole life, however long the
// router retries. Every pooled session is suspect, as they all reached
// the same host, so all are closed (the ones in use when they are
// returned) and the retry dials again, which reaches the new primary
// once the failover is done. (target_session_attrs=read-write in
// postgres.url makes the dial itself skip a server that is not one.)
//
// A transaction pooler that postgres.pooler does not name (SQLSTATE 26000
// or 42P05 on pgx's named statements) is permanent too, with an error
// that names the setting (pooler.Explain): it never heals by itself.
func (p *Postgres) classify(err error) error {
	if _, fenced := processor.IsFenced(err); err == nil || fenced || errors.Is(err, context.Canceled) {
		return err
	}
	if e := pooler.Explain(err, p.pooler); e != err {
		return processor.Permanent(e)
	}
	if readOnlyServer(err) {
		p.pool.Reset()
	}
	if Transient(err) {
		return err
	}
	return processor.Permanent(err)
}

// readOnlyServer: the server refused a write because the session is
// read-only (SQLSTATE 25006 read_only_sql_transaction).
func readOnlyServer(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "25006"
}
