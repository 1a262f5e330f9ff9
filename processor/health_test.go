package processor

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func newTestHealth(t *testing.T) (*health, func() []bool) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Retry.Initial, cfg.Retry.Max = 5*time.Millisecond, 20*time.Millisecond
	m, err := newMetrics(prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var changes []bool
	h := newHealth(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), m, func(p bool) {
		mu.Lock()
		changes = append(changes, p)
		mu.Unlock()
	}, nil)
	return h, func() []bool { mu.Lock(); defer mu.Unlock(); return append([]bool(nil), changes...) }
}

// The pause rule: a dependency is down while every call using it fails
// and none succeeded for retry.max.
func TestHealthPauseRule(t *testing.T) {
	down := errors.New("connection refused")

	t.Run("every call fails: paused, then resumed when one succeeds", func(t *testing.T) {
		h, changes := newTestHealth(t)
		var mu sync.Mutex
		failing := true
		done := make(chan error)
		go func() {
			done <- h.retry(context.Background(), OpClaim, func(context.Context) error {
				mu.Lock()
				defer mu.Unlock()
				if failing {
					return down
				}
				return nil
			})
		}()
		waitFor(t, h.Paused, "paused")
		if err := h.Why(); err == nil || !errors.Is(err, down) {
			t.Fatalf("Why() = %v, want postgres failing with the last error", err)
		}
		mu.Lock()
		failing = false
		mu.Unlock()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if h.Paused() || h.Why() != nil {
			t.Fatalf("still paused after the call succeeded: %v", h.Why())
		}
		if got := changes(); len(got) != 2 || !got[0] || got[1] {
			t.Fatalf("pause changes %v, want [true false]", got)
		}
	})

	t.Run("one workflow's start keeps failing while others succeed: never paused", func(t *testing.T) {
		h, changes := newTestHealth(t)
		// The rule's clock is stepped by the test (5 ms per success,
		// retry.max is 20 ms), so a loaded machine that stalls this
		// goroutine cannot make "no success for retry.max" true.
		var clockMu sync.Mutex
		now := time.Unix(1_000_000, 0)
		h.now = func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
		step := func(d time.Duration) { clockMu.Lock(); now = now.Add(d); clockMu.Unlock() }
		ctx, cancel := context.WithCancel(context.Background())
		stuck := make(chan error)
		var stuckCalls atomic.Int64
		go func() {
			stuck <- h.retry(ctx, OpStart, func(context.Context) error { stuckCalls.Add(1); return down })
		}()
		for i := 0; i < 60; i++ {
			if err := h.retry(ctx, OpStart, func(context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}
			step(5 * time.Millisecond)
			time.Sleep(5 * time.Millisecond) // the stuck start retries meanwhile
		}
		if got := changes(); len(got) != 0 {
			t.Fatalf("pause changes %v while other starts succeeded, want none", got)
		}
		if stuckCalls.Load() < 2 {
			t.Fatalf("the failing start was tried %d times, want it retrying throughout", stuckCalls.Load())
		}
		// The same failing start, once nothing else succeeds for
		// retry.max: the replica pauses (the rule is not vacuous).
		step(25 * time.Millisecond)
		waitFor(t, h.Paused, "paused once no start succeeded for retry.max")
		cancel()
		if err := <-stuck; !errors.Is(err, context.Canceled) {
			t.Errorf("the failing start after cancel: %v, want context.Canceled", err)
		}
	})

	t.Run("an abandoned retry neither keeps nor clears the pause by itself", func(t *testing.T) {
		h, _ := newTestHealth(t)
		ctx1, cancel1 := context.WithCancel(context.Background())
		ctx2, cancel2 := context.WithCancel(context.Background())
		r1, r2 := make(chan error), make(chan error)
		go func() { r1 <- h.retry(ctx1, OpMark, func(context.Context) error { return down }) }()
		go func() { r2 <- h.retry(ctx2, OpClaim, func(context.Context) error { return down }) }()
		waitFor(t, h.Paused, "paused")
		cancel1() // one of the failing calls is abandoned (its partition was revoked)
		if err := <-r1; !errors.Is(err, context.Canceled) {
			t.Errorf("the abandoned call: %v, want context.Canceled", err)
		}
		time.Sleep(50 * time.Millisecond) // the other keeps failing
		if !h.Paused() {
			t.Fatal("the pause cleared when a failing call was abandoned while another still fails")
		}
		cancel2()
		if err := <-r2; !errors.Is(err, context.Canceled) {
			t.Errorf("the second call after cancel: %v, want context.Canceled", err)
		}
		if h.Paused() {
			t.Fatal("still paused with no call left that fails")
		}
	})
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("not %s within 5s", what)
}
