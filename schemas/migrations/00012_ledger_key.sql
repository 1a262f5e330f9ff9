-- The ledger's unique key becomes a 16-byte digest of the workflow ID
-- (issue #33): dedup_ledger_key(workflow_id), a uuid, instead of the
-- workflow ID's text (about 65 bytes, compared by collation).
--
-- Why: a claim looks every workflow ID up in the unique index. With random
-- event IDs (UUIDv4s; the content rule's SHA-256s) each lookup lands on a
-- random leaf, so the whole index must stay in memory and every leaf a
-- checkpoint interval touches is logged whole. The digest makes the index
-- about a third of its size (docs/bench/ledger.md). A workflow ID that
-- ends with a UUIDv7 (lowercase, RFC 9562) or a ULID (uppercase Crockford
-- base32), the time-first IDs the runbook asks producers for, keeps its
-- 48 bits of milliseconds first in the digest, so time-ordered IDs still
-- land on the newest leaves; the other 80 bits are the ID's SHA-256.
--
-- The digest is one rule, this function: every statement of sink/ledger
-- finds a row by dedup_ledger_key(workflow_id) = dedup_ledger_key($id)
-- AND workflow_id = $id, so two workflow IDs with one digest (2^-128 for
-- random IDs; 2^-80 within one millisecond for time-first IDs) never share a row:
-- the second is answered a conflict and dead-lettered (sink/ledger,
-- claim.go). It must never change: the index stores its results. It is
-- written with immutable functions only and is not STRICT, so PostgreSQL
-- inlines it (about 2 microseconds a call). decode(replace(w, '\', '\\'),
-- 'escape') is the text's own bytes (convert_to is only stable).
--
-- Online: the index is built CONCURRENTLY beside the primary key (claims
-- go on), then the primary key is dropped, which takes a brief exclusive
-- lock. Routers of the version before this migration claim with ON
-- CONFLICT (workflow_id) and fail (42P10, nothing written, no offset
-- committed) from that moment until they are replaced: run `dedup migrate`
-- just before rolling the routers out. If the build is interrupted,
-- PostgreSQL leaves an INVALID index: the primary key is then kept, and
-- the migration stops, naming the index to drop before running it again.
-- The lock that drops the primary key is asked for a second at a time
-- (lock_timeout), so that readers queue behind it for a second at most.
-- Every role that finds rows by workflow ID calls the function: grants.sql
-- grants it EXECUTE (a database whose default privileges keep functions
-- from PUBLIC needs it).
-- The heap's fillfactor goes from 90 to 100 (new pages only): a claim's
-- updates change indexed columns (state, updated_at), so they were never
-- HOT and the room was never used.

-- +goose NO TRANSACTION
-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION dedup_ledger_key(workflow_id text) RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE
	WHEN substr(workflow_id, length(workflow_id) - 21, 1) = '7'
		AND substr(workflow_id, length(workflow_id) - 35, 36) ~ '^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$'
	THEN (substr(workflow_id, length(workflow_id) - 35, 8) || substr(workflow_id, length(workflow_id) - 26, 4)
		|| substr(encode(sha256(decode(replace(workflow_id, '\', '\\'), 'escape')), 'hex'), 1, 20))::uuid
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
		|| substr(encode(sha256(decode(replace(workflow_id, '\', '\\'), 'escape')), 'hex'), 1, 20))::uuid
	ELSE substr(encode(sha256(decode(replace(workflow_id, '\', '\\'), 'escape')), 'hex'), 1, 32)::uuid
END
$$;
-- +goose StatementEnd
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS dedup_ledger_key ON dedup_ledger (dedup_ledger_key(workflow_id));
-- +goose StatementBegin
DO $$
DECLARE
	tries int := 0;
BEGIN
	IF NOT (SELECT indisvalid FROM pg_index WHERE indexrelid = 'dedup_ledger_key'::regclass) THEN
		RAISE EXCEPTION 'index dedup_ledger_key is invalid (its build was interrupted): DROP INDEX CONCURRENTLY dedup_ledger_key; then run dedup migrate again';
	END IF;
	-- The exclusive lock waits behind every open transaction that read
	-- the ledger, and every statement on the ledger queues behind it: so
	-- it is asked for a second at a time, a second apart, for two minutes.
	LOOP
		BEGIN
			SET LOCAL lock_timeout = '1s';
			ALTER TABLE dedup_ledger DROP CONSTRAINT IF EXISTS dedup_ledger_pkey;
			EXIT;
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
ALTER TABLE dedup_ledger SET (fillfactor = 100);

-- +goose Down
ALTER TABLE dedup_ledger SET (fillfactor = 90);
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS dedup_ledger_pkey ON dedup_ledger (workflow_id);
-- +goose StatementBegin
DO $$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_constraint WHERE conrelid = 'dedup_ledger'::regclass AND contype = 'p') THEN
		ALTER TABLE dedup_ledger ADD CONSTRAINT dedup_ledger_pkey PRIMARY KEY USING INDEX dedup_ledger_pkey;
	END IF;
END
$$;
-- +goose StatementEnd
DROP INDEX CONCURRENTLY IF EXISTS dedup_ledger_key;
DROP FUNCTION IF EXISTS dedup_ledger_key(text);
