// Package ledgerread reads dedup's ledger (PostgreSQL) without the right
// to change it: the lookup that answers a producer (the same key again,
// another payload, a workflow's status), for the producer client (package
// client, whose LedgerReader *Reader satisfies) and the HTTP ingress.
//
// It is the one place of the lookup query: sink/ledger's Lookup runs it
// too (Lookup with the ledger's pool). It imports no migration tool: a
// producer reads a ledger the routers migrated, and a ledger that is not
// migrated (no dedup_ledger table) is an error of the lookup, not a
// migration.
//
// What it guarantees:
//   - Open's reads are read-only: even a user with write grants cannot
//     change the ledger through a Reader. On a direct connection every
//     session is (default_transaction_read_only=on, a runtime parameter
//     of every connection); behind a pooler (Options.Pooler), which
//     refuses that parameter at login and shares sessions, every lookup
//     is its own READ ONLY transaction instead. Give it a user with
//     SELECT on dedup_ledger and dedup_conflicts only.
//   - A lookup takes no lock and decides nothing: the routers' claim
//     decides a start. What a lookup says may be stale a moment later (a
//     router claims a record right after it).
//   - A credential never crosses a network in plaintext: Open refuses a
//     URL that reaches a host other than this machine without verifying
//     its certificate, unless Options.AllowInsecure says so.
package ledgerread

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/sink/ledger/pooler"
)

// Options say how Open connects.
type Options struct {
	// AllowInsecure lets the Reader connect to a PostgreSQL that is not
	// on this machine without verifying its certificate (sslmode disable,
	// allow, prefer, or require without sslrootcert): anyone on the path
	// could read the password and the rows, or pose as the server. dedup's
	// config calls it postgres.allow_insecure.
	AllowInsecure bool
	// MaxConns bounds the pool; 0: 4. A lookup holds one connection for
	// one round trip.
	MaxConns int32
	// Pooler is what stands between the Reader and PostgreSQL (dedup's
	// postgres.pooler; package pooler): behind one, lookups are READ ONLY
	// transactions (three round trips instead of one) and, under
	// pooler.Transaction, statements are unnamed.
	Pooler pooler.Mode
}

// Reader looks up ledger rows over a read-only pool. It is safe for
// concurrent use.
type Reader struct {
	pool *pgxpool.Pool
	// inTx: each lookup is a READ ONLY transaction (behind a pooler; a
	// direct session is read-only as a whole).
	inTx bool
}

// Open parses url (a libpq connection string), checks its TLS, and
// creates a pool of read-only sessions. It connects lazily: a PostgreSQL
// that is down (or refuses the login) shows up as the first lookup's
// error.
func Open(ctx context.Context, url string, o Options) (*Reader, error) {
	if url == "" {
		return nil, errors.New("ledgerread: the connection URL is empty")
	}
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx's parse errors do not repeat the password.
		return nil, fmt.Errorf("ledgerread: parsing the connection URL: %w", err)
	}
	if !o.AllowInsecure {
		if addr, how, bad := Unverified(pc.ConnConfig.Config); bad {
			return nil, fmt.Errorf("ledgerread: the URL connects to %s %s (sslmode disable, allow, prefer, or require without sslrootcert): "+
				"use sslmode=verify-full (with sslrootcert=FILE for a private CA), or accept it with Options.AllowInsecure", addr, how)
		}
	}
	if o.MaxConns > 0 {
		pc.MaxConns = o.MaxConns
	} else {
		pc.MaxConns = 4
	}
	if err := o.Pooler.Validate("ledgerread: Options.Pooler"); err != nil {
		return nil, err
	}
	if err := o.Pooler.Configure(pc.ConnConfig, "ledgerread: the connection URL"); err != nil {
		return nil, err
	}
	if !o.Pooler.Pooled() {
		if pc.ConnConfig.RuntimeParams == nil {
			pc.ConnConfig.RuntimeParams = map[string]string{}
		}
		pc.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("ledgerread: creating the pool: %w", err)
	}
	return &Reader{pool: pool, inTx: o.Pooler.Pooled()}, nil
}

// Close releases the pool.
func (r *Reader) Close() { r.pool.Close() }

// Lookup is what the ledger holds for each of workflowIDs; an ID it does
// not know (never claimed, or purged) is absent from the map. One query,
// one round trip. payloadHashes, when given, are the hashes of the copies
// being sent (payloadHashes[i] for workflowIDs[i]): see the function
// Lookup.
func (r *Reader) Lookup(ctx context.Context, workflowIDs []string, payloadHashes ...[32]byte) (map[string]decide.LedgerEntry, error) {
	if !r.inTx || len(workflowIDs) == 0 {
		return Lookup(ctx, r.pool, workflowIDs, payloadHashes...)
	}
	var out map[string]decide.LedgerEntry
	err := pgx.BeginTxFunc(ctx, r.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) (err error) {
		out, err = Lookup(ctx, tx, workflowIDs, payloadHashes...)
		return err
	})
	return out, err
}

// Querier runs a query: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// MaxConflictHashes bounds the conflicts a lookup reads per workflow ID:
// the payload hashes (LedgerEntry.ConflictHashes) and copies
// (LedgerEntry.Conflicts) of at most this many distinct conflicting
// payloads, the ones seen last. A producer that sent more payloads under
// one key makes its own lookups no slower than this. The hash of the copy
// being sent (Lookup's payloadHashes) is asked besides, along the
// (workflow_id, payload_hash) index, so a recorded conflict is known as
// such however many others were seen after it.
const MaxConflictHashes = 64

