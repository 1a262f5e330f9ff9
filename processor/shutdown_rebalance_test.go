package processor

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
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

// tryReached runs scenario, an interleaving set up by the clock (a
// record released, a mark let through, so many milliseconds before the
// drain's end), up to three times while it was not reached: the machine's
// pace, not the router, put the event the scenario needs after the moment
// it needs it before (a test goroutine run late, a slow statement), and
// scenario says what it saw (why). A scenario that was reached asserts
// what it holds; one not reached in three tries fails the test.
func tryReached(t *testing.T, scenario func() (reached bool, why string)) {
	t.Helper()
	var whys []string
	for try := 1; try <= 3; try++ {
		reached, why := scenario()
		if reached {
			return
		}
		t.Logf("try %d: the interleaving was not reached: %s", try, why)
		whys = append(whys, why)
	}
	t.Fatalf("the interleaving was not reached in three tries: %s", strings.Join(whys, "; "))
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

// Adversary 50 (a/revoke, then stop): a router stopped while a
// rebalance's revoke commits through a coordinator that does not answer
// the OffsetCommit still returns within drain_timeout (the smallest
// Validate accepts). Run says shutdown takes at most drain_timeout
// "whatever the group is doing"; but the revoke's commit is sent under the
// client's context (no deadline: franz-go v1.22.3 has nothing to cut), and
// the poll loop, stopped, still waits in PollRecords for the revoke
// callback to return (BlockRebalanceOnPoll: kgo's waitAndAddPoller does
// not look at the poll's context), so the drain, the final commit and its
// deadline are never reached. The OffsetCommit is held for 60 s (released
// at the end).
func TestShutdownWhileARevokeCommitsThroughAHungCoordinatorIsBoundedByTheDrainTimeout(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	hold := make(chan struct{})
	var holdOnce sync.Once
	release := func() { holdOnce.Do(func() { close(hold) }) }
	defer release()
	var armed, held atomic.Bool
	e.cluster.ControlKey(kmsg.OffsetCommit.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		if armed.Load() && !held.Swap(true) {
			e.sleepControl(func() {
				select {
				case <-hold:
				case <-time.After(60 * time.Second):
				}
			})
		}
		return nil, nil, false
	})
	cfg := e.config()
	cfg.DrainTimeout = minDrainTimeout
	cfg.CommitInterval = time.Hour // only the revoke and the final commit commit
	e.produce(0, "a", "v")
	e.produce(1, "b", "v")
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool {
		return e.led.state(wid("a")) == stateStarted && e.led.state(wid("b")) == stateStarted
	}, func() string { return "a and b not marked" })
	armed.Store(true)
	other := e.otherMember()
	defer other.Close()
	eventually(t, 10*time.Second, held.Load, func() string { return "no revoke's OffsetCommit reached the coordinator" })
	err := rn.stop()
	if rn.took > cfg.DrainTimeout+2*time.Second {
		t.Errorf("Run returned %v after cancel while a revoke's commit was held; want within drain_timeout (%v) + 2s", rn.took, cfg.DrainTimeout)
	}
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	release()
	// Run left the leave (and the client's close) to finish on its own
	// once the coordinator answers: it does, once released.
	select {
	case <-rn.r.closed:
	case <-time.After(60 * time.Second):
		t.Errorf("the router's client not closed 60s after the release")
	}
}

