package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dedupio/dedup/schemas"
)

// This file is the operators' read-only view of the ledger (dedup explain,
// inspect, the offsets reset plan, ledger stats): nothing here writes, and
// nothing here runs on the router's path.

// Row is one dedup_ledger row.
type Row struct {
	WorkflowID  string
	ActivityID  string
	EventID     string
	IDRule      string
	PayloadHash []byte
	// Topic, Partition and Offset are where the record that first claimed
	// the row was read (a re-drive does not move them).
	Topic      string
	Partition  int32
	Offset     int64
	State      State  // pending, started, dead_lettered
	RunID      string // the Temporal run ID once started ("" if Temporal did not say)
	Attempts   int    // claims of the row while not started (1 + re-drives)
	Generation int
	ClaimedAt  time.Time
	StartedAt  *time.Time
	UpdatedAt  time.Time
}

const rowColumns = `workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset,
	state, coalesce(run_id, ''), attempts, generation, claimed_at, started_at, updated_at`

func scanRows(rows pgx.Rows) ([]Row, error) {
	defer rows.Close()
	var out []Row
	for rows.Next() {
		var r Row
		if err := rows.Scan(&r.WorkflowID, &r.ActivityID, &r.EventID, &r.IDRule, &r.PayloadHash, &r.Topic, &r.Partition, &r.Offset,
			&r.State, &r.RunID, &r.Attempts, &r.Generation, &r.ClaimedAt, &r.StartedAt, &r.UpdatedAt); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Rows reads the rows of the given workflow IDs (primary key lookups), in
// workflow ID order; absent IDs have no row.
func (p *Postgres) Rows(ctx context.Context, workflowIDs []string) ([]Row, error) {
	rows, err := p.pool.Query(ctx, `SELECT `+rowColumns+` FROM dedup_ledger WHERE `+schemas.LedgerRowsOf("", "$1", "$2")+` ORDER BY workflow_id`, workflowIDs, keysOf(workflowIDs))
	if err != nil {
		return nil, fmt.Errorf("reading %d ledger rows: %w", len(workflowIDs), err)
	}
	out, err := scanRows(rows)
	if err != nil {
		return nil, fmt.Errorf("reading %d ledger rows: %w", len(workflowIDs), err)
	}
	return out, nil
}

// RowsOfEvent reads every row claimed for an event ID. The column has no
// index (one would cost every claim a write): this scans the table.
func (p *Postgres) RowsOfEvent(ctx context.Context, eventID string) ([]Row, error) {
	rows, err := p.pool.Query(ctx, `SELECT `+rowColumns+` FROM dedup_ledger WHERE event_id = $1 ORDER BY workflow_id`, eventID)
	if err != nil {
		return nil, fmt.Errorf("reading the ledger rows of event %q: %w", eventID, err)
	}
	out, err := scanRows(rows)
	if err != nil {
		return nil, fmt.Errorf("reading the ledger rows of event %q: %w", eventID, err)
	}
	return out, nil
}

// RowsClaimedAt reads the rows a record claimed first (its coordinates).
// The coordinates have no index: this scans the table.
func (p *Postgres) RowsClaimedAt(ctx context.Context, topic string, partition int32, offset int64) ([]Row, error) {
	rows, err := p.pool.Query(ctx, `SELECT `+rowColumns+` FROM dedup_ledger
WHERE topic = $1 AND kafka_partition = $2 AND kafka_offset = $3 ORDER BY workflow_id`, topic, partition, offset)
	if err != nil {
		return nil, fmt.Errorf("reading the ledger rows claimed at %s/%d/%d: %w", topic, partition, offset, err)
	}
	out, err := scanRows(rows)
	if err != nil {
		return nil, fmt.Errorf("reading the ledger rows claimed at %s/%d/%d: %w", topic, partition, offset, err)
	}
	return out, nil
}

// Conflict is one dedup_conflicts row: a copy of a workflow ID read with
// another payload than the one the row was claimed with.
type Conflict struct {
	WorkflowID        string
	EventID           string
	PayloadHash       []byte // the conflicting copy's
	LedgerPayloadHash []byte // the row's, when the conflict was found
	Topic             string // where the conflicting copy was read
	Partition         int32
	Offset            int64
	DetectedAt        time.Time
}

// Conflicts reads the conflicts of a record (by its coordinates: the
// table's unique key) when topic is set, and of the given workflow IDs (a
// scan of the table, which holds only conflicts).
func (p *Postgres) Conflicts(ctx context.Context, topic string, partition int32, offset int64, workflowIDs []string) ([]Conflict, error) {
	rows, err := p.pool.Query(ctx, `
SELECT workflow_id, event_id, payload_hash, ledger_payload_hash, topic, kafka_partition, kafka_offset, detected_at
FROM dedup_conflicts
WHERE ($1 <> '' AND topic = $1 AND kafka_partition = $2 AND kafka_offset = $3) OR workflow_id = ANY($4::text[])
ORDER BY detected_at, id`, topic, partition, offset, workflowIDs)
	if err != nil {
		return nil, fmt.Errorf("reading conflicts: %w", err)
	}
	defer rows.Close()
	var out []Conflict
	for rows.Next() {
		var c Conflict
		if err := rows.Scan(&c.WorkflowID, &c.EventID, &c.PayloadHash, &c.LedgerPayloadHash, &c.Topic, &c.Partition, &c.Offset, &c.DetectedAt); err != nil {
			return nil, fmt.Errorf("reading conflicts: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading conflicts: %w", err)
	}
	return out, nil
}

// DeadLetterEntry is one dedup_dead_letters row: a record dedup wrote to a
// dead-letter topic.
type DeadLetterEntry struct {
	Topic           string // where the record was read
	Partition       int32
	Offset          int64
	WorkflowID      string // for per-workflow reasons (conflict, temporal_permanent), else ""
	Reason          string
	Error           string
	DeadLetterTopic string
	WrittenAt       time.Time
}

// DeadLetters reads the dead letters of a record (by its coordinates: the
// table's primary key) when topic is set, and of the given workflow IDs
// (a scan of the table).
func (p *Postgres) DeadLetters(ctx context.Context, topic string, partition int32, offset int64, workflowIDs []string) ([]DeadLetterEntry, error) {
	rows, err := p.pool.Query(ctx, `
SELECT topic, kafka_partition, kafka_offset, workflow_id, reason, error, dead_letter_topic, written_at
FROM dedup_dead_letters
WHERE ($1 <> '' AND topic = $1 AND kafka_partition = $2 AND kafka_offset = $3) OR (workflow_id <> '' AND workflow_id = ANY($4::text[]))
ORDER BY written_at`, topic, partition, offset, workflowIDs)
	if err != nil {
		return nil, fmt.Errorf("reading dead letters: %w", err)
	}
	defer rows.Close()
	var out []DeadLetterEntry
	for rows.Next() {
		var d DeadLetterEntry
		if err := rows.Scan(&d.Topic, &d.Partition, &d.Offset, &d.WorkflowID, &d.Reason, &d.Error, &d.DeadLetterTopic, &d.WrittenAt); err != nil {
			return nil, fmt.Errorf("reading dead letters: %w", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading dead letters: %w", err)
	}
	return out, nil
}

// Stats summarises the ledger for operators (dedup ledger stats). It
// scans the ledger once: run it on demand, not on a schedule.
type Stats struct {
	// Rows counts ledger rows per activity and state, in that order.
	Rows []StateCount
	// OldestPending is the pending row waiting longest since it was last
	// claimed; nil when none is pending.
	OldestPending *Row
	Conflicts     int64
	// DeadLetters counts the dead-letter log's entries per reason.
	DeadLetters []ReasonCount
	// Tables are the sizes on disk of the ledger's tables.
	Tables []TableSize
}

// StateCount is the rows of one activity in one state.
type StateCount struct {
	ActivityID string
	State      State
	Rows       int64
	// Oldest and Newest are the rows' oldest and newest last change
	// (updated_at).
	Oldest, Newest time.Time
}

// ReasonCount is the dead letters of one reason.
type ReasonCount struct {
	Reason string
	Rows   int64
}

// TableSize is one table's size on disk: the whole relation (with its
// TOAST data and indexes), and the indexes alone.
type TableSize struct {
	Table        string
	TotalBytes   int64
	IndexesBytes int64
}

// Stats reads the ledger's statistics.
func (p *Postgres) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	rows, err := p.pool.Query(ctx, `SELECT activity_id, state, count(*), min(updated_at), max(updated_at)
FROM dedup_ledger GROUP BY activity_id, state ORDER BY activity_id, state`)
	if err != nil {
		return st, fmt.Errorf("counting ledger rows: %w", err)
	}
	for rows.Next() {
		var c StateCount
		if err := rows.Scan(&c.ActivityID, &c.State, &c.Rows, &c.Oldest, &c.Newest); err != nil {
			rows.Close()
			return st, fmt.Errorf("counting ledger rows: %w", err)
		}
		st.Rows = append(st.Rows, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("counting ledger rows: %w", err)
	}
	rows, err = p.pool.Query(ctx, `SELECT `+rowColumns+` FROM dedup_ledger WHERE state = 'pending' ORDER BY updated_at LIMIT 1`)
	if err != nil {
		return st, fmt.Errorf("reading the oldest pending row: %w", err)
	}
	oldest, err := scanRows(rows)
	if err != nil {
		return st, fmt.Errorf("reading the oldest pending row: %w", err)
	}
	if len(oldest) > 0 {
		st.OldestPending = &oldest[0]
	}
	if err := p.pool.QueryRow(ctx, `SELECT count(*) FROM dedup_conflicts`).Scan(&st.Conflicts); err != nil {
		return st, fmt.Errorf("counting conflicts: %w", err)
	}
	rows, err = p.pool.Query(ctx, `SELECT reason, count(*) FROM dedup_dead_letters GROUP BY reason ORDER BY reason`)
	if err != nil {
		return st, fmt.Errorf("counting dead letters: %w", err)
	}
	for rows.Next() {
		var c ReasonCount
		if err := rows.Scan(&c.Reason, &c.Rows); err != nil {
			rows.Close()
			return st, fmt.Errorf("counting dead letters: %w", err)
		}
		st.DeadLetters = append(st.DeadLetters, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("counting dead letters: %w", err)
	}
	rows, err = p.pool.Query(ctx, `SELECT t, pg_total_relation_size(t::regclass), pg_indexes_size(t::regclass)
FROM unnest(ARRAY['dedup_ledger', 'dedup_conflicts', 'dedup_dead_letters']) AS t`)
	if err != nil {
		return st, fmt.Errorf("reading table sizes: %w", err)
	}
	for rows.Next() {
		var s TableSize
		if err := rows.Scan(&s.Table, &s.TotalBytes, &s.IndexesBytes); err != nil {
			rows.Close()
			return st, fmt.Errorf("reading table sizes: %w", err)
		}
		st.Tables = append(st.Tables, s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("reading table sizes: %w", err)
	}
	return st, nil
}

// PurgeCount is what Purge(olderThan) would delete now: ledger rows and
// dead-letter log entries (the dry run of dedup ledger purge).
func (p *Postgres) PurgeCount(ctx context.Context, olderThan time.Duration) (rows, deadLetters int64, err error) {
	err = p.pool.QueryRow(ctx, `SELECT
	(SELECT count(*) FROM dedup_ledger WHERE `+purgeable+`),
	(SELECT count(*) FROM dedup_dead_letters WHERE `+purgeableDeadLetters+`)`, olderThan).Scan(&rows, &deadLetters)
	if err != nil {
		return 0, 0, fmt.Errorf("counting purgeable rows: %w", err)
	}
	return rows, deadLetters, nil
}
