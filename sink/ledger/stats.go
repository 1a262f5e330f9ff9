package ledger

import (
	"context"
	"fmt"
	"time"
)

// RowsEstimate is the planner's estimate of the ledger's row count: cheap
// at any size (a gauge for dashboards), exact only after ANALYZE.
func (p *Postgres) RowsEstimate(ctx context.Context) (float64, error) {
	var n float64
	err := p.pool.QueryRow(ctx, `SELECT greatest(reltuples, 0)::float8 FROM pg_class WHERE oid = 'dedup_ledger'::regclass`).Scan(&n)
	return n, err
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
