package ingress

import (
	"sync"
	"testing"
	"time"
)

// Waits of the tests that hold a request in the handler (the Locked hook)
// while others are sent. A test that fails while a request is held must
// end with its message, not hang: httptest.Server's Close waits for every
// request in flight, and a held request waits for the test to let it go.
// So the hold is let go by the test's cleanup too, before the servers
// close (cleanups run last in, first out), and each wait for the handler
// to reach a point has a bound.

// handlerPatience bounds how long a test waits for a request to reach
// the handler: a loaded CI machine takes a moment; a wait that is met
// returns at once.
const handlerPatience = time.Minute

// letGoAtCleanup returns the func that closes hold (at most once), and has
// the test's cleanup call it. Call it after the servers whose handlers
// wait on hold are made, so that it runs before they close.
func letGoAtCleanup(t *testing.T, hold chan struct{}) func() {
	t.Helper()
	letGo := sync.OnceFunc(func() { close(hold) })
	t.Cleanup(letGo)
	return letGo
}

// within receives from ch, or fails the test after d, naming what it
// waited for.
func within[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("%s: nothing after %s", what, d)
		panic("unreachable")
	}
}

// reached waits until held signals (the request is held in the handler),
// or fails the test: at once with the request's response if it was
// answered first, or after handlerPatience.
func reached(t *testing.T, held <-chan struct{}, answered <-chan resp, what string) {
	t.Helper()
	select {
	case <-held:
	case r := <-answered:
		t.Fatalf("%s: answered %d %s before it was held", what, r.code, r.body)
	case <-time.After(handlerPatience):
		t.Fatalf("%s: not held after %s", what, handlerPatience)
	}
}
