package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/schedule"
	"github.com/dedupio/dedup/sink/ledger"
)

// The tests below run dedup's own statements as each least-privilege role
// (roles.sql, grants.sql) on a real server, and what the role must not do
// fails with SQLSTATE 42501.

// rolesDB is a fresh database set up as docker-compose.yml and
// docs/security.md do it: an admin applies roles.sql and grants.sql
// before any table exists, then a migrator (a login user of dedup_owner
// whose sessions start as dedup_owner) applies the migrations, and with
// them the grants. It returns the admin's and the migrator's URLs.
func rolesDB(t *testing.T) (admin, migrator string) {
	t.Helper()
	ctx := deadline(t, 2*time.Minute)
	admin = pgtest.NewDatabase(t)
	if err := ledger.ApplyRoles(ctx, admin); err != nil {
		t.Fatal(err)
	}
	migrator = pgtest.NewLogin(t, admin, "dedup_owner", "dedup_owner")
	if err := ledger.Migrate(ctx, migrator); err != nil {
		t.Fatalf("migrating as the schema's owner: %v", err)
	}
	return admin, migrator
}

// openAs opens the ledger at url (a login user's) with the router's
// pool settings.
func openAs(t *testing.T, url string) *ledger.Postgres {
	t.Helper()
	cfg := ledger.DefaultConfig()
	cfg.URL = url
	l, err := ledger.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// connect is one session at url.
func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx := deadline(t, time.Minute)
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// denied: err is PostgreSQL's insufficient_privilege.
func denied(t *testing.T, what string, err error) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Errorf("%s: %v, want permission denied (SQLSTATE 42501)", what, err)
	}
}

// mustDeny runs each statement in its own transaction (a failed one
// aborts it) and wants each refused.
func mustDeny(t *testing.T, c *pgx.Conn, stmts ...string) {
	t.Helper()
	ctx := deadline(t, time.Minute)
	for _, s := range stmts {
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec(ctx, s)
		denied(t, s, err)
		_ = tx.Rollback(ctx)
	}
}

// ddl is what no role but the owner may run.
var ddl = []string{
	`CREATE TABLE dedup_intruder (id int)`,
	`ALTER TABLE dedup_ledger ADD COLUMN intruder int`,
	`CREATE INDEX dedup_intruder ON dedup_ledger (event_id)`,
	`DROP TABLE dedup_conflicts`,
	`TRUNCATE dedup_ledger`,
	`ALTER TABLE dedup_ledger DISABLE TRIGGER ALL`,
}

