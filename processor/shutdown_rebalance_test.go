package processor

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// logLines keeps the router's log lines at Warn and above.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	l.mu.Lock()
	l.lines = append(l.lines, b.String())
	l.mu.Unlock()
	return nil
}
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logLines) WithGroup(string) slog.Handler      { return l }
func (l *logLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// startLogged is startWith with the router's Warn and Error lines kept.
func (e *testEnv) startLogged(name string, cfg Config, logs *logLines) *runner {
	e.t.Helper()
	r, err := New(cfg, Options{Ledger: e.led, DeadLetterLog: e.dlq, Starter: e.starter.as(name), Registerer: prometheus.NewRegistry(),
		Log: slog.New(logs), KafkaOpts: []kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond), kgo.MetadataMinAge(50 * time.Millisecond)}})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rn := &runner{t: e.t, r: r, cancel: cancel, done: make(chan error, 1)}
	go func() { rn.done <- r.Run(ctx) }()
	e.t.Cleanup(func() { _ = rn.stop() })
	return rn
}

// A router stopped while the group keeps rebalancing (members joining and
// leaving, one after the other: a rolling restart) returns within
// drain_timeout, its client closes (franz-go v1.22.3: Close and LeaveGroup
// no longer wait for the group to settle), and it logs no fetch error for
// the stop itself (a request cut short by the closing client is
// kgo.ErrClientClosed now, not context.Canceled).
func TestAStopWhileTheGroupKeepsRebalancingReturnsInTimeAndLogsNoFetchError(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	e.produce(0, "a", "v")
	e.produce(1, "b", "v")
	cfg := e.config()
	cfg.DrainTimeout = 3 * time.Second
	logs := &logLines{}
	rn := e.startLogged("r1", cfg, logs)
	eventually(t, 10*time.Second, func() bool {
		return len(e.starter.executionsOf(wid("a"))) == 1 && len(e.starter.executionsOf(wid("b"))) == 1
	}, func() string { return "a and b not started" })
	e.waitCommittedToEnd(10 * time.Second)

	// A rolling restart of other members: one joins, leaves, the next
	// joins, for as long as the test needs.
	var churn sync.WaitGroup
	var stopChurn atomic.Bool
	churn.Add(1)
	go func() {
		defer churn.Done()
		for !stopChurn.Load() {
			other := e.otherMember()
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			other.PollFetches(ctx)
			cancel()
			other.Close()
		}
	}()
	defer func() { stopChurn.Store(true); churn.Wait() }()
	time.Sleep(1500 * time.Millisecond)
	e.produce(0, "c", "v")
	e.produce(1, "d", "v")
	time.Sleep(1500 * time.Millisecond)

	err := rn.stop()
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	if rn.took > cfg.DrainTimeout+2*time.Second {
		t.Errorf("Run returned %v after its stop while the group kept rebalancing; want within drain_timeout (%v)", rn.took, cfg.DrainTimeout)
	}
	select {
	case <-rn.r.closed:
	case <-time.After(cfg.DrainTimeout + 5*time.Second):
		t.Errorf("the client did not close within %v of the stop while the group kept rebalancing", cfg.DrainTimeout+5*time.Second)
	}
	stopChurn.Store(true)
	churn.Wait()
	for _, l := range logs.all() {
		if strings.Contains(l, "fetch error") || strings.Contains(l, "client closed") {
			t.Errorf("logged at the stop: %s", l)
		}
		t.Logf("log: %s", l)
	}
}

// A router stopped while it is inside a revoke (a member joined, the
// revoked partition's start is held, the revoke waits revoke_timeout for
// it) returns within drain_timeout, and the held record, started once,
// is never started again by the router that stopped.
func TestAStopDuringARevokeThatWaitsForAHeldStartReturnsInTime(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	cfg.RevokeTimeout = 2 * time.Second
	cfg.DrainTimeout = 3 * time.Second
	release0 := e.starter.block(wid("x0"))
	release1 := e.starter.block(wid("x1"))
	defer release0()
	defer release1()
	e.produce(0, "x0", "v")
	e.produce(1, "x1", "v")
	logs := &logLines{}
	rn := e.startLogged("r1", cfg, logs)
	eventually(t, 10*time.Second, func() bool { return e.starter.heldCount(wid("x0")) == 1 && e.starter.heldCount(wid("x1")) == 1 },
		func() string { return "x0 and x1 not held in Temporal" })
	other := e.otherMember()
	pollCtx, stopPolling := context.WithCancel(context.Background())
	var polling sync.WaitGroup
	polling.Add(1)
	go func() {
		defer polling.Done()
		for pollCtx.Err() == nil {
			if other.PollFetches(pollCtx).IsClientClosed() {
				return
			}
		}
	}()
	defer func() { stopPolling(); polling.Wait(); other.Close() }()
	revoking := func() bool {
		rn.r.commits.mu.Lock()
		defer rn.r.commits.mu.Unlock()
		for _, p := range rn.r.commits.parts {
			if p.revoking {
				return true
			}
		}
		return false
	}
	eventually(t, 10*time.Second, revoking, func() string { return "no partition began its revoke" })
	err := rn.stop()
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	if rn.took > cfg.DrainTimeout+2*time.Second {
		t.Errorf("Run returned %v after a stop during a revoke; want within drain_timeout (%v)", rn.took, cfg.DrainTimeout)
	}
	select {
	case <-rn.r.closed:
	case <-time.After(cfg.DrainTimeout + 5*time.Second):
		t.Errorf("the client did not close within %v of a stop during a revoke", cfg.DrainTimeout+5*time.Second)
	}
	for _, id := range []string{"x0", "x1"} {
		if n := e.starter.callCount(wid(id)); n != 1 {
			t.Errorf("%s: %d start calls by the stopped router, want 1", id, n)
		}
	}
	for _, l := range logs.all() {
		t.Logf("log: %s", l)
	}
}
