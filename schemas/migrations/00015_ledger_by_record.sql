-- A replay (a consumer group moved back, a topic read again) meets the
-- records whose rows the ledger already holds, in offset order. The
-- read-only look-up of a replay (sink/ledger/claim.go, startedSQL) finds
-- each record's started row through this index first: the rows of
-- consecutive offsets lie on the same leaves of this index, and next to
-- each other in the heap (claimed together), where the key's leaves are
-- random ones (the key is a digest). A copy at another offset (a
-- producer's retry) is looked up by its key, as before.
-- Partial: only started rows are looked up this way (a row is started
-- once its mark set started_at; none goes back), so a new claim (pending)
-- writes no entry here; the mark that moves a row to started was no HOT
-- update already (dedup_ledger_pending, dedup_ledger_started) and writes
-- one more index entry. Its predicate is started_at, not state: the
-- look-up implies this index's predicate and not dedup_ledger_started's,
-- whose scan of every started row the planner could otherwise take for a
-- cheap way to the same rows (with statistics from before the marks).
-- CONCURRENTLY: on a big ledger the build does not hold up the routers'
-- claims (it cannot run in a transaction; the migration lock still makes
-- one process run it). An INVALID index, what an interrupted build leaves,
-- is dropped and built again.

-- +goose NO TRANSACTION
-- +goose Up
-- The DROP waits a second at a time for its lock, a second apart, for a
-- minute (as in 00012), rather than queue the routers' claims behind it.
-- +goose StatementBegin
CREATE OR REPLACE PROCEDURE dedup_ledger_ddl(stmt text) LANGUAGE plpgsql AS $$
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
				RAISE EXCEPTION 'could not lock dedup_ledger for a moment in % tries (for: %): a long transaction holds it (pg_stat_activity, pg_locks); end it and run dedup migrate again', tries, stmt;
			END IF;
			PERFORM pg_sleep(1);
		END;
	END LOOP;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $$
BEGIN
	IF EXISTS (SELECT FROM pg_index WHERE indexrelid = to_regclass('dedup_ledger_by_record') AND NOT indisvalid) THEN
		CALL dedup_ledger_ddl('DROP INDEX dedup_ledger_by_record');
	END IF;
END
$$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS dedup_ledger_by_record ON dedup_ledger (kafka_partition, kafka_offset, topic) WHERE started_at IS NOT NULL;
-- +goose StatementBegin
DO $$
BEGIN
	IF EXISTS (SELECT FROM pg_index WHERE indexrelid = 'dedup_ledger_by_record'::regclass AND NOT indisvalid) THEN
		RAISE EXCEPTION 'index dedup_ledger_by_record is invalid (its build was interrupted again): run dedup migrate again';
	END IF;
END
$$;
-- +goose StatementEnd
DROP PROCEDURE IF EXISTS dedup_ledger_ddl(text);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS dedup_ledger_by_record;