// The migrator: every table and sequence of the schema is dedup_owner's,
// the group roles cannot log in, and a second run finds nothing to do.
func TestRolesMigratorOwnsTheSchema(t *testing.T) {
	admin, migrator := rolesDB(t)
	ctx := deadline(t, time.Minute)
	c := connect(t, admin)
	rows, err := c.Query(ctx, `SELECT c.relname, pg_get_userbyid(c.relowner) FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p', 'S', 'i') ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	owners, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ Rel, Owner string }])
	if err != nil {
		t.Fatal(err)
	}
	if len(owners) < 10 {
		t.Fatalf("%d relations in the schema: %v", len(owners), owners)
	}
	for _, o := range owners {
		if o.Owner != "dedup_owner" {
			t.Errorf("%s is owned by %s, want dedup_owner", o.Rel, o.Owner)
		}
	}
	var canLogin []string
	rows, err = c.Query(ctx, `SELECT rolname FROM pg_roles WHERE rolname LIKE 'dedup\_%' AND rolname NOT LIKE 'dedup\_test\_%' AND rolcanlogin`)
	if err != nil {
		t.Fatal(err)
	}
	if canLogin, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || len(canLogin) > 0 {
		t.Errorf("group roles that can log in: %v (%v), want none", canLogin, err)
	}
	if err := ledger.Migrate(ctx, migrator); err != nil {
		t.Fatalf("a second migration: %v", err)
	}
}

// The ingress's role: the status lookup (Lookup: dedup_ledger and
// dedup_conflicts) and its session advisory locks work; writing, reading
// anything else, and DDL are refused.
func TestRolesIngressReadsOnly(t *testing.T) {
	admin, _ := rolesDB(t)
	ctx := deadline(t, time.Minute)
	router := openAs(t, pgtest.NewLogin(t, admin, "", "dedup_router"))
	claim(t, router, intent("e1", "A"), intent("e2", "B"))
	claim(t, router, intent("e1", "other payload")) // a conflict
	if err := router.MarkStarted(ctx, []processor.Started{{WorkflowID: intent("e1", "").WorkflowID, RunID: "run-1", Generation: 1}}); err != nil {
		t.Fatal(err)
	}

	url := pgtest.NewLogin(t, admin, "", "dedup_ingress")
	ingress := openAs(t, url)
	got, err := ingress.Lookup(ctx, []string{intent("e1", "").WorkflowID, intent("e2", "").WorkflowID, "activity-a:none"})
	if err != nil {
		t.Fatalf("Lookup as the ingress: %v", err)
	}
	e1, e2 := got[intent("e1", "").WorkflowID], got[intent("e2", "").WorkflowID]
	if len(got) != 2 || e1.State != ledger.StateStarted || e1.RunID != "run-1" || e1.Conflicts != 1 || e2.State != ledger.StatePending {
		t.Fatalf("Lookup as the ingress: %+v", got)
	}

	// internal/ingress/locks.go's statements, on a session of its own.
	c := connect(t, url)
	var locked, unlocked bool
	if err := c.QueryRow(ctx, `SELECT pg_try_advisory_lock($1::int4, hashtext($2))`, 0x64647570, "evt-1").Scan(&locked); err != nil || !locked {
		t.Fatalf("pg_try_advisory_lock(int4, int4) as the ingress: %v, %v", locked, err)
	}
	if err := c.QueryRow(ctx, `SELECT pg_advisory_unlock($1::int4, hashtext($2))`, 0x64647570, "evt-1").Scan(&unlocked); err != nil || !unlocked {
		t.Fatalf("pg_advisory_unlock(int4, int4) as the ingress: %v, %v", unlocked, err)
	}

	_, err = ingress.Claim(ctx, []decide.Intent{intent("e3", "C")})
	denied(t, "Claim as the ingress", err)
	mustDeny(t, c, append([]string{
		`INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset)
VALUES ('w', 'a', 'e', 'field', '\x00', 't', 0, 0)`,
		`UPDATE dedup_ledger SET state = 'started'`,
		`DELETE FROM dedup_ledger`,
		`INSERT INTO dedup_conflicts (workflow_id, event_id, payload_hash, ledger_payload_hash, topic, kafka_partition, kafka_offset)
VALUES ('w', 'e', '\x00', '\x01', 't', 0, 0)`,
		`TRUNCATE dedup_conflicts`,
		`SELECT count(*) FROM dedup_dead_letters`,
		`SELECT count(*) FROM dedup_schedule_fires`,
		`SELECT count(*) FROM idempotency_keys`,
		`SELECT count(*) FROM activity_runs`,
		`SELECT count(*) FROM goose_db_version`,
		`SELECT nextval('dedup_conflicts_id_seq')`,
		`SELECT * FROM dedup_ledger FOR UPDATE`,
	}, ddl...)...)
}

// The router's role: every statement of `dedup run` (the migration check,
// claims with a conflict, marks, the dead-letter log, the purge, the
// metrics' reads, the scheduler) works; DDL and the worker's tables are
// refused.
func TestRolesRouterRunsTheRouter(t *testing.T) {
	admin, _ := rolesDB(t)
	ctx := deadline(t, time.Minute)
	url := pgtest.NewLogin(t, admin, "", "dedup_router")
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatalf("the router's migration check on a current schema: %v", err)
	}
	l := openAs(t, url)
	// The fence: the router takes its partitions and claims and marks
	// under their epochs.
	epochs, err := l.Own(ctx, processor.Ownership{Group: "g", Member: "router", Parts: []processor.PartitionRef{{Topic: "events", Partition: 1}}})
	if err != nil {
		t.Fatalf("Own: %v", err)
	}
	f := decide.Fence{Group: "g", Epoch: epochs[0]}
	fenced := func(in decide.Intent) decide.Intent { in.Fence = f; return in }
	want(t, claim(t, l, fenced(intent("e1", "A")), fenced(intent("e2", "B")), fenced(intent("e3", "C"))), decide.VerdictNew, decide.VerdictNew, decide.VerdictNew)
	want(t, claim(t, l, fenced(intent("e1", "A")), fenced(intent("e2", "other"))), decide.VerdictRedrive, decide.VerdictConflict)
	w := func(id string) string { return intent(id, "").WorkflowID }
	if err := l.MarkStarted(ctx, []processor.Started{{WorkflowID: w("e1"), RunID: "run-1", Generation: 1, Topic: "events", Partition: 1, Fence: f}}); err != nil {
		t.Fatalf("MarkStarted: %v", err)
	}
	if err := l.MarkDeadLettered(ctx, []processor.DeadLettered{{WorkflowID: w("e3"), Topic: "events", Partition: 1, Fence: f}}); err != nil {
		t.Fatalf("MarkDeadLettered: %v", err)
	}
	dl := []processor.DeadLetter{{Topic: "events", Partition: 1, Offset: 9, WorkflowID: w("e3"), Reason: "temporal_permanent", Error: "no", DLQTopic: "events.dlq"}}
	if err := l.Record(ctx, dl); err != nil {
		t.Fatalf("recording a dead letter: %v", err)
	}
	if written, err := l.Written(ctx, dl); err != nil || !slices.Equal(written, []bool{true}) {
		t.Fatalf("Written: %v, %v", written, err)
	}
	counts, err := l.Count(ctx)
	if err != nil || counts != (ledger.Counts{Pending: 1, Started: 1, DeadLettered: 1, Conflicts: 1}) {
		t.Fatalf("Count: %+v, %v", counts, err)
	}
	if _, err := l.Stats(ctx); err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if _, err := l.PendingStats(ctx, time.Minute); err != nil {
		t.Fatalf("PendingStats: %v", err)
	}
	if _, err := l.RowsEstimate(ctx); err != nil {
		t.Fatalf("RowsEstimate: %v", err)
	}
	// The purge (postgres.retention): the started and dead-lettered rows
	// ended two hours ago.
	if _, err := connect(t, admin).Exec(ctx, `UPDATE dedup_ledger SET started_at = now() - interval '2 hours', updated_at = now() - interval '2 hours' WHERE state <> 'pending';
UPDATE dedup_dead_letters SET written_at = now() - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}
	if n, err := l.Purge(ctx, time.Hour, 100); err != nil || n != 2 {
		t.Fatalf("Purge: %d rows, %v; want 2", n, err)
	}

	// The scheduler.
	now, err := l.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slot := now.Truncate(time.Minute)
	fires, err := l.Decide(ctx, schedule.Round{Triggers: []string{"hourly"}, Now: now, Holder: "r1", HoldUntil: now.Add(time.Minute)}, func(c schedule.Cursor) schedule.Decision {
		f := schedule.Fire{Trigger: c.Trigger, ActivityID: "a", WorkflowID: "activity-a:slot", ScheduledFor: slot, Kind: schedule.OnTime,
			WindowStart: slot.Add(-time.Hour), WindowEnd: slot}
		c.LastSlot, c.LastFired = slot, slot
		return schedule.Decision{Cursor: c, Fires: []schedule.Fire{f}}
	})
	if err != nil || len(fires) != 1 {
		t.Fatalf("Decide: %v, %v", fires, err)
	}
	if err := l.EndFires(ctx, []schedule.FireEnd{{Trigger: "hourly", ScheduledFor: slot, State: schedule.FireStarted, RunID: "r"}}); err != nil {
		t.Fatalf("EndFires: %v", err)
	}
	if err := l.Release(ctx, "r1", []string{"hourly"}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if cs, err := l.Cursors(ctx, []string{"hourly"}); err != nil || len(cs) != 1 {
		t.Fatalf("Cursors: %v, %v", cs, err)
	}

	c := connect(t, url)
	mustDeny(t, c, append([]string{
		`SELECT count(*) FROM activity_runs`,
		`SELECT count(*) FROM task_instances`,
		`SELECT count(*) FROM idempotency_keys`,
		`TRUNCATE dedup_conflicts`,
		`UPDATE dedup_dead_letters SET error = 'x'`,
		`DELETE FROM dedup_schedule_cursors`,
		`INSERT INTO goose_db_version (version_id, is_applied) VALUES (999, true)`,
		`DELETE FROM goose_db_version`,
	}, ddl...)...)
}

