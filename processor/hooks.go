package processor

// hooks are the router's test-only stops, where a test kills the process
// the way a crash would. They are no part of Options: a build with -tags
// failpoints sets them through Run's context (WithFailpoints,
// failpoints.go), and a build without it has none (nofailpoints.go). A nil
// one is skipped.
type hooks struct {
	// AfterClaim runs after a batch's claims are committed in the ledger
	// and before any of its workflows is started.
	AfterClaim func()
	// AfterStart runs after a workflow start succeeded and before it is
	// marked in the ledger or its offset committed.
	AfterStart func()
	// AfterSignal runs after a signal route's SignalWithStart succeeded
	// and before the delivery is marked in the ledger or its offset
	// committed (AfterStart does not run for deliveries).
	AfterSignal func()
}
