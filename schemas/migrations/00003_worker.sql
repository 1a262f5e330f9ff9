-- The worker side (package worker): runs of RunActivityWorkflow, their task
-- instances, and the idempotency keys of activities with outside effects.
-- Every write to these tables is an upsert, so Temporal's activity retries
-- never duplicate a row.

-- +goose Up
CREATE TABLE IF NOT EXISTS activity_runs (
    run_id       text        PRIMARY KEY,   -- the Temporal run ID of RunActivityWorkflow (a UUID)
    workflow_id  text        NOT NULL,
    activity_id  text        NOT NULL,
    event_id     text        NOT NULL,
    status       text        NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'completed', 'failed')),
    started_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz
);

CREATE TABLE IF NOT EXISTS task_instances (
    id          text        PRIMARY KEY,    -- task-{run_id}:{task_type}:{index}, also its workflow ID
    run_id      text        NOT NULL,
    task_type   text        NOT NULL,
    task_index  integer     NOT NULL,
    status      text        NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'completed', 'failed')),
    result      jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
CREATE INDEX IF NOT EXISTS task_instances_run ON task_instances (run_id);

CREATE TABLE IF NOT EXISTS idempotency_keys (
    key          text        PRIMARY KEY,
    fingerprint  bytea       NOT NULL,      -- hash of the request parameters
    status       text        NOT NULL CHECK (status IN ('in_progress', 'completed', 'failed')),
    lease_token  text,                      -- who holds the in_progress lease
    lease_until  timestamptz,
    result       bytea,
    error        text,
    attempts     integer     NOT NULL DEFAULT 1,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS idempotency_keys_expiry ON idempotency_keys (expires_at);

-- +goose Down
DROP TABLE IF EXISTS idempotency_keys;
DROP TABLE IF EXISTS task_instances;
DROP TABLE IF EXISTS activity_runs;
