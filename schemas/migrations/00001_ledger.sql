-- The ledger: one row per workflow ID that dedup has claimed.
-- A claim is not a completion: 'pending' rows are started again when their
-- record is redelivered (a crash happened between claim and start); only
-- 'started' rows make later duplicates skip Temporal.

-- +goose Up
CREATE TABLE IF NOT EXISTS dedup_ledger (
    workflow_id     text        PRIMARY KEY,
    activity_id     text        NOT NULL,
    event_id        text        NOT NULL,
    id_rule         text        NOT NULL,  -- provenance: header, field, content, coordinates
    payload_hash    bytea       NOT NULL,  -- sha256 of canonical {data, source, type}
    topic           text        NOT NULL,  -- where the claiming record was read
    kafka_partition integer     NOT NULL,
    kafka_offset    bigint      NOT NULL,
    state           text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'started')),
    run_id          text,                  -- Temporal run ID once started
    attempts        integer     NOT NULL DEFAULT 1,  -- claims of a pending row (re-drives)
    claimed_at      timestamptz NOT NULL DEFAULT now(),
    started_at      timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 90);  -- room for the pending -> started update to stay HOT

-- Same workflow ID, different payload: never started, kept for inspection.
CREATE TABLE IF NOT EXISTS dedup_conflicts (
    id                  bigserial   PRIMARY KEY,
    workflow_id         text        NOT NULL,
    event_id            text        NOT NULL,
    payload_hash        bytea       NOT NULL,
    ledger_payload_hash bytea       NOT NULL,
    topic               text        NOT NULL,
    kafka_partition     integer     NOT NULL,
    kafka_offset        bigint      NOT NULL,
    detected_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (topic, kafka_partition, kafka_offset, workflow_id)  -- a redelivered record is one conflict
);

-- +goose Down
DROP TABLE IF EXISTS dedup_conflicts;
DROP TABLE IF EXISTS dedup_ledger;
