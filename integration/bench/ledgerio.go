package bench

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Why the claims slow down as the ledger grows (issue #33, item 1): what
// each phase of LedgerScale read and wrote, from PostgreSQL's own
// counters (pg_statio_user_tables / _indexes, pg_stat_wal), and the shape
// of the unique index the claims go through (pgstatindex).

// IOPhase is what one phase of claims (new, or duplicate) cost, per row
// claimed. A block "read" is one PostgreSQL asked the kernel for (from the
// page cache or the disk: shared_buffers did not have it); a "hit" was in
// shared_buffers.
type IOPhase struct {
	KeyReadsPerRow   float64 `json:"key_blocks_read_per_row"`
	KeyHitRatio      float64 `json:"key_hit_ratio"`
	HeapReadsPerRow  float64 `json:"heap_blocks_read_per_row"`
	HeapHitRatio     float64 `json:"heap_hit_ratio"`
	OtherReadsPerRow float64 `json:"other_index_blocks_read_per_row"`
	// FPIPerRow is full-page images per row: the first change of a page
	// after a checkpoint logs the whole page.
	FPIPerRow        float64 `json:"full_page_images_per_row"`
	WALRecordsPerRow float64 `json:"wal_records_per_row"`
}

// KeyShape is the unique index the claims' ON CONFLICT goes through.
type KeyShape struct {
	Name        string  `json:"name"`
	Definition  string  `json:"definition"`
	MiB         float64 `json:"mib"`
	BytesPerRow float64 `json:"bytes_per_row"`
	// Levels above the leaves (pgstatindex's tree_level; -1 where the
	// pgstattuple extension could not be created), leaf pages and their
	// average fill.
	Depth       int     `json:"tree_level"`
	LeafPages   int64   `json:"leaf_pages"`
	LeafDensity float64 `json:"avg_leaf_density"`
}

// ioCounters are the ledger's block counters and the cluster's WAL
// counters at one moment.
type ioCounters struct {
	heapRead, heapHit, keyRead, keyHit, otherRead int64
	fpi, records                                  int64
}

// flushStats makes every idle connection of pool report its pending
// statistics (PostgreSQL 15 flushes them at most once a second otherwise).
func flushStats(ctx context.Context, pool *pgxpool.Pool) {
	for _, c := range pool.AcquireAllIdle(ctx) {
		_, _ = c.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		c.Release()
	}
}

// keyIndex is the unique index of the ledger (its primary key before
// migration 00012, dedup_ledger_key after).
func keyIndex(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var name string
	err := pool.QueryRow(ctx, `SELECT indexrelid::regclass::text FROM pg_index
		WHERE indrelid = 'dedup_ledger'::regclass AND indisunique ORDER BY indexrelid LIMIT 1`).Scan(&name)
	if err != nil {
		return "", fmt.Errorf("finding the ledger's unique index: %w", err)
	}
	return name, nil
}

func readIO(ctx context.Context, pool *pgxpool.Pool, key string) (ioCounters, error) {
	flushStats(ctx, pool)
	var c ioCounters
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return c, err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
		return c, err
	}
	err = conn.QueryRow(ctx, `SELECT
		(SELECT coalesce(heap_blks_read, 0) FROM pg_statio_user_tables WHERE relname = 'dedup_ledger'),
		(SELECT coalesce(heap_blks_hit, 0) FROM pg_statio_user_tables WHERE relname = 'dedup_ledger'),
		(SELECT coalesce(sum(idx_blks_read) FILTER (WHERE indexrelname = $1), 0)::int8 FROM pg_statio_user_indexes WHERE relname = 'dedup_ledger'),
		(SELECT coalesce(sum(idx_blks_hit) FILTER (WHERE indexrelname = $1), 0)::int8 FROM pg_statio_user_indexes WHERE relname = 'dedup_ledger'),
		(SELECT coalesce(sum(idx_blks_read) FILTER (WHERE indexrelname <> $1), 0)::int8 FROM pg_statio_user_indexes WHERE relname = 'dedup_ledger'),
		(SELECT wal_fpi FROM pg_stat_wal), (SELECT wal_records FROM pg_stat_wal)`, key).Scan(
		&c.heapRead, &c.heapHit, &c.keyRead, &c.keyHit, &c.otherRead, &c.fpi, &c.records)
	return c, err
}

