package ledger_test

import (
	"context"
	"crypto/sha256"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/sink/ledger"
)

// Migration 00012 (the ledger key) next to routers of the version before it.

// oldClaim is the claim of the version before 00012 (ON CONFLICT on the
// workflow ID; no key), reduced to what matters here: the rows are
// inserted, or locked and updated, in workflow ID order.
const oldClaim = `/* adv2 old claim */ INSERT INTO dedup_ledger AS l (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset)
SELECT w, 'a', w, 'field', $2::bytea, 'events', 1, 7 FROM unnest($1::text[]) w ORDER BY w
ON CONFLICT (workflow_id) DO UPDATE SET attempts = l.attempts + 1, updated_at = now()`

func pHash(payload string) []byte { h := sha256.Sum256([]byte(payload)); return h[:] }

// migrateWithPausedFill starts ledger.Migrate(migrateURL) on a ledger at
// version 11 and stops it inside the backfill, deterministically: the
// column key and the trigger exist, and dedup_ledger_fill_keys holds the
// row of pauseID (its UPDATE locked it) and waits for an advisory lock
// that a session of the test holds, asked for by a test-only BEFORE UPDATE
// trigger on that row. It returns release (ends that lock: the fill goes
// on) and the channel of Migrate's result. side is a superuser pool of the
// database.
//
// Not a row lock taken right after ADD COLUMN (queued behind its lock while
// a reader held the table), as before: ADD COLUMN's release granted the
// queued session its table lock, but that session locked the row only once
// it ran again, and on a loaded machine (make test's two lanes) the fill
// went through the row first and never waited (stop 72's CI:
// TestBackfillSurvivesADeadlockWithAnOldRouter; with two busy loops beside
// it, 1 in 16 runs of the two tests here).
func migrateWithPausedFill(t *testing.T, side *pgxpool.Pool, migrateURL, pauseID string) (release func(), done <-chan error) {
	t.Helper()
	ctx := context.Background()
	if _, err := side.Exec(ctx, `CREATE FUNCTION adv2_pause() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_advisory_xact_lock_shared(hashtext('adv2 pause'));
	RETURN NEW;
END
$$`); err != nil {
		t.Fatal(err)
	}
	if _, err := side.Exec(ctx, `CREATE TRIGGER adv2_pause BEFORE UPDATE ON dedup_ledger FOR EACH ROW
WHEN (OLD.workflow_id = '`+strings.ReplaceAll(pauseID, "'", "''")+`') EXECUTE FUNCTION adv2_pause()`); err != nil {
		t.Fatal(err)
	}
	pauser := held(t, side, pgx.TxOptions{})
	if _, err := pauser.Exec(ctx, `/* adv2 pause */ SELECT pg_advisory_xact_lock(hashtext('adv2 pause'))`); err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() { res <- ledger.Migrate(t.Context(), migrateURL) }()
	waitBlockedBy(t, side, "dedup_ledger_fill_keys", "adv2 pause")
	var once bool
	return func() {
		if !once {
			once = true
			_ = pauser.Rollback(ctx)
		}
	}, res
}