// A router whose role may not migrate, started before `dedup migrate`
// ran: on a database without the schema, and on one a migration behind,
// Migrate refuses with ErrMayNotMigrate and says what to do; it changes
// nothing. Once the migrator ran, the same check passes.
func TestRolesRouterMayNotMigrate(t *testing.T) {
	ctx := deadline(t, 2*time.Minute)
	empty := pgtest.NewDatabase(t)
	if err := ledger.ApplyRoles(ctx, empty); err != nil {
		t.Fatal(err)
	}
	err := ledger.Migrate(ctx, pgtest.NewLogin(t, empty, "", "dedup_router"))
	if !errors.Is(err, ledger.ErrMayNotMigrate) || !strings.Contains(err.Error(), "no schema yet") || !strings.Contains(err.Error(), "run `dedup migrate`") {
		t.Fatalf("the router's Migrate on an empty database: %v, want ErrMayNotMigrate naming dedup migrate", err)
	}
	denied(t, "the router's Migrate on an empty database", err)
	t.Logf("on an empty database: %v", err)

	admin, migrator := rolesDB(t)
	router := pgtest.NewLogin(t, admin, "", "dedup_router")
	// A dedup one migration ahead of the database: forget the newest.
	var newest, previous int64 // migration numbers may have gaps (00010 before 00009)
	if err := connect(t, admin).QueryRow(ctx, `DELETE FROM goose_db_version WHERE version_id = (SELECT max(version_id) FROM goose_db_version)
RETURNING version_id`).Scan(&newest); err != nil {
		t.Fatal(err)
	}
	if err := connect(t, admin).QueryRow(ctx, `SELECT max(version_id) FROM goose_db_version`).Scan(&previous); err != nil {
		t.Fatal(err)
	}
	err = ledger.Migrate(ctx, router)
	wantText := fmt.Sprintf("the ledger's schema is at version %d, this dedup needs %d, and postgres user", previous, newest)
	if !errors.Is(err, ledger.ErrMayNotMigrate) || !strings.Contains(err.Error(), wantText) || !strings.Contains(err.Error(), "run `dedup migrate`") {
		t.Fatalf("the router's Migrate a migration behind: %v, want ErrMayNotMigrate saying %q", err, wantText)
	}
	t.Logf("a migration behind: %v", err)
	if err := ledger.Migrate(ctx, migrator); err != nil {
		t.Fatal(err)
	}
	if err := ledger.Migrate(ctx, router); err != nil {
		t.Fatalf("the router's Migrate once the migrator ran: %v", err)
	}
}

