package ledger_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupio/dedup/internal/testsupport/pgbouncer"
	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/sink/ledger"
	"github.com/dedupio/dedup/sink/ledger/pooler"
)

func TestPurgeKeepsPendingAndRecentRows(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	old, recent, pending := intent("old", "a"), intent("recent", "b"), intent("pending-old", "c")
	claim(t, l, old, recent, pending)
	if err := l.MarkStarted(ctx, []processor.Started{{WorkflowID: old.WorkflowID, RunID: "r1"}, {WorkflowID: recent.WorkflowID, RunID: "r2"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Pool().Exec(ctx, `UPDATE dedup_ledger SET started_at = now() - interval '48 hours', claimed_at = now() - interval '48 hours' WHERE workflow_id IN ($1, $2)`, old.WorkflowID, pending.WorkflowID); err != nil {
		t.Fatal(err)
	}
	n, err := l.Purge(ctx, 24*time.Hour, 1)
	if err != nil || n != 1 {
		t.Fatalf("purged %d (%v), want 1", n, err)
	}
	counts, _ := l.Count(ctx)
	if counts != (ledger.Counts{Pending: 1, Started: 1}) {
		t.Fatalf("after purge %+v, want the pending and the recent row", counts)
	}
	// A purged ID is new again: the ledger forgot it (Temporal's retention is the guard left).
	want(t, claim(t, l, old), decide.VerdictNew)
}

// The purge walks the rows it deletes oldest first, in batches: rows that
// share one end time (a mark batch sets one started_at) across several
// batches all go, dead-lettered rows go by when they were dead-lettered,
// and nothing newer than the horizon or pending goes.
func TestPurgeInBatchesAlongTheEndTime(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	var started []processor.Started
	var all []decide.Intent
	for i := range 25 {
		in := intent(fmt.Sprint("old-", i), "p")
		all = append(all, in)
		started = append(started, processor.Started{WorkflowID: in.WorkflowID, RunID: "r"})
	}
	for i := range 5 {
		in := intent(fmt.Sprint("new-", i), "p")
		all = append(all, in)
		started = append(started, processor.Started{WorkflowID: in.WorkflowID, RunID: "r"})
	}
	dead, deadNew, pending := intent("dead", "p"), intent("dead-new", "p"), intent("pending", "p")
	all = append(all, dead, deadNew, pending)
	claim(t, l, all...)
	if err := l.MarkStarted(ctx, started); err != nil {
		t.Fatal(err)
	}
	if err := l.MarkDeadLettered(ctx, unfenced(dead.WorkflowID, deadNew.WorkflowID)); err != nil {
		t.Fatal(err)
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := l.Pool().Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	// 20 old rows share one end time, 5 have older ones of their own.
	exec(`UPDATE dedup_ledger SET started_at = now() - interval '48 hours' WHERE workflow_id LIKE 'activity-%:old-%'`)
	exec(`UPDATE dedup_ledger SET started_at = now() - interval '72 hours' - (substr(event_id, 5)::int * interval '1 minute')
		WHERE event_id IN ('old-0', 'old-1', 'old-2', 'old-3', 'old-4')`)
	exec(`UPDATE dedup_ledger SET updated_at = now() - interval '48 hours' WHERE event_id IN ('dead', 'pending')`)
	n, err := l.Purge(ctx, 24*time.Hour, 7)
	if err != nil || n != 26 {
		t.Fatalf("purged %d (%v), want the 25 old started rows and the old dead-lettered one", n, err)
	}
	counts, _ := l.Count(ctx)
	if counts != (ledger.Counts{Pending: 1, Started: 5, DeadLettered: 1}) {
		t.Fatalf("after the purge %+v, want the pending row, the 5 recent started rows and the recent dead-lettered one", counts)
	}
	if n, err := l.Purge(ctx, 24*time.Hour, 7); err != nil || n != 0 {
		t.Fatalf("a second purge deleted %d (%v)", n, err)
	}
}

// Each purge batch finds its victims along a partial index, never by
// scanning the ledger (which made a day's purge of a 50M-row ledger
// hundreds of full scans). The planner prefers a scan of a table this
// small, so sequential scans are priced out, as a big ledger prices them.
func TestPurgeBatchesUseTheEndTimeIndexes(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	conn, err := l.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	for state, index := range map[ledger.State]string{ledger.StateStarted: "dedup_ledger_started", ledger.StateDeadLettered: "dedup_ledger_dead_lettered"} {
		rows, err := conn.Query(ctx, `EXPLAIN `+ledger.PurgeStatements[state], "24 hours", 1000, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		rows.Close()
		text := strings.Join(plan, "\n")
		if !strings.Contains(text, index) || strings.Contains(text, "Seq Scan") {
			t.Errorf("purging %s rows does not read them along %s:\n%s", state, index, text)
		}
	}
}

// Conflict rows go with the ledger's retention: a purge deletes those
// last seen before the horizon (whatever their ledger row's state) and
// keeps those seen since, so the table a producer's conflicting copies
// grow is bounded by what they send in one retention period.
func TestPurgeDeletesConflictsLastSeenBeforeTheHorizon(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	claim(t, l, intent("old", "a"), intent("recent", "a"))
	old, recent := intent("old", "b"), intent("recent", "b")
	old.Offset, recent.Offset = 20, 21
	want(t, claim(t, l, old, recent), decide.VerdictConflict, decide.VerdictConflict)
	if _, err := l.Pool().Exec(ctx, `UPDATE dedup_conflicts SET detected_at = now() - interval '48 hours', last_seen_at = now() - interval '48 hours' WHERE workflow_id = $1`, old.WorkflowID); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Purge(ctx, 24*time.Hour, 1); err != nil {
		t.Fatal(err)
	}
	var left []string
	rows, err := l.Pool().Query(ctx, `SELECT workflow_id FROM dedup_conflicts`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		left = append(left, id)
	}
	if len(left) != 1 || left[0] != recent.WorkflowID {
		t.Fatalf("conflicts left after the purge: %v, want only %s", left, recent.WorkflowID)
	}
}

// A router recording conflicts while the purge deletes the same old
// conflict rows: the record locks its rows in (workflow ID, payload hash)
// order (recordConflictsSQL's ORDER BY), the purge finds them oldest first
// (the heap's order). Were the purge to wait for a row the record holds
// while holding one the record waits for, the two would deadlock (40P01)
// and the claim that recorded the conflicts would fail; it skips the rows
// others hold instead. R1 (c-c) is older than M2 (c-z), older than R2
// (c-a); the record takes c-a, waits for c-b (M1), then takes c-c.
func TestRecordingConflictsAndPurgingThemDoNotDeadlock(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	ids := []string{"c-c", "c-z", "c-a", "c-b"} // R1, M2, R2, M1: the heap's and the age's order
	for _, id := range ids {
		want(t, claim(t, l, intent(id, "p")), decide.VerdictNew)
		want(t, claim(t, l, intent(id, "q")), decide.VerdictConflict)
	}
	if _, err := l.Pool().Exec(ctx, `UPDATE dedup_conflicts SET last_seen_at = now() - interval '2 hours' + id * interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Pool().Exec(ctx, `ANALYZE dedup_conflicts`); err != nil {
		t.Fatal(err)
	}
	side := sidePool(t, l.Pool().Config().ConnString())
	lockRow := func(id string) pgx.Tx { return holdRows(t, side, "dedup_conflicts", intent(id, "q").WorkflowID) }
	t1, t2 := lockRow("c-b"), lockRow("c-z")
	var wg sync.WaitGroup
	var claimErr error
	wg.Add(1)
	go func() { // records c-a, c-b, c-c: takes c-a, waits for c-b
		defer wg.Done()
		_, claimErr = l.Claim(ctx, []decide.Intent{intent("c-c", "q"), intent("c-b", "q"), intent("c-a", "q")})
	}()
	waitBlocked(t, side, "INSERT INTO dedup_conflicts")
	purgeWhileRowsAreHeld(t, l, time.Hour) // deletes c-c; skips c-z, c-a, c-b
	var left []string
	for _, id := range []string{"c-a", "c-b", "c-z"} {
		left = append(left, intent(id, "q").WorkflowID)
	}
	if got := conflictIDs(t, side); !slices.Equal(got, left) {
		t.Fatalf("conflicts left by the purge: %v, want %v (those other transactions held)", got, left)
	}
	_ = t1.Rollback(ctx) // the record takes c-b, then records c-c again
	_ = t2.Rollback(ctx)
	wg.Wait()
	if claimErr != nil {
		t.Fatalf("a router recording conflicts while the purge deleted the same rows: %v", claimErr)
	}
}

// purgeWhileRowsAreHeld runs a purge of rows older than olderThan while
// other transactions hold some of its victims: it must skip those, not
// wait for them.
func purgeWhileRowsAreHeld(t *testing.T, l *ledger.Postgres, olderThan time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := l.Purge(context.Background(), olderThan, 100)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the purge: %v", err)
		}
	case <-time.After(lockWaitPatience):
		t.Fatalf("the purge waited %s for rows other transactions hold: it should skip them", lockWaitPatience)
	}
}

// conflictIDs lists the workflow IDs of the conflicts recorded, sorted.
func conflictIDs(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT workflow_id FROM dedup_conflicts ORDER BY workflow_id`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// A router re-claiming old dead-lettered rows (a dlq replay) while the
// purge deletes them: the claim locks in key order, the purge finds its
// victims oldest first (and in the heap's order). Were the purge to wait
// for a row the claim holds while holding one the claim waits for, the two
// would deadlock (40P01); it skips the rows others hold instead. R2 < M1 <
// R1 by key; R1 ended before M2, before R2. The claim takes R2, waits for
// M1, then takes R1 (claimed anew once the purge deleted it).
func TestReclaimingDeadLetteredRowsAndPurgingThemDoNotDeadlock(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	in := func(n int) decide.Intent { return intent(fmt.Sprintf("purge-%d", n), "p") }
	r2, m1, r1 := inKeyOrder(in)
	m2 := r1 + 1
	for _, n := range []int{r1, m2, r2, m1} {
		want(t, claim(t, l, in(n)), decide.VerdictNew)
	}
	for _, n := range []int{r1, m2, r2} {
		if err := l.MarkDeadLettered(ctx, unfenced(in(n).WorkflowID)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Pool().Exec(ctx, `UPDATE dedup_ledger SET updated_at = updated_at - interval '48 hours' WHERE state = 'dead_lettered'`); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Pool().Exec(ctx, `ANALYZE dedup_ledger`); err != nil {
		t.Fatal(err)
	}
	side := sidePool(t, l.Pool().Config().ConnString())
	lockRow := func(id string) pgx.Tx { return holdRows(t, side, "dedup_ledger", id) }
	t1, t2 := lockRow(in(m1).WorkflowID), lockRow(in(m2).WorkflowID)
	var wg sync.WaitGroup
	var claimErr error
	wg.Add(1)
	go func() { // re-claims R2, M1, R1 in key order: takes R2, waits for M1
		defer wg.Done()
		_, claimErr = l.Claim(ctx, []decide.Intent{in(r1), in(m1), in(r2)})
	}()
	waitBlocked(t, side, "INSERT INTO dedup_ledger AS l")
	purgeWhileRowsAreHeld(t, l, 24*time.Hour) // deletes R1; skips M2, R2
	var dead []string
	if err := side.QueryRow(ctx, `SELECT coalesce(array_agg(workflow_id ORDER BY workflow_id), '{}') FROM dedup_ledger WHERE state = 'dead_lettered'`).Scan(&dead); err != nil {
		t.Fatal(err)
	}
	heldRows := []string{in(m2).WorkflowID, in(r2).WorkflowID}
	slices.Sort(heldRows)
	if !slices.Equal(dead, heldRows) {
		t.Fatalf("dead-lettered rows left by the purge: %v, want %v (those other transactions held)", dead, heldRows)
	}
	_ = t1.Rollback(ctx) // the claim takes M1, then claims R1 anew
	_ = t2.Rollback(ctx)
	wg.Wait()
	if claimErr != nil {
		t.Fatalf("a router re-claiming dead-lettered rows while the purge deleted the same rows: %v", claimErr)
	}
}

// inKeyOrder picks three of in's intents whose ledger keys are in the
// order r2 < m1 < r1, r2 being in(0).
func inKeyOrder(in func(int) decide.Intent) (r2, m1, r1 int) {
	key := func(n int) string { return wantKey(in(n).WorkflowID) }
	r2, m1, r1 = 0, -1, -1
	for n := 1; n < 100 && r1 < 0; n++ {
		switch {
		case m1 < 0 && key(n) > key(r2):
			m1 = n
		case m1 >= 0 && key(n) > key(m1):
			r1 = n
		}
	}
	return r2, m1, r1
}

// Every router with a retention runs the purge on its own interval, so
// purges run together: with FOR UPDATE SKIP LOCKED each skips the batch
// the other holds and pages past it (from, the newest end time of its own
// victims). Between them they must still delete every purgeable row, each
// once, and each run must end.
func TestConcurrentPurgesDeleteEveryPurgeableRowOnce(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	var all []decide.Intent
	var started []processor.Started
	for i := range 300 {
		in := intent(fmt.Sprint("many-", i), "p")
		all = append(all, in)
		started = append(started, processor.Started{WorkflowID: in.WorkflowID, RunID: "r", Generation: 1})
	}
	claim(t, l, all...)
	if err := l.MarkStarted(ctx, started); err != nil {
		t.Fatal(err)
	}
	// End times spread over a day, some shared.
	if _, err := l.Pool().Exec(ctx, `UPDATE dedup_ledger SET started_at = now() - interval '48 hours' - (substr(event_id, 6)::int % 40) * interval '1 minute'`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	ns, errs := make([]int64, 3), make([]error, 3)
	for i := range ns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ns[i], errs[i] = l.Purge(ctx, 24*time.Hour, 7)
		}()
	}
	wg.Wait()
	var total int64
	for i := range ns {
		if errs[i] != nil {
			t.Fatalf("purge %d: %v", i, errs[i])
		}
		total += ns[i]
	}
	counts, err := l.Count(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if total != 300 || counts != (ledger.Counts{}) {
		t.Fatalf("three purges together deleted %v (%d), and left %+v; want 300 in all and nothing left", ns, total, counts)
	}
}

// A conflict a router records again while a purge runs is one seen just
// now: it lives one retention period more (purgeConflicts), whichever
// role runs the purge. The router's record holds the row it re-counts
// (last_seen_at = now()) until its statement ends; the purge found that
// row old in its snapshot. The router's purge skips the held row; the
// operator's (dedup ledger purge --execute, which may not lock rows) waits
// for it, and must then find it seen again, not delete it by the ID it
// chose before.
func TestPurgeKeepsAConflictRecordedAgainWhileItRuns(t *testing.T) {
	for _, role := range []string{"dedup_router", "dedup_operator"} {
		t.Run(role, func(t *testing.T) {
			admin, router, purger := routerAnd(t, role)
			ctx := deadline(t, 2*time.Minute)
			for _, id := range []string{"c-a", "c-b"} {
				want(t, claim(t, router, intent(id, "p")), decide.VerdictNew)
				want(t, claim(t, router, intent(id, "q")), decide.VerdictConflict)
			}
			side := sidePool(t, admin)
			if _, err := side.Exec(ctx, `UPDATE dedup_conflicts SET detected_at = now() - interval '2 hours', last_seen_at = now() - interval '2 hours'`); err != nil {
				t.Fatal(err)
			}
			tx := held(t, side, pgx.TxOptions{})
			if _, err := tx.Exec(ctx, `SELECT 1 FROM dedup_conflicts WHERE workflow_id = $1 FOR UPDATE`, intent("c-b", "q").WorkflowID); err != nil {
				t.Fatal(err)
			}
			// New copies of both conflicting payloads: the record re-counts
			// c-a (holding it), then waits for c-b.
			again := []decide.Intent{intent("c-a", "q"), intent("c-b", "q")}
			again[0].Offset, again[1].Offset = 30, 31
			claimed := make(chan error, 1)
			go func() {
				_, err := router.Claim(ctx, again)
				claimed <- err
			}()
			waitBlocked(t, side, "INSERT INTO dedup_conflicts")
			purged := make(chan error, 1)
			go func() {
				_, err := purger.Purge(ctx, time.Hour, 100)
				purged <- err
			}()
			// The purge ends (it skipped the held rows) or waits for c-a.
			var purgeErr error
			done := false
			for end := time.Now().Add(lockWaitPatience); !done; time.Sleep(10 * time.Millisecond) {
				select {
				case purgeErr = <-purged:
					done = true
					continue
				default:
				}
				var n int
				if err := side.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%DELETE FROM dedup_conflicts%'`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n > 0 {
					break
				}
				if time.Now().After(end) {
					t.Fatalf("the purge neither ended nor waited for the conflict the record holds:\n%s", sessions(side))
				}
			}
			_ = tx.Rollback(ctx) // the record re-counts c-b, and commits
			if err := within(t, claimed, lockWaitPatience, "the claim"); err != nil {
				t.Fatalf("the claim that recorded the conflicts again: %v", err)
			}
			if !done {
				purgeErr = within(t, purged, lockWaitPatience, "the purge")
			}
			if purgeErr != nil {
				t.Fatalf("the purge: %v", purgeErr)
			}
			wantLeft := []string{intent("c-a", "q").WorkflowID, intent("c-b", "q").WorkflowID}
			if got := conflictIDs(t, side); !slices.Equal(got, wantLeft) {
				t.Fatalf("conflicts left after a purge as %s: %v, want %v (both seen again just now, while it ran)", role, got, wantLeft)
			}
		})
	}
}

// A purge by a role that may lock rows never waits for one: it skips
// the rows other transactions hold (Purge). PostgreSQL lets a role lock a
// table's rows (FOR UPDATE) with UPDATE on any one of its columns, or with
// UPDATE on that table whatever the other's: a retention role granted
// that way (as grants.sql granted dedup_operator at 314a06c) may lock, and
// its purge must skip a held dead-lettered row, not queue behind it in age
// order where it can deadlock with a router's re-claim.
func TestPurgeByARoleThatMayLockSkipsHeldRows(t *testing.T) {
	for name, grants := range map[string][]string{
		"UPDATE of one column of each table": {
			`GRANT DELETE, UPDATE (attempts) ON dedup_ledger TO %s`,
			`GRANT DELETE, UPDATE (event_id) ON dedup_conflicts TO %s`,
		},
		"UPDATE of dedup_ledger, not of dedup_conflicts": {
			`GRANT DELETE, UPDATE ON dedup_ledger TO %s`,
			`GRANT DELETE ON dedup_conflicts TO %s`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			admin, _ := rolesDB(t)
			ctx := deadline(t, 3*time.Minute)
			router := openAs(t, pgtest.NewLogin(t, admin, "", "dedup_router"))
			url := pgtest.NewLogin(t, admin, "", "dedup_reader")
			cfg, err := pgx.ParseConfig(url)
			if err != nil {
				t.Fatal(err)
			}
			side := sidePool(t, admin)
			for _, g := range append(grants, `GRANT DELETE ON dedup_dead_letters TO %s`) {
				if _, err := side.Exec(ctx, fmt.Sprintf(g, pgx.Identifier{cfg.User}.Sanitize())); err != nil {
					t.Fatal(err)
				}
			}
			purger := openAs(t, url)
			// The role may lock: its own FOR UPDATE SKIP LOCKED runs.
			if _, err := purger.Pool().Exec(ctx, `SELECT 1 FROM dedup_ledger LIMIT 1 FOR UPDATE SKIP LOCKED`); err != nil {
				t.Fatalf("the role locking a ledger row: %v", err)
			}
			a, b := intent("held", "p"), intent("free", "p")
			want(t, claim(t, router, a, b), decide.VerdictNew, decide.VerdictNew)
			if err := router.MarkDeadLettered(ctx, unfenced(a.WorkflowID, b.WorkflowID)); err != nil {
				t.Fatal(err)
			}
			if _, err := side.Exec(ctx, `UPDATE dedup_ledger SET updated_at = now() - interval '48 hours'`); err != nil {
				t.Fatal(err)
			}
			tx := held(t, side, pgx.TxOptions{})
			if _, err := tx.Exec(ctx, `SELECT 1 FROM dedup_ledger WHERE workflow_id = $1 FOR NO KEY UPDATE`, a.WorkflowID); err != nil {
				t.Fatal(err)
			}
			purgeWhileRowsAreHeld(t, purger, 24*time.Hour)
			var left []string
			if err := side.QueryRow(ctx, `SELECT coalesce(array_agg(workflow_id), '{}') FROM dedup_ledger`).Scan(&left); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(left, []string{a.WorkflowID}) {
				t.Fatalf("ledger rows left: %v, want only the held %s", left, a.WorkflowID)
			}
		})
	}
}

// A purge deletes every conflict last seen before its horizon, in as many
// batches as that takes. dedup_operator's purge (purgeConflictsUnlocked)
// waits for a conflict a router records again meanwhile and then keeps it:
// that batch deletes fewer rows than it chose, and the purge must still go
// on to the old conflicts after it, not take the short batch for the last.
func TestPurgeByTheOperatorGoesOnPastAConflictRecordedAgain(t *testing.T) {
	admin, router, operator := routerAnd(t, "dedup_operator")
	ctx := deadline(t, 2*time.Minute)
	ids := []string{"c-a", "c-b", "c-c", "c-d", "c-e"} // oldest first
	for _, id := range ids {
		want(t, claim(t, router, intent(id, "p")), decide.VerdictNew)
		want(t, claim(t, router, intent(id, "q")), decide.VerdictConflict)
	}
	side := sidePool(t, admin)
	if _, err := side.Exec(ctx, `UPDATE dedup_conflicts SET detected_at = now() - interval '2 hours', last_seen_at = now() - interval '2 hours' + (ascii(right(workflow_id, 1)) - ascii('a')) * interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	// c-a recorded again, as recordConflictsSQL does, in a transaction
	// still open when the purge comes to it.
	tx := held(t, side, pgx.TxOptions{})
	if _, err := tx.Exec(ctx, `UPDATE dedup_conflicts SET copies = copies + 1, last_seen_at = now() WHERE workflow_id = $1`, intent("c-a", "q").WorkflowID); err != nil {
		t.Fatal(err)
	}
	purged := make(chan error, 1)
	go func() {
		_, err := operator.Purge(ctx, time.Hour, 2) // c-a and c-b first
		purged <- err
	}()
	waitBlockedHere(t, side, "DELETE FROM dedup_conflicts")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := within(t, purged, lockWaitPatience, "the purge"); err != nil {
		t.Fatalf("the purge: %v", err)
	}
	if got, wantLeft := conflictIDs(t, side), []string{intent("c-a", "q").WorkflowID}; !slices.Equal(got, wantLeft) {
		t.Fatalf("conflicts left after dedup_operator's purge: %v, want %v (the one seen again; the others are older than the horizon)", got, wantLeft)
	}
}

// dedup_operator's purge (purgeStartedUnlocked, purgeDeadLetteredUnlocked)
// chooses its victims without a lock and waits for a row a router holds.
// A started row re-run meanwhile (MarkStarted of a newer generation: a new
// started_at) or a dead-lettered row re-claimed (pending) is not a victim
// any more: the DELETE must check the row as the router left it, not as
// the victims CTE read it, and keep it; the other old rows go.
func TestPurgeByTheOperatorKeepsALedgerRowMovedWhileItWaited(t *testing.T) {
	for name, move := range map[string]string{
		"started row re-run":           `UPDATE dedup_ledger SET generation = generation + 1, started_at = now(), updated_at = now() WHERE workflow_id = $1`,
		"dead-lettered row re-claimed": `UPDATE dedup_ledger SET attempts = attempts + 1, state = 'pending', updated_at = now() WHERE workflow_id = $1`,
	} {
		t.Run(name, func(t *testing.T) {
			admin, router, operator := routerAnd(t, "dedup_operator")
			ctx := deadline(t, 2*time.Minute)
			var ins []decide.Intent
			for i := range 4 {
				ins = append(ins, intent(fmt.Sprint("moved-", i), "p"))
			}
			claim(t, router, ins...)
			var ids []string
			for _, in := range ins {
				ids = append(ids, in.WorkflowID)
			}
			if strings.HasPrefix(name, "started") {
				var st []processor.Started
				for _, id := range ids {
					st = append(st, processor.Started{WorkflowID: id, RunID: "r", Generation: 1})
				}
				if err := router.MarkStarted(ctx, st); err != nil {
					t.Fatal(err)
				}
			} else if err := router.MarkDeadLettered(ctx, unfenced(ids...)); err != nil {
				t.Fatal(err)
			}
			side := sidePool(t, admin)
			// moved-0 oldest, then moved-1, ...
			if _, err := side.Exec(ctx, `UPDATE dedup_ledger SET started_at = CASE WHEN state = 'started' THEN now() - interval '48 hours' + right(workflow_id, 1)::int * interval '1 second' END, updated_at = now() - interval '48 hours' + right(workflow_id, 1)::int * interval '1 second'`); err != nil {
				t.Fatal(err)
			}
			tx := held(t, side, pgx.TxOptions{})
			if _, err := tx.Exec(ctx, move, ids[0]); err != nil {
				t.Fatal(err)
			}
			purged := make(chan error, 1)
			go func() {
				_, err := operator.Purge(ctx, 24*time.Hour, 2)
				purged <- err
			}()
			waitBlockedHere(t, side, "DELETE FROM dedup_ledger")
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := within(t, purged, lockWaitPatience, "the purge"); err != nil {
				t.Fatalf("the purge: %v", err)
			}
			var left []string
			if err := side.QueryRow(ctx, `SELECT coalesce(array_agg(workflow_id ORDER BY workflow_id), '{}') FROM dedup_ledger`).Scan(&left); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(left, ids[:1]) {
				t.Fatalf("ledger rows left after dedup_operator's purge: %v, want only %v (moved while the purge waited for it)", left, ids[:1])
			}
		})
	}
}

// dedup_operator may not lock rows, so its purge deletes its victims oldest
// first as it meets them (purgeStartedUnlocked, purgeDeadLetteredUnlocked),
// while a router re-claiming the same old dead-lettered rows (a dlq replay)
// locks them in key order: the two can deadlock, and PostgreSQL cancels
// one (40P01). When it cancels the purge's batch, the purge must run the
// batch again, not fail: the batch deleted nothing, and the old rows the
// router did not take are still there. R2 < M1 < R1 by key; R1 ended
// before M2, before R2. The claim takes R2 and waits for M1; the purge
// deletes R1 and waits for M2; M1 let go, the claim waits for R1 (the
// purge); M2 let go, the purge waits for R2 (the claim), closing the
// circle. The purge is the one PostgreSQL cancels: the router's sessions
// look for a deadlock only after minutes (lateToLookForDeadlocks), the
// purge's a second after it began to wait, when the circle is closed.
func TestPurgeByTheOperatorRunsABatchThatLostADeadlockAgain(t *testing.T) {
	admin, _ := rolesDB(t)
	router := openAs(t, lateToLookForDeadlocks(t, admin, pgtest.NewLogin(t, admin, "", "dedup_router")))
	operator := openAs(t, pgtest.NewLogin(t, admin, "", "dedup_operator"))
	ctx := deadline(t, 2*time.Minute)
	in := func(n int) decide.Intent { return intent(fmt.Sprintf("purge-%d", n), "p") }
	r2, m1, r1 := inKeyOrder(in)
	m2 := r1 + 1
	for _, n := range []int{r1, m2, r2, m1} {
		want(t, claim(t, router, in(n)), decide.VerdictNew)
	}
	for _, n := range []int{r1, m2, r2} {
		if err := router.MarkDeadLettered(ctx, unfenced(in(n).WorkflowID)); err != nil {
			t.Fatal(err)
		}
	}
	side := sidePool(t, admin)
	// R1 oldest, then M2, then R2.
	if _, err := side.Exec(ctx, `UPDATE dedup_ledger SET updated_at = now() - interval '48 hours' + CASE workflow_id WHEN $1 THEN 0 WHEN $2 THEN 1 ELSE 2 END * interval '1 second' WHERE state = 'dead_lettered'`, in(r1).WorkflowID, in(m2).WorkflowID); err != nil {
		t.Fatal(err)
	}
	if _, err := side.Exec(ctx, `ANALYZE dedup_ledger`); err != nil {
		t.Fatal(err)
	}
	t1, t2 := holdRows(t, side, "dedup_ledger", in(m1).WorkflowID), holdRows(t, side, "dedup_ledger", in(m2).WorkflowID)
	claimed := make(chan error, 1)
	go func() { // re-claims R2, M1, R1 in key order: takes R2, waits for M1
		_, err := router.Claim(ctx, []decide.Intent{in(r1), in(m1), in(r2)})
		claimed <- err
	}()
	waitBlockedHere(t, side, "INSERT INTO dedup_ledger AS l")
	purged := make(chan error, 1)
	go func() {
		_, err := operator.Purge(ctx, 24*time.Hour, 100)
		purged <- err
	}()
	waitBlockedHere(t, side, "DELETE FROM dedup_ledger")
	_ = t1.Rollback(ctx)
	waitBlockedBy(t, side, "INSERT INTO dedup_ledger AS l", "DELETE FROM dedup_ledger")
	_ = t2.Rollback(ctx)
	if err := within(t, purged, lockWaitPatience, "the purge"); err != nil {
		t.Fatalf("dedup_operator's purge meeting a router's re-claim of the same rows: %v", err)
	}
	if err := within(t, claimed, lockWaitPatience, "the re-claim"); err != nil {
		t.Fatalf("the router's re-claim meeting dedup_operator's purge of the same rows (the purge, closing the circle, should have lost the deadlock): %v", err)
	}
	var left []string
	if err := side.QueryRow(ctx, `SELECT coalesce(array_agg(workflow_id ORDER BY workflow_id), '{}') FROM dedup_ledger`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	wantLeft := []string{in(r1).WorkflowID, in(m1).WorkflowID, in(r2).WorkflowID}
	slices.Sort(wantLeft)
	if !slices.Equal(left, wantLeft) {
		t.Fatalf("ledger rows left: %v, want %v (the rows the router claimed; M2 purged)", left, wantLeft)
	}
}

// A conflict written before migration 00014 has no last_seen_at and goes
// by detected_at (purgeConflicts), whichever role purges: the DELETE's
// second look at the row's age must read it the same way, deleting an old
// one and keeping a recent one.
func TestPurgeGoesByDetectedAtForAConflictWithoutLastSeenAt(t *testing.T) {
	for _, role := range []string{"dedup_router", "dedup_operator"} {
		t.Run(role, func(t *testing.T) {
			admin, router, purger := routerAnd(t, role)
			ctx := deadline(t, 2*time.Minute)
			for _, id := range []string{"old", "recent"} {
				want(t, claim(t, router, intent(id, "p")), decide.VerdictNew)
				want(t, claim(t, router, intent(id, "q")), decide.VerdictConflict)
			}
			side := sidePool(t, admin)
			if _, err := side.Exec(ctx, `UPDATE dedup_conflicts SET last_seen_at = NULL, detected_at = CASE WHEN workflow_id = $1 THEN now() - interval '48 hours' ELSE now() END`, intent("old", "q").WorkflowID); err != nil {
				t.Fatal(err)
			}
			if _, err := purger.Purge(ctx, 24*time.Hour, 1); err != nil {
				t.Fatal(err)
			}
			if got, wantLeft := conflictIDs(t, side), []string{intent("recent", "q").WorkflowID}; !slices.Equal(got, wantLeft) {
				t.Fatalf("conflicts without last_seen_at left after a purge as %s: %v, want %v", role, got, wantLeft)
			}
		})
	}
}

// Through PgBouncer in transaction pooling (postgres.pooler: transaction)
// the purge's statements each run on whichever server session is free:
// the privilege question that picks the lock and every batch after it.
// As dedup_router (locks) and dedup_operator (does not), it deletes every
// old started and dead-lettered row and conflict, in batches, and keeps
// the recent ones.
func TestPurgeThroughTransactionPoolerAsEachRole(t *testing.T) {
	for _, role := range []string{"dedup_router", "dedup_operator"} {
		t.Run(role, func(t *testing.T) {
			admin, _ := rolesDB(t)
			ctx := deadline(t, 2*time.Minute)
			router := openAs(t, pgtest.NewLogin(t, admin, "", "dedup_router"))
			login := pgtest.NewLogin(t, admin, "", role)
			b := pgbouncer.Start(t, login, pgbouncer.Options{Mode: pgbouncer.Transaction})
			cfg := ledger.DefaultConfig()
			cfg.URL = b.URL(login)
			cfg.Pooler = pooler.Transaction
			purger, err := ledger.Open(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(purger.Close)
			var started []processor.Started
			var dead []string
			for i := range 10 {
				in := intent(fmt.Sprint("pooled-", i), "p")
				want(t, claim(t, router, in), decide.VerdictNew)
				want(t, claim(t, router, intent(in.EventID, "q")), decide.VerdictConflict)
				if i%2 == 0 {
					started = append(started, processor.Started{WorkflowID: in.WorkflowID, RunID: "r", Generation: 1})
				} else {
					dead = append(dead, in.WorkflowID)
				}
			}
			if err := router.MarkStarted(ctx, started); err != nil {
				t.Fatal(err)
			}
			if err := router.MarkDeadLettered(ctx, unfenced(dead...)); err != nil {
				t.Fatal(err)
			}
			keep := intent("pooled-9", "q").WorkflowID // the recent one
			side := sidePool(t, admin)
			for _, q := range []string{
				`UPDATE dedup_ledger SET started_at = now() - interval '48 hours', updated_at = now() - interval '48 hours' WHERE workflow_id <> $1`,
				`UPDATE dedup_conflicts SET detected_at = now() - interval '48 hours', last_seen_at = now() - interval '48 hours' WHERE workflow_id <> $1`,
			} {
				if _, err := side.Exec(ctx, q, keep); err != nil {
					t.Fatal(err)
				}
			}
			n, err := purger.Purge(ctx, 24*time.Hour, 2)
			if err != nil {
				t.Fatalf("the purge through the pooler as %s: %v", role, err)
			}
			var ledgerLeft []string
			if err := side.QueryRow(ctx, `SELECT coalesce(array_agg(workflow_id), '{}') FROM dedup_ledger`).Scan(&ledgerLeft); err != nil {
				t.Fatal(err)
			}
			if n != 9 || !slices.Equal(ledgerLeft, []string{keep}) {
				t.Fatalf("the purge as %s deleted %d ledger rows and left %v; want 9 and only %s", role, n, ledgerLeft, keep)
			}
			if got := conflictIDs(t, side); !slices.Equal(got, []string{keep}) {
				t.Fatalf("conflicts left after the purge as %s: %v, want only %s", role, got, keep)
			}
		})
	}
}

// Routers purge on their own interval while an operator runs dedup ledger
// purge --execute: dedup_operator's purge (purgeConflictsUnlocked) waits
// for a conflict a router's purge is deleting, and finds it gone. That
// batch deletes fewer rows than it chose; the purge must still go on to
// the old conflicts after it.
func TestPurgeByTheOperatorGoesOnPastAConflictAnotherPurgeDeleted(t *testing.T) {
	admin, router, operator := routerAnd(t, "dedup_operator")
	ctx := deadline(t, 2*time.Minute)
	for _, id := range []string{"c-a", "c-b", "c-c", "c-d", "c-e"} { // oldest first
		want(t, claim(t, router, intent(id, "p")), decide.VerdictNew)
		want(t, claim(t, router, intent(id, "q")), decide.VerdictConflict)
	}
	side := sidePool(t, admin)
	if _, err := side.Exec(ctx, `UPDATE dedup_conflicts SET detected_at = now() - interval '2 hours', last_seen_at = now() - interval '2 hours' + (ascii(right(workflow_id, 1)) - ascii('a')) * interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	// A router's purge batch deleting c-a, not yet committed.
	tx := held(t, side, pgx.TxOptions{})
	if _, err := tx.Exec(ctx, `DELETE FROM dedup_conflicts WHERE workflow_id = $1`, intent("c-a", "q").WorkflowID); err != nil {
		t.Fatal(err)
	}
	purged := make(chan error, 1)
	go func() {
		_, err := operator.Purge(ctx, time.Hour, 2) // c-a and c-b first
		purged <- err
	}()
	waitBlockedHere(t, side, "DELETE FROM dedup_conflicts")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := within(t, purged, lockWaitPatience, "the purge"); err != nil {
		t.Fatalf("the purge: %v", err)
	}
	if got := conflictIDs(t, side); len(got) != 0 {
		t.Fatalf("conflicts left after dedup_operator's purge: %v, want none (all older than the horizon)", got)
	}
}

// lateToLookForDeadlocks has the sessions of login (a URL of
// pgtest.NewLogin's) look for a deadlock only after ten minutes of
// waiting for a lock (deadlock_timeout, a superuser's setting, set by
// admin for the login), and returns login. PostgreSQL cancels the session
// whose own look finds the circle, one deadlock_timeout (a second) after
// it began to wait, or none if the circle was not closed yet: which of two
// sessions loses a deadlock then depends on the machine's pace (CI's
// TestPurgeCountsEachDeletedRowOnceAfterADeadlock saw the wrong one lose).
// With the login late, the other session loses, if it closes the circle.
func lateToLookForDeadlocks(t *testing.T, admin, login string) string {
	t.Helper()
	u, err := url.Parse(login)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sidePool(t, admin).Exec(deadline(t, time.Minute), `ALTER ROLE `+pgx.Identifier{u.User.Username()}.Sanitize()+` SET deadlock_timeout = '10min'`); err != nil {
		t.Fatal(err)
	}
	return login
}

// routerAnd opens one new ledger with dedup's roles (rolesDB) as
// dedup_router and as role: a router and another role's purge of the same
// rows. admin is the database's superuser URL.
func routerAnd(t *testing.T, role string) (admin string, router, other *ledger.Postgres) {
	t.Helper()
	admin, _ = rolesDB(t)
	return admin, openAs(t, pgtest.NewLogin(t, admin, "", "dedup_router")), openAs(t, pgtest.NewLogin(t, admin, "", role))
}

// The purge's batch that lost a deadlock deleted nothing; the batch run
// again deletes M2 (TestPurgeByTheOperatorRunsABatchThatLostADeadlockAgain's
// meeting). The count Purge returns is of the rows deleted, each once:
// neither the cancelled run's victims nor the rows the router re-claimed.
func TestPurgeCountsEachDeletedRowOnceAfterADeadlock(t *testing.T) {
	admin, _ := rolesDB(t)
	router := openAs(t, lateToLookForDeadlocks(t, admin, pgtest.NewLogin(t, admin, "", "dedup_router")))
	operator := openAs(t, pgtest.NewLogin(t, admin, "", "dedup_operator"))
	ctx := deadline(t, 2*time.Minute)
	in := func(n int) decide.Intent { return intent(fmt.Sprintf("purge-%d", n), "p") }
	r2, m1, r1 := inKeyOrder(in)
	m2 := r1 + 1
	for _, n := range []int{r1, m2, r2, m1} {
		want(t, claim(t, router, in(n)), decide.VerdictNew)
	}
	for _, n := range []int{r1, m2, r2} {
		if err := router.MarkDeadLettered(ctx, unfenced(in(n).WorkflowID)); err != nil {
			t.Fatal(err)
		}
	}
	side := sidePool(t, admin)
	// R1 oldest, then M2, then R2.
	if _, err := side.Exec(ctx, `UPDATE dedup_ledger SET updated_at = now() - interval '48 hours' + CASE workflow_id WHEN $1 THEN 0 WHEN $2 THEN 1 ELSE 2 END * interval '1 second' WHERE state = 'dead_lettered'`, in(r1).WorkflowID, in(m2).WorkflowID); err != nil {
		t.Fatal(err)
	}
	if _, err := side.Exec(ctx, `ANALYZE dedup_ledger`); err != nil {
		t.Fatal(err)
	}
	t1, t2 := holdRows(t, side, "dedup_ledger", in(m1).WorkflowID), holdRows(t, side, "dedup_ledger", in(m2).WorkflowID)
	claimed := make(chan error, 1)
	go func() { // re-claims R2, M1, R1 in key order: takes R2, waits for M1
		_, err := router.Claim(ctx, []decide.Intent{in(r1), in(m1), in(r2)})
		claimed <- err
	}()
	waitBlockedHere(t, side, "INSERT INTO dedup_ledger AS l")
	purged := make(chan error, 1)
	var n int64
	go func() {
		var err error
		n, err = operator.Purge(ctx, 24*time.Hour, 100)
		purged <- err
	}()
	waitBlockedHere(t, side, "DELETE FROM dedup_ledger")
	_ = t1.Rollback(ctx)
	waitBlockedBy(t, side, "INSERT INTO dedup_ledger AS l", "DELETE FROM dedup_ledger")
	_ = t2.Rollback(ctx)
	if err := within(t, purged, lockWaitPatience, "the purge"); err != nil {
		t.Fatalf("dedup_operator's purge meeting a router's re-claim of the same rows: %v", err)
	}
	if err := within(t, claimed, lockWaitPatience, "the re-claim"); err != nil {
		t.Fatalf("the router's re-claim meeting dedup_operator's purge of the same rows (the purge, closing the circle, should have lost the deadlock): %v", err)
	}
	var left []string
	if err := side.QueryRow(ctx, `SELECT coalesce(array_agg(workflow_id ORDER BY workflow_id), '{}') FROM dedup_ledger`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	wantLeft := []string{in(r1).WorkflowID, in(m1).WorkflowID, in(r2).WorkflowID}
	slices.Sort(wantLeft)
	if !slices.Equal(left, wantLeft) {
		t.Fatalf("ledger rows left: %v, want %v (the rows the router claimed; M2 purged)", left, wantLeft)
	}
	if n != 1 {
		t.Fatalf("the purge that ran its batch again after losing a deadlock says it deleted %d ledger rows, want 1 (M2, once)", n)
	}
}

// TestPurgeByTheOperatorRunsABatchThatLostADeadlockAgain's meeting with
// dedup_operator's purge going through PgBouncer in transaction pooling
// (postgres.pooler: transaction): the batch PostgreSQL cancelled runs
// again on whichever server session is free, and deletes M2 only.
func TestPurgeByTheOperatorThroughTransactionPoolerRunsABatchThatLostADeadlockAgain(t *testing.T) {
	admin, _ := rolesDB(t)
	ctx := deadline(t, 2*time.Minute)
	router := openAs(t, lateToLookForDeadlocks(t, admin, pgtest.NewLogin(t, admin, "", "dedup_router")))
	login := pgtest.NewLogin(t, admin, "", "dedup_operator")
	b := pgbouncer.Start(t, login, pgbouncer.Options{Mode: pgbouncer.Transaction})
	cfg := ledger.DefaultConfig()
	cfg.URL = b.URL(login)
	cfg.Pooler = pooler.Transaction
	operator, err := ledger.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(operator.Close)
	in := func(n int) decide.Intent { return intent(fmt.Sprintf("purge-%d", n), "p") }
	r2, m1, r1 := inKeyOrder(in)
	m2 := r1 + 1
	for _, n := range []int{r1, m2, r2, m1} {
		want(t, claim(t, router, in(n)), decide.VerdictNew)
	}
	for _, n := range []int{r1, m2, r2} {
		if err := router.MarkDeadLettered(ctx, unfenced(in(n).WorkflowID)); err != nil {
			t.Fatal(err)
		}
	}
	side := sidePool(t, admin)
	// R1 oldest, then M2, then R2.
	if _, err := side.Exec(ctx, `UPDATE dedup_ledger SET updated_at = now() - interval '48 hours' + CASE workflow_id WHEN $1 THEN 0 WHEN $2 THEN 1 ELSE 2 END * interval '1 second' WHERE state = 'dead_lettered'`, in(r1).WorkflowID, in(m2).WorkflowID); err != nil {
		t.Fatal(err)
	}
	if _, err := side.Exec(ctx, `ANALYZE dedup_ledger`); err != nil {
		t.Fatal(err)
	}
	t1, t2 := holdRows(t, side, "dedup_ledger", in(m1).WorkflowID), holdRows(t, side, "dedup_ledger", in(m2).WorkflowID)
	claimed := make(chan error, 1)
	go func() { // re-claims R2, M1, R1 in key order: takes R2, waits for M1
		_, err := router.Claim(ctx, []decide.Intent{in(r1), in(m1), in(r2)})
		claimed <- err
	}()
	waitBlockedHere(t, side, "INSERT INTO dedup_ledger AS l")
	purged := make(chan error, 1)
	var n int64
	go func() {
		var err error
		n, err = operator.Purge(ctx, 24*time.Hour, 100)
		purged <- err
	}()
	waitBlockedHere(t, side, "DELETE FROM dedup_ledger")
	_ = t1.Rollback(ctx)
	waitBlockedBy(t, side, "INSERT INTO dedup_ledger AS l", "DELETE FROM dedup_ledger")
	_ = t2.Rollback(ctx)
	if err := within(t, purged, lockWaitPatience, "the purge"); err != nil {
		t.Fatalf("dedup_operator's purge meeting a router's re-claim of the same rows: %v", err)
	}
	if err := within(t, claimed, lockWaitPatience, "the re-claim"); err != nil {
		t.Fatalf("the router's re-claim meeting dedup_operator's purge of the same rows (the purge, closing the circle, should have lost the deadlock): %v", err)
	}
	var left []string
	if err := side.QueryRow(ctx, `SELECT coalesce(array_agg(workflow_id ORDER BY workflow_id), '{}') FROM dedup_ledger`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	wantLeft := []string{in(r1).WorkflowID, in(m1).WorkflowID, in(r2).WorkflowID}
	slices.Sort(wantLeft)
	if !slices.Equal(left, wantLeft) {
		t.Fatalf("ledger rows left: %v, want %v (the rows the router claimed; M2 purged)", left, wantLeft)
	}
	if n != 1 {
		t.Fatalf("the purge through the pooler says it deleted %d ledger rows, want 1 (M2)", n)
	}
}

// A purge's batch ended by its context (an operator's Ctrl-C, --timeout)
// while it waits for a row a router holds is not run again, as a batch
// PostgreSQL cancelled to break a deadlock is (againAfterDeadlock): the
// purge returns at once with the context's error. Having returned, it
// deletes nothing more: the statement must be cancelled in PostgreSQL too,
// not left waiting for the row and deleting it once the router lets go.
func TestPurgeCancelledWhileItWaitsDeletesNothingAfterItReturns(t *testing.T) {
	admin, router, operator := routerAnd(t, "dedup_operator")
	in := intent("cancelled-0", "p")
	want(t, claim(t, router, in), decide.VerdictNew)
	if err := router.MarkDeadLettered(deadline(t, time.Minute), unfenced(in.WorkflowID)); err != nil {
		t.Fatal(err)
	}
	side := sidePool(t, admin)
	if _, err := side.Exec(context.Background(), `UPDATE dedup_ledger SET updated_at = now() - interval '48 hours'`); err != nil {
		t.Fatal(err)
	}
	tx := holdRows(t, side, "dedup_ledger", in.WorkflowID)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	purged := make(chan error, 1)
	go func() {
		_, err := operator.Purge(ctx, 24*time.Hour, 10)
		purged <- err
	}()
	waitBlockedHere(t, side, "DELETE FROM dedup_ledger")
	cancel()
	if err := within(t, purged, lockWaitPatience, "the cancelled purge"); !errors.Is(err, context.Canceled) {
		t.Fatalf("the purge cancelled while it waited for a held row: %v, want context.Canceled", err)
	}
	_ = tx.Rollback(context.Background())
	// Locking the row again queues behind a statement still waiting for
	// it: what it did is seen, without a race with it.
	after := held(t, side, pgx.TxOptions{})
	var left int
	if err := after.QueryRow(context.Background(), `SELECT count(*) FROM (SELECT 1 FROM dedup_ledger FOR UPDATE) r`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 1 {
		t.Fatalf("ledger rows left after a cancelled purge: %d, want 1", left)
	}
}

// A purge cancelled while its statement is on its way to PostgreSQL: the
// cancel request, on a connection of its own, reaches the server before
// the statement does (a delay on the network, or in a proxy), finds the
// session idle, and does nothing. The statement then arrives, waits for
// the row a router holds, and deletes it once the router lets go, after
// the purge returned context.Canceled. Having returned, the purge must
// delete nothing more.
func TestPurgeCancelledBeforeItsStatementReachesTheServerDeletesNothingAfterItReturns(t *testing.T) {
	admin, router, _ := routerAnd(t, "dedup_operator")
	px := newStatementHolder(t, pgtest.NewLogin(t, admin, "", "dedup_operator"), "'dead_lettered'")
	operator := openAs(t, px.url)
	in := intent("cancelled-early-0", "p")
	want(t, claim(t, router, in), decide.VerdictNew)
	if err := router.MarkDeadLettered(deadline(t, time.Minute), unfenced(in.WorkflowID)); err != nil {
		t.Fatal(err)
	}
	side := sidePool(t, admin)
	if _, err := side.Exec(context.Background(), `UPDATE dedup_ledger SET updated_at = now() - interval '48 hours'`); err != nil {
		t.Fatal(err)
	}
	tx := holdRows(t, side, "dedup_ledger", in.WorkflowID)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	purged := make(chan error, 1)
	go func() {
		_, err := operator.Purge(ctx, 24*time.Hour, 10)
		purged <- err
	}()
	within(t, px.holding, lockWaitPatience, "the dead-lettered batch's statement on its way")
	cancel()
	if err := within(t, purged, lockWaitPatience, "the cancelled purge"); !errors.Is(err, context.Canceled) {
		t.Fatalf("the purge cancelled while its statement was on its way: %v, want context.Canceled", err)
	}
	px.release()
	// The statement, arrived late, waits for the held row (or it was
	// cancelled, and nothing waits: then the count below is at once).
	late := make(chan struct{})
	go func() {
		defer close(late)
		for end := time.Now().Add(lockWaitPatience); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			var n int
			_ = side.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%DELETE FROM dedup_ledger%'`).Scan(&n)
			if n > 0 {
				return
			}
		}
	}()
	<-late
	_ = tx.Rollback(context.Background())
	after := held(t, side, pgx.TxOptions{})
	var left int
	if err := after.QueryRow(context.Background(), `SELECT count(*) FROM (SELECT 1 FROM dedup_ledger FOR UPDATE) r`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 1 {
		t.Fatalf("ledger rows left after a purge cancelled while its statement was on its way: %d, want 1", left)
	}
}

// statementHolder is a TCP proxy to a PostgreSQL login's server that
// holds back what the client sends from the first execution (Bind, or a
// simple Query) of a statement whose text holds mark, until release: the
// network's delay, made long. Every other connection (a cancel request's)
// goes through at once.
type statementHolder struct {
	url     string
	holding chan struct{} // closed when a statement is held
	free    chan struct{} // closed by release
	once    sync.Once
	// refuse, set, closes every new connection at once (a proxy or
	// pooler at its limit): a cancel request does not get through.
	refuse atomic.Bool
}

func newStatementHolder(t *testing.T, loginURL, mark string) *statementHolder {
	t.Helper()
	u, err := url.Parse(loginURL)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	u.Host = ln.Addr().String()
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	h := &statementHolder{url: u.String(), holding: make(chan struct{}), free: make(chan struct{})}
	t.Cleanup(h.release)
	var held sync.Once
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if h.refuse.Load() {
				_ = c.Close()
				continue
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
			go func() {
				defer func() { _ = s.Close() }()
				buf := make([]byte, 64<<10)
				armed, holding := false, false
				for {
					n, err := c.Read(buf)
					if n > 0 {
						chunk := buf[:n]
						if bytes.Contains(chunk, []byte(mark)) && bytes.Contains(chunk, []byte("DELETE FROM dedup_ledger")) {
							armed = true
						}
						if !holding && armed && (chunk[0] == 'B' || chunk[0] == 'Q') {
							held.Do(func() { holding = true; close(h.holding) })
						}
						if holding {
							<-h.free
						}
						if _, err := s.Write(chunk); err != nil {
							return
						}
					}
					if err != nil {
						// The server reads what was sent before the
						// client closed, as it would without a proxy.
						if holding {
							<-h.free
						}
						return
					}
				}
			}()
		}
	}()
	return h
}

func (h *statementHolder) release() { h.once.Do(func() { close(h.free) }) }

// Purges cancelled while they wait for a held row, more of them than the
// pool has connections (4): each closes its connection instead of
// releasing it, and none is kept or lost. The pool serves the purge after
// them, which deletes the row once it is let go, and no backend of the
// cancelled purges is left in the database.
func TestPurgesCancelledWhileTheyWaitLeaveThePoolServing(t *testing.T) {
	admin, router, operator := routerAnd(t, "dedup_operator")
	in := intent("cancelled-many-0", "p")
	want(t, claim(t, router, in), decide.VerdictNew)
	if err := router.MarkDeadLettered(deadline(t, time.Minute), unfenced(in.WorkflowID)); err != nil {
		t.Fatal(err)
	}
	side := sidePool(t, admin)
	if _, err := side.Exec(context.Background(), `UPDATE dedup_ledger SET updated_at = now() - interval '48 hours'`); err != nil {
		t.Fatal(err)
	}
	tx := holdRows(t, side, "dedup_ledger", in.WorkflowID)
	for i := range 6 {
		ctx, cancel := context.WithCancel(context.Background())
		purged := make(chan error, 1)
		go func() {
			_, err := operator.Purge(ctx, 24*time.Hour, 10)
			purged <- err
		}()
		waitBlockedHere(t, side, "DELETE FROM dedup_ledger")
		cancel()
		if err := within(t, purged, lockWaitPatience, "the cancelled purge"); !errors.Is(err, context.Canceled) {
			t.Fatalf("purge %d cancelled while it waited: %v, want context.Canceled", i, err)
		}
		if n := operator.Pool().Stat().TotalConns(); n > 4 {
			t.Fatalf("after cancelled purge %d: %d connections in a pool of 4", i, n)
		}
	}
	_ = tx.Rollback(context.Background())
	n, err := operator.Purge(deadline(t, time.Minute), 24*time.Hour, 10)
	if err != nil || n != 1 {
		t.Fatalf("the purge after the cancelled ones: %d, %v, want 1 row deleted", n, err)
	}
	var waiting int
	if err := side.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE '%DELETE FROM dedup_ledger%' AND state <> 'idle' AND pid <> pg_backend_pid()`).Scan(&waiting); err != nil {
		t.Fatal(err)
	}
	if waiting != 0 {
		t.Fatalf("%d purge statements still running after the purges returned:\n%s", waiting, sessions(side))
	}
}

// A purge cancelled while it waits for a held row, whose cancel request
// does not get through (the proxy or pooler in front of PostgreSQL takes
// no new connection just then; a load balancer sending it to another
// server): the purge returns context.Canceled, and its statement, left
// waiting, deletes the row once the router lets go. Having returned, the
// purge must delete nothing more, or say it could not stop its statement.
func TestPurgeCancelledWhoseCancelRequestDoesNotGetThroughDeletesNothingAfterItReturns(t *testing.T) {
	admin, router, _ := routerAnd(t, "dedup_operator")
	px := newStatementHolder(t, pgtest.NewLogin(t, admin, "", "dedup_operator"), "\x00 holds nothing")
	operator := openAs(t, px.url)
	in := intent("cancel-lost-0", "p")
	want(t, claim(t, router, in), decide.VerdictNew)
	if err := router.MarkDeadLettered(deadline(t, time.Minute), unfenced(in.WorkflowID)); err != nil {
		t.Fatal(err)
	}
	side := sidePool(t, admin)
	if _, err := side.Exec(context.Background(), `UPDATE dedup_ledger SET updated_at = now() - interval '48 hours'`); err != nil {
		t.Fatal(err)
	}
	tx := holdRows(t, side, "dedup_ledger", in.WorkflowID)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	purged := make(chan error, 1)
	go func() {
		_, err := operator.Purge(ctx, 24*time.Hour, 10)
		purged <- err
	}()
	waitBlockedHere(t, side, "DELETE FROM dedup_ledger")
	px.refuse.Store(true)
	cancel()
	err := within(t, purged, lockWaitPatience, "the cancelled purge")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the purge cancelled while it waited for a held row: %v, want context.Canceled", err)
	}
	_ = tx.Rollback(context.Background())
	after := held(t, side, pgx.TxOptions{})
	var left int
	if err := after.QueryRow(context.Background(), `SELECT count(*) FROM (SELECT 1 FROM dedup_ledger FOR UPDATE) r`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 1 {
		t.Fatalf("ledger rows left after a purge whose cancel request did not get through returned %q: %d, want 1", err, left)
	}
}
