// Package ledgertest is the contract of processor.Ledger as one test
// suite, in the manner of Watermill's pubsub/tests: Run takes a
// constructor and runs every case against a fresh ledger from it. Every
// implementation runs it, sink/ledger's PostgreSQL ledger (the reference)
// and the router tests' in-memory fake, so that the fake the router's
// tests rely on cannot drift from the ledger the router meets in
// production.
//
// The suite drives a ledger through the interface (Claim, MarkStarted,
// MarkDeadLettered) and checks what it answers (verdicts and
// generations), and what it holds after each step (a row's state and
// recorded run, through Subject.Row): a mark that must change nothing is
// checked both ways.
//
// It is imported by tests only: it is not linked into any binary.
package ledgertest

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"testing"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
)

// Subject is one ledger under test.
type Subject struct {
	Ledger processor.Ledger
	// Row reads what the ledger holds for a workflow ID: the row's state
	// and recorded run ("" before it is started, or when the start did not
	// say); ok is false when the ledger holds no row.
	Row func(ctx context.Context, workflowID string) (state decide.LedgerState, runID string, ok bool, err error)
}

// Run runs the contract against ledgers from newSubject, a fresh, empty
// one per case (cleaned up by the t it is given).
func Run(t *testing.T, newSubject func(t *testing.T) Subject) {
	cases := []struct {
		name string
		test func(*testing.T, Subject)
	}{
		{"NewThenRedriveWhilePending", testNewThenRedrive},
		{"CopiesInOneBatchShareTheVerdict", testCopiesInOneBatch},
		{"Conflicts", testConflicts},
		{"DuplicateOnceStarted", testDuplicateOnceStarted},
		{"ReclaimOfDeadLettered", testReclaimOfDeadLettered},
		{"GenerationsAndTheMarkGuard", testGenerations},
		{"RecordedSaysWhichRowsAMarkLeftStarted", testRecorded},
		{"MarkDeadLetteredOnlyPending", testMarkDeadLetteredOnlyPending},
		{"ConcurrentClaimsGiveOneNew", testConcurrentClaims},
		{"CancelledContext", testCancelledContext},
		{"AStaleOwnerChangesNoRow", testStaleOwnerChangesNoRow},
		{"AFencedClaimWritesNothingOfItsBatch", testFencedClaimWritesNothing},
		{"AFencedMarkWritesTheOtherPartitions", testFencedMarkWritesTheOthers},
		{"AnOlderGenerationTakesNothing", testOlderGenerationTakesNothing},
		{"RecordedIsPerEntryUnderAStaleFenceBesideAHeldOneOfTheSameID", testRecordedPerEntryUnderAStaleFence},
		{"RecordedIsPerEntryForTwoGenerationsOfTheSameID", testRecordedPerEntryForTwoGenerations},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.test(t, newSubject(t)) })
	}
}

// intent is an intent of workflow ID "activity-a:"+id with the given
// payload: copies of one event share id and payload; another payload
// under the same id is a conflicting copy.
func intent(id, payload string) decide.Intent {
	return decide.Intent{
		WorkflowID: "activity-a:" + id, ActivityID: "a", EventID: id, IDRule: "field",
		PayloadHash: sha256.Sum256([]byte(payload)), Topic: "events", Partition: 1, Offset: 7,
	}
}

// The verdicts as the suite writes them.
var (
	none = decide.Claimed{}
	new1 = decide.Claimed{Verdict: decide.VerdictNew, Generation: 1}
	conf = decide.Claimed{Verdict: decide.VerdictConflict}
)

func redrive(gen int) decide.Claimed {
	return decide.Claimed{Verdict: decide.VerdictRedrive, Generation: gen}
}

func dup(gen int) decide.Claimed {
	return decide.Claimed{Verdict: decide.VerdictDuplicate, Generation: gen}
}

