package processor

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// slowCoordinatorFrom makes the group coordinator answer OffsetFetch and
// OffsetCommit in shutdownCoordinatorRTT each once slow is set (as
// TestShutdownAtTheSmallestDrainTimeoutCommitsThroughASlowCoordinator).
func (e *testEnv) slowCoordinatorFrom(slow *atomic.Bool) {
	for _, key := range []int16{kmsg.OffsetFetch.Int16(), kmsg.OffsetCommit.Int16()} {
		e.cluster.ControlKey(key, func(kmsg.Request) (kmsg.Response, error, bool) {
			e.cluster.KeepControl()
			if slow.Load() {
				e.cluster.SleepControl(func() { time.Sleep(shutdownCoordinatorRTT) })
			}
			return nil, nil, false
		})
	}
}

// Adversary 50 (a/shutdown): at the smallest drain_timeout Validate
// accepts, with the coordinator as slow as in the change's own test, a
// router whose drain is used up by one start that never answers still
// commits what finished before the stop: a (offset 0) was started and
// marked, b (offset 1) hangs in Temporal. The final commit's share is
// said to be a quarter of drain_timeout; it must hold the two 200 ms
// round trips whether or not the drain used its part.
func TestShutdownAtTheSmallestDrainTimeoutCommitsTheFinishedPrefixWhenTheDrainRunsOut(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	cfg := e.config()
	cfg.DrainTimeout = minDrainTimeout
	cfg.CommitInterval = time.Hour // the final commit is the only one
	var stopping atomic.Bool
	e.slowCoordinatorFrom(&stopping)
	release := e.starter.block(wid("b"))
	defer release()
	e.produce(0, "a", "v")
	e.produce(0, "b", "v")
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool {
		return e.led.state(wid("a")) == stateStarted && e.starter.heldCount(wid("b")) > 0
	}, func() string { return "a not marked, or b's start not held" })
	stopping.Store(true)
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rn.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run returned %v after cancel; want within drain_timeout (%v) + 1s", rn.took, cfg.DrainTimeout)
	}
	// What the group holds when Run returns is what a process that exits
	// then (internal/app returns from Run, and main exits) leaves behind:
	// the leave's revoke, which Run stops waiting for at drain_timeout,
	// may commit later in the background, but not in a process that has
	// exited.
	stopping.Store(false)
	if c := e.committed()[0]; c != 1 {
		t.Errorf("committed %d when Run returned (after %v), want 1: a was started and marked before the stop; only b, held in its start, is left for the next owner", c, rn.took)
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
			e.cluster.SleepControl(func() {
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

// Adversary 50 (b/c): a router stopped while a dead letter's Produce is
// held by the broker returns within drain_timeout (the smallest Validate
// accepts), and commits nothing past the record whose dead letter was not
// acknowledged. The dead letter is written from the poll loop (prepare),
// under the poll's context: the stop cancels it, but a Produce already
// sent is the client's request, not the record's, and ProduceSync waits
// for its answer. Before offset 1 (a valid event, started) the record at
// offset 0 must be dead-lettered; the Produce to the dead-letter topic is
// held for 60 s (released at the end).
func TestAStopWhileADeadLetterIsProducedReturnsWithinTheSmallestDrainTimeout(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	hold := make(chan struct{})
	var holdOnce sync.Once
	release := func() { holdOnce.Do(func() { close(hold) }) }
	defer release()
	var armed, held atomic.Bool
	e.cluster.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		// Produce names topics by ID from v13 on: every Produce once
		// armed (after the test's own) is the router's dead letter.
		if armed.Load() && !held.Swap(true) {
			e.cluster.SleepControl(func() {
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
	e.produceRaw(0, []byte("not json"))
	e.produce(0, "a", "v")
	armed.Store(true)
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, held.Load, func() string { return "the dead letter's Produce never reached the broker" })
	time.Sleep(50 * time.Millisecond)
	err := rn.stop()
	if rn.took > cfg.DrainTimeout+2*time.Second {
		t.Errorf("Run returned %v after a stop while a dead letter's Produce was held; want within drain_timeout (%v) + 2s", rn.took, cfg.DrainTimeout)
	}
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	if c := e.committed()[0]; c > 0 && len(e.dlq.recorded()) == 0 {
		t.Errorf("committed %d with no dead letter recorded for offset 0", c)
	}
	release()
}

// Adversary 50 (c, worker side): a router stopped while a start pool
// worker writes the dead letter of a start Temporal refused for good
// (temporal_permanent), its Produce held by the broker, returns within
// drain_timeout (the smallest Validate accepts). The worker's put runs
// under the record's partition context, which the drain cancels; but a
// Produce already sent is the client's request and ProduceSync waits for
// it, and stopStarts waits for every worker before the final commit.
func TestAStopWhileAWorkerWritesADeadLetterReturnsWithinTheSmallestDrainTimeout(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	hold := make(chan struct{})
	var holdOnce sync.Once
	release := func() { holdOnce.Do(func() { close(hold) }) }
	defer release()
	var armed, held atomic.Bool
	e.cluster.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		if armed.Load() && !held.Swap(true) { // Produce v13 names topics by ID: every Produce once armed is the router's
			e.cluster.SleepControl(func() {
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
	e.starter.failPermanent(wid("p"))
	e.produce(0, "p", "v")
	armed.Store(true)
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, held.Load, func() string { return "the dead letter's Produce never reached the broker" })
	time.Sleep(50 * time.Millisecond)
	err := rn.stop()
	if rn.took > cfg.DrainTimeout+2*time.Second {
		t.Errorf("Run returned %v after a stop while a worker's dead letter Produce was held; want within drain_timeout (%v) + 2s", rn.took, cfg.DrainTimeout)
	}
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	release()
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

// holdKeyOnce holds the first request of key sent once armed, for 60 s or
// until release; held reports whether one was.
func (e *testEnv) holdKeyOnce(key int16) (arm func(), held *atomic.Bool, release func()) {
	hold := make(chan struct{})
	var holdOnce sync.Once
	release = func() { holdOnce.Do(func() { close(hold) }) }
	e.t.Cleanup(release)
	var armed atomic.Bool
	held = &atomic.Bool{}
	e.cluster.ControlKey(key, func(kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		if armed.Load() && !held.Swap(true) {
			e.cluster.SleepControl(func() {
				select {
				case <-hold:
				case <-time.After(60 * time.Second):
				}
			})
		}
		return nil, nil, false
	})
	return func() { armed.Store(true) }, held, release
}

// Adversary 50 (b, lag): a router stopped while its lag measure's
// ListOffsets is answered slowly (one answer takes 2 s: a loaded broker)
// still commits, when Run returns, what it started before the stop. The
// lag measure's ListOffsets and the final commit's OffsetFetch and
// OffsetCommit share franz-go's normal connection to the broker (kgo
// broker.loadConnection: "list offsets stays on cxnNormal"), whose answers
// come in order: the shutdown cancels the measure, but the request is
// sent, and the final commit's requests wait behind it. Before v1.22.3
// the commit waited and landed late; now its deadline cuts it, and the
// next owner re-drives a.
func TestAStopWhileALagMeasureIsSlowStillCommitsWhatStarted(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	var armed, held atomic.Bool
	slept := make(chan struct{}) // ends the held answer when the test does
	defer close(slept)
	e.cluster.ControlKey(kmsg.ListOffsets.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		if armed.Load() && !held.Swap(true) {
			e.cluster.SleepControl(func() {
				select {
				case <-time.After(2 * time.Second):
				case <-slept:
				}
			})
		}
		return nil, nil, false
	})
	cfg := e.config()
	cfg.DrainTimeout = minDrainTimeout
	cfg.CommitInterval = time.Hour // the final commit is the only one
	e.produce(0, "a", "v")
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return e.led.state(wid("a")) == stateStarted }, func() string { return "a not marked" })
	armed.Store(true)
	eventually(t, 10*time.Second, held.Load, func() string { return "no lag measure's ListOffsets reached the broker" })
	err := rn.stop()
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	if rn.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run returned %v after cancel; want within drain_timeout (%v) + 1s", rn.took, cfg.DrainTimeout)
	}
	if c := e.committed()[0]; c != 1 {
		t.Errorf("committed %d when Run returned (after %v), want 1: a was started and marked before the stop", c, rn.took)
	}
}

// Adversary 50 (a, ticker): a router stopped while its ticker's commit
// waits for an OffsetCommit the coordinator holds returns within
// drain_timeout (the smallest Validate accepts): the ticker's commit runs
// under the committer loop's context, which the shutdown cancels before
// loops.Wait, and holds commitMu, which the final commit needs.
func TestAStopWhileATickerCommitIsHeldReturnsWithinTheSmallestDrainTimeout(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	arm, held, release := e.holdKeyOnce(kmsg.OffsetCommit.Int16())
	cfg := e.config()
	cfg.DrainTimeout = minDrainTimeout
	e.produce(0, "a", "v")
	arm()
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, held.Load, func() string { return "no OffsetCommit held" })
	err := rn.stop()
	if rn.took > cfg.DrainTimeout+2*time.Second {
		t.Errorf("Run returned %v after a stop while a ticker commit was held; want within drain_timeout (%v) + 2s", rn.took, cfg.DrainTimeout)
	}
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	release()
	t0 := time.Now()
	select {
	case <-rn.r.closed:
		t.Logf("client closed %v after the release", time.Since(t0))
	case <-time.After(60 * time.Second):
		t.Errorf("the router's client not closed 60s after the release")
	}
}
