-- activity_runs.run_id is a uuid, as the seed contract says ("run_id as the
-- primary key (UUID)"), and so is run_id in the tables that carry it
-- (activity_run_attempts, task_instances): one type, so that they join
-- without casts and a value that is not a UUID is refused where it is
-- written.
--
-- Every run_id dedup writes is a UUID: RunID(workflow ID), the name-based
-- UUID (v5) of the workflow ID, or, for runs started before 00005, the
-- Temporal run ID. A UUID in its canonical form stays that UUID. A value that is not a UUID (a row written by hand or by
-- another tool) is not dropped, and does not stop the migration (which
-- would keep every router and worker from starting over a history row):
-- it becomes the name-based UUID (v3, MD5) of the old text in the run
-- namespace (worker/identity.go), the same in all three tables, and the
-- old text is kept in activity_runs.original_run_id. Its task IDs
-- (task_instances.id, text) keep the old value.
--
-- It may run again on a schema it converted (the casts to text make it a
-- no-op there), as every migration here may.
--
-- The conversion rewrites the three tables and holds an exclusive lock on
-- each meanwhile: the worker's bookkeeping activities wait (and Temporal
-- retries them) until it is done.

-- +goose Up
-- +goose StatementBegin
-- A UUID in its canonical form only (lower case, hyphens 8-4-4-4-12: what
-- dedup and Temporal write). Other spellings PostgreSQL's uuid input would
-- take (upper case, braces, no hyphens) are names like any other text: two
-- spellings of one UUID are two distinct keys before, and must stay two
-- after (TestRunIDMigrationSurvivesTwoSpellingsOfOneUUID).
CREATE OR REPLACE FUNCTION pg_temp.dedup_is_uuid(v text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
	SELECT v ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
$$;
-- +goose StatementEnd
-- +goose StatementBegin
-- A UUID as it is; anything else the RFC 9562 name-based UUID v3 of it in
-- the run namespace: MD5 of the namespace's bytes and the name, version 3,
-- variant 10 (Go: uuid.NewMD5(namespace, []byte(v))).
CREATE OR REPLACE FUNCTION pg_temp.dedup_run_uuid(v text) RETURNS uuid LANGUAGE sql IMMUTABLE AS $$
	SELECT CASE WHEN pg_temp.dedup_is_uuid(v) THEN v::uuid
		ELSE (SELECT overlay(overlay(h PLACING '3' FROM 13 FOR 1)
				PLACING substr('89ab', (('x' || substr(h, 17, 1))::bit(4)::int & 3) + 1, 1) FROM 17 FOR 1)::uuid
			FROM (SELECT md5(decode('3935511675eb52b493447f3665737919', 'hex') || convert_to(v, 'UTF8')) AS h) AS d)
	END
$$;
-- +goose StatementEnd
ALTER TABLE activity_runs ADD COLUMN IF NOT EXISTS original_run_id text;
COMMENT ON COLUMN activity_runs.original_run_id IS
	'run_id as it was before migration 00008 when it was not a UUID (run_id is then the v3 UUID of it); NULL otherwise';
UPDATE activity_runs SET original_run_id = run_id WHERE NOT pg_temp.dedup_is_uuid(run_id::text);
ALTER TABLE activity_runs ALTER COLUMN run_id TYPE uuid USING pg_temp.dedup_run_uuid(run_id::text);
ALTER TABLE activity_run_attempts ALTER COLUMN run_id TYPE uuid USING pg_temp.dedup_run_uuid(run_id::text);
ALTER TABLE task_instances ALTER COLUMN run_id TYPE uuid USING pg_temp.dedup_run_uuid(run_id::text);
DROP FUNCTION pg_temp.dedup_run_uuid(text);
DROP FUNCTION pg_temp.dedup_is_uuid(text);

-- +goose Down
ALTER TABLE task_instances ALTER COLUMN run_id TYPE text USING run_id::text;
ALTER TABLE activity_run_attempts ALTER COLUMN run_id TYPE text USING run_id::text;
UPDATE task_instances t SET run_id = r.original_run_id FROM activity_runs r
WHERE r.original_run_id IS NOT NULL AND t.run_id = r.run_id::text;
UPDATE activity_run_attempts a SET run_id = r.original_run_id FROM activity_runs r
WHERE r.original_run_id IS NOT NULL AND a.run_id = r.run_id::text;
ALTER TABLE activity_runs ALTER COLUMN run_id TYPE text USING coalesce(original_run_id, run_id::text);
ALTER TABLE activity_runs DROP COLUMN IF EXISTS original_run_id;
