package schedule

// FireState is a decided fire's state: the text of
// dedup_schedule_fires.state (the SQL keeps its literals). A fire is
// pending until it ends, once, in one of the other three. Compare states
// with these constants, never with strings.
type FireState string

// The states of a fire.
const (
	// FirePending: decided, not started yet.
	FirePending FireState = "pending"
	// FireStarted: Temporal has the run.
	FireStarted FireState = "started"
	// FireFailed: Temporal refused the start for good (logged; the ledger
	// row is dead_lettered).
	FireFailed FireState = "failed"
	// FireConflict: the workflow ID was claimed with another payload (not
	// a slot): never started.
	FireConflict FireState = "conflict"
)