// claim claims the intents and checks the answer against want, one per
// intent.
func claim(t *testing.T, l Subject, in []decide.Intent, want ...decide.Claimed) {
	t.Helper()
	got, err := l.Ledger.Claim(context.Background(), in)
	if err != nil {
		t.Fatalf("claiming %d intents: %v", len(in), err)
	}
	if len(got) != len(in) {
		t.Fatalf("claiming %d intents: %d verdicts", len(in), len(got))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("claiming %s: verdicts %s, want %s", ids(in), show(got), show(want))
	}
}

func batch(in ...decide.Intent) []decide.Intent { return in }

func ids(in []decide.Intent) string {
	s := ""
	for i, x := range in {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%s(%x)", x.EventID, x.PayloadHash[:2])
	}
	return "[" + s + "]"
}

func show(cs []decide.Claimed) string {
	s := ""
	for i, c := range cs {
		if i > 0 {
			s += " "
		}
		if c == none {
			s += "none"
			continue
		}
		s += fmt.Sprintf("%s/%d", c.Verdict, c.Generation)
	}
	return "[" + s + "]"
}

func markStarted(t *testing.T, l Subject, in decide.Intent, run string, gen int) {
	t.Helper()
	if err := l.Ledger.MarkStarted(context.Background(), []processor.Started{{WorkflowID: in.WorkflowID, RunID: run, Generation: gen}}); err != nil {
		t.Fatalf("marking %s started (generation %d): %v", in.WorkflowID, gen, err)
	}
}

// holds checks the row of in's workflow ID: its state and recorded run;
// state "" means no row.
func holds(t *testing.T, l Subject, in decide.Intent, state decide.LedgerState, run string) {
	t.Helper()
	got, gotRun, ok, err := l.Row(context.Background(), in.WorkflowID)
	if err != nil {
		t.Fatalf("reading the row of %s: %v", in.WorkflowID, err)
	}
	if !ok {
		got, gotRun = "", ""
	}
	if got != state || gotRun != run {
		t.Fatalf("row of %s: %q, run %q; want %q, run %q", in.WorkflowID, got, gotRun, state, run)
	}
}

func markDeadLettered(t *testing.T, l Subject, in decide.Intent) {
	t.Helper()
	if err := l.Ledger.MarkDeadLettered(context.Background(), []processor.DeadLettered{{WorkflowID: in.WorkflowID}}); err != nil {
		t.Fatalf("marking %s dead-lettered: %v", in.WorkflowID, err)
	}
}

// A first claim is new (generation 1); while the row is pending (a crash
// between claim and start, or a start in flight), every claim re-drives
// it. Empty batches and marks are no-ops.
func testNewThenRedrive(t *testing.T, l Subject) {
	ctx := context.Background()
	if got, err := l.Ledger.Claim(ctx, nil); err != nil || len(got) != 0 {
		t.Fatalf("empty claim: %v %v", got, err)
	}
	if err := l.Ledger.MarkStarted(ctx, nil); err != nil {
		t.Fatalf("empty MarkStarted: %v", err)
	}
	if err := l.Ledger.MarkDeadLettered(ctx, nil); err != nil {
		t.Fatalf("empty MarkDeadLettered: %v", err)
	}
	a := intent("a", "A")
	holds(t, l, a, "", "")
	claim(t, l, batch(a), new1)
	holds(t, l, a, decide.LedgerPending, "")
	claim(t, l, batch(a), redrive(1))
	claim(t, l, batch(a), redrive(1))
	holds(t, l, a, decide.LedgerPending, "")
}

// Every copy of a workflow ID in one batch gets the row's verdict,
// wherever it stands: all new when the batch claims the ID (the router,
// not the ledger, picks the one that starts), all re-drives while it is
// pending.
func testCopiesInOneBatch(t *testing.T, l Subject) {
	a, b := intent("a", "A"), intent("b", "B")
	claim(t, l, batch(a, b, a, a), new1, new1, new1, new1)
	claim(t, l, batch(a, a, b), redrive(1), redrive(1), redrive(1))
}

