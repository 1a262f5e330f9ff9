-- What each of dedup's group roles (roles.sql) may do to each of the
-- ledger's tables: the one list of dedup's privileges in PostgreSQL
-- (docs/security.md, "Least privilege"), each row the statements of
-- sink/ledger, worker and worker/idempotency that the role's process runs.
--
-- Exact and idempotent: on every table listed, each dedup role ends with
-- the privileges below and no other (a privilege dropped from this list is
-- revoked at the next run). Skipped: a role that does not exist (without
-- roles.sql, a single-user setup, nothing is granted), a table that does
-- not exist yet (before the first migration), and a table this session may
-- not grant on (a router checking the schema version at its start).
--
-- Applied by ledger.Migrate after every run (`dedup migrate`, and the
-- migration check at the start of the routers and the worker) by a user
-- that holds the tables' owner's privileges: a table a new migration
-- creates is granted in the same run. A table owned by someone else (a
-- single-user deployment from before these roles) is handed to dedup_owner
-- when this session may (a superuser, a member of both roles), so that the
-- migrator can change it.
--
-- Why not ALTER DEFAULT PRIVILEGES: it grants by kind of object, not by
-- table. Every future table would go to the router (the worker's too) and
-- none to the ingress. A migration that creates a table adds its row here;
-- TestGrantsCoverEveryTable (sink/ledger) fails until it does.
DO $grants$
DECLARE
	-- role, table (or sequence), privileges
	m CONSTANT text[] := ARRAY[
		['dedup_router',   'dedup_ledger',           'SELECT, INSERT, UPDATE, DELETE'], -- claim (upsert), marks, purge
		['dedup_router',   'dedup_conflicts',        'SELECT, INSERT, UPDATE, DELETE'], -- record conflicts (an upsert per payload); stats count them; purge
		['dedup_router',   'dedup_conflicts_id_seq', 'USAGE'],                          -- its bigserial
		['dedup_router',   'dedup_dead_letters',     'SELECT, INSERT, DELETE'],         -- the dead-letter log; purge
		['dedup_router',   'dedup_schedule_cursors', 'SELECT, INSERT, UPDATE'],         -- the scheduler's cursors (FOR UPDATE SKIP LOCKED)
		['dedup_router',   'dedup_schedule_fires',   'SELECT, INSERT, UPDATE, DELETE'], -- its fires, pruned
		['dedup_router',   'dedup_partition_owners', 'SELECT, INSERT, UPDATE'],         -- the fence: epochs bumped on assignment, share-locked by claims and marks
		['dedup_router',   'goose_db_version',       'SELECT'],                         -- the migration check at start
		['dedup_worker',   'dedup_ledger',           'SELECT (workflow_id, key, generation)'], -- StartRun's generation fence (by key)
		['dedup_worker',   'activity_runs',          'SELECT, INSERT, UPDATE'],
		['dedup_worker',   'activity_run_attempts',  'SELECT, INSERT, UPDATE'],
		['dedup_worker',   'task_instances',         'SELECT, INSERT, UPDATE'],
		['dedup_worker',   'idempotency_keys',       'SELECT, INSERT, UPDATE, DELETE'], -- keys, leases, the reaper
		['dedup_worker',   'goose_db_version',       'SELECT'],
		['dedup_ingress',  'dedup_ledger',           'SELECT'],                         -- Lookup
		['dedup_ingress',  'dedup_conflicts',        'SELECT'],
		['dedup_reader',   'dedup_ledger',           'SELECT'],
		['dedup_reader',   'dedup_conflicts',        'SELECT'],
		['dedup_reader',   'dedup_dead_letters',     'SELECT'],
		['dedup_reader',   'dedup_schedule_cursors', 'SELECT'],
		['dedup_reader',   'dedup_schedule_fires',   'SELECT'],
		['dedup_reader',   'dedup_partition_owners', 'SELECT'],
		['dedup_operator', 'dedup_ledger',           'DELETE'],                         -- ledger purge --execute
		['dedup_operator', 'dedup_conflicts',        'DELETE'],                         -- its conflicts (the purge's last step)
		['dedup_operator', 'dedup_dead_letters',     'DELETE'],
		['dedup_operator', 'dedup_schedule_cursors', 'INSERT, UPDATE'],                 -- schedule pause|resume (an upsert)
		['dedup_operator', 'goose_db_version',       'SELECT']                          -- its migration check
	];
	roles CONSTANT text[] := ARRAY['dedup_router', 'dedup_worker', 'dedup_ingress', 'dedup_reader', 'dedup_operator'];
	obj text;
	rel regclass;
	own oid;
	kind text;
	r text;
	g text[];
	wait interval;
	deadline timestamptz;
BEGIN
	IF to_regrole('dedup_owner') IS NULL THEN
		RETURN; -- no roles: roles.sql was not run here
	END IF;
	-- A session that may grant nothing here (a router's or a worker's
	-- check at its start) takes no lock: the lock is a key any role may
	-- hold (the ingress's too), and must not stall a start.
	IF NOT EXISTS (SELECT FROM generate_subscripts(m, 1) AS i JOIN pg_class c ON c.oid = to_regclass(m[i][2])
	               WHERE pg_has_role(c.relowner, 'USAGE'))
	   AND NOT EXISTS (SELECT FROM pg_proc p WHERE p.oid = to_regprocedure('dedup_ledger_key(text)') AND pg_has_role(p.proowner, 'USAGE')) THEN
		RETURN;
	END IF;
	-- One session at a time: replicas that start together would otherwise
	-- update the same catalog rows at once ("tuple concurrently updated").
	-- Tried, not waited for: a session that holds it longer than
	-- dedup.grants_lock_wait (default 30 s) is an error that names it.
	wait := coalesce(nullif(current_setting('dedup.grants_lock_wait', true), ''), '30s')::interval;
	deadline := clock_timestamp() + wait;
	WHILE NOT pg_try_advisory_xact_lock(hashtextextended('dedup grants.sql', 0)) LOOP
		IF clock_timestamp() >= deadline THEN
			RAISE EXCEPTION 'another session has held the advisory lock "dedup grants.sql" for over % (dedup.grants_lock_wait): no grant was changed', wait
				USING ERRCODE = '55P03',
				HINT = 'find it: SELECT a.pid, a.usename, a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE l.locktype = ''advisory''; end it (pg_terminate_backend) if it is not a dedup migrate, then run again';
		END IF;
		PERFORM pg_sleep(0.1);
	END LOOP;
	FOR obj IN SELECT DISTINCT m[i][2] FROM generate_subscripts(m, 1) AS i LOOP
		rel := to_regclass(obj);
		CONTINUE WHEN rel IS NULL;
		SELECT c.relowner, CASE c.relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END INTO own, kind
		FROM pg_class c WHERE c.oid = rel;
		CONTINUE WHEN NOT pg_has_role(own, 'USAGE');
		-- (a sequence follows its table)
		IF kind = 'TABLE' AND own <> 'dedup_owner'::regrole::oid THEN
			IF pg_has_role('dedup_owner', 'MEMBER') THEN
				EXECUTE format('ALTER TABLE %s OWNER TO dedup_owner', rel);
			ELSE
				RAISE WARNING 'table % is owned by %, not dedup_owner, and % may not hand it over: the migrator cannot change it (GRANT dedup_owner TO %, then run this file again)',
					rel, own::regrole, current_user, current_user;
			END IF;
		END IF;
		FOREACH r IN ARRAY roles LOOP
			CONTINUE WHEN to_regrole(r) IS NULL;
			EXECUTE format('REVOKE ALL ON %s %s FROM %I', kind, rel, r);
		END LOOP;
		FOREACH g SLICE 1 IN ARRAY m LOOP
			CONTINUE WHEN g[2] <> obj OR to_regrole(g[1]) IS NULL;
			-- dedup_ledger.key exists from migration 00012 on: a ledger
			-- still before it grants the columns it has.
			EXECUTE format('GRANT %s ON %s %s TO %I', CASE WHEN g[3] LIKE '%(%key%)%'
				AND NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = rel AND attname = 'key' AND NOT attisdropped)
				THEN replace(g[3], ', key', '') ELSE g[3] END, kind, rel, g[1]);
		END LOOP;
	END LOOP;
	-- The ledger's key (migration 00012): every role that reads or
	-- changes dedup_ledger by workflow ID calls dedup_ledger_key, so each
	-- gets EXECUTE, not only through PUBLIC's default (which a hardened
	-- database revokes).
	IF to_regprocedure('dedup_ledger_key(text)') IS NOT NULL
		AND pg_has_role((SELECT proowner FROM pg_proc WHERE oid = to_regprocedure('dedup_ledger_key(text)')), 'USAGE') THEN
		FOREACH r IN ARRAY roles LOOP
			CONTINUE WHEN to_regrole(r) IS NULL;
			EXECUTE format('GRANT EXECUTE ON FUNCTION dedup_ledger_key(text) TO %I', r);
		END LOOP;
	END IF;
END $grants$;
