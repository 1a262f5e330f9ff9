package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/sink/ledger"
)

// A row whose record was dead-lettered (Temporal refused its start for
// good) ends dead_lettered, not pending forever; replaying the record
// (dlq replay after the cause is fixed) claims it again.
func TestDeadLetteredRowEndsAndCanBeReclaimed(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	a, other := intent("e1", "A"), intent("e1", "other")
	want(t, claim(t, l, a), decide.VerdictNew)
	if err := l.MarkDeadLettered(ctx, unfenced(a.WorkflowID)); err != nil {
		t.Fatal(err)
	}
	counts, err := l.Count(ctx)
	if err != nil || counts != (ledger.Counts{DeadLettered: 1}) {
		t.Fatalf("counts %+v (%v), want one dead_lettered row", counts, err)
	}
	want(t, claim(t, l, other, a), decide.VerdictConflict, decide.VerdictRedrive)
	if counts, _ = l.Count(ctx); counts != (ledger.Counts{Pending: 1, Conflicts: 1}) {
		t.Fatalf("counts %+v, want the row pending again", counts)
	}
}

// A re-run is recorded after its start: MarkStarted moves a started row to
// the newer generation's run, and a mark of an older generation (a slow
// router's) changes nothing. A duplicate's verdict carries the recorded
// generation, which the router's re-run starts after.
func TestMarkStartedMovesToNewerGenerationsOnly(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	a := intent("e1", "A")
	claim(t, l, a)
	mark := func(run string, gen int) {
		t.Helper()
		if err := l.MarkStarted(ctx, []processor.Started{{WorkflowID: a.WorkflowID, RunID: run, Generation: gen}}); err != nil {
			t.Fatal(err)
		}
	}
	row := func() (string, int) {
		t.Helper()
		var run string
		var gen int
		if err := l.Pool().QueryRow(ctx, `SELECT coalesce(run_id, ''), generation FROM dedup_ledger WHERE workflow_id = $1`, a.WorkflowID).Scan(&run, &gen); err != nil {
			t.Fatal(err)
		}
		return run, gen
	}
	mark("run-1", 1)
	if cl, err := l.Claim(ctx, []decide.Intent{a}); err != nil || cl[0] != (decide.Claimed{Verdict: decide.VerdictDuplicate, Generation: 1}) {
		t.Fatalf("claim after start: %+v %v, want a duplicate of generation 1", cl, err)
	}
	mark("run-3", 3)
	mark("run-2", 2) // late: an older generation's mark
	mark("run-3b", 3)
	if run, gen := row(); run != "run-3" || gen != 3 {
		t.Fatalf("row after marks of generations 3, 2, 3: run %q generation %d, want run-3 generation 3", run, gen)
	}
	if cl, err := l.Claim(ctx, []decide.Intent{a}); err != nil || cl[0] != (decide.Claimed{Verdict: decide.VerdictDuplicate, Generation: 3}) {
		t.Fatalf("claim after the re-run: %+v %v, want a duplicate of generation 3", cl, err)
	}
}

// unfenced names rows for MarkDeadLettered without a fence.
func unfenced(ids ...string) []processor.DeadLettered {
	out := make([]processor.DeadLettered, len(ids))
	for i, id := range ids {
		out[i] = processor.DeadLettered{WorkflowID: id}
	}
	return out
}

// cancelOnStale cancels its context's mark when the ledger sends the
// statement that reads which fences moved (fence.go's staleSQL): the mark's
// UPDATE has landed, and the read after it fails (a context ended, a
// connection dropped between the two round trips).
type cancelOnStale struct {
	mu     sync.Mutex
	cancel context.CancelFunc
}

func (c *cancelOnStale) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel != nil && strings.Contains(d.SQL, "dedup_partition_owners o") && strings.Contains(d.SQL, "IS DISTINCT FROM f.epoch") {
		c.cancel()
	}
	return ctx
}

