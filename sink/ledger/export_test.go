package ledger

// PurgeStatements are the purge's batch statements, for plan tests.
var PurgeStatements = map[State]string{StateStarted: purgeStarted, StateDeadLettered: purgeDeadLettered}

// SetKeyFunc makes the ledger compute its keys with f (a test forces
// collisions with it) until the returned restore is called.
func SetKeyFunc(f func(string) [16]byte) (restore func()) {
	old := keyOf
	keyOf = f
	return func() { keyOf = old }
}

// StartedSQL is the replay's read of started rows, for plan tests.
var StartedSQL = startedSQL
