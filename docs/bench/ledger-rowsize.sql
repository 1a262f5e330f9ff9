-- What a smaller ledger row would save (issue #33, item 2): the same 1M
-- rows as `make bench-ledger` fills (random event IDs, started), in
-- today's layout (migrations 00001-00012) and in a compact one: run_id as
-- uuid, state and id_rule as "char", the topic as a smallint id, no
-- activity_id / event_id (both are in the workflow ID), columns ordered by
-- alignment, fillfactor 100. Run with psql on a scratch database:
--   psql -f docs/bench/ledger-rowsize.sql
\set rows 1000000
CREATE TEMP TABLE today (
    workflow_id text NOT NULL, activity_id text NOT NULL, event_id text NOT NULL, id_rule text NOT NULL,
    payload_hash bytea NOT NULL, topic text NOT NULL, kafka_partition integer NOT NULL, kafka_offset bigint NOT NULL,
    state text NOT NULL, run_id text, attempts integer NOT NULL, claimed_at timestamptz NOT NULL,
    started_at timestamptz, updated_at timestamptz NOT NULL, generation integer NOT NULL
) WITH (fillfactor = 100);
CREATE TEMP TABLE compact (
    claimed_at timestamptz NOT NULL, started_at timestamptz, updated_at timestamptz NOT NULL, kafka_offset bigint NOT NULL,
    kafka_partition integer NOT NULL, attempts integer NOT NULL, generation integer NOT NULL,
    run_id uuid, topic smallint NOT NULL, state "char" NOT NULL, id_rule "char" NOT NULL,
    payload_hash bytea NOT NULL, workflow_id text NOT NULL
) WITH (fillfactor = 100);
INSERT INTO today
SELECT 'activity-order-confirmation:' || e, 'order-confirmation', e, 'field', sha256(g::text::bytea), 'events', (g % 12)::int, g,
    'started', md5('run' || g)::uuid::text, 1, now(), now(), now(), 1
FROM generate_series(1, :rows) g, LATERAL (SELECT md5(g::text)::uuid::text AS e) x;
INSERT INTO compact
SELECT claimed_at, started_at, updated_at, kafka_offset, kafka_partition, attempts, generation,
    run_id::uuid, 1, 's', 'f', payload_hash, workflow_id FROM today;
CREATE UNIQUE INDEX ON today ((substr(encode(sha256(convert_to(workflow_id, 'UTF8')), 'hex'), 1, 32)::uuid));
CREATE UNIQUE INDEX ON compact ((substr(encode(sha256(convert_to(workflow_id, 'UTF8')), 'hex'), 1, 32)::uuid));
SELECT t AS layout, pg_relation_size(t) / :rows AS heap_bytes_per_row,
    (SELECT avg(pg_column_size(x.*)) FROM today x) AS today_row_data, (SELECT avg(pg_column_size(x.*)) FROM compact x) AS compact_row_data
FROM unnest(ARRAY['today', 'compact']::regclass[]) t;
