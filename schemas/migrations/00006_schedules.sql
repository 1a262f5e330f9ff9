-- dedup's scheduler (processor/schedule): one cursor per trigger, locked by
-- one replica per tick (SELECT ... FOR UPDATE SKIP LOCKED), and the fires it
-- decided, written in the same transaction as the cursor and before any
-- start: a crash replays a stored fire (same slot, same window), never a new
-- decision. A fire is claimed in dedup_ledger like an event (workflow ID
-- activity-{activity_id}:{scheduled_for}, id_rule 'schedule', topic '').

-- +goose Up
CREATE TABLE IF NOT EXISTS dedup_schedule_cursors (
    trigger_name text        PRIMARY KEY,
    last_slot    timestamptz NOT NULL,  -- newest slot decided (run or not); a new cursor: its creation
    last_fired   timestamptz,           -- newest slot decided to run: a compressed window starts here
    since        timestamptz NOT NULL,  -- when the trigger was first seen
    paused       boolean     NOT NULL DEFAULT false,
    paused_at    timestamptz,
    updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS dedup_schedule_fires (
    trigger_name  text        NOT NULL,
    scheduled_for timestamptz NOT NULL,
    workflow_id   text        NOT NULL,
    activity_id   text        NOT NULL,
    kind          text        NOT NULL CHECK (kind IN ('on_time', 'catchup', 'compressed')),
    window_start  timestamptz NOT NULL,
    window_end    timestamptz NOT NULL,
    missed_count  bigint      NOT NULL,
    state         text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'started', 'failed', 'conflict')),
    run_id        text,
    decided_at    timestamptz NOT NULL,  -- the scheduler's clock at the decision
    ended_at      timestamptz,
    PRIMARY KEY (trigger_name, scheduled_for)
);
CREATE INDEX IF NOT EXISTS dedup_schedule_fires_pending ON dedup_schedule_fires (trigger_name, scheduled_for) WHERE state = 'pending';

-- +goose Down
DROP TABLE IF EXISTS dedup_schedule_fires;
DROP TABLE IF EXISTS dedup_schedule_cursors;