// phase is what happened between a and b, per row of n.
func phase(a, b ioCounters, n int) IOPhase {
	per := func(x int64) float64 { return float64(x) / float64(n) }
	ratio := func(hit, read int64) float64 {
		if hit+read == 0 {
			return 1
		}
		return float64(hit) / float64(hit+read)
	}
	return IOPhase{
		KeyReadsPerRow: per(b.keyRead - a.keyRead), KeyHitRatio: ratio(b.keyHit-a.keyHit, b.keyRead-a.keyRead),
		HeapReadsPerRow: per(b.heapRead - a.heapRead), HeapHitRatio: ratio(b.heapHit-a.heapHit, b.heapRead-a.heapRead),
		OtherReadsPerRow: per(b.otherRead - a.otherRead),
		FPIPerRow:        per(b.fpi - a.fpi), WALRecordsPerRow: per(b.records - a.records),
	}
}

// keyShape measures the unique index (pgstatindex reads all of it: run
// it after the timed phases).
func keyShape(ctx context.Context, pool *pgxpool.Pool, key string, rows int) KeyShape {
	s := KeyShape{Name: key, Depth: -1}
	var size int64
	if err := pool.QueryRow(ctx, `SELECT pg_get_indexdef($1::regclass), pg_relation_size($1::regclass)`, key).Scan(&s.Definition, &size); err == nil {
		s.MiB, s.BytesPerRow = float64(size)/(1<<20), float64(size)/float64(rows)
	}
	// Best effort: the extension needs a superuser (the throwaway cluster
	// has one; a DATABASE_URL may not).
	if _, err := pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pgstattuple`); err == nil {
		_ = pool.QueryRow(ctx, `SELECT tree_level, leaf_pages, avg_leaf_density FROM pgstatindex($1::regclass)`, key).Scan(&s.Depth, &s.LeafPages, &s.LeafDensity)
	}
	return s
}

// columnBytes is the average stored size of each column of the ledger
// (pg_column_size) on a sample of about n rows, and of the whole row, to
// show where a row's heap bytes go.
func columnBytes(ctx context.Context, pool *pgxpool.Pool, rows, n int) (map[string]float64, error) {
	cols, err := pool.Query(ctx, `SELECT attname FROM pg_attribute WHERE attrelid = 'dedup_ledger'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`)
	if err != nil {
		return nil, err
	}
	var names []string
	for cols.Next() {
		var s string
		if err := cols.Scan(&s); err != nil {
			cols.Close()
			return nil, err
		}
		names = append(names, s)
	}
	cols.Close()
	exprs := make([]string, 0, len(names)+1)
	for _, c := range names {
		exprs = append(exprs, fmt.Sprintf(`coalesce(avg(pg_column_size(l.%q)), 0)::float8`, c))
	}
	exprs = append(exprs, `coalesce(avg(pg_column_size(l.*)), 0)::float8`)
	pct := min(100, max(0.01, 100*float64(n)/float64(max(rows, 1))))
	vals := make([]float64, len(exprs))
	ptrs := make([]any, len(vals))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	q := fmt.Sprintf(`SELECT %s FROM dedup_ledger l TABLESAMPLE SYSTEM (%g)`, strings.Join(exprs, ", "), pct)
	if err := pool.QueryRow(ctx, q).Scan(ptrs...); err != nil {
		return nil, err
	}
	out := make(map[string]float64, len(vals))
	for i, c := range names {
		out[c] = vals[i]
	}
	out["(row data)"] = vals[len(vals)-1]
	return out, nil
}
