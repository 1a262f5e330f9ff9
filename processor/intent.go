package processor

import (
	"github.com/dedupio/dedup/processor/decide"
)

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
	// Recorded is MarkStarted's answer, set by it: after the call the row
	// is started at this generation or a newer one (the call moved it, or
	// found it so: an earlier try whose answer was lost, another router's
	// mark). False for a row dead_lettered or absent, and under a fence
	// that no longer holds.
	Recorded bool
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