// Adversary 50 (config): Validate accepts a revoke_timeout (10 s, the
// default) far above the smallest drain_timeout (1 s), and a router
// stopped while a rebalance's revoke waits revoke_timeout for a held start
// returns only when that wait ends: the stopped poll loop waits in
// PollRecords for the revoke callback (BlockRebalanceOnPoll), so the
// drain's bound is never applied. Either the stop must cut the revoke's
// wait, or such a config must be refused. (The existing
// TestAStopDuringARevokeThatWaitsForAHeldStartReturnsInTime uses a
// revoke_timeout below drain_timeout, and so cannot see this.)
func TestAStopDuringARevokeWithTheDefaultRevokeTimeoutReturnsWithinTheSmallestDrainTimeout(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	cfg.RevokeTimeout = DefaultConfig().RevokeTimeout
	cfg.DrainTimeout = minDrainTimeout
	if err := cfg.Validate(); err != nil {
		return // refused: the attack does not apply
	}
	release0 := e.starter.block(wid("x0"))
	release1 := e.starter.block(wid("x1"))
	defer release0()
	defer release1()
	e.produce(0, "x0", "v")
	e.produce(1, "x1", "v")
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return e.starter.heldCount(wid("x0")) == 1 && e.starter.heldCount(wid("x1")) == 1 },
		func() string { return "x0 and x1 not held in Temporal" })
	other := e.otherMember()
	defer other.Close()
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
	if rn.took > cfg.DrainTimeout+2*time.Second {
		t.Errorf("Run returned %v after a stop during a revoke (revoke_timeout %v, accepted with drain_timeout %v); want within drain_timeout + 2s",
			rn.took, cfg.RevokeTimeout, cfg.DrainTimeout)
	}
	if err != nil {
		t.Errorf("Run: %v", err)
	}
}

// Adversary 50 (a, holds): at the smallest drain_timeout Validate
// accepts, a rebalance (not a shutdown) that revokes a partition whose
// record finished commits it through a coordinator answering OffsetFetch
// and OffsetCommit in 200 ms each: the revoke's commit runs under the
// client's context, not under the shutdown's share, so franz-go v1.22.3
// cuts nothing, and the new owner does not re-drive the record.
func TestARevokeAtTheSmallestDrainTimeoutCommitsThroughASlowCoordinator(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	cfg.DrainTimeout = minDrainTimeout
	cfg.CommitInterval = time.Hour // only the revoke commits
	var slow atomic.Bool
	e.slowCoordinatorFrom(&slow)
	e.produce(0, "a", "v")
	e.produce(1, "b", "v")
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool {
		return e.led.state(wid("a")) == stateStarted && e.led.state(wid("b")) == stateStarted
	}, func() string { return "a and b not marked" })
	slow.Store(true)
	other := e.otherMember()
	defer other.Close()
	eventually(t, 10*time.Second, func() bool { return len(rn.owned()) == 1 }, func() string {
		return fmt.Sprintf("r1 owns %v: want one partition moved to the other member", rn.owned())
	})
	slow.Store(false)
	moved := int32(0)
	if rn.owned()[0] {
		moved = 1
	}
	if c := e.committed()[moved]; c != 1 {
		t.Errorf("partition %d revoked with its record started and marked: committed %d, want 1", moved, c)
	}
}

// Adversary 50d (a, revoke cut by the stop): a router stopped while a
// rebalance's revoke waits for a held start still commits, when Run
// returns, what finished before the stop on the partition it keeps.
// The revoke in progress waits for its records until drainBy (the drain's
// end) and then commits under commitMu, with the shutdown's deadline for
// its two round trips; the final commit, whose share of the reserve
// (deadline - reserve/4) is sized for one commit's two round trips of a
// 200 ms coordinator, queues behind it. Until the revoke the stop cut also
// committed the partitions kept, the kept partition's prefix hung on a
// margin of about 50 ms at 200 ms round trips (the final commit's
// OffsetCommit sent just before its cut; it failed so once under -race in
// CI), and at 300 ms round trips it was lost every time. (What finishes
// after the revoke read the prefix is still the final commit's: a known
// limit at 300 ms, knownlimits_test.go.)
// p0 and p1 each have a finished record (a0, a1) and one held in Temporal
// (h0, h1); another member joins and takes one of them.
func TestAStopDuringARevokeStillCommitsTheKeptPartitionsFinishedPrefix(t *testing.T) {
	waitsOnTimers(t)
	for _, rtt := range []time.Duration{shutdownCoordinatorRTT, 300 * time.Millisecond} {
		t.Run(rtt.String(), func(t *testing.T) {
			t.Parallel()
			stopDuringARevoke(t, rtt)
		})
	}
}