func (c *cancelOnStale) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Ledger.MarkStarted's contract: Recorded is whether the call left the
// row started, "also when it returns a *FencedError for others; false for
// all on any other error". A mark with one stale partition writes the
// other partition's row, then reads which fences moved; when that read
// fails, MarkStarted returns that error (not a *FencedError), and no
// entry says Recorded (at d34cb2d the row it wrote still said Moved).
func TestAMarkThatFailsAfterItsWriteSaysNoRowRecorded(t *testing.T) {
	base := open(t)
	pc, err := pgxpool.ParseConfig(base.Pool().Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	tr := &cancelOnStale{}
	pc.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	l := ledger.NewFromPool(pool)
	ctx := context.Background()
	p1, p2 := processor.PartitionRef{Topic: "events", Partition: 1}, processor.PartitionRef{Topic: "events", Partition: 2}
	fs, err := l.Own(ctx, processor.Ownership{Group: "g", Member: "r", Parts: []processor.PartitionRef{p1, p2}})
	if err != nil {
		t.Fatal(err)
	}
	f1, f2 := decide.Fence{Group: "g", Epoch: fs[0]}, decide.Fence{Group: "g", Epoch: fs[1]}
	a, b := intent("a", "A"), intent("b", "B")
	a.Fence, b.Partition, b.Fence = f1, 2, f2
	if v, err := l.Claim(ctx, []decide.Intent{a, b}); err != nil || v[0].Verdict != decide.VerdictNew || v[1].Verdict != decide.VerdictNew {
		t.Fatalf("claim: %v %v", v, err)
	}
	if _, err := l.Own(ctx, processor.Ownership{Group: "g", Member: "other", Parts: []processor.PartitionRef{p1}}); err != nil {
		t.Fatal(err)
	}
	started := []processor.Started{
		{WorkflowID: a.WorkflowID, RunID: "run-a", Generation: 1, Topic: "events", Partition: 1, Fence: f1},
		{WorkflowID: b.WorkflowID, RunID: "run-b", Generation: 1, Topic: "events", Partition: 2, Fence: f2},
	}
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tr.mu.Lock()
	tr.cancel = cancel
	tr.mu.Unlock()
	err = l.MarkStarted(mctx, started)
	if err == nil {
		t.Fatal("MarkStarted: no error, want the failed read's")
	}
	if _, fenced := processor.IsFenced(err); fenced {
		t.Fatalf("MarkStarted: %v, a *FencedError: the case did not happen", err)
	}
	var st string
	if err := base.Pool().QueryRow(ctx, `SELECT state FROM dedup_ledger WHERE workflow_id = $1`, b.WorkflowID).Scan(&st); err != nil || st != "started" {
		t.Fatalf("b's row %q (%v): the mark's write did not land, the case did not happen", st, err)
	}
	if started[0].Recorded || started[1].Recorded {
		t.Errorf("MarkStarted returned %v (not a *FencedError) with Recorded %v, %v; want false for all",
			err, started[0].Recorded, started[1].Recorded)
	}
}

// A router claiming (re-driving) pending rows while another marks the
// same rows dead-lettered: the claim locks them in key order (claimSQL's
// ORDER BY i.key), and MarkDeadLettered must lock them in that order too,
// or PostgreSQL aborts one of the two (40P01). MarkDeadLettered sorts its
// IDs by workflow ID and joins them with UPDATE ... FROM unnest, which, on
// an index-sized ledger, probes the key index row by row in that order.
// The blockers pace the two statements so that each takes its first row
// before the other takes its last; no blocker is in the cycle.
func TestClaimAndMarkDeadLetteredLockInOneOrder(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	fillLedger(t, l.Pool(), 20000)
	wf := func(n int) string { return intent(fmt.Sprintf("dl-%d", n), "p").WorkflowID }
	key := func(n int) string { return wantKey(wf(n)) }
	// X < Y by workflow ID, key(Y) < key(W) < key(X); W2 between X and Y
	// by workflow ID, not between them by key.
	var x, y, w, w2 = -1, -1, -1, -1
search:
	for a := 0; a < 200; a++ {
		for b := 0; b < 200; b++ {
			if wf(a) >= wf(b) || key(b) >= key(a) {
				continue
			}
			wi, w2i := -1, -1
			for c := 0; c < 400; c++ {
				if c == a || c == b {
					continue
				}
				if wi < 0 && key(b) < key(c) && key(c) < key(a) {
					wi = c
				} else if w2i < 0 && wf(a) < wf(c) && wf(c) < wf(b) && (key(b) >= key(c) || key(c) >= key(a)) {
					w2i = c
				}
			}
			if wi >= 0 && w2i >= 0 {
				x, y, w, w2 = a, b, wi, w2i
				break search
			}
		}
	}
	if x < 0 {
		t.Fatal("no IDs found")
	}
	in := func(n int) decide.Intent { return intent(fmt.Sprintf("dl-%d", n), "p") }
	want(t, claim(t, l, in(x), in(y), in(w), in(w2)), decide.VerdictNew, decide.VerdictNew, decide.VerdictNew, decide.VerdictNew)
	if _, err := l.Pool().Exec(ctx, `ANALYZE dedup_ledger`); err != nil {
		t.Fatal(err)
	}
	side := sidePool(t, l.Pool().Config().ConnString())
	lockRow := func(id string) pgx.Tx { return holdRows(t, side, "dedup_ledger", id) }
	t1, t2 := lockRow(wf(w)), lockRow(wf(w2))
	var wg sync.WaitGroup
	var claimErr, markErr error
	wg.Add(2)
	claimed := make(chan struct{})
	go func() { // router A re-drives Y, W, X (locks Y, waits for W)
		defer wg.Done()
		defer close(claimed)
		_, claimErr = l.Claim(ctx, []decide.Intent{in(x), in(y), in(w)})
	}()
	waitBlocked(t, side, "INSERT INTO dedup_ledger AS l")
	a := waiterOf(t, side, t1)
	go func() { // router B marks X, W2, Y dead-lettered (locks X, waits for W2)
		defer wg.Done()
		markErr = l.MarkDeadLettered(ctx, unfenced(wf(y), wf(x), wf(w2)))
	}()
	waitBlocked(t, side, "UPDATE dedup_ledger l SET state = 'dead_lettered'")
	_ = t1.Rollback(ctx) // A takes W, then waits for X (B's)
	// (B locking in key order, it holds no row A takes next: A ends.)
	waitMovedOn(t, side, a, "UPDATE dedup_ledger l SET state = 'dead_lettered'", claimed)
	_ = t2.Rollback(ctx) // B takes W2, then waits for Y (A's)
	wg.Wait()
	if claimErr != nil || markErr != nil {
		t.Fatalf("a claim and a dead-letter mark of the same rows by two routers: claim: %v; MarkDeadLettered: %v\n"+
			"(claim locks in key order: key(%s)=%s < key(%s)=%s; MarkDeadLettered in workflow ID order: %s < %s)",
			claimErr, markErr, wf(y), key(y), wf(x), key(x), wf(x), wf(y))
	}
}

// MarkDeadLettered with two IDs that share one key (a forced collision)
// and an ID named twice: a mark of the ID without a row leaves the owner's
// row pending; a mark naming the owner twice ends it, once.
func TestMarkDeadLetteredOfCollidingIDsMarksTheOwnersRowOnly(t *testing.T) {
	restore := ledger.SetKeyFunc(func(string) [16]byte { return [16]byte{0x80, 15: 1} })
	defer restore()
	l := open(t)
	ctx := context.Background()
	owner, other := intent("owner", "p"), intent("other", "p")
	want(t, claim(t, l, owner), decide.VerdictNew)
	want(t, claim(t, l, other), decide.VerdictConflict)
	state := func() string {
		var st string
		if err := l.Pool().QueryRow(ctx, `SELECT string_agg(workflow_id || '=' || state, ',') FROM dedup_ledger`).Scan(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	if err := l.MarkDeadLettered(ctx, unfenced(other.WorkflowID, other.WorkflowID)); err != nil {
		t.Fatal(err)
	}
	if got := state(); got != owner.WorkflowID+"=pending" {
		t.Fatalf("after marking the ID without a row: %s, want the owner's row pending", got)
	}
	if err := l.MarkDeadLettered(ctx, unfenced(other.WorkflowID, owner.WorkflowID, owner.WorkflowID)); err != nil {
		t.Fatal(err)
	}
	if got := state(); got != owner.WorkflowID+"=dead_lettered" {
		t.Fatalf("after marking the owner: %s, want its row dead_lettered", got)
	}
}

// A mark and a claim of the same rows on a small ledger (a new
// deployment, a test environment, a ledger just purged): there the
// planner joins the mark's input with a scan of the table, which hands the
// rows out in the order they lie in the heap, not in key order, whatever
// order the input was sorted in. Rows claimed in separate batches and
// moved by their updates lie in no particular key order, so a mark that
// locks them in heap order and a claim that locks them in key order
// deadlock (40P01), against the package doc ("lock ledger rows in key
// order ... do not deadlock"). P < M1 < Q by key; the heap holds Q, M2,
// P, M1. The claim takes P, M1, Q; the mark Q, M2, P; blockers on M1 and
// M2 pace them so that each holds one row the other waits for.
func TestClaimAndMarksLockInOneOrderOnASmallLedger(t *testing.T) {
	for _, m := range []struct {
		name, stmt string
		mark       func(l *ledger.Postgres, ids ...string) error
	}{
		{"MarkDeadLettered", "UPDATE dedup_ledger l SET state = 'dead_lettered'", func(l *ledger.Postgres, ids ...string) error {
			return l.MarkDeadLettered(context.Background(), unfenced(ids...))
		}},
		{"MarkStarted", "UPDATE dedup_ledger l SET state = 'started'", func(l *ledger.Postgres, ids ...string) error {
			st := make([]processor.Started, len(ids))
			for i, id := range ids {
				st[i] = processor.Started{WorkflowID: id, RunID: "r1", Generation: 1}
			}
			return l.MarkStarted(context.Background(), st)
		}},
	} {
		t.Run(m.name, func(t *testing.T) { claimAndMarkOnASmallLedger(t, m.stmt, m.mark) })
	}
}

func claimAndMarkOnASmallLedger(t *testing.T, stmt string, mark func(l *ledger.Postgres, ids ...string) error) {
	l := open(t)
	ctx := context.Background()
	in := func(n int) decide.Intent { return intent(fmt.Sprintf("small-%d", n), "p") }
	key := func(n int) string { return wantKey(in(n).WorkflowID) }
	p, m1, q, m2 := -1, -1, -1, -1
	for n := 0; n < 100 && q < 0; n++ {
		switch {
		case p < 0:
			p = n
		case m1 < 0 && key(n) > key(p):
			m1 = n
		case m1 >= 0 && key(n) > key(m1):
			q = n
		}
	}
	m2 = q + 1
	// The heap: Q, M2, P, M1 (one claim each, so one insert after another).
	for _, n := range []int{q, m2, p, m1} {
		want(t, claim(t, l, in(n)), decide.VerdictNew)
	}
	if _, err := l.Pool().Exec(ctx, `ANALYZE dedup_ledger`); err != nil {
		t.Fatal(err)
	}
	var heap []string
	rows, err := l.Pool().Query(ctx, `SELECT workflow_id FROM dedup_ledger ORDER BY ctid`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		heap = append(heap, id)
	}
	side := sidePool(t, l.Pool().Config().ConnString())
	lockRow := func(id string) pgx.Tx { return holdRows(t, side, "dedup_ledger", id) }
	t1, t2 := lockRow(in(m1).WorkflowID), lockRow(in(m2).WorkflowID)
	var wg sync.WaitGroup
	var claimErr, markErr error
	wg.Add(2)
	claimed := make(chan struct{})
	go func() { // re-drives P, M1, Q in key order: takes P, waits for M1
		defer wg.Done()
		defer close(claimed)
		_, claimErr = l.Claim(ctx, []decide.Intent{in(q), in(m1), in(p)})
	}()
	waitBlocked(t, side, "INSERT INTO dedup_ledger AS l")
	claimer := waiterOf(t, side, t1)
	go func() { // marks P, M2, Q: in heap order takes Q, waits for M2
		defer wg.Done()
		markErr = mark(l, in(p).WorkflowID, in(m2).WorkflowID, in(q).WorkflowID)
	}()
	waitBlocked(t, side, stmt)
	_ = t1.Rollback(ctx) // the claim takes M1, then waits for Q
	// (The mark locking in key order, it holds no row the claim takes
	// next: the claim ends.)
	waitMovedOn(t, side, claimer, stmt, claimed)
	_ = t2.Rollback(ctx) // the mark takes M2, then waits for P
	wg.Wait()
	if claimErr != nil || markErr != nil {
		t.Fatalf("a claim and a mark of the same rows by two routers on a small ledger: claim: %v; mark: %v\n"+
			"(keys: P %s < M1 %s < Q %s; heap order %v)", claimErr, markErr, key(p), key(m1), key(q), heap)
	}
}

// MarkStarted decides Recorded from its rows as it locks them (lk, at
// their latest committed version), not from its snapshot: here every row
// of a mark is moved by another transaction after the mark's snapshot and
// before its lock (the mark waits for them). A row another router started
// at a newer generation is Recorded (and not moved back); one
// dead-lettered or deleted (the purge) meanwhile is not, and stays so; a
// re-run's entry beside an older one of the same row moves it once, to
// the newer generation.
func TestMarkStartedRecordsOnlyRowsStartedAtItsGenerationWhenRowsMoveBeforeItsLock(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	in := func(s string) decide.Intent { return intent("epq-"+s, "p") }
	for _, s := range []string{"a", "b", "c", "d", "e"} {
		want(t, claim(t, l, in(s)), decide.VerdictNew)
	}
	side := sidePool(t, l.Pool().Config().ConnString())
	movers := sidePool(t, l.Pool().Config().ConnString()) // (a pool of 4: side must keep one free)
	move := func(s, sql string) pgx.Tx {
		tx := held(t, movers, pgx.TxOptions{})
		if _, err := tx.Exec(ctx, sql, in(s).WorkflowID); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	txs := []pgx.Tx{
		move("a", `UPDATE dedup_ledger SET state = 'started', run_id = 'other-2', generation = 2, started_at = now() WHERE workflow_id = $1`),
		move("b", `UPDATE dedup_ledger SET state = 'dead_lettered', updated_at = now() WHERE workflow_id = $1`),
		move("c", `DELETE FROM dedup_ledger WHERE workflow_id = $1`),
		move("e", `UPDATE dedup_ledger SET state = 'started', run_id = 'other-3', generation = 3, started_at = now() WHERE workflow_id = $1`),
	}
	started := []processor.Started{
		{WorkflowID: in("a").WorkflowID, RunID: "a-1", Generation: 1},
		{WorkflowID: in("a").WorkflowID, RunID: "a-3", Generation: 3},
		{WorkflowID: in("b").WorkflowID, RunID: "b-1", Generation: 1},
		{WorkflowID: in("c").WorkflowID, RunID: "c-1", Generation: 1},
		{WorkflowID: in("d").WorkflowID, RunID: "d-1", Generation: 1},
		{WorkflowID: in("e").WorkflowID, RunID: "e-2", Generation: 2},
	}
	done := make(chan error, 1)
	go func() { done <- l.MarkStarted(ctx, started) }()
	waitBlocked(t, side, "lk AS MATERIALIZED")
	for _, tx := range txs {
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("MarkStarted: %v", err)
		}
	case <-time.After(lockWaitPatience):
		t.Fatal("MarkStarted still waits")
	}
	wantRecorded := []bool{true, true, false, false, true, true}
	for i, s := range started {
		if s.Recorded != wantRecorded[i] {
			t.Errorf("entry %s generation %d: Recorded %v, want %v", s.WorkflowID, s.Generation, s.Recorded, wantRecorded[i])
		}
	}
	for s, w := range map[string]string{"a": "started a-3 3", "b": "dead_lettered  1", "c": "", "d": "started d-1 1", "e": "started other-3 3"} {
		var got string
		err := side.QueryRow(ctx, `SELECT state || ' ' || coalesce(run_id, '') || ' ' || generation FROM dedup_ledger WHERE workflow_id = $1`, in(s).WorkflowID).Scan(&got)
		if err == pgx.ErrNoRows {
			err = nil
		}
		if err != nil {
			t.Fatal(err)
		}
		if got != w {
			t.Errorf("row %s after the mark: %q, want %q", s, got, w)
		}
	}
}

// Two routers' marks of overlapping rows on a small ledger, each given its
// rows in an order of its own: both lock in key order (lockInKeyOrder),
// whatever the heap's order and the batch's, so neither fails with a
// deadlock (40P01). As in TestClaimAndMarksLockInOneOrderOnASmallLedger,
// P < M1 < Q by key and the heap holds Q, M2, P, M1; the first mark names
// Q, M1, P, the second P, M2, Q (reversed), and blockers on M1 and M2 pace
// them so that each would hold one row the other waits for were either to
// lock in the heap's or the batch's order.
func TestTwoMarksOfOverlappingRowsLockInOneOrderOnASmallLedger(t *testing.T) {
	started := func(gen int) func(l *ledger.Postgres, ids ...string) error {
		return func(l *ledger.Postgres, ids ...string) error {
			st := make([]processor.Started, len(ids))
			for i, id := range ids {
				st[i] = processor.Started{WorkflowID: id, RunID: fmt.Sprintf("r%d", gen), Generation: gen}
			}
			return l.MarkStarted(context.Background(), st)
		}
	}
	deadLettered := func(l *ledger.Postgres, ids ...string) error {
		return l.MarkDeadLettered(context.Background(), unfenced(ids...))
	}
	for _, c := range []struct {
		name          string
		first, second func(l *ledger.Postgres, ids ...string) error
	}{
		{"MarkStarted and MarkStarted of a re-run", started(1), started(2)},
		{"MarkStarted and MarkDeadLettered", started(1), deadLettered},
		{"MarkDeadLettered and MarkStarted", deadLettered, started(1)},
		{"MarkDeadLettered and MarkDeadLettered", deadLettered, deadLettered},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := open(t)
			ctx := context.Background()
			in := func(n int) decide.Intent { return intent(fmt.Sprintf("small-%d", n), "p") }
			key := func(n int) string { return wantKey(in(n).WorkflowID) }
			p, m1, q := -1, -1, -1
			for n := 0; n < 100 && q < 0; n++ {
				switch {
				case p < 0:
					p = n
				case m1 < 0 && key(n) > key(p):
					m1 = n
				case m1 >= 0 && key(n) > key(m1):
					q = n
				}
			}
			m2 := q + 1
			for _, n := range []int{q, m2, p, m1} {
				want(t, claim(t, l, in(n)), decide.VerdictNew)
			}
			if _, err := l.Pool().Exec(ctx, `ANALYZE dedup_ledger`); err != nil {
				t.Fatal(err)
			}
			side := sidePool(t, l.Pool().Config().ConnString())
			waiting := func(n int) {
				t.Helper()
				for end := time.Now().Add(lockWaitPatience); ; time.Sleep(10 * time.Millisecond) {
					var got int
					if err := side.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%UPDATE dedup_ledger l SET state%'`).Scan(&got); err != nil {
						t.Fatal(err)
					}
					if got >= n {
						return
					}
					if time.Now().After(end) {
						t.Fatalf("%d marks wait for a lock, want %d:\n%s", got, n, sessions(side))
					}
				}
			}
			lockRow := func(id string) pgx.Tx { return holdRows(t, side, "dedup_ledger", id) }
			t1, t2 := lockRow(in(m1).WorkflowID), lockRow(in(m2).WorkflowID)
			var wg sync.WaitGroup
			var firstErr, secondErr error
			wg.Add(2)
			firstDone := make(chan struct{})
			go func() { // takes Q (in the batch's order) or P (in key order), waits for M1
				defer wg.Done()
				defer close(firstDone)
				firstErr = c.first(l, in(q).WorkflowID, in(m1).WorkflowID, in(p).WorkflowID)
			}()
			waiting(1)
			first := waiterOf(t, side, t1)
			go func() { // in the batch's order takes P, waits for M2
				defer wg.Done()
				secondErr = c.second(l, in(p).WorkflowID, in(m2).WorkflowID, in(q).WorkflowID)
			}()
			waiting(2)
			_ = t1.Rollback(ctx) // the first takes M1, then waits for P (the second's)
			// (Both locking in key order, the second waits for the
			// first's P, or for M2 holding nothing: the first ends.)
			waitMovedOn(t, side, first, "UPDATE dedup_ledger l SET state", firstDone)
			_ = t2.Rollback(ctx) // the second takes M2, then waits for Q (the first's)
			wg.Wait()
			if firstErr != nil || secondErr != nil {
				t.Fatalf("two marks of overlapping rows by two routers on a small ledger: first: %v; second: %v\n(keys: P %s < M1 %s < Q %s)",
					firstErr, secondErr, key(p), key(m1), key(q))
			}
		})
	}
}