// A hardened database (the owner's new functions not executable by PUBLIC,
// the case grants.sql's EXECUTE grant is for): grants.sql runs only after
// the whole migration, but the trigger that 00012 adds at its start calls
// dedup_ledger_key as the inserting user. During the migration (the
// backfill of a big ledger: minutes to hours), every claim of a router of
// the version before, connected as dedup_router, that inserts a row is
// refused: 42501, a permanent error, so the old routers stop (crash loop)
// for the length of the backfill, although the migration is "online" for
// them until the primary key is swapped.
func TestHardenedOldRouterClaimsDuringMigration(t *testing.T) {
	ctx := deadline(t, 3*time.Minute)
	admin := pgtest.NewDatabase(t)
	if err := ledger.ApplyRoles(ctx, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := connect(t, admin).Exec(ctx, `ALTER DEFAULT PRIVILEGES FOR ROLE dedup_owner REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC`); err != nil {
		t.Fatal(err)
	}
	migrator := pgtest.NewLogin(t, admin, "dedup_owner", "dedup_owner")
	prov, _ := provider(t, migrator)
	if _, err := prov.UpTo(ctx, 11); err != nil {
		t.Fatal(err)
	}
	adm := connect(t, admin)
	// What grants.sql of version 11 gave the router on the ledger.
	if _, err := adm.Exec(ctx, `GRANT SELECT, INSERT, UPDATE, DELETE ON dedup_ledger TO dedup_router`); err != nil {
		t.Fatal(err)
	}
	router := connect(t, pgtest.NewLogin(t, admin, "", "dedup_router"))
	if _, err := router.Exec(ctx, oldClaim, []string{"activity-a:first", "activity-a:pause"}, pHash("p")); err != nil {
		t.Fatalf("the old router's claim at version 11: %v", err)
	}
	side := sidePool(t, admin)
	release, done := migrateWithPausedFill(t, side, migrator, "activity-a:pause")
	// The migration is in its backfill: the old router claims a new ID.
	_, claimErr := router.Exec(ctx, oldClaim, []string{"activity-a:during-the-fill"}, pHash("p"))
	release()
	if err := within(t, done, 2*time.Minute, "Migrate after the backfill's release"); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if claimErr != nil {
		t.Fatalf("the old router's claim (as dedup_router) during the backfill of 00012: %v", claimErr)
	}
}

// The backfill (dedup_ledger_fill_keys) updated a thousand pages of rows (a hundred since) in
// one transaction, in physical order, and has no retry: a router of the
// version before, whose claim locks rows in workflow ID order, deadlocks
// with it, and when the backfill is the one PostgreSQL aborts (it waited
// first), the migration fails (40P01). Here: the old router's claim of
// [a-late, m-new, z-early] has locked a-late (a late page) and waits for
// m-new (another router's insert in flight); the backfill locks z-early
// (page 0) and waits for a-late; m-new commits, the old router asks for
// z-early: a cycle.
func TestBackfillSurvivesADeadlockWithAnOldRouter(t *testing.T) {
	ctx := deadline(t, 3*time.Minute)
	url := pgtest.NewDatabase(t)
	prov, _ := provider(t, url)
	if _, err := prov.UpTo(ctx, 11); err != nil {
		t.Fatal(err)
	}
	side := sidePool(t, url)
	const (
		pause = "activity-a:e-pause"
		early = "activity-a:z-early"
		late  = "activity-a:a-late"
		newID = "activity-a:m-new"
	)
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{oldClaim, []any{[]string{pause}, pHash("p")}},
		{oldClaim, []any{[]string{early}, pHash("p")}},
		{`INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset)
			SELECT 'activity-a:fill-' || g, 'a', g::text, 'field', sha256(g::text::bytea), 'events', 0, g FROM generate_series(1, 3000) g`, nil},
		{oldClaim, []any{[]string{late}, pHash("p")}},
	} {
		if _, err := side.Exec(ctx, q.sql, q.args...); err != nil {
			t.Fatal(err)
		}
	}
	var pEarly, pLate int
	if err := side.QueryRow(ctx, `SELECT (SELECT (ctid::text::point)[0]::int FROM dedup_ledger WHERE workflow_id = $1), (SELECT (ctid::text::point)[0]::int FROM dedup_ledger WHERE workflow_id = $2)`, early, late).Scan(&pEarly, &pLate); err != nil {
		t.Fatal(err)
	}
	if pEarly >= pLate || pLate >= 1000 {
		t.Fatalf("setup: pages %d, %d", pEarly, pLate)
	}

	release, done := migrateWithPausedFill(t, side, url, pause)
	defer release()
	// Another router's insert of m-new, in flight.
	other := held(t, side, pgx.TxOptions{})
	if _, err := other.Exec(ctx, oldClaim, []string{newID}, pHash("p")); err != nil {
		t.Fatal(err)
	}
	// The old router: locks a-late, waits for m-new.
	old, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = old.Close(context.Background()) }()
	oldPID := old.PgConn().PID()
	oldDone := make(chan error, 1)
	go func() {
		_, err := old.Exec(ctx, oldClaim, []string{late, newID, early}, pHash("p"))
		oldDone <- err
	}()
	waitBlocked(t, side, "adv2 old claim")
	// The backfill goes on: z-early, then waits for a-late (the old router's).
	release()
	for end := time.Now().Add(lockWaitPatience); ; time.Sleep(10 * time.Millisecond) {
		var waits bool
		if err := side.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE query LIKE '%dedup_ledger_fill_keys%' AND $1::int = ANY(pg_blocking_pids(pid)))`, oldPID).Scan(&waits); err != nil {
			t.Fatal(err)
		}
		if waits {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the backfill did not wait for the old router in %s; the database's sessions:\n%s", lockWaitPatience, sessions(side))
		}
	}
	if err := other.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	oldErr := within(t, oldDone, 2*time.Minute, "the old router's claim after the other router's commit")
	migErr := within(t, done, 2*time.Minute, "Migrate after the deadlock")
	t.Logf("old router's claim: %v", oldErr)
	if migErr != nil {
		t.Fatalf("Migrate, with routers of the version before claiming: %v", migErr)
	}
}

// A migration cancelled while it builds the key's index (the router's
// start-up context ends: SIGTERM during a rollout, or waitAll cancelling the
// PostgreSQL wait because Kafka or Temporal refused; an operator's Ctrl-C)
// leaves an INVALID index dedup_ledger_key, and every later Migrate (every
// router's and worker's start) fails on it until a person drops the index
// by hand: the migration does not converge by being run again, as it does
// after a stop at any other step.
func TestMigrationCancelledDuringIndexBuildConverges(t *testing.T) {
	ctx := deadline(t, 3*time.Minute)
	url := pgtest.NewDatabase(t)
	prov, _ := provider(t, url)
	if _, err := prov.UpTo(ctx, 11); err != nil {
		t.Fatal(err)
	}
	side := sidePool(t, url)
	if _, err := side.Exec(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset)
		SELECT 'activity-a:' || g, 'a', g::text, 'field', sha256(g::text::bytea), 'events', 0, g FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	// A transaction with a snapshot (a report, a backup): the concurrent
	// build waits for it before it marks the index valid.
	snap := held(t, side, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if _, err := snap.Exec(ctx, `SELECT txid_current()`); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ledger.Migrate(mctx, url) }()
	waitBlocked(t, side, "CREATE UNIQUE INDEX CONCURRENTLY")
	cancel() // the process ends its migration (and its session: as pg_cancel_backend does)
	if _, err := side.Exec(ctx, `SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query LIKE 'CREATE UNIQUE INDEX CONCURRENTLY%'`); err != nil {
		t.Fatal(err)
	}
	t.Logf("cancelled Migrate: %v", within(t, done, 2*time.Minute, "Migrate after its cancel"))
	_ = snap.Rollback(ctx)
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatalf("Migrate again after a cancel during the index build: %v", err)
	}
}

// docs/security.md, "An existing single-user ledger": run roles.sql and
// grants.sql as an administrator (ledger.ApplyRoles). On a ledger at the
// schema of the version before (11: the column key does not exist yet),
// this release's grants.sql fails (42703, column "key" does not exist:
// the dedup_worker's column grant) and, being one DO block, grants nothing.
func TestGrantsOnAVersion11Ledger(t *testing.T) {
	ctx := deadline(t, 2*time.Minute)
	url := pgtest.NewDatabase(t)
	prov, _ := provider(t, url)
	if _, err := prov.UpTo(ctx, 11); err != nil {
		t.Fatal(err)
	}
	if err := ledger.ApplyRoles(ctx, url); err != nil {
		t.Fatalf("roles.sql and grants.sql on an existing ledger of the version before: %v", err)
	}
}
