package ledger_test

import (
	"context"
	"testing"

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
