package ledgertest

import (
	"context"
	"fmt"
	"testing"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
)

// The fence's cases: a partition's owner epoch on every claim and mark, so
// that a router that lost the partition changes no row.

// own takes the partitions for group "g" and returns their fences.
func own(t *testing.T, l Subject, member string, parts ...processor.PartitionRef) []decide.Fence {
	t.Helper()
	epochs, err := l.Ledger.Own(context.Background(), processor.Ownership{Group: "g", Member: member, Parts: parts})
	if err != nil {
		t.Fatalf("Own(%v): %v", parts, err)
	}
	if len(epochs) != len(parts) {
		t.Fatalf("Own(%v): %d epochs", parts, len(epochs))
	}
	out := make([]decide.Fence, len(epochs))
	for i, e := range epochs {
		if e == 0 {
			t.Fatalf("Own(%v): epoch 0 (the unfenced value)", parts)
		}
		out[i] = decide.Fence{Group: "g", Epoch: e}
	}
	return out
}

func fenced(in decide.Intent, f decide.Fence) decide.Intent {
	in.Fence = f
	return in
}

// wantFenced checks that err is the fence's refusal naming exactly the
// partitions of stale (topic/partition at the fence's epoch).
func wantFenced(t *testing.T, what string, err error, stale ...processor.PartitionEpoch) {
	t.Helper()
	f, ok := processor.IsFenced(err)
	if !ok {
		t.Fatalf("%s: err %v, want a *processor.FencedError", what, err)
	}
	if fmt.Sprint(f.Stale) != fmt.Sprint(stale) {
		t.Fatalf("%s: stale %v, want %v", what, f.Stale, stale)
	}
}

// A router that lost a partition (the new owner took it in the ledger,
// Own) can neither claim, re-drive, re-claim a dead_lettered row, nor mark
// rows for the partition's records: the row stays as the new owner left
// it, and each call says the partition moved. The new owner's own writes
// go through.
func testStaleOwnerChangesNoRow(t *testing.T, l Subject) {
	ctx := context.Background()
	p := processor.PartitionRef{Topic: "events", Partition: 1}
	old := own(t, l, "zombie", p)[0]
	a := intent("a", "A")
	claim(t, l, batch(fenced(a, old)), new1)
	cur := own(t, l, "owner", p)[0]
	if cur.Epoch <= old.Epoch {
		t.Fatalf("Own: epoch %d after %d, want it to grow", cur.Epoch, old.Epoch)
	}
	claim(t, l, batch(fenced(a, cur)), redrive(1))
	if err := l.Ledger.MarkDeadLettered(ctx, []processor.DeadLettered{{WorkflowID: a.WorkflowID, Topic: p.Topic, Partition: p.Partition, Fence: cur}}); err != nil {
		t.Fatalf("the owner's MarkDeadLettered: %v", err)
	}
	holds(t, l, a, decide.LedgerDeadLettered, "")
	stale := processor.PartitionEpoch{Group: "g", Topic: p.Topic, Partition: p.Partition, Epoch: old.Epoch}

	// The zombie's claim of the same record (slow, or retried after the
	// revoke): it would re-claim the dead_lettered row, pending with no
	// owner.
	_, err := l.Ledger.Claim(ctx, batch(fenced(a, old)))
	wantFenced(t, "the zombie's claim", err, stale)
	holds(t, l, a, decide.LedgerDeadLettered, "")
	err = l.Ledger.MarkStarted(ctx, []processor.Started{{WorkflowID: a.WorkflowID, RunID: "zombie-run", Generation: 1,
		Topic: p.Topic, Partition: p.Partition, Fence: old}})
	wantFenced(t, "the zombie's MarkStarted", err, stale)
	holds(t, l, a, decide.LedgerDeadLettered, "")

	// A pending row of the new owner is not the zombie's to end.
	b := intent("b", "B")
	claim(t, l, batch(fenced(b, cur)), new1)
	err = l.Ledger.MarkDeadLettered(ctx, []processor.DeadLettered{{WorkflowID: b.WorkflowID, Topic: p.Topic, Partition: p.Partition, Fence: old}})
	wantFenced(t, "the zombie's MarkDeadLettered", err, stale)
	holds(t, l, b, decide.LedgerPending, "")
	// The new owner's replay re-claims its dead_lettered row.
	claim(t, l, batch(fenced(a, cur)), redrive(1))
	holds(t, l, a, decide.LedgerPending, "")
}

// A claim with one stale partition writes nothing, not even the rows of
// its partitions that still hold: the caller drops the stale partition's
// records and claims the rest again.
func testFencedClaimWritesNothing(t *testing.T, l Subject) {
	ctx := context.Background()
	p1, p2 := processor.PartitionRef{Topic: "events", Partition: 1}, processor.PartitionRef{Topic: "events", Partition: 2}
	fs := own(t, l, "r", p1, p2)
	old1 := fs[0]
	own(t, l, "other", p1)
	a := intent("a", "A")
	b := intent("b", "B")
	b.Partition = 2
	_, err := l.Ledger.Claim(ctx, batch(fenced(a, old1), fenced(b, fs[1])))
	wantFenced(t, "a claim with a stale partition", err, processor.PartitionEpoch{Group: "g", Topic: "events", Partition: 1, Epoch: old1.Epoch})
	holds(t, l, a, "", "")
	holds(t, l, b, "", "")
	claim(t, l, batch(fenced(b, fs[1])), new1)
	// Unfenced intents (the scheduler's fires) are not fenced.
	claim(t, l, batch(a), new1)
}

