// Package pooler is how dedup's processes talk to PostgreSQL through a
// connection pooler such as PgBouncer: the one rule, applied wherever a
// pgx pool or connection is made for the ledger, the worker's tables or
// the ingress's locks (postgres.pooler in dedup's config).
//
// What a pooler shares decides what a client may keep in its session:
//
//   - None and Session: the client has a server session of its own for as
//     long as it is connected (PgBouncer's session pooling resets it with
//     DISCARD ALL before the next client gets it). Everything works as on
//     a direct connection: pgx's cache of named prepared statements,
//     session advisory locks (the migrations' lock). PgBouncer still
//     refuses startup parameters it does not know (default_transaction_
//     read_only, options): Configure refuses them for either pooler.
//   - Transaction: the client has a server session for one transaction
//     only; its next transaction may run on another, which other clients
//     used in between. Named prepared statements (pgx's default,
//     QueryExecModeCacheStatement: "stmtcache_…", and the ledger's reads of
//     started rows, "dedup_started_rows" and "dedup_started_by_range")
//     then meet a session that lacks them (SQLSTATE 26000) or already has
//     them (42P05), and a session advisory lock stays on a server session
//     nobody owns. So Configure turns pgx to QueryExecModeCacheDescribe
//     (unnamed statements, the parameter and result types cached per
//     client connection), and what needs a session (migrations) is refused
//     by its caller, naming the setting.
//
// A pooler the config does not name shows itself by those two SQLSTATEs:
// Explain turns them into an error that names postgres.pooler.
package pooler

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Mode is what stands between dedup and PostgreSQL.
type Mode string

const (
	// None is a direct connection (or a proxy that keeps sessions, such as
	// the Cloud SQL Auth Proxy). The default; "" means None.
	None Mode = "none"
	// Session is PgBouncer (or another pooler) in session pooling mode.
	Session Mode = "session"
	// Transaction is PgBouncer (or another pooler) in transaction pooling
	// mode: sessions are shared between clients' transactions.
	Transaction Mode = "transaction"
)

// Validate names field when m is not a mode.
func (m Mode) Validate(field string) error {
	switch m {
	case "", None, Session, Transaction:
		return nil
	}
	return fmt.Errorf("%s: %q, want none, session or transaction", field, string(m))
}

// Pooled is true behind a pooler (Session or Transaction).
func (m Mode) Pooled() bool { return m == Session || m == Transaction }

// String is the mode's name ("" is none).
func (m Mode) String() string {
	if m == "" {
		return string(None)
	}
	return string(m)
}

// passedThrough are the startup parameters PgBouncer accepts from a
// client and keeps per client (its track_extra_parameters before 1.20:
// client_encoding, DateStyle, TimeZone, standard_conforming_strings,
// application_name); it refuses any other ("unsupported startup
// parameter", SQLSTATE 08P01) unless ignore_startup_parameters names it,
// and then drops it.
var passedThrough = []string{"application_name", "client_encoding", "datestyle", "timezone", "standard_conforming_strings"}

// Configure sets c up for mode m; field names the connection string's
// setting in errors (postgres.url). Behind a pooler it refuses session
// parameters the pooler would refuse or drop (set them on the role
// instead: ALTER ROLE … SET, which the server applies to every session);
// under Transaction it turns pgx to unnamed statements.
func (m Mode) Configure(c *pgx.ConnConfig, field string) error {
	if !m.Pooled() {
		return nil
	}
	var refused []string
	for k := range c.RuntimeParams {
		if !slices.Contains(passedThrough, strings.ToLower(k)) {
			refused = append(refused, k)
		}
	}
	if len(refused) > 0 {
		sort.Strings(refused)
		return fmt.Errorf("%s sets the session parameter %s, which a pooler (postgres.pooler: %s) refuses at login or does not keep: "+
			"remove it from the URL and set it on the role instead (ALTER ROLE … SET %s = …)",
			field, strings.Join(refused, ", "), m, refused[0])
	}
	if m == Transaction {
		// Unnamed statements only: a named one would outlive the
		// transaction on a server session shared with other clients.
		// CacheDescribe rather than Exec: the ledger's statements pass
		// arrays (uuid[] from [][16]byte) whose type Exec cannot guess.
		c.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
		c.StatementCacheCapacity = 0
	}
	return nil
}

// Explain names postgres.pooler in err when m is not Transaction and the
// server's answer shows a transaction pooler in the way: a prepared
// statement of this connection missing (SQLSTATE 26000) or already there
// (42P05). Nothing but pgx's cache and the ledger's read of started rows
// prepares statements on dedup's connections, so either means another
// client's transaction used the same server session, or a DISCARD ALL
// reset it. The read heals that (it prepares its statement again and runs
// once more before it fails); pgx's cached statements fail the claim, and
// the error names this setting: no one but a pooler resets a session the
// router holds (PostgreSQL has no command that resets another session).
// Any other error is returned as it is.
func Explain(err error, m Mode) error {
	var pgErr *pgconn.PgError
	if m == Transaction || !errors.As(err, &pgErr) || (pgErr.Code != "26000" && pgErr.Code != "42P05") {
		return err
	}
	return fmt.Errorf("postgres.pooler: %s, but PostgreSQL is reached through a transaction pooler "+
		"(SQLSTATE %s: this connection's prepared statements are on another client's session): "+
		"set postgres.pooler: transaction (and run `dedup migrate` with a direct URL) (%w): %w", m, pgErr.Code, ErrTransactionPooler, err)
}

// ErrTransactionPooler is in Explain's error: a transaction pooler the
// config did not name. Waiting does not heal it; the setting does.
var ErrTransactionPooler = errors.New("a transaction pooler shares this connection's server sessions")