// A copy with another payload than the row's is a conflict, whatever the
// row's state and wherever the copy stands in the batch; it never takes
// the row, never re-drives it, never starts it. An unknown ID is claimed
// with the payload of its first copy in the batch.
func testConflicts(t *testing.T, l Subject) {
	a, a2 := intent("a", "A"), intent("a", "other")
	claim(t, l, batch(a), new1)
	claim(t, l, batch(a2), conf)
	claim(t, l, batch(a2), conf)
	holds(t, l, a, decide.LedgerPending, "")
	claim(t, l, batch(a), redrive(1))
	// Before the original in the batch (else the event is lost: the original
	// must still re-drive).
	claim(t, l, batch(a2, a, a2), conf, redrive(1), conf)
	markStarted(t, l, a, "run-a", 1)
	claim(t, l, batch(a2, a), conf, dup(1))
	holds(t, l, a, decide.LedgerStarted, "run-a")
	// A new ID: the first copy's payload claims it.
	n1, n2 := intent("n", "1"), intent("n", "2")
	claim(t, l, batch(n2, n1, n2), new1, conf, new1)
	claim(t, l, batch(n1, n2), conf, redrive(1))
}

// Once started, every copy is a duplicate carrying the recorded run's
// generation; claims never move a started row.
func testDuplicateOnceStarted(t *testing.T, l Subject) {
	a, b := intent("a", "A"), intent("b", "B")
	claim(t, l, batch(a, b), new1, new1)
	markStarted(t, l, a, "run-a", 1)
	holds(t, l, a, decide.LedgerStarted, "run-a")
	claim(t, l, batch(a, b, a), dup(1), redrive(1), dup(1))
	claim(t, l, batch(a), dup(1))
	holds(t, l, a, decide.LedgerStarted, "run-a")
	holds(t, l, b, decide.LedgerPending, "")
	// A mark of a started row's own generation again (a redelivered
	// start's) changes nothing.
	markStarted(t, l, a, "run-a2", 1)
	claim(t, l, batch(a), dup(1))
	holds(t, l, a, decide.LedgerStarted, "run-a")
}

// A dead_lettered row (Temporal refused its start for good) is not
// started by MarkStarted; a claim with its payload (the record replayed)
// claims it again as pending, re-driven, even behind a conflicting copy
// in the batch; a conflicting copy does not.
func testReclaimOfDeadLettered(t *testing.T, l Subject) {
	a := intent("a", "A")
	claim(t, l, batch(a), new1)
	markDeadLettered(t, l, a)
	holds(t, l, a, decide.LedgerDeadLettered, "")
	markStarted(t, l, a, "run-a", 1) // not pending: no effect
	holds(t, l, a, decide.LedgerDeadLettered, "")
	claim(t, l, batch(a, a), redrive(1), redrive(1))
	holds(t, l, a, decide.LedgerPending, "")
	markStarted(t, l, a, "run-a", 1) // pending again: started
	claim(t, l, batch(a), dup(1))
	holds(t, l, a, decide.LedgerStarted, "run-a")

	c, c2 := intent("c", "C"), intent("c", "other")
	claim(t, l, batch(c), new1)
	markDeadLettered(t, l, c)
	claim(t, l, batch(c2), conf)
	holds(t, l, c, decide.LedgerDeadLettered, "")
	markStarted(t, l, c, "run-c", 1) // still dead_lettered: no effect
	claim(t, l, batch(c2, c, c), conf, redrive(1), redrive(1))
	holds(t, l, c, decide.LedgerPending, "")
	markStarted(t, l, c, "run-c", 1)
	claim(t, l, batch(c), dup(1))
	holds(t, l, c, decide.LedgerStarted, "run-c")
}