// The operator commands: dedup_reader runs the read-only ones (explain,
// inspect, ledger stats, the purge's dry run) and nothing that writes;
// dedup_operator also purges and pauses a trigger.
func TestRolesReaderAndOperator(t *testing.T) {
	admin, _ := rolesDB(t)
	ctx := deadline(t, time.Minute)
	router := openAs(t, pgtest.NewLogin(t, admin, "", "dedup_router"))
	claim(t, router, intent("e1", "A"))
	claim(t, router, intent("e1", "B"))
	w := intent("e1", "").WorkflowID

	reader := openAs(t, pgtest.NewLogin(t, admin, "", "dedup_reader"))
	if rows, err := reader.Rows(ctx, []string{w}); err != nil || len(rows) != 1 {
		t.Fatalf("Rows as the reader: %v, %v", rows, err)
	}
	if _, err := reader.RowsOfEvent(ctx, "e1"); err != nil {
		t.Fatalf("RowsOfEvent as the reader: %v", err)
	}
	if cs, err := reader.Conflicts(ctx, "", 0, 0, []string{w}); err != nil || len(cs) != 1 {
		t.Fatalf("Conflicts as the reader: %v, %v", cs, err)
	}
	if _, err := reader.DeadLetters(ctx, "", 0, 0, []string{w}); err != nil {
		t.Fatalf("DeadLetters as the reader: %v", err)
	}
	if _, err := reader.Stats(ctx); err != nil {
		t.Fatalf("Stats as the reader: %v", err)
	}
	if _, _, err := reader.PurgeCount(ctx, time.Hour); err != nil {
		t.Fatalf("PurgeCount as the reader: %v", err)
	}
	if _, err := reader.Cursors(ctx, []string{"hourly"}); err != nil {
		t.Fatalf("Cursors as the reader: %v", err)
	}
	_, err := reader.Purge(ctx, time.Hour, 100)
	denied(t, "Purge as the reader", err)
	denied(t, "SetPaused as the reader", reader.SetPaused(ctx, "hourly", true, time.Now()))
	_, err = reader.Claim(ctx, []decide.Intent{intent("e2", "A")})
	denied(t, "Claim as the reader", err)

	url := pgtest.NewLogin(t, admin, "", "dedup_operator")
	if err := ledger.Migrate(ctx, url); err != nil { // dedup schedule pause|resume checks the schema first
		t.Fatalf("the operator's migration check: %v", err)
	}
	op := openAs(t, url)
	if _, err := op.Stats(ctx); err != nil {
		t.Fatalf("Stats as the operator: %v", err)
	}
	if _, err := op.Purge(ctx, time.Hour, 100); err != nil {
		t.Fatalf("Purge as the operator: %v", err)
	}
	if err := op.SetPaused(ctx, "hourly", true, time.Now()); err != nil {
		t.Fatalf("SetPaused as the operator: %v", err)
	}
	if err := op.SetPaused(ctx, "hourly", false, time.Now()); err != nil {
		t.Fatalf("SetPaused (resume) as the operator: %v", err)
	}
	_, err = op.Claim(ctx, []decide.Intent{intent("e2", "A")})
	denied(t, "Claim as the operator", err)
	mustDeny(t, connect(t, url), append([]string{`UPDATE dedup_ledger SET state = 'pending'`, `SELECT count(*) FROM idempotency_keys`}, ddl...)...)
}

