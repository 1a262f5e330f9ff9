-- Records dedup wrote to a dead-letter topic, so that a redelivered record
-- (after a rebalance or crash) is not dead-lettered twice, and so that
-- operators can query dead letters next to the ledger.

-- +goose Up
CREATE TABLE IF NOT EXISTS dedup_dead_letters (
    topic             text        NOT NULL,
    kafka_partition   integer     NOT NULL,
    kafka_offset      bigint      NOT NULL,
    workflow_id       text        NOT NULL DEFAULT '',  -- set for per-workflow reasons (conflict, temporal_permanent)
    reason            text        NOT NULL,
    error             text        NOT NULL,
    dead_letter_topic text        NOT NULL,
    written_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, kafka_partition, kafka_offset, workflow_id)
);

-- +goose Down
DROP TABLE IF EXISTS dedup_dead_letters;
