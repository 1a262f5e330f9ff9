package ledger

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/schemas"
)

var (
	_ processor.Ledger        = (*Postgres)(nil)
	_ processor.DeadLetterLog = (*Postgres)(nil)
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
	// PendingAlertAfter is the age past which a pending row counts as
	// stale (dedup_ledger_pending_stale): a live router re-drives or starts
	// a pending row within seconds.
	PendingAlertAfter time.Duration `yaml:"pending_alert_after"`
	// PurgeInterval is how often the purge runs, in batches of PurgeBatch.
	PurgeInterval time.Duration `yaml:"purge_interval"`
	PurgeBatch    int           `yaml:"purge_batch"`
}

// DefaultConfig has everything but the URL.
func DefaultConfig() Config {
	return Config{MaxConns: 4, PurgeInterval: time.Hour, PurgeBatch: 10000, PendingAlertAfter: 10 * time.Minute}
}

// Validate names the first invalid field.
func (c Config) Validate() error {
	if c.URL == "" {
		return errors.New("postgres.url: empty (set it or DATABASE_URL)")
	}
	pc, err := pgxpool.ParseConfig(c.URL)
	if err != nil {
		return fmt.Errorf("postgres.url: %w", err)
	}
	if !c.AllowInsecure {
		if err := verifiedTLS(pc.ConnConfig.Config); err != nil {
			return err
		}
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
	return nil
}

// verifiedTLS says which host of a parsed connection string (its first
// host, or a fallback: a second host, or sslmode=prefer's plaintext retry)
// is reached without verifying the server's certificate, unless it is on
// this machine.
func verifiedTLS(c pgconn.Config) error {
	try := []*pgconn.FallbackConfig{{Host: c.Host, Port: c.Port, TLSConfig: c.TLSConfig}}
	try = append(try, c.Fallbacks...)
	for _, f := range try {
		if onThisMachine(f.Host) {
			continue
		}
		how := ""
		switch {
		case f.TLSConfig == nil:
			how = "without TLS"
		case f.TLSConfig.InsecureSkipVerify && f.TLSConfig.VerifyPeerCertificate == nil:
			how = "over TLS without verifying the server's certificate"
		default:
			continue
		}
		return fmt.Errorf("postgres.url: connects to %s %s (sslmode disable, allow, prefer, or require without sslrootcert): "+
			"use sslmode=verify-full (with sslrootcert=FILE for a private CA), or accept it with postgres.allow_insecure: true",
			net.JoinHostPort(f.Host, strconv.Itoa(int(f.Port))), how)
	}
	return nil
}

// onThisMachine: a Unix socket or a loopback host.
func onThisMachine(host string) bool {
	if strings.HasPrefix(host, "/") || strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Postgres is the ledger.
type Postgres struct {
	pool *pgxpool.Pool
	// replaying is set while most of the last claimed batch's workflow IDs
	// were already started: Claim then reads them first, and otherwise goes
	// straight to the upsert, which answers started rows too.
	replaying atomic.Bool
}

// Open connects (lazily: the pool dials on first use).
func Open(ctx context.Context, cfg Config) (*Postgres, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("parsing postgres.url: %w", err)
	}
	pc.MaxConns = cfg.MaxConns
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("creating pool: %w", err)
	}
	return &Postgres{pool: pool}, nil
}

// NewFromPool wraps a pool the caller configured (a query tracer, say:
// the benchmark counts round trips with one). The caller closes it.
func NewFromPool(pool *pgxpool.Pool) *Postgres { return &Postgres{pool: pool} }

// Close releases the pool.
func (p *Postgres) Close() { p.pool.Close() }

// Pool exposes the pool for inspection queries (tests, the dev summary).
func (p *Postgres) Pool() *pgxpool.Pool { return p.pool }

// Migrate applies the embedded migrations up to the newest.
func Migrate(ctx context.Context, url string) error {
	pc, err := pgx.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("parsing postgres url: %w", err)
	}
	db := stdlib.OpenDB(*pc)
	defer db.Close()
	return migrate(ctx, db)
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

