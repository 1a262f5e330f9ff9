-- Every ledger row ends: 'started' (Temporal has the workflow) or
-- 'dead_lettered' (Temporal refused the start for good and the record went
-- to the dead-letter topic). A 'dead_lettered' row is claimed again, as
-- pending, when its record is replayed (`dedup dlq replay`). Conflicting
-- copies never own a row: they are kept in dedup_conflicts.
-- Pending rows are work in flight; the partial index makes "the oldest
-- pending row" cheap to watch (dedup_ledger_pending_oldest_seconds).

-- +goose Up
ALTER TABLE dedup_ledger DROP CONSTRAINT IF EXISTS dedup_ledger_state_check;
ALTER TABLE dedup_ledger ADD CONSTRAINT dedup_ledger_state_check CHECK (state IN ('pending', 'started', 'dead_lettered'));
CREATE INDEX IF NOT EXISTS dedup_ledger_pending ON dedup_ledger (updated_at) WHERE state = 'pending';

-- +goose Down
DROP INDEX IF EXISTS dedup_ledger_pending;
DELETE FROM dedup_ledger WHERE state = 'dead_lettered';
ALTER TABLE dedup_ledger DROP CONSTRAINT IF EXISTS dedup_ledger_state_check;
ALTER TABLE dedup_ledger ADD CONSTRAINT dedup_ledger_state_check CHECK (state IN ('pending', 'started'));
