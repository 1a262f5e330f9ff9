package idempotency_test

import (
	"testing"
	"time"
)

// Waits of the tests that hold a key in one call while another runs. A
// holder's fn signals that it holds the key; a call that returned before
// its fn ran (refused, answered from a stored outcome, in progress
// elsewhere) never signals, so an unbounded wait for it would hang the
// package until go test's timeout, and the failure's message would never
// be printed.

// holderPatience bounds the wait for a holder's fn to start: one
// statement or two on a loaded CI machine; a wait that is met returns at
// once.
const holderPatience = time.Minute

// holds waits until holding is closed (the holder's fn runs), or fails
// the test: at once with the holder's error if its call ended first (ended
// may be nil when the test does not keep it), or after holderPatience.
func holds(t *testing.T, holding <-chan struct{}, ended <-chan error, what string) {
	t.Helper()
	select {
	case <-holding:
	case err := <-ended:
		t.Fatalf("%s: the call returned before its fn ran: %v", what, err)
	case <-time.After(holderPatience):
		t.Fatalf("%s: its fn did not run in %s", what, holderPatience)
	}
}