func stopDuringARevoke(t *testing.T, rtt time.Duration) {
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	cfg.DrainTimeout = minDrainTimeout
	cfg.RevokeTimeout = DefaultConfig().RevokeTimeout
	cfg.CommitInterval = time.Hour // only the revoke and the final commit commit
	var slow atomic.Bool
	e.coordinatorSlowedBy(&slow, rtt)
	rel0 := e.starter.block(wid("h0"))
	rel1 := e.starter.block(wid("h1"))
	defer rel0()
	defer rel1()
	e.produce(0, "a0", "v")
	e.produce(0, "h0", "v")
	e.produce(1, "a1", "v")
	e.produce(1, "h1", "v")
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool {
		return e.led.state(wid("a0")) == stateStarted && e.led.state(wid("a1")) == stateStarted &&
			e.starter.heldCount(wid("h0")) == 1 && e.starter.heldCount(wid("h1")) == 1
	}, func() string { return "a0, a1 not marked or h0, h1 not held" })
	other := e.otherMember()
	defer other.Close()
	moved := int32(-1)
	eventually(t, 10*time.Second, func() bool {
		rn.r.commits.mu.Lock()
		defer rn.r.commits.mu.Unlock()
		for tp, p := range rn.r.commits.parts {
			if p.revoking {
				moved = tp.partition
				return true
			}
		}
		return false
	}, func() string { return "no partition began its revoke" })
	kept := 1 - moved
	slow.Store(true)
	err := rn.stop()
	slow.Store(false)
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	c := e.committed()
	t.Logf("Run took %v; committed %v (moved p%d, kept p%d)", rn.took, c, moved, kept)
	if c[kept] != 1 {
		t.Errorf("kept partition %d: committed %d when Run returned, want 1: a%d was started and marked before the stop (the revoke of p%d, cut by the stop, committed first)",
			kept, c[kept], kept, moved)
	}
	if c[moved] != 1 {
		t.Errorf("revoked partition %d: committed %d, want 1 (a%d finished before the revoke)", moved, c[moved], moved)
	}
}

// Adversary 50d (a, zombie commit; holds): a revoke's OffsetCommit that
// the coordinator holds past the stop is cut at the shutdown's deadline
// (untilShutdown) but stays at the broker. Once the other member owns the
// partition and committed past it, the held commit, answered late, must
// not move the group's offset back.
func TestARevokesCommitCutByTheStopDoesNotMoveTheNewOwnersOffsetBack(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	arm, held, release := e.holdKeyOnce(kmsg.OffsetCommit.Int16())
	defer release()
	cfg := e.config()
	cfg.DrainTimeout = minDrainTimeout
	cfg.CommitInterval = time.Hour // only the revoke and the final commit commit
	e.produce(0, "a", "v")
	e.produce(1, "b", "v")
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool {
		return e.led.state(wid("a")) == stateStarted && e.led.state(wid("b")) == stateStarted
	}, func() string { return "a and b not marked" })
	arm()
	other := e.otherMember()
	defer other.Close()
	eventually(t, 10*time.Second, held.Load, func() string { return "no revoke's OffsetCommit reached the coordinator" })
	if err := rn.stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	// The other member now takes both partitions, reads them to their
	// end (2 more records each) and commits.
	e.produce(0, "c", "v")
	e.produce(1, "d", "v")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	seen := map[int32]int64{}
	for (seen[0] < 1 || seen[1] < 1) && ctx.Err() == nil {
		fs := other.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) { seen[r.Partition] = max(seen[r.Partition], r.Offset) })
	}
	if ctx.Err() != nil {
		t.Fatalf("the other member never read both partitions to their end: %v", seen)
	}
	if err := other.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("other's commit: %v", err)
	}
	before := e.committed()
	release() // the held revoke's OffsetCommit is answered now
	time.Sleep(500 * time.Millisecond)
	after := e.committed()
	t.Logf("Run took %v; committed by the new owner %v, after the held commit's release %v", rn.took, before, after)
	for p, c := range before {
		if after[p] < c {
			t.Errorf("partition %d: committed offset moved back from %d to %d by the router's held revoke commit", p, c, after[p])
		}
	}
}

