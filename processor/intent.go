package processor

import (
	"fmt"

	"github.com/dedupio/dedup/processor/decide"
)

// Verdict is the ledger's answer to a claim.
type Verdict uint8

const (
	// VerdictNew is the first claim of this workflow ID; start it.
	VerdictNew Verdict = iota + 1
	// VerdictRedrive is a row claimed before but never marked started (a crash
	// between claim and start, or a start still in flight elsewhere); start
	// it again: the deterministic workflow ID makes that safe.
	VerdictRedrive
	// VerdictDuplicate is a row already started, or claimed earlier in the same
	// batch; skip it.
	VerdictDuplicate
	// VerdictConflict is an ID claimed with a different payload; never
	// start it, keep it for inspection.
	VerdictConflict
)

func (v Verdict) String() string {
	switch v {
	case VerdictNew:
		return "new"
	case VerdictRedrive:
		return "redrive"
	case VerdictDuplicate:
		return "duplicate"
	case VerdictConflict:
		return "conflict"
	}
	return fmt.Sprintf("verdict(%d)", uint8(v))
}

// Claimed is the ledger's answer for one intent.
type Claimed struct {
	Verdict Verdict
	// Generation is the run the claim is for, with VerdictNew (1) and
	// VerdictRedrive: the starter derives the start's request ID from it.
	// With VerdictDuplicate it is the generation of the recorded run (a
	// re-run starts a later one).
	Generation int
}

// Started reports a workflow start that Temporal accepted, or rejected as
// already started.
type Started struct {
	WorkflowID string
	RunID      string
	// Generation is the generation the start was for.
	Generation int
	// Topic, Partition and Fence are the claiming record's partition and
	// its ownership: the mark changes the row only while the fence
	// holds (zero Fence: unfenced).
	Topic     string
	Partition int32
	Fence     decide.Fence
}

// DeadLettered names a row whose start Temporal refused for good, for
// MarkDeadLettered: its workflow ID and the fence of the record that
// claimed it (zero Fence: unfenced).
type DeadLettered struct {
	WorkflowID string
	Topic      string
	Partition  int32
	Fence      decide.Fence
}
