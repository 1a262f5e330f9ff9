-- dedup's scheduler (processor/schedule): a replica that decided a trigger's
-- fires holds its cursor until it has started them (held_by, held_until), so
-- that a replica whose tick lines up with it leaves them to it instead of
-- sending each a second time; a holder that died is waited for until
-- held_until. resumed_at is the last resume of a paused trigger: its slots up
-- to then came due in the pause and follow the misfire policy, however soon
-- after them the resume came.

-- +goose Up
ALTER TABLE dedup_schedule_cursors
    ADD COLUMN IF NOT EXISTS held_by    text,         -- the scheduler holding the trigger (NULL: none)
    ADD COLUMN IF NOT EXISTS held_until timestamptz,  -- its hold ends then, on the schedulers' clock
    ADD COLUMN IF NOT EXISTS resumed_at timestamptz;  -- the last resume after a pause

-- +goose Down
ALTER TABLE dedup_schedule_cursors
    DROP COLUMN IF EXISTS held_by,
    DROP COLUMN IF EXISTS held_until,
    DROP COLUMN IF EXISTS resumed_at;
