package ledger

import (
	"github.com/dedupio/dedup/processor/decide"
)

// State is a ledger row's state: the text of dedup_ledger.state (the SQL
// keeps its literals) and of the JSON the operators' tools print. It is
// decide.LedgerState, whose doc draws the moves between the states: the
// router's Ledger contract names them, and the processor cannot import
// this package. Compare states with these constants, never with strings.
type State = decide.LedgerState

// The states of a ledger row.
const (
	// StatePending: claimed, not started yet.
	StatePending = decide.LedgerPending
	// StateStarted: Temporal has the workflow.
	StateStarted = decide.LedgerStarted
	// StateDeadLettered: Temporal refused the start for good.
	StateDeadLettered = decide.LedgerDeadLettered
)
