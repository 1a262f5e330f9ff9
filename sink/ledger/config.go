package ledger

import (
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupio/dedup/sink/ledger/ledgerread"
	"github.com/dedupio/dedup/sink/ledger/pooler"
)

// Config says how to reach the ledger.
type Config struct {
	// URL is a libpq connection string; cmd/ fills it from DATABASE_URL when
	// the file leaves it empty. In production use sslmode=verify-full (and
	// sslrootcert=FILE for a private CA, such as RDS's bundle): Validate
	// refuses a connection that does not verify the server's certificate
	// unless AllowInsecure says so.
	URL string `yaml:"url"`
	// URLFile names a file holding URL (a mounted Secret: the URL carries
	// the password). The config loader (internal/app) reads it into URL;
	// set one of the two.
	URLFile string `yaml:"url_file"`
	// AllowInsecure lets dedup connect to a PostgreSQL that is not on
	// this machine without verifying its certificate (sslmode disable,
	// allow, prefer, or require without sslrootcert): anyone on the path
	// can read the ledger's traffic or pose as the server. Connections to
	// a loopback address or a Unix socket never leave the machine and are
	// allowed without it (the dev stack, tests, a local TLS proxy such as
	// the Cloud SQL Auth Proxy).
	AllowInsecure bool `yaml:"allow_insecure"`
	// Pooler says what is between dedup and PostgreSQL at URL: none (a
	// direct connection, the default), session or transaction (PgBouncer's
	// pool_mode). Under transaction every connection uses unnamed
	// statements only (pgx's CacheDescribe mode), and `dedup migrate`,
	// whose lock is a session's, is refused: run it with a direct URL.
	// With a pooler, URL may set no session parameter but
	// application_name, client_encoding, DateStyle, TimeZone and
	// standard_conforming_strings (PgBouncer refuses the others at login).
	// A transaction pooler that this setting does not name fails the
	// first statements with SQLSTATE 26000 or 42P05: the error then names
	// this setting. See docs/runbook.md, "Behind PgBouncer".
	Pooler pooler.Mode `yaml:"pooler"`
	// MaxConns bounds the pool. One router uses one connection for claims
	// and one for marking starts; more only help ad-hoc queries.
	MaxConns int32 `yaml:"max_conns"`
	// Retention deletes started rows (and dead-letter log entries) older
	// than this; 0 keeps them forever. Keep it longer than any replay you
	// may run (Kafka retention, or how far back you would reset a group):
	// an event older than the ledger's memory that is replayed is stopped
	// only by Temporal's own retention of the workflow ID.
	Retention time.Duration `yaml:"retention"`
	// AcceptShortHorizon lets dedup start although a replay from a
	// topic's log start could find events that both the ledger (Retention)
	// and Temporal (the namespace retention) have forgotten, and start
	// their workflows again. Checked at start when Retention > 0.
	AcceptShortHorizon bool `yaml:"accept_short_horizon"`
	// AcceptAsyncReplication lets dedup start although the server
	// acknowledges commits that no standby has yet (streaming standbys
	// but no synchronous one, or synchronous_commit off/local) while a
	// route relies on the ledger alone (an allow_* reuse policy, a signal
	// route) or the ledger remembers events longer than Temporal's
	// namespace retention. A failover to such a standby rewinds the
	// ledger: the started rows it lost are claimed as new events again.
	// Checked at start (internal/app/replication.go).
	AcceptAsyncReplication bool `yaml:"accept_async_replication"`
	// PendingAlertAfter is the age past which a pending row counts as
	// stale (dedup_ledger_pending_stale): a live router re-drives or starts
	// a pending row within seconds.
	PendingAlertAfter time.Duration `yaml:"pending_alert_after"`
	// PurgeInterval is how often the purge runs, in batches of PurgeBatch.
	PurgeInterval time.Duration `yaml:"purge_interval"`
	PurgeBatch    int           `yaml:"purge_batch"`
	// StartedCache is how many workflow IDs the process remembers after
	// a claim found their rows started (a duplicate): a later copy of one
	// with the same payload is answered a duplicate without a read, for at
	// most a minute after (a replay's copies of earlier events, a
	// producer's retries). 80 bytes an ID, in one table made when the
	// first ID is remembered and never grown (8 MB at 100,000; no
	// garbage). 0 remembers none. A copy with another payload still goes to
	// the ledger (a conflict), and a started row changed by hand is read
	// again within the minute.
	StartedCache int `yaml:"started_cache"`
}

// maxStartedCache bounds postgres.started_cache (800 MB of IDs).
const maxStartedCache = 10_000_000

