package ledger

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/schemas"
)

// MarkStarted moves rows from pending to started, and a started row to a
// re-run's newer generation, in one statement. A mark of an older
// generation than the row's (a slow router's) changes nothing.
func (p *Postgres) MarkStarted(ctx context.Context, started []processor.Started) error {
	if len(started) == 0 {
		return nil
	}
	// In key order, like Claim's insert and the dead-letter marks' index
	// scan, so that routers lock rows in one order (a deadlock would still
	// only cost a retry).
	type mark struct {
		s   processor.Started
		key [16]byte
	}
	ms := make([]mark, len(started))
	for i, s := range started {
		ms[i] = mark{s, keyOf(s.WorkflowID)}
	}
	slices.SortFunc(ms, func(a, b mark) int { return bytes.Compare(a.key[:], b.key[:]) })
	ids, runs, gens, keys := make([]string, len(ms)), make([]string, len(ms)), make([]int32, len(ms)), make([][16]byte, len(ms))
	for i, m := range ms {
		ids[i], runs[i], gens[i], keys[i] = m.s.WorkflowID, m.s.RunID, int32(m.s.Generation), m.key
	}
	_, err := p.pool.Exec(ctx, `
UPDATE dedup_ledger l SET state = 'started', run_id = NULLIF(u.run_id, ''), generation = greatest(l.generation, u.generation),
	started_at = now(), updated_at = now()
FROM unnest($1::text[], $2::text[], $3::int4[], $4::uuid[]) AS u(workflow_id, run_id, generation, key)
WHERE `+schemas.LedgerRowIs("l", "u.workflow_id", "u.key")+` AND (l.state = 'pending' OR (l.state = 'started' AND l.generation < u.generation))`, ids, runs, gens, keys)
	if err != nil {
		return p.classify(fmt.Errorf("marking %d workflows started: %w", len(started), err))
	}
	return nil
}

// MarkDeadLettered ends pending rows whose records were dead-lettered
// because Temporal refused their start for good: they are not work in
// flight any more. Replaying the record claims the row again.
func (p *Postgres) MarkDeadLettered(ctx context.Context, workflowIDs []string) error {
	if len(workflowIDs) == 0 {
		return nil
	}
	// The key's index scan (= ANY) takes the rows in key order.
	ids := slices.Sorted(slices.Values(workflowIDs))
	_, err := p.pool.Exec(ctx, `
UPDATE dedup_ledger SET state = 'dead_lettered', updated_at = now()
WHERE `+schemas.LedgerRowsOf("", "$1", "$2")+` AND state = 'pending'`, ids, keysOf(ids))
	if err != nil {
		return p.classify(fmt.Errorf("marking %d workflows dead-lettered: %w", len(ids), err))
	}
	return nil
}
