-- The ledger's fence: which assignment of a Kafka partition may change
-- ledger rows for its records.
--
-- A router that takes on a partition (a consumer-group assignment) bumps
-- the partition's epoch here before it claims any of its records, and
-- every claim and mark it sends carries that epoch. The claim statement
-- takes a share lock on the owner row and writes nothing unless the epoch
-- is still the one it carries; the bump waits for those locks. So a router
-- that lost the partition (a zombie after a long pause, or a slow claim
-- that lands after an ordinary revoke) changes no row once the new owner
-- has bumped: its claim is refused whole (processor.FencedError), its
-- marks change nothing.
--
-- One row per consumer group, topic and partition: two groups that read
-- one topic into one ledger fence each other's routers only within their
-- own group. owner is the member that bumped last (for operators), and
-- generation the group generation it was assigned the partition in: a bump
-- of an older generation (a member the group dropped, whose bump lands
-- late) takes nothing, unless the group coordinator confirmed the member
-- (a group made anew starts its generations again).
-- A new table: no lock on the ledger, nothing rewritten.

-- +goose Up
CREATE TABLE IF NOT EXISTS dedup_partition_owners (
    consumer_group  text        NOT NULL,
    topic           text        NOT NULL,
    kafka_partition integer     NOT NULL,
    epoch           bigint      NOT NULL DEFAULT 1,
    owner           text        NOT NULL DEFAULT '',
    generation      integer     NOT NULL DEFAULT -1,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_group, topic, kafka_partition)
) WITH (fillfactor = 50);

-- +goose Down
DROP TABLE IF EXISTS dedup_partition_owners;
