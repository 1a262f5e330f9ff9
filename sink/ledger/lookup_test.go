package ledger_test

import (
	"context"
	"testing"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
)

// Lookup answers what the ledger holds per workflow ID (state, payload
// hash, run ID, conflicts) and leaves unknown IDs out; it writes nothing.
func TestLookup(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	a, b := intent("a", "p1"), intent("b", "p1")
	if _, err := l.Claim(ctx, []decide.Intent{a, b}); err != nil {
		t.Fatal(err)
	}
	if err := l.MarkStarted(ctx, []processor.Started{{WorkflowID: a.WorkflowID, RunID: "run-a", Generation: 1}}); err != nil {
		t.Fatal(err)
	}
	conflicting := intent("a", "p2")
	conflicting.Offset = 99
	if v, err := l.Claim(ctx, []decide.Intent{conflicting}); err != nil || v[0].Verdict != decide.VerdictConflict {
		t.Fatalf("conflicting claim: %v %v", v, err)
	}
	got, err := l.Lookup(ctx, []string{a.WorkflowID, b.WorkflowID, "activity-x:unknown", a.WorkflowID})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d entries, want 2 (the unknown ID left out): %+v", len(got), got)
	}
	ea, eb := got[a.WorkflowID], got[b.WorkflowID]
	if ea.State != "started" || ea.RunID != "run-a" || ea.PayloadHash != a.PayloadHash || ea.EventID != a.EventID || ea.Conflicts != 1 || ea.Generation != 1 {
		t.Errorf("a: %+v", ea)
	}
	if eb.State != "pending" || eb.RunID != "" || eb.PayloadHash != b.PayloadHash || eb.Conflicts != 0 || eb.Offset != b.Offset {
		t.Errorf("b: %+v", eb)
	}
	if got, err := l.Lookup(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("empty lookup: %v %v", got, err)
	}
}
