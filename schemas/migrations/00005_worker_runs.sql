-- The worker keeps one logical run per workflow ID (issue 19).
--
-- activity_runs.run_id is now the name-based UUID (v5) of the workflow ID,
-- not the Temporal run ID: every execution of one workflow ID (an activity
-- retry, a replay, a reset, a re-run that the reuse policy allows) is the
-- same logical run, and each Temporal execution is one row of
-- activity_run_attempts. Task IDs task-{run_id}:{task_type}:{index} and the
-- idempotency keys {task_id}:{step} derive from run_id, so a re-run finds
-- what the previous executions finished. Rows written before this migration
-- keep their Temporal run IDs (workflows started before it finish on the
-- old code path, see worker/legacy.go).
--
-- Runs and tasks record how they ended: failed and cancelled with the
-- error. An idempotency key may end failed_permanent (the step said the
-- error will not go away: it is returned again, never retried while the
-- key lives), and records when a holder took it over after a lease expired.

-- +goose Up
ALTER TABLE activity_runs DROP CONSTRAINT IF EXISTS activity_runs_status_check;
ALTER TABLE activity_runs ADD CONSTRAINT activity_runs_status_check CHECK (status IN ('running', 'completed', 'failed', 'cancelled'));
ALTER TABLE activity_runs ADD COLUMN IF NOT EXISTS error text;

CREATE TABLE IF NOT EXISTS activity_run_attempts (
    run_id          text        NOT NULL,  -- activity_runs.run_id
    temporal_run_id text        NOT NULL,  -- this execution's Temporal run ID
    attempt         integer     NOT NULL,  -- 1, 2, ...: the order in which the worker saw the executions
    -- abandoned: the execution closed without recording an end (terminated,
    -- timed out, or reset away); the worker notes it when the next one begins.
    -- superseded: a start of an older generation that landed after a newer
    -- generation's run (a delayed start under an allow_* policy); it ran
    -- nothing.
    status          text        NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'completed', 'failed', 'cancelled', 'abandoned', 'superseded')),
    -- generation: the router's generation of the start (the run's memo
    -- dedup_generation; 0 when it carried none).
    generation      integer     NOT NULL DEFAULT 0,
    error           text,
    started_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    PRIMARY KEY (run_id, temporal_run_id),
    UNIQUE (run_id, attempt)
);

ALTER TABLE task_instances DROP CONSTRAINT IF EXISTS task_instances_status_check;
ALTER TABLE task_instances ADD CONSTRAINT task_instances_status_check CHECK (status IN ('running', 'completed', 'failed', 'cancelled'));
ALTER TABLE task_instances ADD COLUMN IF NOT EXISTS error text;
-- Executions of the task's workflow: a failed task runs again in a re-run.
ALTER TABLE task_instances ADD COLUMN IF NOT EXISTS executions integer NOT NULL DEFAULT 1;
ALTER TABLE task_instances ADD COLUMN IF NOT EXISTS temporal_run_id text;

ALTER TABLE idempotency_keys DROP CONSTRAINT IF EXISTS idempotency_keys_status_check;
ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_status_check CHECK (status IN ('in_progress', 'completed', 'failed', 'failed_permanent'));
ALTER TABLE idempotency_keys ADD COLUMN IF NOT EXISTS taken_over_at timestamptz;

-- +goose Down
ALTER TABLE idempotency_keys DROP COLUMN IF EXISTS taken_over_at;
UPDATE idempotency_keys SET status = 'failed' WHERE status = 'failed_permanent';
ALTER TABLE idempotency_keys DROP CONSTRAINT IF EXISTS idempotency_keys_status_check;
ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_status_check CHECK (status IN ('in_progress', 'completed', 'failed'));
ALTER TABLE task_instances DROP COLUMN IF EXISTS temporal_run_id;
ALTER TABLE task_instances DROP COLUMN IF EXISTS executions;
ALTER TABLE task_instances DROP COLUMN IF EXISTS error;
UPDATE task_instances SET status = 'failed' WHERE status = 'cancelled';
ALTER TABLE task_instances DROP CONSTRAINT IF EXISTS task_instances_status_check;
ALTER TABLE task_instances ADD CONSTRAINT task_instances_status_check CHECK (status IN ('running', 'completed', 'failed'));
DROP TABLE IF EXISTS activity_run_attempts;
ALTER TABLE activity_runs DROP COLUMN IF EXISTS error;
UPDATE activity_runs SET status = 'failed' WHERE status = 'cancelled';
ALTER TABLE activity_runs DROP CONSTRAINT IF EXISTS activity_runs_status_check;
ALTER TABLE activity_runs ADD CONSTRAINT activity_runs_status_check CHECK (status IN ('running', 'completed', 'failed'));