// adversary 33: fenced marks on partitions at the int4 range's ends and a
// topic whose text needs quoting in an array literal, with run IDs that
// are empty or look like NULL, a re-run's generation 2 and then a slow
// router's generation 1: every mark is Recorded, each row holds the
// newest generation's run ID, and a fence that no longer holds (an epoch
// at the int8 range's end) marks nothing.
func TestFencedMarksAtTheTypesEndsLandAsSent(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	topic := `a"b\c{,} NULL`
	parts := []processor.PartitionRef{{Topic: topic, Partition: 1<<31 - 1}, {Topic: topic, Partition: -1 << 31}}
	epochs, err := l.Own(ctx, processor.Ownership{Group: "g", Member: "m", Generation: 1, Parts: parts})
	if err != nil || len(epochs) != 2 {
		t.Fatalf("Own: %v %v", epochs, err)
	}
	runs := []string{"", "NULL", `"`, "r,{x}"}
	var in []decide.Intent
	for i := range 8 {
		x := intent(fmt.Sprintf("f%d", i), "p")
		x.Topic, x.Partition, x.Fence = topic, parts[i%2].Partition, decide.Fence{Group: "g", Epoch: epochs[i%2]}
		in = append(in, x)
	}
	want(t, claim(t, l, in...), decide.VerdictNew, decide.VerdictNew, decide.VerdictNew, decide.VerdictNew,
		decide.VerdictNew, decide.VerdictNew, decide.VerdictNew, decide.VerdictNew)
	mark := func(gen int, run func(i int) string, epoch func(i int) int64) []processor.Started {
		var st []processor.Started
		for i, x := range in {
			st = append(st, processor.Started{WorkflowID: x.WorkflowID, RunID: run(i), Generation: gen,
				Topic: topic, Partition: x.Partition, Fence: decide.Fence{Group: "g", Epoch: epoch(i)}})
		}
		return st
	}
	own := func(i int) int64 { return epochs[i%2] }
	for _, st := range [][]processor.Started{
		mark(1, func(i int) string { return runs[i%4] }, own),
		mark(2, func(i int) string { return "2" + runs[i%4] }, own),
		mark(1, func(i int) string { return "late" }, own),
	} {
		if err := l.MarkStarted(ctx, st); err != nil {
			t.Fatal(err)
		}
		for i, s := range st {
			if !s.Recorded {
				t.Fatalf("generation %d mark %d not recorded", s.Generation, i)
			}
		}
	}
	stale := mark(3, func(i int) string { return "stale" }, func(i int) int64 { return []int64{1<<63 - 1, -1 << 63}[i%2] })
	if err := l.MarkStarted(ctx, stale); err == nil {
		t.Fatal("marks under stale fences: no error")
	}
	for i, x := range in {
		var run string
		var gen int
		if err := l.Pool().QueryRow(ctx, `SELECT run_id, generation FROM dedup_ledger WHERE workflow_id = $1 AND state = 'started'`, x.WorkflowID).Scan(&run, &gen); err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		if run != "2"+runs[i%4] || gen != 2 {
			t.Fatalf("row %d: run %q generation %d, want %q, 2", i, run, gen, "2"+runs[i%4])
		}
	}
}

