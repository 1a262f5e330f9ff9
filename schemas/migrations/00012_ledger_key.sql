-- The ledger's unique key becomes a 16-byte digest of the workflow ID
-- (issue #33): the column key (uuid), the primary key, instead of the
-- workflow ID's text (about 65 bytes, compared by collation).
--
-- Why: a claim looks every workflow ID up in the unique index. With random
-- event IDs (UUIDv4s; the content rule's SHA-256s) each lookup lands on a
-- random leaf, so the whole index must stay in memory, and every leaf a
-- checkpoint interval touches is logged whole. The digest makes the index
-- about a third of its size (docs/bench/ledger.md). A workflow ID that
-- ends with a UUIDv7 (lowercase, RFC 9562) or a ULID (uppercase Crockford
-- base32), the time-first IDs the runbook asks producers for, keeps its 48
-- bits of milliseconds first in the key, so time-ordered IDs still land on
-- the newest leaves; the other 80 bits are the ID's SHA-256.
--
-- The routers compute the key (schemas.LedgerKey, Go) and every statement
-- of sink/ledger finds a row by key = $key AND workflow_id = $id, so two
-- workflow IDs with one digest (2^-128 for random IDs; 2^-80 within one
-- millisecond for time-first IDs) never share a row: the second is a
-- conflict (sink/ledger, claim.go). dedup_ledger_key below is the same
-- rule in SQL (TestLedgerKeyDigest holds them together): this migration
-- fills the rows already there with it, and a trigger fills the key of a
-- row inserted without one (a router of the version before, during the
-- upgrade; an operator's INSERT).
--
-- Online, in steps a re-run resumes: add the column (no rewrite), the
-- trigger, fill the existing rows a hundred pages per transaction, build
-- the unique index CONCURRENTLY, prove the column NOT NULL by a validated
-- CHECK (a scan that blocks nothing), then swap the primary key (a brief
-- exclusive lock, asked for a second at a time so that the ledger's
-- readers never queue behind it longer). The fill rewrites every row once:
-- WAL and dead space of about the table's size, reclaimed by VACUUM.
-- Routers of the version before claim with ON CONFLICT (workflow_id) and
-- fail (42P10: nothing written, no offset committed) once the primary key
-- is swapped, until they are replaced: run `dedup migrate` just before
-- rolling the routers out, and roll the worker and the ingress with them:
-- the previous version's lookups by workflow_id scan the table once the
-- key is swapped, and this version's find rows only once they have a key.
-- If the index build is interrupted, PostgreSQL leaves an INVALID index:
-- the next run drops it and builds it again.
-- The heap's fillfactor goes from 90 to 100 (new pages only): a claim's
-- updates change indexed columns (state, updated_at), so they were never
-- HOT and the room was never used.

-- +goose NO TRANSACTION
-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION dedup_ledger_key(workflow_id text) RETURNS uuid
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT CASE
	WHEN substr(workflow_id, length(workflow_id) - 21, 1) = '7'
		AND substr(workflow_id, length(workflow_id) - 35, 36) ~ '^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$'
	THEN (substr(workflow_id, length(workflow_id) - 35, 8) || substr(workflow_id, length(workflow_id) - 26, 4)
		|| substr(encode(sha256(convert_to(workflow_id, 'UTF8')), 'hex'), 1, 20))::uuid
	WHEN substr(workflow_id, length(workflow_id) - 25, 26) ~ '^[0-7][0-9A-HJKMNP-TV-Z]{25}$'
	THEN (lpad(to_hex(((strpos('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(workflow_id, length(workflow_id) - 25, 1)) - 1)::int8 << 45)
			| ((strpos('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(workflow_id, length(workflow_id) - 24, 1)) - 1)::int8 << 40)
			| ((strpos('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(workflow_id, length(workflow_id) - 23, 1)) - 1)::int8 << 35)
			| ((strpos('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(workflow_id, length(workflow_id) - 22, 1)) - 1)::int8 << 30)
			| ((strpos('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(workflow_id, length(workflow_id) - 21, 1)) - 1)::int8 << 25)
			| ((strpos('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(workflow_id, length(workflow_id) - 20, 1)) - 1)::int8 << 20)
			| ((strpos('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(workflow_id, length(workflow_id) - 19, 1)) - 1)::int8 << 15)
			| ((strpos('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(workflow_id, length(workflow_id) - 18, 1)) - 1)::int8 << 10)
			| ((strpos('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(workflow_id, length(workflow_id) - 17, 1)) - 1)::int8 << 5)
			| ((strpos('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(workflow_id, length(workflow_id) - 16, 1)) - 1)::int8 << 0)), 12, '0')
		|| substr(encode(sha256(convert_to(workflow_id, 'UTF8')), 'hex'), 1, 20))::uuid
	ELSE substr(encode(sha256(convert_to(workflow_id, 'UTF8')), 'hex'), 1, 32)::uuid
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION dedup_ledger_fill_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	NEW.key := dedup_ledger_key(NEW.workflow_id);
	RETURN NEW;
END
$$;
-- +goose StatementEnd
-- The old routers' inserts run the trigger, so their roles need EXECUTE
-- now, not only when grants.sql runs after the migration (a database whose
-- default privileges keep functions from PUBLIC).
-- +goose StatementBegin
DO $$
DECLARE
	r text;
BEGIN
	FOREACH r IN ARRAY ARRAY['dedup_router', 'dedup_worker', 'dedup_ingress', 'dedup_reader', 'dedup_operator'] LOOP
		IF to_regrole(r) IS NOT NULL THEN
			EXECUTE format('GRANT EXECUTE ON FUNCTION dedup_ledger_key(text), dedup_ledger_fill_key() TO %I', r);
		END IF;
	END LOOP;
END
$$;
-- +goose StatementEnd
-- A DDL statement whose lock would queue the ledger's readers: asked for
-- a second at a time, a second apart, for a minute.
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
CREATE OR REPLACE PROCEDURE dedup_ledger_fill_keys() LANGUAGE plpgsql AS $$
DECLARE
	pages bigint := pg_relation_size('dedup_ledger') / current_setting('block_size')::int;
	b bigint := 0;
	done boolean;
	tries int := 0;
BEGIN
	-- A hundred pages a transaction, in page order; a router of the
	-- version before locks rows in workflow ID order, so a batch that
	-- deadlocks with it (or waits a second for its lock) is tried again.
	WHILE b <= pages LOOP
		done := false;
		BEGIN
			SET LOCAL lock_timeout = '1s';
			UPDATE dedup_ledger SET key = dedup_ledger_key(workflow_id)
			WHERE ctid >= format('(%s,0)', b)::tid AND ctid < format('(%s,0)', b + 100)::tid AND key IS NULL;
			done := true;
		EXCEPTION WHEN deadlock_detected OR lock_not_available THEN
			tries := tries + 1;
			IF tries >= 600 THEN
				RAISE;
			END IF;
		END;
		COMMIT;
		IF done THEN
			b := b + 100;
		END IF;
	END LOOP;
	-- Rows whose new version went past the last page: one scan.
	LOOP
		BEGIN
			UPDATE dedup_ledger SET key = dedup_ledger_key(workflow_id) WHERE key IS NULL;
			EXIT;
		EXCEPTION WHEN deadlock_detected THEN
			tries := tries + 1;
			IF tries >= 600 THEN
				RAISE;
			END IF;
		END;
	END LOOP;
	COMMIT;
END
$$;
-- +goose StatementEnd
CALL dedup_ledger_ddl('ALTER TABLE dedup_ledger ADD COLUMN IF NOT EXISTS key uuid');
CALL dedup_ledger_ddl($$CREATE OR REPLACE TRIGGER dedup_ledger_fill_key BEFORE INSERT ON dedup_ledger FOR EACH ROW WHEN (NEW.key IS NULL) EXECUTE FUNCTION dedup_ledger_fill_key()$$);
CALL dedup_ledger_fill_keys();
-- An INVALID index is what an interrupted build leaves (a router's start
-- cancelled, a lost connection): dropped, and built again.
-- +goose StatementBegin
DO $$
BEGIN
	IF EXISTS (SELECT FROM pg_index WHERE indexrelid = to_regclass('dedup_ledger_key') AND NOT indisvalid) THEN
		CALL dedup_ledger_ddl('DROP INDEX dedup_ledger_key');
	END IF;
END
$$;
-- +goose StatementEnd
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS dedup_ledger_key ON dedup_ledger (key);
-- +goose StatementBegin
DO $$
BEGIN
	IF EXISTS (SELECT FROM pg_index WHERE indexrelid = 'dedup_ledger_key'::regclass AND NOT indisvalid) THEN
		RAISE EXCEPTION 'index dedup_ledger_key is invalid (its build was interrupted again): run dedup migrate again';
	END IF;
	IF NOT EXISTS (SELECT FROM pg_constraint WHERE conrelid = 'dedup_ledger'::regclass AND conname = 'dedup_ledger_key_not_null') THEN
		CALL dedup_ledger_ddl('ALTER TABLE dedup_ledger ADD CONSTRAINT dedup_ledger_key_not_null CHECK (key IS NOT NULL) NOT VALID');
	END IF;
END
$$;
-- +goose StatementEnd
ALTER TABLE dedup_ledger VALIDATE CONSTRAINT dedup_ledger_key_not_null;
CALL dedup_ledger_ddl('ALTER TABLE dedup_ledger ALTER COLUMN key SET NOT NULL');
-- +goose StatementBegin
DO $$
BEGIN
	IF EXISTS (SELECT FROM pg_index WHERE indexrelid = 'dedup_ledger_key'::regclass) THEN
		CALL dedup_ledger_ddl('ALTER TABLE dedup_ledger DROP CONSTRAINT IF EXISTS dedup_ledger_pkey, ADD CONSTRAINT dedup_ledger_pkey PRIMARY KEY USING INDEX dedup_ledger_key');
	END IF;
END
$$;
-- +goose StatementEnd
CALL dedup_ledger_ddl('ALTER TABLE dedup_ledger DROP CONSTRAINT IF EXISTS dedup_ledger_key_not_null');
ALTER TABLE dedup_ledger SET (fillfactor = 100);
DROP PROCEDURE IF EXISTS dedup_ledger_fill_keys();
DROP PROCEDURE IF EXISTS dedup_ledger_ddl(text);

-- +goose Down
ALTER TABLE dedup_ledger SET (fillfactor = 90);
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS dedup_ledger_workflow_id ON dedup_ledger (workflow_id);
-- +goose StatementBegin
DO $$
BEGIN
	IF EXISTS (SELECT FROM pg_index WHERE indexrelid = 'dedup_ledger_workflow_id'::regclass) THEN
		ALTER TABLE dedup_ledger DROP CONSTRAINT IF EXISTS dedup_ledger_pkey;
		ALTER TABLE dedup_ledger ADD CONSTRAINT dedup_ledger_pkey PRIMARY KEY USING INDEX dedup_ledger_workflow_id;
	END IF;
END
$$;
-- +goose StatementEnd
DROP TRIGGER IF EXISTS dedup_ledger_fill_key ON dedup_ledger;
ALTER TABLE dedup_ledger DROP COLUMN IF EXISTS key;
DROP FUNCTION IF EXISTS dedup_ledger_fill_key();
DROP FUNCTION IF EXISTS dedup_ledger_key(text);
