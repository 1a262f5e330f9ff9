package ledger

// PurgeStatements are the purge's batch statements, for plan tests.
var PurgeStatements = map[string]string{"started": purgeStarted, "dead_lettered": purgeDeadLettered}
