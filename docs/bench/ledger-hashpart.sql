-- Hash partitioning by workflow ID (issue #33, item 3), measured at
-- :rows rows on a scratch database that has dedup_ledger_key (run `dedup
-- migrate` on it first, or paste the function from
-- schemas/migrations/00012_ledger_key.sql):
--   psql -v rows=10000000 -f docs/bench/ledger-hashpart.sql
-- The same rows (the ledger's columns, random event IDs, started over 7
-- days) in one table and in 16 hash partitions; the index depth and size,
-- new claims (ON CONFLICT on the key), and removing the oldest day with
-- the purge's DELETE and a VACUUM, each with its WAL.
\timing on
SET maintenance_work_mem = '1GB';
CREATE TABLE hp_plain (
    key uuid NOT NULL, workflow_id text NOT NULL, activity_id text NOT NULL, event_id text NOT NULL, id_rule text NOT NULL,
    payload_hash bytea NOT NULL, topic text NOT NULL, kafka_partition integer NOT NULL, kafka_offset bigint NOT NULL,
    state text NOT NULL, run_id text, attempts integer NOT NULL, claimed_at timestamptz NOT NULL,
    started_at timestamptz, updated_at timestamptz NOT NULL, generation integer NOT NULL
);
CREATE TABLE hp_part (LIKE hp_plain) PARTITION BY HASH (key);
SELECT format('CREATE TABLE hp_part_%s PARTITION OF hp_part FOR VALUES WITH (MODULUS 16, REMAINDER %s)', i, i) FROM generate_series(0, 15) i \gexec
-- An expression (even an immutable one) cannot be the unique key of a
-- partitioned table: the key must be a stored column.
CREATE UNIQUE INDEX ON hp_part ((md5(workflow_id)));
INSERT INTO hp_plain
SELECT dedup_ledger_key(w), w, 'order-confirmation', e, 'field', sha256(g::text::bytea), 'events', (g % 12)::int, g,
    'started', md5('run' || g)::uuid::text, 1, t, t + interval '50 ms', t + interval '50 ms', 1
FROM generate_series(1, :rows) g,
    LATERAL (SELECT md5(g::text)::uuid::text AS e, now() - interval '7 days' * (1 - g::float8 / :rows) AS t) x,
    LATERAL (SELECT 'activity-order-confirmation:' || x.e AS w) y;
INSERT INTO hp_part SELECT * FROM hp_plain;
ALTER TABLE hp_plain ADD PRIMARY KEY (key);
ALTER TABLE hp_part ADD PRIMARY KEY (key);
CREATE INDEX ON hp_plain (started_at) WHERE state = 'started';
CREATE INDEX ON hp_part (started_at) WHERE state = 'started';
VACUUM ANALYZE hp_plain;
VACUUM ANALYZE hp_part;
CREATE EXTENSION IF NOT EXISTS pgstattuple;
SELECT 'plain' AS t, tree_level, leaf_pages, pg_size_pretty(index_size) FROM pgstatindex('hp_plain_pkey')
UNION ALL SELECT 'partition ' || i, tree_level, leaf_pages, pg_size_pretty(index_size) FROM generate_series(0, 15) i, pgstatindex(format('hp_part_%s_pkey', i)) WHERE i < 3
UNION ALL SELECT 'all partitions', max(tree_level), sum(leaf_pages), pg_size_pretty(sum(index_size)) FROM generate_series(0, 15) i, pgstatindex(format('hp_part_%s_pkey', i));
-- 20,000 new claims, 1000 a statement, into each.
CREATE TEMP TABLE l0 (l pg_lsn);
CREATE TEMP TABLE new_ids AS SELECT 'activity-order-confirmation:' || gen_random_uuid() AS w, g FROM generate_series(1, 20000) g;
CHECKPOINT;
TRUNCATE l0; INSERT INTO l0 SELECT pg_current_wal_lsn();
SELECT format($$INSERT INTO hp_plain SELECT dedup_ledger_key(w), w, 'a', 'e', 'field', '\x00', 'events', 0, g, 'pending', NULL, 1, now(), NULL, now(), 1
    FROM new_ids WHERE g > %s AND g <= %s ON CONFLICT (key) DO NOTHING$$, b, b + 1000) FROM generate_series(0, 19000, 1000) b \gexec
SELECT pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), (SELECT l FROM l0)) / 20000) AS plain_wal_per_new_row;
CHECKPOINT;
TRUNCATE l0; INSERT INTO l0 SELECT pg_current_wal_lsn();
SELECT format($$INSERT INTO hp_part SELECT dedup_ledger_key(w), w, 'a', 'e', 'field', '\x00', 'events', 0, g, 'pending', NULL, 1, now(), NULL, now(), 1
    FROM new_ids WHERE g > %s AND g <= %s ON CONFLICT (key) DO NOTHING$$, b, b + 1000) FROM generate_series(0, 19000, 1000) b \gexec
SELECT pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), (SELECT l FROM l0)) / 20000) AS partitioned_wal_per_new_row;
-- The oldest day: DELETE (as the purge, in one statement here), then VACUUM.
CHECKPOINT;
TRUNCATE l0; INSERT INTO l0 SELECT pg_current_wal_lsn();
DELETE FROM hp_plain WHERE state = 'started' AND started_at < now() - interval '6 days';
VACUUM hp_plain;
SELECT pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), (SELECT l FROM l0))) AS plain_purge_and_vacuum_wal;
CHECKPOINT;
TRUNCATE l0; INSERT INTO l0 SELECT pg_current_wal_lsn();
DELETE FROM hp_part WHERE state = 'started' AND started_at < now() - interval '6 days';
VACUUM hp_part;
SELECT pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), (SELECT l FROM l0))) AS partitioned_purge_and_vacuum_wal;
DROP TABLE hp_plain, hp_part;
