package ledger

// PurgeStatements are the purge's batch statements, for plan tests.
var PurgeStatements = map[State]string{StateStarted: purgeStarted, StateDeadLettered: purgeDeadLettered}
