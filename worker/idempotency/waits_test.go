package idempotency_test

import (
	"context"
	"sync"
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

// passingDeadline is a caller's context whose deadline passes when the
// test calls pass, not on a clock: a test whose call must see its deadline
// pass while fn runs would otherwise, on a loaded machine, see it pass
// while the call still takes the key (its statement slow to answer), and
// fn would never run. Its Err is context.DeadlineExceeded once passed, as
// a context.WithTimeout's is.
type passingDeadline struct {
	context.Context
	done chan struct{}
	once sync.Once
}

func newPassingDeadline() *passingDeadline {
	return &passingDeadline{Context: context.Background(), done: make(chan struct{})}
}

func (d *passingDeadline) Done() <-chan struct{} { return d.done }

func (d *passingDeadline) Err() error {
	select {
	case <-d.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// pass makes the deadline pass.
func (d *passingDeadline) pass() { d.once.Do(func() { close(d.done) }) }
