-- The purge (postgres.retention) deletes the oldest started and
-- dead-lettered rows in batches. Without an index on when they ended,
-- every batch scanned the whole ledger for its victims: at 50M rows, a
-- day's purge was some 700 full scans. These partial indexes let each
-- batch read only the rows it deletes, oldest first. The mark that moves a
-- row from pending to started already changed indexed columns (state,
-- updated_at: dedup_ledger_pending), so it was no HOT update before; it
-- now writes one more index entry.
-- CONCURRENTLY: on a big ledger the build does not hold up the routers'
-- claims (it cannot run in a transaction; the migration lock still makes
-- one process run it). If a build is interrupted, PostgreSQL leaves an
-- INVALID index: DROP INDEX it and restart a router to build it again.

-- +goose NO TRANSACTION
-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS dedup_ledger_started ON dedup_ledger (started_at) WHERE state = 'started';
CREATE INDEX CONCURRENTLY IF NOT EXISTS dedup_ledger_dead_lettered ON dedup_ledger (updated_at) WHERE state = 'dead_lettered';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS dedup_ledger_dead_lettered;
DROP INDEX CONCURRENTLY IF EXISTS dedup_ledger_started;
