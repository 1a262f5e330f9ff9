-- A replay ends a record the ledger knows without deciding it again
-- (processor/known.go): the claim that inserts a record's rows writes on
-- each the record's digest (of its bytes and coordinates, the binary and
-- the deciding configuration) and how many intents the record had, and a
-- replay that finds that many started rows at the record's coordinates,
-- each with its digest, ends the record as their duplicates would have
-- (sink/ledger/known.go, through dedup_ledger_by_record of 00015).
-- NULL on every row from before, on the scheduler's, and on a record's
-- whose routes may run again: such records are decided as always.
-- Nullable columns without a default: added to the catalogue only, no row
-- written, a NULL costs a bit of the row's null bitmap.

-- +goose Up
-- The ALTER waits a second at a time for its lock, a second apart, for a
-- minute (as in 00012 and 00015), rather than queue the routers' claims
-- behind it.
-- +goose StatementBegin
DO $$
DECLARE
	tries int := 0;
BEGIN
	LOOP
		BEGIN
			SET LOCAL lock_timeout = '1s';
			ALTER TABLE dedup_ledger ADD COLUMN IF NOT EXISTS record_digest uuid, ADD COLUMN IF NOT EXISTS record_intents int2;
			RETURN;
		EXCEPTION WHEN lock_not_available THEN
			tries := tries + 1;
			IF tries >= 60 THEN
				RAISE EXCEPTION 'could not lock dedup_ledger for a moment in % tries: a long transaction holds it (pg_stat_activity, pg_locks); end it and run dedup migrate again', tries;
			END IF;
			PERFORM pg_sleep(1);
		END;
	END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
ALTER TABLE dedup_ledger DROP COLUMN IF EXISTS record_digest, DROP COLUMN IF EXISTS record_intents;