// A session that lost the mark's statement (DISCARD ALL between two marks
// on it) answers SQLSTATE 26000 before the statement runs: the mark
// prepares it again and runs it once (arrays.go), and its answer is the
// run's: every entry Recorded, each row started at its generation.
func TestAMarkAfterDiscardAllOnItsSessionRecordsItsRows(t *testing.T) {
	l, pool, url := onePooled(t)
	side := sidePool(t, url)
	ctx := deadline(t, time.Minute)
	a, b := intent("discard-mark-a", "p"), intent("discard-mark-b", "p")
	want(t, claim(t, l, a, b), decide.VerdictNew, decide.VerdictNew)
	if err := l.MarkStarted(ctx, []processor.Started{{WorkflowID: a.WorkflowID, RunID: "ra", Generation: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `DISCARD ALL`); err != nil {
		t.Fatal(err)
	}
	st := []processor.Started{{WorkflowID: a.WorkflowID, RunID: "ra2", Generation: 2}, {WorkflowID: b.WorkflowID, RunID: "rb", Generation: 1}}
	if err := l.MarkStarted(ctx, st); err != nil {
		t.Fatalf("the mark after DISCARD ALL on its session: %v (permanent: %v)", err, processor.IsPermanent(err))
	}
	for _, s := range st {
		if !s.Recorded {
			t.Errorf("%s not Recorded after the mark", s.WorkflowID)
		}
		var gen int
		var state, run string
		if err := side.QueryRow(ctx, `SELECT generation, state, run_id FROM dedup_ledger WHERE workflow_id = $1`, s.WorkflowID).Scan(&gen, &state, &run); err != nil {
			t.Fatal(err)
		}
		if gen != s.Generation || state != "started" || run != s.RunID {
			t.Errorf("%s: generation %d, %s, run %s; want %d, started, %s", s.WorkflowID, gen, state, run, s.Generation, s.RunID)
		}
	}
}

// A mark cancelled while its statement waits on the server (for a row
// another transaction holds) returns context.Canceled, says no entry
// Recorded, and leaves no session in the middle of its answer: once the
// row is let go, the next mark on the pool's one session answers, every
// entry Recorded.
func TestAMarkCancelledWhileItWaitsForARowLeavesThePoolServing(t *testing.T) {
	l, pool, url := onePooled(t)
	a, b := intent("cancelled-mark-a", "p"), intent("cancelled-mark-b", "p")
	want(t, claim(t, l, a, b), decide.VerdictNew, decide.VerdictNew)
	side := sidePool(t, url)
	tx := holdRows(t, side, "dedup_ledger", b.WorkflowID)
	st := []processor.Started{{WorkflowID: a.WorkflowID, RunID: "ra", Generation: 1}, {WorkflowID: b.WorkflowID, RunID: "rb", Generation: 1}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.MarkStarted(ctx, st) }()
	waitBlockedHere(t, side, "RETURNING l.workflow_id, l.generation")
	cancel()
	err := within(t, done, 10*time.Second, "the cancelled mark")
	if !errors.Is(err, context.Canceled) || processor.IsPermanent(err) {
		t.Fatalf("the mark cancelled while it waited: %v (permanent: %v), want context.Canceled", err, processor.IsPermanent(err))
	}
	if st[0].Recorded || st[1].Recorded {
		t.Fatalf("the cancelled mark says Recorded %v, %v; want false for all", st[0].Recorded, st[1].Recorded)
	}
	if err := tx.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(5 * time.Second); pool.Stat().AcquiredConns() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d sessions still acquired 5s after the cancelled mark returned", pool.Stat().AcquiredConns())
		}
	}
	st = []processor.Started{{WorkflowID: a.WorkflowID, RunID: "ra", Generation: 1}, {WorkflowID: b.WorkflowID, RunID: "rb", Generation: 1}}
	if err := l.MarkStarted(deadline(t, time.Minute), st); err != nil {
		t.Fatalf("the mark after the cancelled one: %v", err)
	}
	if !st[0].Recorded || !st[1].Recorded {
		t.Fatalf("the mark after the cancelled one: Recorded %v, %v; want true for all", st[0].Recorded, st[1].Recorded)
	}
}