// adv55cCoordinator makes the group coordinator answer OffsetFetch and
// OffsetCommit in rtt each once slow is set, and calls onFetch (once) on
// the first OffsetFetch that arrives once armed, before it is answered.
func (e *testEnv) adv55cCoordinator(slow, armed *atomic.Bool, rtt time.Duration, onFetch func()) {
	var once sync.Once
	for _, key := range []int16{kmsg.OffsetFetch.Int16(), kmsg.OffsetCommit.Int16()} {
		e.cluster.ControlKey(key, func(kmsg.Request) (kmsg.Response, error, bool) {
			e.cluster.KeepControl()
			if key == kmsg.OffsetFetch.Int16() && armed.Load() {
				once.Do(onFetch)
			}
			if slow.Load() {
				e.sleepControl(func() { time.Sleep(rtt) })
			}
			return nil, nil, false
		})
	}
}

// revokingPartition is the partition rn's committer is revoking (-1: none).
func revokingPartition(rn *runner) int32 {
	rn.r.commits.mu.Lock()
	defer rn.r.commits.mu.Unlock()
	for tp, p := range rn.r.commits.parts {
		if p.revoking {
			return tp.partition
		}
	}
	return -1
}

// adversary 55c: a rebalance that revokes nothing from this router (a
// member joins during the drain: franz-go's cooperative consumer calls
// OnPartitionsRevoked with no partition at the end of its session) must
// not cost the final commit what finished during the drain. Before
// e6f0866 such a revoke committed nothing (only was empty); now, once the
// router stopped, it commits every partition (commitOnly nil) and holds
// commitMu for two round trips: a record that finished after it read the
// prefix (released here at the first OffsetFetch after the join, the
// revoke's, 100 ms before the drain's end; with no such revoke, 50 ms
// before the drain's end) is left to the final commit, queued behind it
// and cut at deadline - reserve/4 (fixed: a revoke of nothing commits
// nothing). The router's heartbeats are held from just before the stop
// until then, so that it sees the rebalance (REBALANCE_IN_PROGRESS) 100 ms
// before the drain's end; its session (3 s) outlasts the hold, so the
// partitions are revoked, not lost (with the harness's 1 s session, a
// heartbeat answered early before the hold expired the member: CI's -race
// run, session 64, committed nothing at all). p0: a0 finished, h0 held (the drain lasts until drainBy);
// p1: a1 finished, h1 held, released as above.
// Coordinator round trips of 300 ms. A run whose h1 was not marked before
// the drain's end did not reach the attack and is run again (tryReached).
func TestARevokeOfNothingDuringTheStopDoesNotCostTheFinalCommitWhatFinishedInTheDrain(t *testing.T) {
	waitsOnTimers(t)
	tryReached(t, func() (bool, string) {
		e := newTestEnv(t, 2, envOpt{})
		cfg := e.config()
		cfg.DrainTimeout = minDrainTimeout
		cfg.RevokeTimeout = DefaultConfig().RevokeTimeout
		cfg.CommitInterval = time.Hour // only revokes and the final commit commit
		// Longer than the heartbeats are held (up to the drain's second and a
		// heartbeat interval): a held heartbeat must not expire the member,
		// whose partitions would then be lost, not revoked.
		cfg.SessionTimeout = 3 * time.Second
		rel0 := e.starter.block(wid("h0"))
		rel1 := e.starter.block(wid("h1"))
		defer rel0()
		defer rel1()
		var slow, armed atomic.Bool
		var fetchAt atomic.Int64
		e.adv55cCoordinator(&slow, &armed, 300*time.Millisecond, func() {
			fetchAt.Store(time.Now().UnixNano())
			rel1()
		})
		var holdHBUntil atomic.Int64
		e.cluster.ControlKey(kmsg.Heartbeat.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
			e.cluster.KeepControl()
			if time.Now().Before(time.Unix(0, holdHBUntil.Load())) {
				e.sleepControl(func() { // until the hold's end, as it is when it comes (set again below)
					for time.Now().Before(time.Unix(0, holdHBUntil.Load())) {
						time.Sleep(time.Millisecond)
					}
				})
			}
			return nil, nil, false
		})
		var markMu sync.Mutex
		var h1MarkedAt time.Time
		e.produce(0, "a0", "v")
		e.produce(0, "h0", "v")
		e.produce(1, "a1", "v")
		e.produce(1, "h1", "v")
		rn := e.start("r1", cfg)
		eventually(t, 10*time.Second, func() bool {
			return e.led.state(wid("a0")) == stateStarted && e.led.state(wid("a1")) == stateStarted &&
				e.starter.heldCount(wid("h0")) == 1 && e.starter.heldCount(wid("h1")) == 1
		}, func() string { return "a0, a1 not marked or h0, h1 not held" })
		e.led.mu.Lock()
		e.led.markGate = func(ps []int32) {
			for _, p := range ps {
				if p == 1 {
					markMu.Lock()
					if h1MarkedAt.IsZero() && e.starter.heldCount(wid("h1")) == 0 {
						h1MarkedAt = time.Now()
					}
					markMu.Unlock()
				}
			}
		}
		e.led.mu.Unlock()
		slow.Store(true)
		// The heartbeats are held from before the stop: the one in flight when
		// the router stops (its answer came up to a heartbeat interval before)
		// is answered 100 ms before the drain's end.
		holdHBUntil.Store(time.Now().Add(time.Minute).UnixNano())
		time.Sleep(150 * time.Millisecond)
		rn.cancel() // the stop; rn.stop below waits for Run
		errc := make(chan error, 1)
		go func() { errc <- rn.stop() }()
		eventually(t, 5*time.Second, func() bool { return !rn.r.commits.drainBy().IsZero() }, func() string { return "the stop not recorded" })
		drainBy := rn.r.commits.drainBy()
		stopAt := drainBy.Add(-(cfg.DrainTimeout - shutdownReserve(cfg.DrainTimeout)))
		holdHBUntil.Store(drainBy.Add(-100 * time.Millisecond).UnixNano())
		time.Sleep(time.Until(stopAt.Add(600 * time.Millisecond)))
		armed.Store(true)
		other := e.otherMember() // a rebalance begins; the router sees it at its next heartbeat
		defer other.Close()
		time.Sleep(time.Until(drainBy.Add(-50 * time.Millisecond)))
		rel1() // h1 finishes 50 ms before the drain's end, if no revoke's OffsetFetch released it
		err := <-errc
		h1State := e.led.state(wid("h1"))
		slow.Store(false)
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		c := e.committed()
		markMu.Lock()
		marked := h1MarkedAt
		markMu.Unlock()
		t.Logf("Run took %v; committed %v; the first OffsetFetch after the join (the empty revoke's, if it commits) at stop+%v, h1 marked at stop+%v (drainBy stop+%v)",
			rn.took, c, time.Unix(0, fetchAt.Load()).Sub(stopAt), marked.Sub(stopAt), drainBy.Sub(stopAt))
		if marked.IsZero() || !marked.Before(drainBy) || h1State != stateStarted {
			return false, fmt.Sprintf("h1 %v, marked %s, not before the drain's end (stop+%v): the attack did not run",
				h1State, afterStop(marked, stopAt), drainBy.Sub(stopAt))
		}
		if c[1] != 2 {
			t.Errorf("partition 1: committed %d when Run returned, want 2: h1 was started and marked at stop+%v, within the drain "+
				"(a revoke of no partition, cut by the stop, read the prefix before it and held commitMu; the final commit was cut behind it)",
				c[1], marked.Sub(stopAt))
		}
		return true, ""
	})
}

