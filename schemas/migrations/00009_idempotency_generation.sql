-- Which generation of its run (the router's dedup_generation, carried in the
-- run's memo) holds an idempotency key, or recorded its outcome. A failed
-- outcome belongs to the generation that failed: a newer generation (a
-- re-run of the failed run under allow_duplicate_failed_only) takes the key
-- over and tries the effect again, where the same generation gets the
-- stored failure. 0: a key of a run started without a generation, or
-- recorded before this column (a newer generation may retry it).
-- Adding a column with a constant default rewrites no rows.

-- +goose Up
ALTER TABLE idempotency_keys ADD COLUMN IF NOT EXISTS generation integer NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE idempotency_keys DROP COLUMN IF EXISTS generation;
