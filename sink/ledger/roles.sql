-- dedup's PostgreSQL roles: one NOLOGIN group role per kind of process,
-- which the deployment grants to that process's login user
-- (docs/security.md, "Least privilege"):
--
--   dedup_owner     owns the ledger's tables; may create tables in the
--                   schema: the migrator (`dedup migrate`), nothing else
--   dedup_router    `dedup run`: claims, marks, dead-letter log, conflicts,
--                   purge (postgres.retention), scheduler
--   dedup_worker    `dedup worker`: its run, task and idempotency tables;
--                   reads a ledger row's generation
--   dedup_ingress   `dedup ingress`: reads dedup_ledger and dedup_conflicts
--                   (the status lookup); its advisory locks need no grant
--   dedup_reader    the read-only operator commands: dedup explain,
--                   inspect, ledger stats, ledger purge without --execute,
--                   offsets reset (its ledger reads)
--   dedup_operator  dedup_reader, and dedup ledger purge --execute and
--                   dedup schedule pause|resume
--
-- What each role may do to each table is grants.sql's (run it after this
-- file; dedup applies it again after every migration). This file makes the
-- roles and gives them the schema: run it once per database, and again
-- after an upgrade whose notes say so, as a superuser or a role with
-- CREATEROLE that may grant on the schema (Amazon RDS: the master user),
-- connected to dedup's database with the ledger's schema first on
-- search_path (public, unless the URLs set another):
--
--   psql "$ADMIN_URL" -v ON_ERROR_STOP=1 -f roles.sql -f grants.sql
--
-- Idempotent. Roles are per cluster, grants per database: two dedup
-- deployments in one cluster share these roles; give each its own cluster,
-- or revoke CONNECT on each database from PUBLIC and grant it to that
-- deployment's login users only.

DO $roles$
DECLARE
	r text;
BEGIN
	FOREACH r IN ARRAY ARRAY['dedup_owner', 'dedup_router', 'dedup_worker', 'dedup_ingress', 'dedup_reader', 'dedup_operator'] LOOP
		IF to_regrole(r) IS NULL THEN
			BEGIN
				EXECUTE format('CREATE ROLE %I NOLOGIN', r);
			EXCEPTION WHEN duplicate_object OR unique_violation THEN
				NULL; -- created meanwhile by another run of this file
			END;
		END IF;
	END LOOP;
END $roles$;

-- The operator reads what the reader reads.
GRANT dedup_reader TO dedup_operator;

-- The schema: only the owner creates in it. PostgreSQL 15 and later no
-- longer let PUBLIC create in schema public; on older servers the REVOKE
-- is what keeps every other role from creating tables there.
DO $schema$
DECLARE
	s text := current_schema();
BEGIN
	IF s IS NULL THEN
		RAISE EXCEPTION 'no schema on search_path: connect with the ledger''s schema first on it';
	END IF;
	EXECUTE format('REVOKE CREATE ON SCHEMA %I FROM PUBLIC', s);
	EXECUTE format('GRANT USAGE, CREATE ON SCHEMA %I TO dedup_owner', s);
	EXECUTE format('GRANT USAGE ON SCHEMA %I TO dedup_router, dedup_worker, dedup_ingress, dedup_reader, dedup_operator', s);
END $schema$;