// adversary 55c (holds; the control of the two tests above): with no
// rebalance during the stop, a record that finishes 100 ms before the
// drain's end (h1, released then) is committed by the final commit,
// through the same coordinator (300 ms round trips): the final commit
// begins at the drain's end and has time for its two round trips. A run
// whose h1 was marked only after the drain's end (the test, or the router,
// run late by a loaded machine) did not reach it and is run again
// (tryReached).
func TestWithoutARevokeTheFinalCommitCommitsWhatFinishedJustBeforeTheDrainsEnd(t *testing.T) {
	waitsOnTimers(t)
	tryReached(t, func() (bool, string) {
		e := newTestEnv(t, 2, envOpt{})
		cfg := e.config()
		cfg.DrainTimeout = minDrainTimeout
		cfg.CommitInterval = time.Hour // only the final commit commits
		rel0 := e.starter.block(wid("h0"))
		rel1 := e.starter.block(wid("h1"))
		defer rel0()
		defer rel1()
		var slow atomic.Bool
		e.coordinatorSlowedBy(&slow, 300*time.Millisecond)
		e.produce(0, "a0", "v")
		e.produce(0, "h0", "v")
		e.produce(1, "a1", "v")
		e.produce(1, "h1", "v")
		rn := e.start("r1", cfg)
		eventually(t, 10*time.Second, func() bool {
			return e.led.state(wid("a0")) == stateStarted && e.led.state(wid("a1")) == stateStarted &&
				e.starter.heldCount(wid("h0")) == 1 && e.starter.heldCount(wid("h1")) == 1
		}, func() string { return "a0, a1 not marked or h0, h1 not held" })
		var h1MarkedAt atomic.Int64
		e.led.mu.Lock()
		e.led.markGate = func(ps []int32) {
			if slices.Contains(ps, 1) && e.starter.heldCount(wid("h1")) == 0 {
				h1MarkedAt.CompareAndSwap(0, time.Now().UnixNano())
			}
		}
		e.led.mu.Unlock()
		slow.Store(true)
		rn.cancel()
		errc := make(chan error, 1)
		go func() { errc <- rn.stop() }()
		eventually(t, 5*time.Second, func() bool { return !rn.r.commits.drainBy().IsZero() }, func() string { return "the stop not recorded" })
		drainBy := rn.r.commits.drainBy()
		stopAt := drainBy.Add(-(cfg.DrainTimeout - shutdownReserve(cfg.DrainTimeout)))
		time.Sleep(time.Until(drainBy.Add(-100 * time.Millisecond)))
		rel1()
		err := <-errc
		slow.Store(false)
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		c := e.committed()
		marked := time.Unix(0, h1MarkedAt.Load())
		if h1MarkedAt.Load() == 0 {
			marked = time.Time{}
		}
		t.Logf("Run took %v; committed %v; h1 marked %s (drainBy stop+%v)", rn.took, c, afterStop(marked, stopAt), drainBy.Sub(stopAt))
		if marked.IsZero() || !marked.Before(drainBy) {
			return false, fmt.Sprintf("h1 marked %s, not before the drain's end (stop+%v)", afterStop(marked, stopAt), drainBy.Sub(stopAt))
		}
		if c[1] != 2 || c[0] != 1 {
			t.Errorf("committed %v when Run returned, want p0 at 1 (h0 still held), p1 at 2 (h1 finished before the drain's end)", c)
		}
		return true, ""
	})
}

