package processor

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

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
				e.cluster.SleepControl(func() { time.Sleep(rtt) })
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
// nothing). The router's heartbeats are held until then, so
// that it sees the rebalance (REBALANCE_IN_PROGRESS) 100 ms before the
// drain's end. p0: a0 finished, h0 held (the drain lasts until drainBy);
// p1: a1 finished, h1 held, released as above.
// Coordinator round trips of 300 ms.
func TestARevokeOfNothingDuringTheStopDoesNotCostTheFinalCommitWhatFinishedInTheDrain(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	cfg.DrainTimeout = minDrainTimeout
	cfg.RevokeTimeout = DefaultConfig().RevokeTimeout
	cfg.CommitInterval = time.Hour // only revokes and the final commit commit
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
		if until := time.Unix(0, holdHBUntil.Load()); time.Now().Before(until) {
			e.cluster.SleepControl(func() { time.Sleep(time.Until(until)) })
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
	if marked.IsZero() || h1State != stateStarted {
		t.Fatalf("the attack did not run: h1 marked %v (%v)", !marked.IsZero(), h1State)
	}
	if c[1] != 2 {
		t.Errorf("partition 1: committed %d when Run returned, want 2: h1 was started and marked at stop+%v, within the drain "+
			"(a revoke of no partition, cut by the stop, read the prefix before it and held commitMu; the final commit was cut behind it)",
			c[1], marked.Sub(stopAt))
	}
}

// adversary 55c (holds; the control of the two tests above): with no
// rebalance during the stop, a record that finishes 100 ms before the
// drain's end (h1, released then) is committed by the final commit,
// through the same coordinator (300 ms round trips): the final commit
// begins at the drain's end and has time for its two round trips.
func TestWithoutARevokeTheFinalCommitCommitsWhatFinishedJustBeforeTheDrainsEnd(t *testing.T) {
	waitsOnTimers(t)
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
	slow.Store(true)
	rn.cancel()
	errc := make(chan error, 1)
	go func() { errc <- rn.stop() }()
	eventually(t, 5*time.Second, func() bool { return !rn.r.commits.drainBy().IsZero() }, func() string { return "the stop not recorded" })
	time.Sleep(time.Until(rn.r.commits.drainBy().Add(-100 * time.Millisecond)))
	rel1()
	err := <-errc
	slow.Store(false)
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	c := e.committed()
	t.Logf("Run took %v; committed %v", rn.took, c)
	if c[1] != 2 || c[0] != 1 {
		t.Errorf("committed %v when Run returned, want p0 at 1 (h0 still held), p1 at 2 (h1 finished before the drain's end)", c)
	}
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

// finalFlushMark: p0 and p1 each have a finished record (a0, a1); h1 is
// started, and its mark held by the ledger until stop + 1.2 s (with a
// rebalance: until the first OffsetFetch once a member joined, by stop +
// 1.24 s at the latest).
func finalFlushMark(t *testing.T, rebalance bool) {
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
			e.cluster.SleepControl(func() { time.Sleep(time.Until(time.Unix(0, hbUntil.Load()))) })
		}
		return nil, nil, false
	})
	e.cluster.ControlKey(kmsg.JoinGroup.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		if until := time.Unix(0, joinUntil.Load()); time.Now().Before(until) {
			e.cluster.SleepControl(func() { time.Sleep(time.Until(until)) })
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
	revokeFetch := "none"
	if fetchAt.Load() != 0 {
		revokeFetch = fmt.Sprintf("stop+%v", time.Unix(0, fetchAt.Load()).Sub(stopAt))
	}
	t.Logf("Run took %v; committed %v; the empty revoke's OffsetFetch at %s; h1's marks let through from stop+%v (%d tries); drainBy stop+%v",
		rn.took, c, revokeFetch, marked.Sub(stopAt), gated.Load(), drainBy.Sub(stopAt))
	if (rebalance && fetchAt.Load() == 0) || h1State != stateStarted {
		t.Fatalf("the attack did not run: a revoke's OffsetFetch seen %v, h1 %v", fetchAt.Load() != 0, h1State)
	}
	if c[1] != 2 {
		t.Errorf("partition 1: committed %d when Run returned, want 2: h1 was marked in the final flush, before Run returned "+
			"(rebalance %v: a revoke of no partition, cut by the stop, read the prefix before it and held commitMu; the final commit was cut behind it)", c[1], rebalance)
	}
}