// lookupSQL reads the rows of a set of workflow IDs, each with the
// conflicts recorded for it (their copies and distinct payload hashes),
// along the index dedup_conflicts_workflow (migration 00014): its cost is
// the ID's own conflicts, at most MaxConflictHashes rows, whatever the
// table holds. (A row per record written before 00014 counts as a copy of
// its own.) Besides, asked: which of the (workflow ID, payload hash)
// pairs $3, $4 are recorded conflicts, along the unique index
// dedup_conflicts_by_hash: one probe per pair asked (a row written before
// 00014, without last_seen_at, is found among the ones seen last only).
var lookupSQL = `
SELECT l.workflow_id, l.event_id, l.id_rule, l.state, l.payload_hash, coalesce(l.run_id, ''), l.generation,
	l.topic, l.kafka_partition, l.kafka_offset, l.claimed_at, l.updated_at,
	c.n, coalesce(c.hashes, '{}'), coalesce(x.asked, '{}')
FROM dedup_ledger l
CROSS JOIN LATERAL (
	SELECT coalesce(sum(d.copies), 0)::int8 AS n, array_agg(DISTINCT d.payload_hash ORDER BY d.payload_hash) AS hashes
	FROM (
		SELECT copies, payload_hash FROM dedup_conflicts
		WHERE workflow_id = l.workflow_id
		ORDER BY coalesce(last_seen_at, detected_at) DESC
		LIMIT ` + strconv.Itoa(MaxConflictHashes) + `
	) d
) c
CROSS JOIN LATERAL (
	SELECT array_agg(k.payload_hash) AS asked
	FROM unnest($3::text[], $4::bytea[]) a(workflow_id, payload_hash)
	JOIN dedup_conflicts k ON k.workflow_id = a.workflow_id AND k.payload_hash = a.payload_hash AND k.last_seen_at IS NOT NULL
	WHERE a.workflow_id = l.workflow_id
) x
WHERE ` + schemas.LedgerRowsOf("l", "$1", "$2")

// Lookup runs the lookup query on q: what Reader.Lookup does, for a
// caller with a pool of its own (sink/ledger's Lookup). It writes
// nothing. payloadHashes, when given, are parallel to workflowIDs (more
// or fewer is an error): payloadHashes[i] is the hash of the copy being
// sent for workflowIDs[i], and an entry's ConflictHashes hold it when it
// is a recorded conflict of that ID, beyond the MaxConflictHashes seen
// last.
func Lookup(ctx context.Context, q Querier, workflowIDs []string, payloadHashes ...[32]byte) (map[string]decide.LedgerEntry, error) {
	out := make(map[string]decide.LedgerEntry, len(workflowIDs))
	if len(payloadHashes) != 0 && len(payloadHashes) != len(workflowIDs) {
		return nil, fmt.Errorf("looking up %d workflow IDs: %d payload hashes, want one per ID or none", len(workflowIDs), len(payloadHashes))
	}
	if len(workflowIDs) == 0 {
		return out, nil
	}
	ids := slices.Compact(slices.Sorted(slices.Values(workflowIDs)))
	askedIDs, asked := make([]string, 0, len(payloadHashes)), make([][]byte, 0, len(payloadHashes))
	for i := range payloadHashes {
		askedIDs, asked = append(askedIDs, workflowIDs[i]), append(asked, payloadHashes[i][:])
	}
	rows, err := q.Query(ctx, lookupSQL, ids, schemas.LedgerKeys(ids), askedIDs, asked)
	if err != nil {
		return nil, fmt.Errorf("looking up %d workflow IDs: %w", len(ids), err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			e      decide.LedgerEntry
			hash   []byte
			hashes [][]byte
			found  [][]byte
		)
		if err := rows.Scan(&e.WorkflowID, &e.EventID, &e.IDRule, &e.State, &hash, &e.RunID, &e.Generation,
			&e.Topic, &e.Partition, &e.Offset, &e.ClaimedAt, &e.UpdatedAt, &e.Conflicts, &hashes, &found); err != nil {
			return nil, fmt.Errorf("reading ledger rows: %w", err)
		}
		copy(e.PayloadHash[:], hash)
		for _, h := range slices.Concat(hashes, found) {
			var c [32]byte
			copy(c[:], h)
			if i, there := slices.BinarySearchFunc(e.ConflictHashes, c, cmpHash); !there {
				e.ConflictHashes = slices.Insert(e.ConflictHashes, i, c)
			}
		}
		out[e.WorkflowID] = e
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("looking up %d workflow IDs: %w", len(ids), err)
	}
	return out, nil
}

func cmpHash(a, b [32]byte) int { return bytes.Compare(a[:], b[:]) }

// Unverified says which host of a parsed connection string (its first
// host, or a fallback: a second host, or sslmode=prefer's plaintext
// retry) is reached without verifying the server's certificate, unless it
// is on this machine (a Unix socket, a loopback address): its address,
// how ("without TLS", "over TLS without verifying the server's
// certificate"), and true. It is the rule behind Open's refusal and
// sink/ledger's postgres.allow_insecure.
func Unverified(c pgconn.Config) (addr, how string, bad bool) {
	try := []*pgconn.FallbackConfig{{Host: c.Host, Port: c.Port, TLSConfig: c.TLSConfig}}
	try = append(try, c.Fallbacks...)
	for _, f := range try {
		if onThisMachine(f.Host) {
			continue
		}
		switch {
		case f.TLSConfig == nil:
			how = "without TLS"
		case f.TLSConfig.InsecureSkipVerify && f.TLSConfig.VerifyPeerCertificate == nil:
			how = "over TLS without verifying the server's certificate"
		default:
			continue
		}
		return net.JoinHostPort(f.Host, strconv.Itoa(int(f.Port))), how, true
	}
	return "", "", false
}

// onThisMachine: a Unix socket or a loopback host.
func onThisMachine(host string) bool {
	if strings.HasPrefix(host, "/") || strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
