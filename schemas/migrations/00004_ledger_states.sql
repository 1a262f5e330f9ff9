-- Every ledger row ends: 'started' (Temporal has the workflow) or
-- 'dead_lettered' (Temporal refused the start for good and the record went
-- to the dead-letter topic). A 'dead_lettered' row is claimed again, as
-- pending, when its record is replayed (`dedup dlq replay`). Conflicting
-- copies never own a row: they are kept in dedup_conflicts.
-- generation counts the runs dedup asked Temporal for: 1 for the first; a
-- redelivered event whose run failed (allow_duplicate_failed_only) or closed
-- (allow_duplicate) re-claims its row for the next generation, and every
-- start of one generation carries one request ID, so Temporal creates at
-- most one run per generation.
-- Pending rows are work in flight; the partial index makes "the oldest
-- pending row" cheap to watch (dedup_ledger_pending_oldest_seconds).

-- +goose Up
ALTER TABLE dedup_ledger DROP CONSTRAINT IF EXISTS dedup_ledger_state_check;
ALTER TABLE dedup_ledger ADD CONSTRAINT dedup_ledger_state_check CHECK (state IN ('pending', 'started', 'dead_lettered'));
ALTER TABLE dedup_ledger ADD COLUMN IF NOT EXISTS generation integer NOT NULL DEFAULT 1;
CREATE INDEX IF NOT EXISTS dedup_ledger_pending ON dedup_ledger (updated_at) WHERE state = 'pending';

-- +goose Down
DROP INDEX IF EXISTS dedup_ledger_pending;
ALTER TABLE dedup_ledger DROP COLUMN IF EXISTS generation;
DELETE FROM dedup_ledger WHERE state = 'dead_lettered';
ALTER TABLE dedup_ledger DROP CONSTRAINT IF EXISTS dedup_ledger_state_check;
ALTER TABLE dedup_ledger ADD CONSTRAINT dedup_ledger_state_check CHECK (state IN ('pending', 'started'));
