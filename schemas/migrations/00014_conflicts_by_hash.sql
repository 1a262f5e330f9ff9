-- dedup_conflicts is kept one row per workflow ID and distinct payload
-- hash (issue #39), indexed, and purged with the ledger's retention.
--
-- Why: every copy of a conflicting payload (a producer retrying a request
-- with another body under a key the ledger holds) wrote a row of its own,
-- the table had no index on the workflow ID, was never purged, and every
-- ledger lookup scanned it: after 400k conflict rows a lookup went from
-- 0.1 ms to 23 ms, for every tenant.
--
-- Now a conflict is a row per (workflow_id, payload_hash) with copies
-- (how many records carried it) and last_seen_at; its topic, partition
-- and offset are the last record's. The routers of this version upsert it
-- (ON CONFLICT on the partial unique index dedup_conflicts_by_hash, which
-- holds the rows that have a last_seen_at: theirs). Rows written before,
-- or by a router of the version before during the upgrade, have none:
-- they stay a row per record, are counted as one copy each by the lookup,
-- and are purged by detected_at, so they are gone one retention period
-- after the upgrade. The unique key per record (topic, partition, offset,
-- workflow ID) is dropped: a row now stands for many records, and a
-- record that an old router counted and a new one reads again would
-- otherwise be refused.
--
-- Online: the columns are added without a rewrite (no default on
-- last_seen_at, a constant one on copies), the indexes are built
-- CONCURRENTLY (an interrupted build leaves an INVALID index, which the
-- next run drops and builds again), and each statement that needs a lock
-- the table's readers would queue behind asks for it a second at a time,
-- as 00012 does.

-- +goose NO TRANSACTION
-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE PROCEDURE dedup_conflicts_ddl(stmt text) LANGUAGE plpgsql AS $$
DECLARE
	tries int := 0;
BEGIN
	LOOP
		BEGIN
			SET LOCAL lock_timeout = '1s';
			EXECUTE stmt;
			RETURN;
		EXCEPTION WHEN lock_not_available THEN
			tries := tries + 1;
			IF tries >= 60 THEN
				RAISE EXCEPTION 'could not lock dedup_conflicts for a moment in % tries (for: %): a long transaction holds it (pg_stat_activity, pg_locks); end it and run dedup migrate again', tries, stmt;
			END IF;
			PERFORM pg_sleep(1);
		END;
	END LOOP;
END
$$;
-- +goose StatementEnd
CALL dedup_conflicts_ddl('ALTER TABLE dedup_conflicts ADD COLUMN IF NOT EXISTS copies bigint NOT NULL DEFAULT 1, ADD COLUMN IF NOT EXISTS last_seen_at timestamptz');
-- +goose StatementBegin
DO $$
DECLARE
	i text;
BEGIN
	FOREACH i IN ARRAY ARRAY['dedup_conflicts_by_hash', 'dedup_conflicts_workflow', 'dedup_conflicts_seen'] LOOP
		IF EXISTS (SELECT FROM pg_index WHERE indexrelid = to_regclass(i) AND NOT indisvalid) THEN
			CALL dedup_conflicts_ddl('DROP INDEX ' || i);
		END IF;
	END LOOP;
END
$$;
-- +goose StatementEnd
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS dedup_conflicts_by_hash ON dedup_conflicts (workflow_id, payload_hash) WHERE last_seen_at IS NOT NULL;
CREATE INDEX CONCURRENTLY IF NOT EXISTS dedup_conflicts_workflow ON dedup_conflicts (workflow_id, (coalesce(last_seen_at, detected_at)));
CREATE INDEX CONCURRENTLY IF NOT EXISTS dedup_conflicts_seen ON dedup_conflicts ((coalesce(last_seen_at, detected_at)));
-- +goose StatementBegin
DO $$
DECLARE
	c text;
BEGIN
	SELECT conname INTO c FROM pg_constraint
	WHERE conrelid = 'dedup_conflicts'::regclass AND contype = 'u';
	IF c IS NOT NULL THEN
		CALL dedup_conflicts_ddl(format('ALTER TABLE dedup_conflicts DROP CONSTRAINT %I', c));
	END IF;
END
$$;
-- +goose StatementEnd
DROP PROCEDURE IF EXISTS dedup_conflicts_ddl(text);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS dedup_conflicts_seen;
DROP INDEX CONCURRENTLY IF EXISTS dedup_conflicts_workflow;
DROP INDEX CONCURRENTLY IF EXISTS dedup_conflicts_by_hash;
ALTER TABLE dedup_conflicts DROP COLUMN IF EXISTS last_seen_at, DROP COLUMN IF EXISTS copies;
ALTER TABLE dedup_conflicts ADD CONSTRAINT dedup_conflicts_topic_kafka_partition_kafka_offset_workflo_key UNIQUE (topic, kafka_partition, kafka_offset, workflow_id);
