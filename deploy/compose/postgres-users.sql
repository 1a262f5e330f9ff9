-- docker-compose.yml's login users: one per dedup process, each granted its
-- group role (sink/ledger/roles.sql, which the postgres image's entrypoint
-- runs before this file: /docker-entrypoint-initdb.d, in name order, once,
-- on an empty data directory). Each service's DATABASE_URL names its user;
-- deploy/deploy_test.go runs these files on a real PostgreSQL and checks
-- that every service's user holds its role.
-- The passwords are the demo's: every port is published on 127.0.0.1 only.
-- In production, create one user per process with a generated password
-- (docs/security.md, Least privilege).

-- `migrate` (dedup migrate): its sessions run as dedup_owner, so the tables
-- it creates are dedup_owner's, whoever migrates next.
CREATE ROLE migrator LOGIN PASSWORD 'migrator' IN ROLE dedup_owner;
ALTER ROLE migrator SET role = 'dedup_owner';

CREATE ROLE router LOGIN PASSWORD 'router' IN ROLE dedup_router;       -- dedup-1, dedup-2 (dedup run)
CREATE ROLE worker LOGIN PASSWORD 'worker' IN ROLE dedup_worker;       -- worker (dedup worker)
CREATE ROLE ingress LOGIN PASSWORD 'ingress' IN ROLE dedup_ingress;    -- ingress (dedup ingress)
-- The operator commands (dedup ledger purge --execute, schedule pause):
--   docker compose run --rm -e DATABASE_URL='postgres://operator:operator@postgres:5432/dedup?sslmode=disable' \
--     migrate ledger stats --config /etc/dedup/dedup.yaml
CREATE ROLE operator LOGIN PASSWORD 'operator' IN ROLE dedup_operator;
