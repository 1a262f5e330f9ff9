package ledger

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Entry is what the ledger holds for one workflow ID.
type Entry struct {
	WorkflowID string
	EventID    string
	IDRule     string
	// State is pending (claimed, not started yet), started or
	// dead_lettered.
	State       State
	PayloadHash [32]byte
	// RunID is the Temporal run the row was marked started with (the
	// latest generation's); empty before.
	RunID      string
	Generation int
	// Topic, Partition and Offset are where the claiming record was read.
	Topic     string
	Partition int32
	Offset    int64
	ClaimedAt time.Time
	UpdatedAt time.Time
	// Conflicts counts the copies with another payload recorded for this
	// workflow ID (dedup_conflicts).
	Conflicts int64
}

// Lookup reads the rows of workflowIDs in one read-only query; an ID the
// ledger does not know (never claimed, or purged) is absent from the map.
// It takes no lock and writes nothing: the producer client and the ingress
// use it to answer a producer (the same key again, another payload, a
// status), never to decide a start.
func (p *Postgres) Lookup(ctx context.Context, workflowIDs []string) (map[string]Entry, error) {
	out := make(map[string]Entry, len(workflowIDs))
	if len(workflowIDs) == 0 {
		return out, nil
	}
	ids := slices.Compact(slices.Sorted(slices.Values(workflowIDs)))
	rows, err := p.pool.Query(ctx, `
SELECT l.workflow_id, l.event_id, l.id_rule, l.state, l.payload_hash, coalesce(l.run_id, ''), l.generation,
	l.topic, l.kafka_partition, l.kafka_offset, l.claimed_at, l.updated_at,
	(SELECT count(*) FROM dedup_conflicts c WHERE c.workflow_id = l.workflow_id)
FROM dedup_ledger l WHERE l.workflow_id = ANY($1::text[])`, ids)
	if err != nil {
		return nil, p.classify(fmt.Errorf("looking up %d workflow IDs: %w", len(ids), err))
	}
	defer rows.Close()
	for rows.Next() {
		var (
			e    Entry
			hash []byte
		)
		if err := rows.Scan(&e.WorkflowID, &e.EventID, &e.IDRule, &e.State, &hash, &e.RunID, &e.Generation,
			&e.Topic, &e.Partition, &e.Offset, &e.ClaimedAt, &e.UpdatedAt, &e.Conflicts); err != nil {
			return nil, fmt.Errorf("reading ledger rows: %w", err)
		}
		copy(e.PayloadHash[:], hash)
		out[e.WorkflowID] = e
	}
	if err := rows.Err(); err != nil {
		return nil, p.classify(fmt.Errorf("looking up %d workflow IDs: %w", len(ids), err))
	}
	return out, nil
}