// wantGrants is grants.sql as a reader checks it: each role's privileges
// on each relation (relation.column for a column's), and nothing else.
var wantGrants = map[string][]string{
	"dedup_router": {
		"dedup_ledger SELECT, INSERT, UPDATE, DELETE", "dedup_conflicts SELECT, INSERT, UPDATE, DELETE", "dedup_conflicts_id_seq USAGE",
		"dedup_dead_letters SELECT, INSERT, DELETE", "dedup_schedule_cursors SELECT, INSERT, UPDATE",
		"dedup_schedule_fires SELECT, INSERT, UPDATE, DELETE", "dedup_partition_owners SELECT, INSERT, UPDATE", "goose_db_version SELECT",
	},
	"dedup_worker": {
		"dedup_ledger.workflow_id SELECT", "dedup_ledger.generation SELECT", "dedup_ledger.key SELECT",
		"activity_runs SELECT, INSERT, UPDATE", "activity_run_attempts SELECT, INSERT, UPDATE",
		"task_instances SELECT, INSERT, UPDATE", "idempotency_keys SELECT, INSERT, UPDATE, DELETE", "goose_db_version SELECT",
	},
	"dedup_ingress": {"dedup_ledger SELECT", "dedup_conflicts SELECT"},
	"dedup_reader": {
		"dedup_ledger SELECT", "dedup_conflicts SELECT", "dedup_dead_letters SELECT",
		"dedup_schedule_cursors SELECT", "dedup_schedule_fires SELECT", "dedup_partition_owners SELECT",
	},
	"dedup_operator": {"dedup_ledger DELETE", "dedup_conflicts DELETE", "dedup_dead_letters DELETE", "dedup_schedule_cursors INSERT, UPDATE", "goose_db_version SELECT"},
}