// claimSQL claims the batch in one statement, one row per workflow ID.
// Rows already started in the statement's snapshot (every row of a replay)
// are answered from it and never written: no row lock, no WAL, no dead
// tuple. Every other ID is inserted, or, when its row exists, locked and
// read at its latest committed version (ON CONFLICT DO UPDATE waits for
// and sees a row another router committed after our snapshot, so a row
// started meanwhile is answered started, not re-driven). A pending or
// dead_lettered row with the same payload is re-claimed (attempts+1,
// pending). Rows are inserted in workflow ID order (ORDER BY, in SQL) so
// that two routers claiming overlapping batches lock in the same order and
// do not deadlock.
const claimSQL = `
WITH input AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::text[], $7::int4[], $8::int8[])
		AS t(workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset)
), cur AS MATERIALIZED (
	SELECT workflow_id, state, payload_hash, generation FROM dedup_ledger WHERE workflow_id = ANY($1::text[]) AND state = 'started'
), up AS (
	INSERT INTO dedup_ledger AS l (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset)
	SELECT * FROM input i
	WHERE NOT EXISTS (SELECT FROM cur WHERE cur.workflow_id = i.workflow_id)
	ORDER BY workflow_id
	ON CONFLICT (workflow_id) DO UPDATE SET
		attempts = l.attempts + (l.state <> 'started' AND l.payload_hash = EXCLUDED.payload_hash)::int,
		state = CASE WHEN l.state = 'dead_lettered' AND l.payload_hash = EXCLUDED.payload_hash THEN 'pending' ELSE l.state END,
		updated_at = CASE WHEN l.state <> 'started' AND l.payload_hash = EXCLUDED.payload_hash THEN now() ELSE l.updated_at END
	RETURNING l.workflow_id, (l.xmax = 0) AS inserted, l.state, l.payload_hash, l.generation
)
SELECT i.workflow_id, coalesce(up.inserted, false), coalesce(up.state, cur.state), coalesce(up.payload_hash, cur.payload_hash),
	coalesce(up.generation, cur.generation, 0)
FROM input i
LEFT JOIN up ON up.workflow_id = i.workflow_id
LEFT JOIN cur ON cur.workflow_id = i.workflow_id`

// stored is what the ledger holds for one workflow ID after the claim.
type stored struct {
	inserted   bool   // this claim created the row
	state      string // pending, started (dead_lettered rows come back pending)
	hash       []byte // the payload hash the row was claimed with
	generation int    // of the claim (pending) or of the recorded run (started)
}

// Claim claims the intents and returns one verdict per intent, in order.
//
// The ledger answers per workflow ID, and every copy of an ID gets its
// row's answer: a copy whose payload differs from the row's is a conflict
// (recorded); every other copy gets the row's verdict (new when this claim
// inserted it, re-drive while it is pending, duplicate once started),
// whatever its position in the batch. An absent row is claimed with the
// payload of the first copy of its ID in the batch. Which of several copies
// starts the workflow is the router's decision (one start in flight per
// workflow ID), not the ledger's.
//
// While most of the previous batch was already started (a replay), a
// read-only statement first answers the rows started with the same payload
// (one lean round trip, nothing written) and only the rest go through
// claimSQL; otherwise claimSQL takes the whole batch. This is an
// optimisation only: both paths give the same verdicts. Another round trip
// happens only when a conflict must be recorded.
func (p *Postgres) Claim(ctx context.Context, intents []processor.Intent) ([]processor.Claimed, error) {
	v, err := p.claimBatch(ctx, intents)
	return v, p.classify(err)
}

func (p *Postgres) claimBatch(ctx context.Context, intents []processor.Intent) ([]processor.Claimed, error) {
	if len(intents) == 0 {
		return nil, nil
	}
	seen := make(map[string]bool, len(intents))
	uniq := make([]int, 0, len(intents))
	for i, in := range intents {
		if !seen[in.WorkflowID] {
			seen[in.WorkflowID] = true
			uniq = append(uniq, i)
		}
	}
	got := make(map[string]stored, len(uniq))
	all := len(uniq)
	if p.replaying.Load() {
		var err error
		if uniq, err = p.answerStarted(ctx, intents, uniq, got); err != nil {
			return nil, err
		}
	}
	if len(uniq) > 0 {
		if err := p.claim(ctx, intents, uniq, got); err != nil {
			return nil, err
		}
	}
	started := 0
	for _, s := range got {
		if s.state == "started" {
			started++
		}
	}
	p.replaying.Store(2*started >= all)
	return p.verdicts(ctx, intents, got)
}