// MarkStarted moves a started row to a newer generation's run (a re-run
// under an allow_* policy) and never back: a late mark of an older
// generation changes nothing. A duplicate carries the recorded
// generation. A mark of an ID the ledger does not hold creates nothing.
func testGenerations(t *testing.T, l Subject) {
	a := intent("a", "A")
	claim(t, l, batch(a), new1)
	markStarted(t, l, a, "run-1", 1)
	claim(t, l, batch(a), dup(1))
	markStarted(t, l, a, "run-3", 3)
	claim(t, l, batch(a), dup(3))
	holds(t, l, a, decide.LedgerStarted, "run-3")
	markStarted(t, l, a, "run-2", 2) // late: an older generation's mark
	claim(t, l, batch(a), dup(3))
	markStarted(t, l, a, "run-3b", 3)
	claim(t, l, batch(a), dup(3))
	holds(t, l, a, decide.LedgerStarted, "run-3")

	x := intent("x", "X")
	markStarted(t, l, x, "run-x", 1)
	holds(t, l, x, "", "")
	claim(t, l, batch(x), new1)
}

// A mark sets each entry's Recorded: true where the row is started at the
// entry's generation or a newer one after it (it moved the row, pending to
// started or to a re-run's generation, or found it so: a mark sent again
// after a lost answer, a late one), false where the row is dead_lettered
// or absent, whatever Recorded said before.
func testRecorded(t *testing.T, l Subject) {
	ctx := context.Background()
	a, b, x := intent("a", "A"), intent("b", "B"), intent("x", "X")
	claim(t, l, batch(a, b), new1, new1)
	markDeadLettered(t, l, b)
	mark := func(want []bool, started ...processor.Started) {
		t.Helper()
		if err := l.Ledger.MarkStarted(ctx, started); err != nil {
			t.Fatalf("MarkStarted: %v", err)
		}
		for i, s := range started {
			if s.Recorded != want[i] {
				t.Errorf("mark of %s (generation %d): Recorded %v, want %v", s.WorkflowID, s.Generation, s.Recorded, want[i])
			}
		}
	}
	// a pending: moved; b dead_lettered, x absent: not, though the caller
	// set Recorded.
	mark([]bool{true, false, false},
		processor.Started{WorkflowID: a.WorkflowID, RunID: "run-1", Generation: 1},
		processor.Started{WorkflowID: b.WorkflowID, RunID: "run-b", Generation: 1, Recorded: true},
		processor.Started{WorkflowID: x.WorkflowID, RunID: "run-x", Generation: 1, Recorded: true})
	mark([]bool{true}, processor.Started{WorkflowID: a.WorkflowID, RunID: "run-1", Generation: 1}) // again: found so
	mark([]bool{true}, processor.Started{WorkflowID: a.WorkflowID, RunID: "run-2", Generation: 2}) // a re-run
	mark([]bool{true}, processor.Started{WorkflowID: a.WorkflowID, RunID: "run-1", Generation: 1}) // late: a newer one
	mark([]bool{false}, processor.Started{WorkflowID: b.WorkflowID, RunID: "run-b", Generation: 1})
	holds(t, l, a, decide.LedgerStarted, "run-2")
	holds(t, l, b, decide.LedgerDeadLettered, "")
	holds(t, l, x, "", "")
}

// Recorded is per entry, not per workflow ID: in one mark of two
// entries of one ID at generations 2 and 3 (the row started at 1), an
// entry says Recorded only if the row ends started at its generation or a
// newer one.
func testRecordedPerEntryForTwoGenerations(t *testing.T, l Subject) {
	ctx := context.Background()
	for _, order := range [][2]int{{2, 3}, {3, 2}} {
		a := intent(fmt.Sprintf("gens-%d-%d", order[0], order[1]), "A")
		claim(t, l, batch(a), new1)
		markStarted(t, l, a, "run-1", 1)
		started := []processor.Started{
			{WorkflowID: a.WorkflowID, RunID: fmt.Sprintf("run-%d", order[0]), Generation: order[0]},
			{WorkflowID: a.WorkflowID, RunID: fmt.Sprintf("run-%d", order[1]), Generation: order[1]},
		}
		if err := l.Ledger.MarkStarted(ctx, started); err != nil {
			t.Fatalf("MarkStarted: %v", err)
		}
		vs, err := l.Ledger.Claim(ctx, batch(a))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range started {
			if s.Recorded && vs[0].Generation < s.Generation {
				t.Errorf("generations %v: the entry of generation %d says Recorded, but the row is started at generation %d",
					order, s.Generation, vs[0].Generation)
			}
		}
	}
}