// grantsOf lists the privileges granted to dedup's roles (all but the
// owner) on the schema's relations and their columns, in wantGrants'
// form, one privilege a line.
func grantsOf(t *testing.T, c *pgx.Conn) []string {
	t.Helper()
	rows, err := c.Query(deadline(t, time.Minute), `
SELECT r.rolname || ' ' || c.relname || ' ' || a.privilege_type
FROM pg_class c, aclexplode(c.relacl) a, pg_roles r
WHERE r.oid = a.grantee AND c.relnamespace = current_schema()::regnamespace AND r.rolname LIKE 'dedup\_%' AND r.rolname <> 'dedup_owner'
UNION ALL
SELECT r.rolname || ' ' || c.relname || '.' || att.attname || ' ' || a.privilege_type
FROM pg_class c JOIN pg_attribute att ON att.attrelid = c.oid, aclexplode(att.attacl) a, pg_roles r
WHERE r.oid = a.grantee AND c.relnamespace = current_schema()::regnamespace AND r.rolname LIKE 'dedup\_%' AND r.rolname <> 'dedup_owner'`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	return got
}

// expand turns wantGrants into one privilege a line.
func expand(m map[string][]string) []string {
	var out []string
	for role, objs := range m {
		for _, o := range objs {
			rel, privs, _ := strings.Cut(o, " ")
			for _, p := range strings.Split(privs, ", ") {
				out = append(out, role+" "+rel+" "+p)
			}
		}
	}
	slices.Sort(out)
	return out
}

// grants.sql is exact: each role has the privileges wantGrants lists and
// no other; one granted by hand is revoked at the next migration.
func TestGrantsAreExact(t *testing.T) {
	admin, migrator := rolesDB(t)
	ctx := deadline(t, time.Minute)
	c := connect(t, admin)
	if got, want := grantsOf(t, c), expand(wantGrants); !slices.Equal(got, want) {
		t.Fatalf("grants:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := c.Exec(ctx, `GRANT TRUNCATE ON dedup_ledger TO dedup_router; GRANT SELECT ON idempotency_keys TO dedup_ingress`); err != nil {
		t.Fatal(err)
	}
	if err := ledger.Migrate(ctx, migrator); err != nil {
		t.Fatal(err)
	}
	if got, want := grantsOf(t, c), expand(wantGrants); !slices.Equal(got, want) {
		t.Fatalf("grants after a migration run:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Every table the migrations create is in grants.sql: a migration that
// adds a table without its grants fails here (and its process would fail
// with permission denied under its role).
func TestGrantsCoverEveryTable(t *testing.T) {
	admin, _ := rolesDB(t)
	rows, err := connect(t, admin).Query(deadline(t, time.Minute), `SELECT c.relname FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
AND NOT EXISTS (SELECT FROM aclexplode(c.relacl) a JOIN pg_roles r ON r.oid = a.grantee WHERE r.rolname LIKE 'dedup\_%' AND r.rolname <> 'dedup_owner')
ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	ungranted, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(ungranted) > 0 {
		t.Fatalf("tables no role of dedup's may use: %v: add them to sink/ledger/grants.sql (and wantGrants)", ungranted)
	}
}

// A ledger that a single user migrated before the roles existed: roles.sql
// and grants.sql, run by an admin, hand its tables to dedup_owner and
// grant them, so that the migrator may change them and the router use
// them.
func TestRolesAdoptAnExistingLedger(t *testing.T) {
	ctx := deadline(t, 2*time.Minute)
	admin := pgtest.NewDatabase(t)
	if err := ledger.Migrate(ctx, admin); err != nil { // as the superuser, the single user of before
		t.Fatal(err)
	}
	if err := ledger.ApplyRoles(ctx, admin); err != nil {
		t.Fatal(err)
	}
	var notOwned int
	if err := connect(t, admin).QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relnamespace = current_schema()::regnamespace
AND relkind IN ('r', 'S') AND relowner <> 'dedup_owner'::regrole`).Scan(&notOwned); err != nil || notOwned != 0 {
		t.Fatalf("%d relations not owned by dedup_owner after roles.sql and grants.sql (%v)", notOwned, err)
	}
	migrator := connect(t, pgtest.NewLogin(t, admin, "dedup_owner", "dedup_owner"))
	if _, err := migrator.Exec(ctx, `ALTER TABLE dedup_ledger ADD COLUMN adopted int; ALTER TABLE dedup_ledger DROP COLUMN adopted`); err != nil {
		t.Fatalf("the migrator changing an adopted table: %v", err)
	}
	router := openAs(t, pgtest.NewLogin(t, admin, "", "dedup_router"))
	want(t, claim(t, router, intent("e1", "A")), decide.VerdictNew)
}

// A ledger whose tables a plain user owns (not a superuser, no member of
// dedup_owner): grants.sql run as that user still grants the roles, and
// warns that it cannot hand the tables to dedup_owner, naming the GRANT
// that lets it.
func TestGrantsWarnWhenTheyCannotHandTablesOver(t *testing.T) {
	ctx := deadline(t, 2*time.Minute)
	admin := pgtest.NewDatabase(t)
	if err := ledger.ApplyRoles(ctx, admin); err != nil {
		t.Fatal(err)
	}
	old := pgtest.NewLogin(t, admin, "")
	c := connect(t, admin)
	var oldName string
	if err := connect(t, old).QueryRow(ctx, `SELECT current_user`).Scan(&oldName); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, `GRANT CREATE ON SCHEMA public TO `+pgx.Identifier{oldName}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if err := ledger.Migrate(ctx, old); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(old)
	if err != nil {
		t.Fatal(err)
	}
	var warnings []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if n.Severity == "WARNING" {
			warnings = append(warnings, n.Message)
		}
	}
	oc, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = oc.Close(ctx) }()
	if _, err := oc.Exec(ctx, ledger.GrantsSQL); err != nil {
		t.Fatal(err)
	}
	if len(warnings) == 0 || !strings.Contains(warnings[0], "not dedup_owner") || !strings.Contains(warnings[0], "GRANT dedup_owner TO "+oldName) {
		t.Fatalf("warnings %q, want one per table naming GRANT dedup_owner TO %s", warnings, oldName)
	}
	router := openAs(t, pgtest.NewLogin(t, admin, "", "dedup_router"))
	want(t, claim(t, router, intent("e1", "A")), decide.VerdictNew)
}

// grants.sql's advisory lock is no lever for another role: a session of
// the ingress's role (any role may take any advisory lock) that holds it
// does not stall a router's start (the router's check grants nothing, so
// it takes no lock), and a migrator that waits for it longer than
// dedup.grants_lock_wait gets an error that names the lock instead of
// waiting forever. Bound: each call gets 30 s; the migrator's wait is 1 s.
func TestGrantsLockHeldByAnotherRoleStallsNothing(t *testing.T) {
	admin, migrator := rolesDB(t)
	ingress := connect(t, pgtest.NewLogin(t, admin, "", "dedup_ingress"))
	ctx := deadline(t, time.Minute)
	if _, err := ingress.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended('dedup grants.sql', 0))`); err != nil {
		t.Fatal(err)
	}
	router := pgtest.NewLogin(t, admin, "", "dedup_router")
	rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ledger.Migrate(rctx, router); err != nil {
		t.Errorf("a router's start while the ingress's role holds grants.sql's lock: %v", err)
	}
	mctx, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	sep := "?"
	if strings.Contains(migrator, "?") {
		sep = "&"
	}
	err := ledger.Migrate(mctx, migrator+sep+"options=-c%20dedup.grants_lock_wait%3D1s")
	if err == nil || !strings.Contains(err.Error(), "dedup grants.sql") || mctx.Err() != nil {
		t.Errorf("the migrator, the lock held elsewhere: %v (context: %v), want an error naming the lock before the deadline", err, mctx.Err())
	}
}

// The purge locks its victims FOR UPDATE SKIP LOCKED, and PostgreSQL lets
// a role lock rows only with UPDATE on one of their columns, so grants.sql
// gives dedup_operator UPDATE of dedup_ledger.attempts and of
// dedup_conflicts.event_id, "which it never updates". The database does
// not know that: the operator's user (a person's, or a CI job's) can now
// rewrite every ledger row's re-drive count and the event every recorded
// conflict names, the evidence `dedup inspect` shows, where before this
// role could only delete what the retention purge deletes. Least
// privilege (docs/security.md): the purge's role writes no row.
func TestRolesOperatorRewritesNoLedgerOrConflictRow(t *testing.T) {
	admin, _ := rolesDB(t)
	ctx := deadline(t, time.Minute)
	router := openAs(t, pgtest.NewLogin(t, admin, "", "dedup_router"))
	claim(t, router, intent("e1", "A"))
	claim(t, router, intent("e1", "B")) // a conflict, recorded
	w := intent("e1", "").WorkflowID
	op := connect(t, pgtest.NewLogin(t, admin, "", "dedup_operator"))
	if _, err := op.Exec(ctx, `UPDATE dedup_ledger SET attempts = 1`); err == nil {
		t.Errorf("the operator rewrote every ledger row's attempts (want permission denied, SQLSTATE 42501)")
	} else {
		denied(t, "UPDATE dedup_ledger SET attempts", err)
	}
	if _, err := op.Exec(ctx, `UPDATE dedup_conflicts SET event_id = 'forged'`); err == nil {
		cs, err := router.Conflicts(ctx, "", 0, 0, []string{w})
		if err != nil || len(cs) != 1 {
			t.Fatalf("Conflicts: %v, %v", cs, err)
		}
		t.Errorf("the operator rewrote the conflict's event ID: inspect now shows event %q, not e1 (want permission denied, SQLSTATE 42501)", cs[0].EventID)
	} else {
		denied(t, "UPDATE dedup_conflicts SET event_id", err)
	}
}

// The router's role runs the replay's read (SELECT on the
// record's columns and started_at), the index built by the migrator's
// role from version 14 on.
func TestRolesRouterRunsTheReplayRead(t *testing.T) {
	admin, _ := rolesDB(t)
	ctx := deadline(t, time.Minute)
	url := pgtest.NewLogin(t, admin, "", "dedup_router")
	l := openAs(t, url)
	epochs, err := l.Own(ctx, processor.Ownership{Group: "g", Member: "router", Parts: []processor.PartitionRef{{Topic: "events", Partition: 1}}})
	if err != nil {
		t.Fatalf("Own: %v", err)
	}
	f := decide.Fence{Group: "g", Epoch: epochs[0]}
	a, b := intent("e1", "A"), intent("e2", "B")
	a.Fence, b.Fence, b.Offset = f, f, 8
	want(t, claim(t, l, a, b), decide.VerdictNew, decide.VerdictNew)
	if err := l.MarkStarted(ctx, []processor.Started{{WorkflowID: a.WorkflowID, RunID: "r", Generation: 1, Topic: "events", Partition: 1, Fence: f},
		{WorkflowID: b.WorkflowID, RunID: "r", Generation: 1, Topic: "events", Partition: 1, Fence: f}}); err != nil {
		t.Fatal(err)
	}
	want(t, claim(t, l, a, b), decide.VerdictDuplicate, decide.VerdictDuplicate)
	want(t, claim(t, l, a, b), decide.VerdictDuplicate, decide.VerdictDuplicate)
}