// adversary 55c (holds): a stop that begins after the revoke read
// stopping (its records idle at once, it commits only the revoked
// partition; the stop arrives at that commit's OffsetFetch) still has the
// kept partition's finished prefix committed when Run returns, within
// drain_timeout: the revoke's two round trips (300 ms each) end at about
// stop + 600 ms, and the final commit has until stop + 1.75 s.
func TestAStopAfterTheRevokeReadStoppingStillCommitsTheKeptPartition(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	cfg.DrainTimeout = minDrainTimeout
	cfg.RevokeTimeout = DefaultConfig().RevokeTimeout
	cfg.CommitInterval = time.Hour // only the revoke and the final commit commit
	var slow, armed atomic.Bool
	var rnp atomic.Pointer[runner]
	var stoppedAt atomic.Int64
	e.adv55cCoordinator(&slow, &armed, 300*time.Millisecond, func() {
		if rn := rnp.Load(); rn != nil && revokingPartition(rn) >= 0 {
			stoppedAt.Store(time.Now().UnixNano())
			slow.Store(true)
			rn.cancel() // the stop, after the revoke's stopping check
		}
	})
	e.produce(0, "a0", "v")
	e.produce(1, "a1", "v")
	rn := e.start("r1", cfg)
	rnp.Store(rn)
	eventually(t, 10*time.Second, func() bool {
		return e.led.state(wid("a0")) == stateStarted && e.led.state(wid("a1")) == stateStarted
	}, func() string { return "a0, a1 not marked" })
	time.Sleep(100 * time.Millisecond) // the tracker ends them
	armed.Store(true)
	other := e.otherMember()
	defer other.Close()
	eventually(t, 10*time.Second, func() bool { return stoppedAt.Load() != 0 }, func() string { return "no revoke's OffsetFetch" })
	err := rn.stop()
	slow.Store(false)
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	took := time.Since(time.Unix(0, stoppedAt.Load()))
	c := e.committed()
	t.Logf("Run returned %v after the stop; committed %v", took, c)
	if took > cfg.DrainTimeout+2*time.Second {
		t.Errorf("Run returned %v after the stop, want within drain_timeout (%v) + 2s", took, cfg.DrainTimeout)
	}
	if c[0] != 1 || c[1] != 1 {
		t.Errorf("committed %v when Run returned, want both partitions at 1 (a0, a1 finished before the stop)", c)
	}
}