// MarkDeadLettered ends pending rows only: a started row stays started,
// an unknown ID stays unknown, and marking twice is marking once.
func testMarkDeadLetteredOnlyPending(t *testing.T, l Subject) {
	a, b, x := intent("a", "A"), intent("b", "B"), intent("x", "X")
	claim(t, l, batch(a, b), new1, new1)
	markStarted(t, l, a, "run-a", 1)
	markDeadLettered(t, l, a)
	holds(t, l, a, decide.LedgerStarted, "run-a")
	claim(t, l, batch(a), dup(1))

	markDeadLettered(t, l, b)
	markDeadLettered(t, l, b)
	holds(t, l, b, decide.LedgerDeadLettered, "")
	markStarted(t, l, b, "run-b", 1) // dead_lettered: no effect
	claim(t, l, batch(b), redrive(1))

	markDeadLettered(t, l, x)
	holds(t, l, x, "", "")
	claim(t, l, batch(x), new1)
}

// Claims of the same IDs at once, in opposite orders (two routers reading
// copies of the same events): every ID gets exactly one new verdict, the
// other claim a re-drive, and neither fails (no deadlock).
func testConcurrentClaims(t *testing.T, l Subject) {
	const rounds, n = 5, 200
	for r := range rounds {
		a, b := make([]decide.Intent, n), make([]decide.Intent, n)
		for i := range a {
			a[i] = intent(fmt.Sprintf("r%d-e%d", r, i), "same")
			b[n-1-i] = a[i]
		}
		var wg sync.WaitGroup
		var va, vb []decide.Claimed
		var ea, eb error
		wg.Add(2)
		go func() { defer wg.Done(); va, ea = l.Ledger.Claim(context.Background(), a) }()
		go func() { defer wg.Done(); vb, eb = l.Ledger.Claim(context.Background(), b) }()
		wg.Wait()
		if ea != nil || eb != nil {
			t.Fatalf("round %d: %v / %v", r, ea, eb)
		}
		if len(va) != n || len(vb) != n {
			t.Fatalf("round %d: %d and %d verdicts for %d intents", r, len(va), len(vb), n)
		}
		for i := range a {
			x, y := va[i], vb[n-1-i]
			if (x != new1 || y != redrive(1)) && (x != redrive(1) || y != new1) {
				t.Fatalf("round %d, %s: %s and %s, want one new and one re-drive", r, a[i].WorkflowID, show([]decide.Claimed{x}), show([]decide.Claimed{y}))
			}
		}
	}
}

// A call with a cancelled context fails and does nothing: the router
// retries it.
func testCancelledContext(t *testing.T, l Subject) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a, b := intent("a", "A"), intent("b", "B")
	if _, err := l.Ledger.Claim(ctx, batch(a)); err == nil {
		t.Fatal("Claim with a cancelled context: no error")
	}
	holds(t, l, a, "", "")
	claim(t, l, batch(a, b), new1, new1)
	if err := l.Ledger.MarkStarted(ctx, []processor.Started{{WorkflowID: a.WorkflowID, RunID: "run-a", Generation: 1}}); err == nil {
		t.Fatal("MarkStarted with a cancelled context: no error")
	}
	if err := l.Ledger.MarkDeadLettered(ctx, []processor.DeadLettered{{WorkflowID: b.WorkflowID}}); err == nil {
		t.Fatal("MarkDeadLettered with a cancelled context: no error")
	}
	holds(t, l, a, decide.LedgerPending, "")
	holds(t, l, b, decide.LedgerPending, "")
	markStarted(t, l, b, "run-b", 1) // pending still (not dead-lettered): started
	claim(t, l, batch(a, b), redrive(1), dup(1))
}