// A mark of rows of two partitions, one stale: the other partition's row
// is marked (Recorded), the stale one's is not, and the error names the
// stale one.
func testFencedMarkWritesTheOthers(t *testing.T, l Subject) {
	ctx := context.Background()
	p1, p2 := processor.PartitionRef{Topic: "events", Partition: 1}, processor.PartitionRef{Topic: "events", Partition: 2}
	fs := own(t, l, "r", p1, p2)
	a := intent("a", "A")
	b := intent("b", "B")
	b.Partition = 2
	claim(t, l, batch(fenced(a, fs[0]), fenced(b, fs[1])), new1, new1)
	own(t, l, "other", p1)
	started := []processor.Started{
		{WorkflowID: a.WorkflowID, RunID: "run-a", Generation: 1, Topic: "events", Partition: 1, Fence: fs[0]},
		{WorkflowID: b.WorkflowID, RunID: "run-b", Generation: 1, Topic: "events", Partition: 2, Fence: fs[1]},
	}
	err := l.Ledger.MarkStarted(ctx, started)
	wantFenced(t, "a mark with a stale partition", err, processor.PartitionEpoch{Group: "g", Topic: "events", Partition: 1, Epoch: fs[0].Epoch})
	if started[0].Recorded || !started[1].Recorded {
		t.Errorf("Recorded: stale partition's %v, the other's %v; want false, true", started[0].Recorded, started[1].Recorded)
	}
	holds(t, l, a, decide.LedgerPending, "")
	holds(t, l, b, decide.LedgerStarted, "run-b")
}

// An Own of an older group generation than the partition's owner (a member
// the group dropped, whose Own lands late) takes nothing: epoch 0, and the
// owner's fence still holds. Confirmed by the coordinator (a group made
// anew starts its generations again), it takes the partition.
func testOlderGenerationTakesNothing(t *testing.T, l Subject) {
	ctx := context.Background()
	p := []processor.PartitionRef{{Topic: "events", Partition: 1}}
	e5, err := l.Ledger.Own(ctx, processor.Ownership{Group: "g", Member: "owner", Generation: 5, Parts: p})
	if err != nil || e5[0] == 0 {
		t.Fatalf("Own of generation 5: %v, %v", e5, err)
	}
	late, err := l.Ledger.Own(ctx, processor.Ownership{Group: "g", Member: "dropped", Generation: 4, Parts: p})
	if err != nil || late[0] != 0 {
		t.Fatalf("a late Own of generation 4 after 5: %v, %v; want epoch 0 (not taken)", late, err)
	}
	a := intent("a", "A")
	claim(t, l, batch(fenced(a, decide.Fence{Group: "g", Epoch: e5[0]})), new1)
	again, err := l.Ledger.Own(ctx, processor.Ownership{Group: "g", Member: "anew", Generation: 1, Confirmed: true, Parts: p})
	if err != nil || again[0] <= e5[0] {
		t.Fatalf("a confirmed Own of generation 1: %v, %v; want an epoch over %d", again, err, e5[0])
	}
	_, err = l.Ledger.Claim(ctx, batch(fenced(intent("b", "B"), decide.Fence{Group: "g", Epoch: e5[0]})))
	wantFenced(t, "generation 5's claim after the confirmed Own", err, processor.PartitionEpoch{Group: "g", Topic: "events", Partition: 1, Epoch: e5[0]})
}

// Recorded is per entry: in one mark, an entry under a stale fence says
// false even when another entry of the same workflow ID, under a fence
// that holds, moves the row (Started.Recorded: false for entries under a
// fence that no longer holds).
func testRecordedPerEntryUnderAStaleFence(t *testing.T, l Subject) {
	ctx := context.Background()
	p1, p2 := processor.PartitionRef{Topic: "events", Partition: 1}, processor.PartitionRef{Topic: "events", Partition: 2}
	fs := own(t, l, "r", p1, p2)
	a := intent("a", "A")
	claim(t, l, batch(fenced(a, fs[0])), new1)
	own(t, l, "other", p1)
	started := []processor.Started{
		{WorkflowID: a.WorkflowID, RunID: "run-a", Generation: 1, Topic: "events", Partition: 1, Fence: fs[0]},
		{WorkflowID: a.WorkflowID, RunID: "run-a", Generation: 1, Topic: "events", Partition: 2, Fence: fs[1]},
	}
	err := l.Ledger.MarkStarted(ctx, started)
	wantFenced(t, "a mark with a stale partition", err, processor.PartitionEpoch{Group: "g", Topic: "events", Partition: 1, Epoch: fs[0].Epoch})
	if started[0].Recorded || !started[1].Recorded {
		t.Errorf("Recorded: the stale fence's entry %v, the held fence's %v; want false, true", started[0].Recorded, started[1].Recorded)
	}
	holds(t, l, a, decide.LedgerStarted, "run-a")
}