// adversary 55c (holds; the control of the test above): with no member
// joining, the same mark, let through by the ledger at stop + 1.2 s in the
// final flush, is committed by the final commit when Run returns.
func TestWithoutARebalanceTheFinalCommitCommitsWhatTheFinalFlushMarked(t *testing.T) {
	waitsOnTimers(t)
	finalFlushMark(t, false)
}

// afterStop is when at was, after the stop at stopAt ("never" if zero).
func afterStop(at, stopAt time.Time) string {
	if at.IsZero() {
		return "never"
	}
	return fmt.Sprintf("at stop+%v", at.Sub(stopAt))
}

// finalFlushBound is when, after the stop, finalFlushMark's final flush
// is cut: a mark let through after it is not the scenario's.
const finalFlushBound = 1250 * time.Millisecond

// finalFlushMark: p0 and p1 each have a finished record (a0, a1); h1 is
// started, and its mark held by the ledger until stop + 1.2 s (with a
// rebalance: until the first OffsetFetch once a member joined, by stop +
// 1.24 s at the latest). A run whose marks were let through only after
// the final flush's bound (finalFlushBound), or without the revoke, is run
// again (tryReached).
func finalFlushMark(t *testing.T, rebalance bool) {
	tryReached(t, func() (bool, string) {
		e := newTestEnv(t, 2, envOpt{})
		cfg := e.config()
		cfg.DrainTimeout = minDrainTimeout
		cfg.RevokeTimeout = DefaultConfig().RevokeTimeout
		cfg.CommitInterval = time.Hour // only revokes and the final commit commit
		open := make(chan struct{})
		var openOnce sync.Once
		openGate := func() { openOnce.Do(func() { close(open) }) }
		defer openGate()
		var slow, armed atomic.Bool
		var fetchAt atomic.Int64
		e.adv55cCoordinator(&slow, &armed, shutdownCoordinatorRTT, func() {
			fetchAt.Store(time.Now().UnixNano())
			openGate()
		})
		// The other member's JoinGroup is held until stop + 1.1 s, and a
		// heartbeat of the router sent from stop + 1 s until stop + 1.2 s:
		// the router sees the rebalance at stop + 1.2 s, its session alive.
		var hbFrom, hbUntil, joinUntil atomic.Int64
		e.cluster.ControlKey(kmsg.Heartbeat.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
			e.cluster.KeepControl()
			if now := time.Now(); hbFrom.Load() != 0 && now.After(time.Unix(0, hbFrom.Load())) && now.Before(time.Unix(0, hbUntil.Load())) {
				e.sleepControl(func() { time.Sleep(time.Until(time.Unix(0, hbUntil.Load()))) })
			}
			return nil, nil, false
		})
		e.cluster.ControlKey(kmsg.JoinGroup.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
			e.cluster.KeepControl()
			if until := time.Unix(0, joinUntil.Load()); time.Now().Before(until) {
				e.sleepControl(func() { time.Sleep(time.Until(until)) })
			}
			return nil, nil, false
		})
		e.produce(0, "a0", "v")
		e.produce(1, "a1", "v")
		rn := e.start("r1", cfg)
		eventually(t, 10*time.Second, func() bool {
			return e.led.state(wid("a0")) == stateStarted && e.led.state(wid("a1")) == stateStarted
		}, func() string { return "a0, a1 not marked" })
		time.Sleep(100 * time.Millisecond)
		var gateMu sync.Mutex
		var capAt time.Time // the gate opens by then at the latest (the flush's bound is stop + 1.25 s)
		var h1MarkedAt atomic.Int64
		var gated atomic.Int32
		e.led.mu.Lock()
		e.led.markGate = func(ps []int32) {
			for _, p := range ps {
				if p != 1 {
					continue
				}
				gated.Add(1)
				for {
					gateMu.Lock()
					until := capAt
					gateMu.Unlock()
					if !until.IsZero() && !time.Now().Before(until) {
						break
					}
					select {
					case <-open:
					case <-time.After(2 * time.Millisecond):
						continue
					}
					break
				}
				h1MarkedAt.CompareAndSwap(0, time.Now().UnixNano())
				return
			}
		}
		e.led.mu.Unlock()
		e.produce(1, "h1", "v")
		eventually(t, 10*time.Second, func() bool { return len(e.starter.executionsOf(wid("h1"))) == 1 && gated.Load() > 0 },
			func() string { return "h1 not started, or its mark not sent" })
		slow.Store(true)
		rn.cancel() // the stop; rn.stop below waits for Run
		errc := make(chan error, 1)
		go func() { errc <- rn.stop() }()
		eventually(t, 5*time.Second, func() bool { return !rn.r.commits.drainBy().IsZero() }, func() string { return "the stop not recorded" })
		drainBy := rn.r.commits.drainBy()
		stopAt := drainBy.Add(-(cfg.DrainTimeout - shutdownReserve(cfg.DrainTimeout)))
		gateMu.Lock()
		capAt = stopAt.Add(1200 * time.Millisecond)
		if rebalance {
			capAt = stopAt.Add(1240 * time.Millisecond)
		}
		gateMu.Unlock()
		hbUntil.Store(stopAt.Add(1200 * time.Millisecond).UnixNano())
		hbFrom.Store(stopAt.Add(1000 * time.Millisecond).UnixNano())
		joinUntil.Store(stopAt.Add(1100 * time.Millisecond).UnixNano())
		if rebalance {
			time.Sleep(time.Until(stopAt.Add(600 * time.Millisecond)))
			armed.Store(true)
			other := e.otherMember() // a rebalance begins; the router sees it at stop + 1.2 s
			defer other.Close()
		}
		err := <-errc
		h1State := e.led.state(wid("h1"))
		slow.Store(false)
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		c := e.committed()
		marked := time.Unix(0, h1MarkedAt.Load())
		if h1MarkedAt.Load() == 0 {
			marked = time.Time{}
		}
		revokeFetch := "none"
		if fetchAt.Load() != 0 {
			revokeFetch = fmt.Sprintf("stop+%v", time.Unix(0, fetchAt.Load()).Sub(stopAt))
		}
		t.Logf("Run took %v; committed %v; the empty revoke's OffsetFetch at %s; h1's marks let through from stop+%v (%d tries); drainBy stop+%v",
			rn.took, c, revokeFetch, marked.Sub(stopAt), gated.Load(), drainBy.Sub(stopAt))
		if (rebalance && fetchAt.Load() == 0) || h1State != stateStarted || !marked.Before(stopAt.Add(finalFlushBound)) {
			return false, fmt.Sprintf("the attack did not run: a revoke's OffsetFetch seen %v, h1 %v, its marks let through %s (the final flush's bound stop+%v)",
				fetchAt.Load() != 0, h1State, afterStop(marked, stopAt), finalFlushBound)
		}
		if c[1] != 2 {
			t.Errorf("partition 1: committed %d when Run returned, want 2: h1 was marked in the final flush, before Run returned "+
				"(rebalance %v: a revoke of no partition, cut by the stop, read the prefix before it and held commitMu; the final commit was cut behind it)", c[1], rebalance)
		}
		return true, ""
	})
}