// In CacheDescribe pgx's own Query forgets a statement's description on
// its session when a run of it fails and describes it again on the next
// run: a pool's tracer hears a prepare of the mark's statement once more
// after a mark that failed (its lock_timeout, on a row another
// transaction holds), as pgx's Query told it.
func TestAPoolsTracerHearsTheMarkDescribedAgainAfterAFailedMarkInCacheDescribe(t *testing.T) {
	ctx := deadline(t, time.Minute)
	pool, log := describingSession(t, ctx)
	url := pool.Config().ConnString()
	l := ledger.NewFromPool(pool)
	const markSQL = "UPDATE dedup_ledger l SET state = 'started'"
	a, b := intent("remark-a", "p"), intent("remark-b", "p")
	want(t, claim(t, l, a, b), decide.VerdictNew, decide.VerdictNew)
	if err := l.MarkStarted(ctx, []processor.Started{{WorkflowID: a.WorkflowID, RunID: "r", Generation: 1}}); err != nil {
		t.Fatal(err)
	}
	if n := log.takeSQL(markSQL); n != 1 {
		t.Fatalf("the first mark: %d describes of its statement, want 1", n)
	}
	other, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Close(context.Background()) }()
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT FROM dedup_ledger WHERE workflow_id = $1 FOR UPDATE`, b.WorkflowID); err != nil {
		t.Fatal(err)
	}
	if err := l.MarkStarted(ctx, []processor.Started{{WorkflowID: b.WorkflowID, RunID: "r", Generation: 1}}); err == nil {
		t.Fatal("a mark of a row another transaction holds succeeded within lock_timeout")
	} else if !ledger.Transient(err) {
		t.Fatalf("the mark's lock_timeout: %v, want a transient error", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	log.takeSQL(markSQL)
	st := []processor.Started{{WorkflowID: b.WorkflowID, RunID: "r", Generation: 1}}
	if err := l.MarkStarted(ctx, st); err != nil || !st[0].Recorded {
		t.Fatalf("the mark after the lock went: %v, Recorded %v", err, st[0].Recorded)
	}
	if n := log.takeSQL(markSQL); n != 1 {
		t.Errorf("the mark after a failed one on the same session: the tracer heard %d describes of its statement, want 1 (pgx's Query forgot the description when the run failed)", n)
	}
}
