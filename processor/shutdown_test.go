package processor

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// A router stopped while its join of the consumer group hangs (the
// coordinator waits for members that were killed and have not timed out
// yet) returns within drain_timeout: it does not wait for the join to
// finish, which would outlast Kubernetes' grace period and have the pod
// killed mid-drain. Bound: DrainTimeout plus 2 s for the test's own
// scheduling (the join is held for 60 s).
func TestShutdownWhileJoiningIsBoundedByTheDrainTimeout(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	hold := make(chan struct{})
	var holdOnce sync.Once
	release := func() { holdOnce.Do(func() { close(hold) }) }
	defer release()
	var joining atomic.Bool
	e.cluster.ControlKey(kmsg.JoinGroup.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		joining.Store(true)
		e.sleepControl(func() {
			select {
			case <-hold:
			case <-time.After(60 * time.Second):
			}
		})
		return nil, nil, false
	})
	cfg := e.config()
	cfg.DrainTimeout = 2 * time.Second
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, joining.Load, func() string { return "the router never sent JoinGroup" })
	t0 := time.Now()
	err := rn.stop()
	took := time.Since(t0)
	if took > cfg.DrainTimeout+2*time.Second {
		t.Fatalf("Run returned %v after its context ended while joining; want within drain_timeout (%v)", took, cfg.DrainTimeout)
	}
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	release()
	select {
	case <-rn.r.closed:
	case <-time.After(30 * time.Second):
		t.Fatal("the client did not close within 30 s of the join's release")
	}
}

// shutdownCoordinatorRTT is how long a slow group coordinator takes to
// answer each of the final commit's two requests (the read of the group's
// offsets, then the commit): a broker under load, or in another zone.
const shutdownCoordinatorRTT = 200 * time.Millisecond

// A router stopped with the smallest drain_timeout Validate accepts, its
// group coordinator answering OffsetFetch and OffsetCommit in 200 ms each
// from the stop on, commits what it started: the final commit's share of
// the drain holds both round trips, and Run still returns within
// drain_timeout. (franz-go from v1.22.3 ends a request at its context's
// deadline rather than sending it late: a share below the two round
// trips loses the commit, and the next owner re-drives what this one
// started.)
func TestShutdownAtTheSmallestDrainTimeoutCommitsThroughASlowCoordinator(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	cfg := e.config()
	cfg.DrainTimeout = minDrainTimeout
	cfg.CommitInterval = time.Hour // the final commit is the only one
	var stopping atomic.Bool
	for _, key := range []int16{kmsg.OffsetFetch.Int16(), kmsg.OffsetCommit.Int16()} {
		e.cluster.ControlKey(key, func(kmsg.Request) (kmsg.Response, error, bool) {
			e.cluster.KeepControl()
			if stopping.Load() {
				e.sleepControl(func() { time.Sleep(shutdownCoordinatorRTT) })
			}
			return nil, nil, false
		})
	}
	e.produce(0, "a", "v")
	e.produce(0, "b", "v")
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool {
		return e.led.state(wid("a")) == stateStarted && e.led.state(wid("b")) == stateStarted
	}, func() string { return "a and b not marked" })
	stopping.Store(true)
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rn.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run returned %v after cancel; want within drain_timeout (%v) + 1s", rn.took, cfg.DrainTimeout)
	}
	if c := e.committed()[0]; c != 2 {
		t.Errorf("committed %d after shutdown, want 2 (a and b were started and marked before the stop)", c)
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