// DefaultConfig has everything but the URL.
func DefaultConfig() Config {
	return Config{Pooler: pooler.None, MaxConns: 4, PurgeInterval: time.Hour, PurgeBatch: 10000, PendingAlertAfter: 10 * time.Minute,
		StartedCache: 100_000}
}

// Validate names the first invalid field.
func (c Config) Validate() error {
	if c.URL == "" {
		return errors.New("postgres.url: empty (set it or DATABASE_URL)")
	}
	pc, err := pgxpool.ParseConfig(c.URL)
	if err != nil {
		// pgx's message quotes the string, password masked only where
		// it could parse it: a key=value password with a space shows its
		// second word. Say what to do instead, never the value.
		return errors.New("postgres.url: not a postgres:// URL nor a key=value connection string " +
			"(the parser's message is not shown: it would quote the password); in key=value form quote a value " +
			"that holds a space or a quote: password='two words', with \\' for a quote")
	}
	if !c.AllowInsecure {
		if err := verifiedTLS(pc.ConnConfig.Config); err != nil {
			return err
		}
	}
	if err := c.Pooler.Validate("postgres.pooler"); err != nil {
		return err
	}
	if err := c.Pooler.Configure(pc.ConnConfig, "postgres.url"); err != nil {
		return err
	}
	if err := arraysSendable(pc.ConnConfig.DefaultQueryExecMode); err != nil {
		return err
	}
	if c.MaxConns < 2 {
		return fmt.Errorf("postgres.max_conns: %d, want at least 2", c.MaxConns)
	}
	if c.Retention < 0 || (c.Retention > 0 && c.Retention < time.Hour) {
		return fmt.Errorf("postgres.retention: %s, want 0 (keep) or at least 1h", c.Retention)
	}
	if c.PendingAlertAfter <= 0 {
		return fmt.Errorf("postgres.pending_alert_after: %s, want > 0", c.PendingAlertAfter)
	}
	if c.PurgeInterval <= 0 || c.PurgeBatch <= 0 {
		return errors.New("postgres.purge_interval, purge_batch: want > 0")
	}
	if c.StartedCache < 0 || c.StartedCache > maxStartedCache {
		return fmt.Errorf("postgres.started_cache: %d, want 0 (remember none) to %d workflow IDs", c.StartedCache, maxStartedCache)
	}
	return nil
}

// arraysSendable refuses the query exec modes in which pgx guesses each
// parameter's type from its Go value (exec, simple_protocol): it has none
// for the ledger's arrays (params.go), and every claim and mark would fail.
func arraysSendable(m pgx.QueryExecMode) error {
	name := map[pgx.QueryExecMode]string{pgx.QueryExecModeExec: "exec", pgx.QueryExecModeSimpleProtocol: "simple_protocol"}[m]
	if name == "" {
		return nil
	}
	return fmt.Errorf("postgres.url: default_query_exec_mode=%s: in this mode pgx cannot send the ledger's array parameters; "+
		"remove it (the default, cache_statement, and cache_describe, which postgres.pooler: transaction sets, work)", name)
}

// verifiedTLS refuses a connection string that reaches a host other than
// this machine without verifying its certificate (ledgerread.Unverified's
// rule), naming the setting that allows it.
func verifiedTLS(c pgconn.Config) error {
	if addr, how, bad := ledgerread.Unverified(c); bad {
		return fmt.Errorf("postgres.url: connects to %s %s (sslmode disable, allow, prefer, or require without sslrootcert): "+
			"use sslmode=verify-full (with sslrootcert=FILE for a private CA), or accept it with postgres.allow_insecure: true",
			addr, how)
	}
	return nil
}

// PoolConfig is the pgx pool configuration of every pool a dedup process
// opens on the ledger's database (the ledger's, the worker's): URL,
// MaxConns, and what Pooler asks of a connection. Call Validate first.
func (c Config) PoolConfig() (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(c.URL)
	if err != nil {
		return nil, fmt.Errorf("parsing postgres.url: %w", err)
	}
	pc.MaxConns = c.MaxConns
	if err := c.Pooler.Configure(pc.ConnConfig, "postgres.url"); err != nil {
		return nil, err
	}
	return pc, nil
}

// ConnConfig is PoolConfig's for a single connection (the ingress's
// locks, the migrations).
func (c Config) ConnConfig() (*pgx.ConnConfig, error) {
	cc, err := pgx.ParseConfig(c.URL)
	if err != nil {
		return nil, fmt.Errorf("parsing postgres.url: %w", err)
	}
	if err := c.Pooler.Configure(cc, "postgres.url"); err != nil {
		return nil, err
	}
	return cc, nil
}