// startedSQL returns the rows of the batch that are not started with the
// same payload: absent (state NULL), pending, or started with another
// payload (a conflict); and the duplicates that were re-run (generation >
// 1, so that their verdict carries it). The rest, nearly every row of a
// replay, are duplicates of generation 1 and cost no row in the answer.
const startedSQL = `
SELECT i.n, l.state, l.payload_hash, coalesce(l.generation, 0)
FROM unnest($1::text[], $2::bytea[]) WITH ORDINALITY AS i(workflow_id, payload_hash, n)
LEFT JOIN dedup_ledger l ON l.workflow_id = i.workflow_id
WHERE l.state IS DISTINCT FROM 'started' OR l.payload_hash <> i.payload_hash OR l.generation > 1`

// answerStarted records in got the rows already started and returns the
// indexes of the intents left to claim. A started row never goes back to
// pending, so the read needs no lock.
func (p *Postgres) answerStarted(ctx context.Context, intents []processor.Intent, uniq []int, got map[string]stored) ([]int, error) {
	ids, hashes := make([]string, len(uniq)), make([][]byte, len(uniq))
	for j, i := range uniq {
		ids[j], hashes[j] = intents[i].WorkflowID, intents[i].PayloadHash[:]
	}
	rows, err := p.pool.Query(ctx, startedSQL, ids, hashes)
	if err != nil {
		return nil, fmt.Errorf("reading %d workflow IDs: %w", len(ids), err)
	}
	defer rows.Close()
	answered := make([]bool, len(uniq))
	var left []int // positions in uniq
	for rows.Next() {
		var (
			n     int64
			state *string
			h     []byte
			gen   int
		)
		if err := rows.Scan(&n, &state, &h, &gen); err != nil {
			return nil, fmt.Errorf("reading workflow IDs: %w", err)
		}
		j := int(n - 1)
		answered[j] = true
		if state != nil && *state == "started" { // with another payload, or re-run
			got[ids[j]] = stored{state: *state, hash: h, generation: gen}
			continue
		}
		left = append(left, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading %d workflow IDs: %w", len(ids), err)
	}
	for j, ok := range answered {
		if !ok {
			got[ids[j]] = stored{state: "started", hash: hashes[j], generation: 1}
		}
	}
	todo := make([]int, len(left))
	for k, j := range left {
		todo[k] = uniq[j]
	}
	return todo, nil
}

// claim runs claimSQL for the intents uniq (in workflow ID order) and
// records the outcome in got.
func (p *Postgres) claim(ctx context.Context, intents []processor.Intent, uniq []int, got map[string]stored) error {
	n := len(uniq)
	var (
		wf, act, ev, rule, topic = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		hash                     = make([][]byte, n)
		part                     = make([]int32, n)
		off                      = make([]int64, n)
	)
	for j, i := range uniq {
		in := &intents[i]
		wf[j], act[j], ev[j], rule[j], topic[j] = in.WorkflowID, in.ActivityID, in.EventID, in.IDRule, in.Topic
		hash[j], part[j], off[j] = in.PayloadHash[:], in.Partition, in.Offset
	}
	rows, err := p.pool.Query(ctx, claimSQL, wf, act, ev, rule, hash, topic, part, off)
	if err != nil {
		return fmt.Errorf("claiming %d intents: %w", n, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id    string
			s     stored
			state *string
		)
		if err := rows.Scan(&id, &s.inserted, &state, &s.hash, &s.generation); err != nil {
			return fmt.Errorf("reading claim verdicts: %w", err)
		}
		if state == nil {
			// Impossible by construction: every ID is either started in
			// the snapshot or inserted / locked by the upsert.
			return fmt.Errorf("claiming workflow ID %q: neither inserted nor found", id)
		}
		s.state = *state
		got[id] = s
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("claiming %d intents: %w", n, err)
	}
	return nil
}

// verdicts turns what the ledger holds for each workflow ID into one
// verdict per intent, and records the conflicts.
func (p *Postgres) verdicts(ctx context.Context, intents []processor.Intent, got map[string]stored) ([]processor.Claimed, error) {
	verdicts := make([]processor.Claimed, len(intents))
	var conflicts []conflict
	var revive []string
	for i := range intents {
		in := &intents[i]
		s := got[in.WorkflowID]
		switch {
		case string(s.hash) != string(in.PayloadHash[:]):
			verdicts[i] = processor.Claimed{Verdict: processor.VerdictConflict}
			conflicts = append(conflicts, conflict{in: in, ledgerHash: s.hash})
		case s.inserted:
			verdicts[i] = processor.Claimed{Verdict: processor.VerdictNew, Generation: 1}
		case s.state == "started":
			verdicts[i] = processor.Claimed{Verdict: processor.VerdictDuplicate, Generation: s.generation}
		default: // pending: claimed before and not started (yet)
			verdicts[i] = processor.Claimed{Verdict: processor.VerdictRedrive, Generation: s.generation}
			if s.state == "dead_lettered" {
				// Re-claimed by a copy that was not the batch's first of
				// its ID (the first conflicted): rare, one more statement.
				revive = append(revive, in.WorkflowID)
				got[in.WorkflowID] = stored{state: "pending", hash: s.hash, generation: s.generation}
			}
		}
	}
	if len(revive) > 0 {
		if _, err := p.pool.Exec(ctx, `UPDATE dedup_ledger SET state = 'pending', attempts = attempts + 1, updated_at = now()
WHERE workflow_id = ANY($1::text[]) AND state = 'dead_lettered'`, revive); err != nil {
			return nil, fmt.Errorf("re-claiming %d dead-lettered rows: %w", len(revive), err)
		}
	}
	if len(conflicts) > 0 {
		if err := p.recordConflicts(ctx, conflicts); err != nil {
			return nil, err
		}
	}
	return verdicts, nil
}

type conflict struct {
	in         *processor.Intent
	ledgerHash []byte
}

func (p *Postgres) recordConflicts(ctx context.Context, cs []conflict) error {
	n := len(cs)
	wf, ev, topic := make([]string, n), make([]string, n), make([]string, n)
	h, lh := make([][]byte, n), make([][]byte, n)
	part, off := make([]int32, n), make([]int64, n)
	for i, c := range cs {
		wf[i], ev[i], topic[i] = c.in.WorkflowID, c.in.EventID, c.in.Topic
		h[i], lh[i], part[i], off[i] = c.in.PayloadHash[:], c.ledgerHash, c.in.Partition, c.in.Offset
	}
	_, err := p.pool.Exec(ctx, `
INSERT INTO dedup_conflicts (workflow_id, event_id, payload_hash, ledger_payload_hash, topic, kafka_partition, kafka_offset)
SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bytea[], $5::text[], $6::int4[], $7::int8[])
ON CONFLICT DO NOTHING`, wf, ev, h, lh, topic, part, off)
	if err != nil {
		return fmt.Errorf("recording %d conflicts: %w", n, err)
	}
	return nil
}

// MarkStarted moves rows from pending to started, and a started row to a
// re-run's newer generation, in one statement. A mark of an older
// generation than the row's (a slow router's) changes nothing.
func (p *Postgres) MarkStarted(ctx context.Context, started []processor.Started) error {
	if len(started) == 0 {
		return nil
	}
	// In workflow ID order, like Claim, so that routers lock rows in one
	// order (a deadlock would still only cost a retry).
	sorted := slices.SortedFunc(slices.Values(started), func(a, b processor.Started) int { return strings.Compare(a.WorkflowID, b.WorkflowID) })
	ids, runs, gens := make([]string, len(sorted)), make([]string, len(sorted)), make([]int32, len(sorted))
	for i, s := range sorted {
		ids[i], runs[i], gens[i] = s.WorkflowID, s.RunID, int32(s.Generation)
	}
	_, err := p.pool.Exec(ctx, `
UPDATE dedup_ledger l SET state = 'started', run_id = NULLIF(u.run_id, ''), generation = greatest(l.generation, u.generation),
	started_at = now(), updated_at = now()
FROM unnest($1::text[], $2::text[], $3::int4[]) AS u(workflow_id, run_id, generation)
WHERE l.workflow_id = u.workflow_id AND (l.state = 'pending' OR (l.state = 'started' AND l.generation < u.generation))`, ids, runs, gens)
	if err != nil {
		return p.classify(fmt.Errorf("marking %d workflows started: %w", len(started), err))
	}
	return nil
}

func deadLetterArrays(dls []processor.DeadLetter) (topic []string, part []int32, off []int64, wf []string) {
	n := len(dls)
	topic, part, off, wf = make([]string, n), make([]int32, n), make([]int64, n), make([]string, n)
	for i, d := range dls {
		topic[i], part[i], off[i], wf[i] = d.Topic, d.Partition, d.Offset, d.WorkflowID
	}
	return
}

// Written says which dead letters were recorded already, in one query.
func (p *Postgres) Written(ctx context.Context, dls []processor.DeadLetter) ([]bool, error) {
	topic, part, off, wf := deadLetterArrays(dls)
	rows, err := p.pool.Query(ctx, `
SELECT i.ord, d.topic IS NOT NULL
FROM unnest($1::text[], $2::int4[], $3::int8[], $4::text[]) WITH ORDINALITY AS i(topic, kafka_partition, kafka_offset, workflow_id, ord)
LEFT JOIN dedup_dead_letters d USING (topic, kafka_partition, kafka_offset, workflow_id)`, topic, part, off, wf)
	if err != nil {
		return nil, p.classify(fmt.Errorf("checking %d dead letters: %w", len(dls), err))
	}
	defer rows.Close()
	out := make([]bool, len(dls))
	for rows.Next() {
		var ord int
		var written bool
		if err := rows.Scan(&ord, &written); err != nil {
			return nil, fmt.Errorf("checking dead letters: %w", err)
		}
		out[ord-1] = written
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("checking dead letters: %w", err)
	}
	return out, nil
}

// Record records written dead letters, in one statement.
func (p *Postgres) Record(ctx context.Context, dls []processor.DeadLetter) error {
	topic, part, off, wf := deadLetterArrays(dls)
	reason, errs, dlq := make([]string, len(dls)), make([]string, len(dls)), make([]string, len(dls))
	for i, d := range dls {
		reason[i], errs[i], dlq[i] = d.Reason, d.Error, d.DLQTopic
	}
	_, err := p.pool.Exec(ctx, `
INSERT INTO dedup_dead_letters (topic, kafka_partition, kafka_offset, workflow_id, reason, error, dead_letter_topic)
SELECT * FROM unnest($1::text[], $2::int4[], $3::int8[], $4::text[], $5::text[], $6::text[], $7::text[])
ON CONFLICT DO NOTHING`, topic, part, off, wf, reason, errs, dlq)
	if err != nil {
		return p.classify(fmt.Errorf("recording %d dead letters: %w", len(dls), err))
	}
	return nil
}

// purgeable selects the ledger rows a purge of rows older than $1
// deletes (Purge, and PurgeCount's dry run): started and dead-lettered
// rows, by when they ended; never pending rows.
const purgeable = `((state = 'started' AND started_at < now() - $1::interval)
	OR (state = 'dead_lettered' AND updated_at < now() - $1::interval))`

// purgeableDeadLetters selects the dead-letter log entries a purge
// deletes.
const purgeableDeadLetters = `written_at < now() - $1::interval`

// Purge deletes started rows and dead-letter log entries older than
// olderThan, in batches of batch rows (short transactions, so claims are
// not held up), and returns how many ledger rows it deleted. Pending rows
// are never purged: they are work not yet done.
//
// Each batch takes the oldest victims along a partial index
// (dedup_ledger_started, dedup_ledger_dead_lettered) and goes on from
// the newest end time the batch before deleted, so a purge reads the rows
// it deletes and not the ledger: its cost grows with what it removes, not
// with the ledger's size.
func (p *Postgres) Purge(ctx context.Context, olderThan time.Duration, batch int) (int64, error) {
	var total int64
	for _, q := range []struct{ what, sql string }{
		{"started", purgeStarted},
		{"dead-lettered", purgeDeadLettered},
	} {
		from := time.Time{} // the oldest end time still to look at
		for {
			var victims, n int64
			var last *time.Time
			if err := p.pool.QueryRow(ctx, q.sql, olderThan, batch, from).Scan(&victims, &n, &last); err != nil {
				return total, fmt.Errorf("purging %s ledger rows: %w", q.what, err)
			}
			total += n
			if victims < int64(batch) || last == nil {
				break
			}
			from = *last
		}
	}
	if _, err := p.pool.Exec(ctx, `DELETE FROM dedup_dead_letters WHERE `+purgeableDeadLetters, olderThan); err != nil {
		return total, fmt.Errorf("purging dead-letter log: %w", err)
	}
	return total, nil
}

// purgeStarted deletes up to $2 started rows that ended before now() -
// $1 and at or after $3, oldest first (an index range scan of
// dedup_ledger_started), and returns how many it chose, how many it
// deleted and the newest end time among them. The DELETE checks the row
// again: one re-run meanwhile (a newer started_at) is not a victim any
// more. purgeDeadLettered is the same for dead-lettered rows, by when
// they were dead-lettered (dedup_ledger_dead_lettered).
var (
	purgeStarted      = purgeBatchSQL("started", "started_at")
	purgeDeadLettered = purgeBatchSQL("dead_lettered", "updated_at")
)

// purgeBatchSQL is one purge batch of the rows in state, by their end
// time ended (the column of that state's partial index).
func purgeBatchSQL(state, ended string) string {
	return fmt.Sprintf(`
WITH victims AS (
	SELECT workflow_id, %[2]s AS t FROM dedup_ledger
	WHERE state = '%[1]s' AND %[2]s < now() - $1::interval AND %[2]s >= $3
	ORDER BY %[2]s LIMIT $2
), gone AS (
	DELETE FROM dedup_ledger l USING victims v
	WHERE l.workflow_id = v.workflow_id AND l.state = '%[1]s' AND l.%[2]s < now() - $1::interval
	RETURNING 1
)
SELECT (SELECT count(*) FROM victims), (SELECT count(*) FROM gone), (SELECT max(t) FROM victims)`, state, ended)
}

// RowsEstimate is the planner's estimate of the ledger's row count: cheap
// at any size (a gauge for dashboards), exact only after ANALYZE.
func (p *Postgres) RowsEstimate(ctx context.Context) (float64, error) {
	var n float64
	err := p.pool.QueryRow(ctx, `SELECT greatest(reltuples, 0)::float8 FROM pg_class WHERE oid = 'dedup_ledger'::regclass`).Scan(&n)
	return n, err
}

// MarkDeadLettered ends pending rows whose records were dead-lettered
// because Temporal refused their start for good: they are not work in
// flight any more. Replaying the record claims the row again.
func (p *Postgres) MarkDeadLettered(ctx context.Context, workflowIDs []string) error {
	if len(workflowIDs) == 0 {
		return nil
	}
	ids := slices.Sorted(slices.Values(workflowIDs))
	_, err := p.pool.Exec(ctx, `
UPDATE dedup_ledger SET state = 'dead_lettered', updated_at = now()
WHERE workflow_id = ANY($1::text[]) AND state = 'pending'`, ids)
	if err != nil {
		return p.classify(fmt.Errorf("marking %d workflows dead-lettered: %w", len(ids), err))
	}
	return nil
}

// PendingStats says how long the oldest pending row has waited since it
// was last claimed, and how many have waited longer than staleAfter. A
// live router re-claims or starts a pending row within seconds; one that
// stays pending longer has no live owner (its record was committed past,
// or its partition is stuck) and needs an operator.
type PendingStats struct {
	Oldest time.Duration
	Stale  int64
}

// PendingStats reads the pending rows' ages (an index scan over pending
// rows only).
func (p *Postgres) PendingStats(ctx context.Context, staleAfter time.Duration) (PendingStats, error) {
	var st PendingStats
	var oldest float64
	err := p.pool.QueryRow(ctx, `SELECT
		coalesce(extract(epoch FROM now() - min(updated_at)), 0)::float8,
		count(*) FILTER (WHERE updated_at < now() - $1::interval)
		FROM dedup_ledger WHERE state = 'pending'`, staleAfter).Scan(&oldest, &st.Stale)
	if err != nil {
		return st, fmt.Errorf("reading pending rows: %w", err)
	}
	st.Oldest = time.Duration(oldest * float64(time.Second))
	return st, nil
}

// Counts is a summary of the ledger.
type Counts struct {
	Pending, Started, DeadLettered, Conflicts int64
}

// Count summarises the ledger (a full scan: for dashboards and tests, not
// the hot path).
func (p *Postgres) Count(ctx context.Context) (Counts, error) {
	var c Counts
	err := p.pool.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE state = 'pending'),
		count(*) FILTER (WHERE state = 'started'),
		count(*) FILTER (WHERE state = 'dead_lettered'),
		(SELECT count(*) FROM dedup_conflicts)
		FROM dedup_ledger`).Scan(&c.Pending, &c.Started, &c.DeadLettered, &c.Conflicts)
	if err != nil {
		return c, fmt.Errorf("counting ledger rows: %w", err)
	}
	return c, nil
}

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
// 25P02 and other bugs, 0A000, XX (internal errors, corruption).
func Transient(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return transientSQLState(pgErr.Code)
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
func (p *Postgres) classify(err error) error {
	if err == nil || errors.Is(err, context.Canceled) {
		return err
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

// pingTimeout bounds readiness probes.
const pingTimeout = 2 * time.Second

// Ready reports whether PostgreSQL answers within a short timeout.
func (p *Postgres) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	return p.pool.Ping(ctx)
}
