package idempotency

import (
	"context"
	"fmt"
	"time"
)

// Upkeep: reaping expired keys, and the table's gauges.

// Reap deletes expired keys, batch rows per statement, and returns how
// many. A key whose lease is live is never deleted, however old: its
// holder is still running and renewing it.
func (s *Store) Reap(ctx context.Context, batch int) (int64, error) {
	var total int64
	for {
		// The outer conditions repeat the inner ones: a row renewed after
		// the subquery chose it is re-checked at its new version.
		tag, err := s.pool.Exec(ctx, `
DELETE FROM idempotency_keys WHERE key IN (
	SELECT key FROM idempotency_keys WHERE expires_at < now() AND (status <> 'in_progress' OR lease_until < now())
	LIMIT $1 FOR UPDATE SKIP LOCKED)
AND expires_at < now() AND (status <> 'in_progress' OR lease_until < now())`, batch)
		if err != nil {
			return total, fmt.Errorf("reaping idempotency keys: %w", err)
		}
		total += tag.RowsAffected()
		s.metrics.reaped.Add(float64(tag.RowsAffected()))
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}

// RefreshStats sets the keys-by-state gauge from the table.
func (s *Store) RefreshStats(ctx context.Context) error {
	rows, err := s.pool.Query(ctx, `SELECT status, count(*) FROM idempotency_keys WHERE expires_at >= now() GROUP BY status`)
	if err != nil {
		return fmt.Errorf("counting idempotency keys: %w", err)
	}
	counts := map[string]float64{}
	for rows.Next() {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			rows.Close()
			return err
		}
		counts[st] = float64(n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("counting idempotency keys: %w", err)
	}
	for _, st := range []string{StatusInProgress, StatusCompleted, StatusFailed, StatusFailedPermanent} {
		s.metrics.keys.WithLabelValues(st).Set(counts[st])
	}
	return nil
}

// Maintain reaps expired keys at once and then every reapEvery, and
// refreshes the keys-by-state gauge every 30s (or every reapEvery, if
// shorter), until ctx ends.
func (s *Store) Maintain(ctx context.Context, reapEvery time.Duration, batch int) {
	reap := func() {
		if n, err := s.Reap(ctx, batch); err != nil {
			s.log.Warn("reaping idempotency keys", "err", err)
		} else if n > 0 {
			s.log.Info("reaped idempotency keys", "keys", n)
		}
	}
	stats := func() {
		if err := s.RefreshStats(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("counting idempotency keys", "err", err)
		}
	}
	reap()
	stats()
	rt := time.NewTicker(reapEvery)
	defer rt.Stop()
	st := time.NewTicker(min(reapEvery, 30*time.Second))
	defer st.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-rt.C:
			reap()
		case <-st.C:
			stats()
		}
	}
}
