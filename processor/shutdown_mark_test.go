package processor

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A started workflow still waiting in the marker's batch when the drain
// deadline passes (starts.mark_interval longer than the drain) is marked
// by the marker's final flush; if PostgreSQL refuses that mark (a
// transient error, every try), the final flush gives up by the drain
// deadline rather than retrying for its own 10 s: shutdown stays within
// drain_timeout, and nothing is committed (the row is still pending, the
// redelivery re-drives it). Bound: DrainTimeout plus 2 s for the test's
// own scheduling (the bug took DrainTimeout plus 10 s).
func TestShutdownWithAFailingFinalMarkIsBoundedByTheDrainTimeout(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	e.produce(0, "a", "v")
	cfg := e.config()
	cfg.Starts.MarkInterval = time.Minute // the batch waits for the final flush
	cfg.RevokeTimeout = 2 * time.Minute   // above mark_interval (Validate); nothing is revoked
	cfg.DrainTimeout = minDrainTimeout
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(e.starter.executionsOf(wid("a"))) == 1 },
		func() string { return "a not started" })
	e.led.mu.Lock()
	e.led.markFail = failer{n: -1, err: errTransient}
	e.led.mu.Unlock()
	t0 := time.Now()
	err := rn.stop()
	took := time.Since(t0)
	if took > cfg.DrainTimeout+2*time.Second {
		t.Errorf("Run returned %v after its context ended; want within drain_timeout (%v)", took, cfg.DrainTimeout)
	}
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if st := e.led.state(wid("a")); st != statePending {
		t.Errorf("a: ledger %q, want pending (the mark never landed)", st)
	}
	if c := e.committed()[0]; c != -1 {
		t.Errorf("committed %d, want -1 (a's workflow is not marked)", c)
	}
}

// shortDrainMarkRTT is a MarkStarted's round trip in the adversary 32
// tests: PostgreSQL in another zone, or a loaded one (the fake ledger
// answers at once otherwise).
const shortDrainMarkRTT = 20 * time.Millisecond

// With a starts.mark_interval above the drain_timeout (1.5s against the
// smallest drain Validate accepts, 1s; with the default 250ms and a
// drain_timeout of 200ms before Validate refused it), a record whose
// workflow was started just after a mark (its start released by that
// mark, so it waits for the marker's next tick, an interval later) and
// then the router stopped: the drain's three quarters see no tick, and the
// marker's final flush gets drain_timeout/16 (Run's
// stopStarts(deadline-reserve*3/4)) if the drain is not hurried. The
// config must either be refused by Validate naming kafka.drain_timeout (or
// starts.mark_interval), or work: a's started workflow marked and its
// record committed by the shutdown. Failed every run before a486b0e (with
// 200ms and 250ms): a's mark was cut by the final flush's deadline, a
// stayed pending and uncommitted, and every shutdown of such a router
// re-drove what it had started. (adversary 32)
func TestShutdownWithADrainTimeoutBelowTheMarkIntervalMarksAndCommitsWhatStarted(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	def := DefaultConfig()
	cfg := e.config()
	cfg.DrainTimeout = minDrainTimeout
	cfg.Starts.MarkInterval = cfg.DrainTimeout * 3 / 2
	cfg.RevokeTimeout = def.RevokeTimeout // above mark_interval (Validate)
	if err := cfg.Validate(); err != nil {
		if strings.Contains(err.Error(), "drain_timeout") || strings.Contains(err.Error(), "starts.mark_interval") {
			return // refused, naming the field: the guarantee holds
		}
		t.Fatalf("Validate: %v", err)
	}
	releaseA := e.starter.block(wid("a"))
	defer releaseA()
	var mu sync.Mutex
	var marks []time.Time
	e.led.mu.Lock()
	e.led.markGate = func([]int32) {
		mu.Lock()
		marks = append(marks, time.Now())
		mu.Unlock()
		releaseA() // a starts just after this tick's mark: its own waits for the next tick
		time.Sleep(shortDrainMarkRTT)
	}
	e.led.mu.Unlock()
	e.produce(0, "s", "v")
	e.produce(0, "a", "v")
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool {
		return len(e.starter.executionsOf(wid("a"))) == 1 && e.led.state(wid("s")) == stateStarted
	}, func() string { return "s not marked, or a not started" })
	mu.Lock()
	since := time.Since(marks[0])
	mu.Unlock()
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("stopped %v after s's mark; Run returned %v after cancel", since.Round(time.Millisecond), rn.took.Round(time.Millisecond))
	if rn.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run returned %v after cancel; want within drain_timeout (%v) + 1s", rn.took, cfg.DrainTimeout)
	}
	if st := e.led.state(wid("a")); st != stateStarted {
		t.Errorf("a: ledger %q after shutdown, want started (its workflow was started before the stop)", st)
	}
	if c := e.committed()[0]; c != 2 {
		mu.Lock()
		t.Errorf("committed %d, want 2 (s and a started before the stop; marks at %v)", c, fmt.Sprint(marks))
		mu.Unlock()
	}
}

// A shutdown that waits out its drain (a start hangs: h), while a tick's
// mark of records started before the stop (a) is still on its way when
// the drain's three quarters end: the work context's cancel cuts that mark
// short (the marker's tick flush runs under the work context), and its
// records are ended not ok, rather than left to the marker's final flush,
// which has its own deadline to mark exactly such records. With the default
// mark interval (250ms) and drain_timeout (1s here, the default 20s alike
// with a start hung past 15s). The mark in flight is made to span the
// moment (the fake ledger's gate holds it until the work context ends; a
// real mark of a few ms does with a probability of its round trip over
// the interval per such shutdown). Wants a marked and committed (the final
// flush re-sends it: a mark is idempotent); failed every run before a486b0e: a stays pending
// and uncommitted, its started workflow re-driven on redelivery.
// (adversary 32)
func TestShutdownMarksAStartedBatchWhoseTickMarkTheDrainsEndCutShort(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	def := DefaultConfig()
	cfg := e.config()
	cfg.Starts.MarkInterval = def.Starts.MarkInterval
	cfg.RevokeTimeout = def.RevokeTimeout
	cfg.DrainTimeout = minDrainTimeout
	releaseA, releaseH := e.starter.block(wid("a")), e.starter.block(wid("h"))
	defer releaseA()
	defer releaseH()
	var stopping atomic.Bool
	var workDone <-chan struct{}
	var cutShort atomic.Bool
	e.led.mu.Lock()
	e.led.markGate = func([]int32) {
		releaseA() // a starts just after the first mark (s's)
		if stopping.Load() {
			<-workDone // on its way when the drain's three quarters end
			cutShort.Store(true)
		}
	}
	e.led.mu.Unlock()
	e.produce(0, "s", "v")
	e.produce(0, "a", "v")
	e.produce(0, "h", "v")
	rn := e.start("r1", cfg)
	workDone = rn.r.workCtx.Done()
	eventually(t, 10*time.Second, func() bool {
		return len(e.starter.executionsOf(wid("a"))) == 1 && e.led.state(wid("s")) == stateStarted && e.starter.heldCount(wid("h")) == 1
	}, func() string { return "s not marked, a not started, or h's start not held" })
	stopping.Store(true)
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("Run returned %v after cancel; a's tick mark cut short: %v", rn.took.Round(time.Millisecond), cutShort.Load())
	if rn.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run returned %v after cancel; want within drain_timeout (%v) + 1s", rn.took, cfg.DrainTimeout)
	}
	if st := e.led.state(wid("a")); st != stateStarted {
		t.Errorf("a: ledger %q after shutdown, want started (its workflow was started before the stop)", st)
	}
	if c := e.committed()[0]; c != 2 {
		t.Errorf("committed %d, want 2 (s and a; h's start hangs)", c)
	}
}

// The default config's shutdown (drain_timeout 20s, mark_interval 250ms):
// a record started just after a mark, the router stopped at once, is
// marked by the next tick within the drain, and committed; Run returns
// about one mark interval after the cancel, not the drain's whole three
// quarters. (adversary 32)
func TestShutdownWithTheDefaultDrainAndMarkIntervalMarksAndCommitsWhatStarted(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	def := DefaultConfig()
	cfg := e.config()
	cfg.Starts.MarkInterval = def.Starts.MarkInterval
	cfg.RevokeTimeout = def.RevokeTimeout
	cfg.DrainTimeout = def.DrainTimeout
	e.afterFirstMark(shortDrainMarkRTT, "a")
	e.produce(0, "s", "v")
	e.produce(0, "a", "v")
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool {
		return len(e.starter.executionsOf(wid("a"))) == 1 && e.led.state(wid("s")) == stateStarted
	}, func() string { return "s not marked, or a not started" })
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rn.took > def.Starts.MarkInterval+time.Second {
		t.Errorf("Run returned %v after cancel; want about one mark interval (%v)", rn.took, def.Starts.MarkInterval)
	}
	if st := e.led.state(wid("a")); st != stateStarted {
		t.Errorf("a: ledger %q after shutdown, want started", st)
	}
	if c := e.committed()[0]; c != 2 {
		t.Errorf("committed %d, want 2", c)
	}
}

// A member the group dropped takes partition 0 in the ledger before every
// mark of its records: a's mark is refused, taken again, refused four
// times, then waits (markDue) holding its partition (s.hold), when the
// router stops. The drain hurries the marker (a486b0e) and its due marks
// are refused again; its end cuts them short or leaves them to the final
// flush (early returns). Wants: Run returns within drain_timeout + 1 s,
// no job left held, no record in flight (nor a negative count: a record
// ended twice), b (partition 1, never refused) marked and committed, and
// partition 0 committed past a only if a's mark landed. (adversary 32b)
func TestShutdownWithAMarkHeldByTheFenceDuringTheHurriedDrainEndsItWithinTheDrain(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	def := DefaultConfig()
	cfg := e.config()
	cfg.Starts.MarkInterval = def.Starts.MarkInterval
	cfg.RevokeTimeout = def.RevokeTimeout
	cfg.DrainTimeout = 2 * time.Second
	bumps, stopGhost := e.ghostKeepsTaking(0, false)
	defer stopGhost()
	e.produce(0, "a", "v")
	e.produce(1, "b", "v")
	rn := e.start("r1", cfg)
	held := func() int {
		rn.r.starts.mu.Lock()
		defer rn.r.starts.mu.Unlock()
		return len(rn.r.starts.heldJobs)
	}
	eventually(t, 10*time.Second, func() bool {
		return held() == 1 && e.led.state(wid("b")) == stateStarted && e.committed()[1] == 1
	}, func() string {
		return fmt.Sprintf("held %d, bumps %d, b %q, committed %v", held(), bumps.Load(), e.led.state(wid("b")), e.committed())
	})
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("Run returned %v after cancel; ghost's takes %d; a %q", rn.took.Round(time.Millisecond), bumps.Load(), e.led.state(wid("a")))
	if rn.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run returned %v after cancel; want within drain_timeout (%v) + 1s", rn.took, cfg.DrainTimeout)
	}
	if n := held(); n != 0 {
		t.Errorf("%d jobs still held after Run", n)
	}
	rn.r.commits.flight.mu.Lock()
	n := rn.r.commits.flight.n
	rn.r.commits.flight.mu.Unlock()
	if n != 0 {
		t.Errorf("%d records in flight after Run, want 0 (negative: ended twice)", n)
	}
	c := e.committed()
	if c[0] > 0 && e.led.state(wid("a")) != stateStarted {
		t.Errorf("partition 0 committed %d while a is %q: committed before its workflow was marked", c[0], e.led.state(wid("a")))
	}
	if c[1] != 1 {
		t.Errorf("partition 1 committed %d, want 1", c[1])
	}
}

// The drain with Temporal hanging (h's start never answers) and every
// mark failing (PostgreSQL down) from the moment the router stops: the
// drain hurries the marker (a486b0e), whose mark of a (started just after
// s's mark, before the stop) retries under the work context until the
// drain's end cuts it short and leaves it to the final flush, which fails
// too. Wants: Run returns within drain_timeout + 1 s, nothing in flight
// after (nor negative), a still pending and not committed (offset 1: s
// only at most). (adversary 32b)
func TestShutdownWithTemporalHangingAndMarksFailingDuringTheHurriedDrainIsBounded(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	def := DefaultConfig()
	cfg := e.config()
	cfg.Starts.MarkInterval = def.Starts.MarkInterval
	cfg.RevokeTimeout = def.RevokeTimeout
	cfg.DrainTimeout = minDrainTimeout
	releaseH := e.starter.block(wid("h"))
	defer releaseH()
	e.afterFirstMark(shortDrainMarkRTT, "a")
	e.produce(0, "s", "v")
	e.produce(0, "a", "v")
	e.produce(0, "h", "v")
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool {
		return len(e.starter.executionsOf(wid("a"))) == 1 && e.led.state(wid("s")) == stateStarted && e.starter.heldCount(wid("h")) == 1
	}, func() string { return "s not marked, a not started, or h's start not held" })
	e.led.mu.Lock()
	e.led.markFail = failer{n: -1, err: errTransient}
	e.led.mu.Unlock()
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("Run returned %v after cancel; MarkStarted calls %d", rn.took.Round(time.Millisecond), e.led.callCount("MarkStarted"))
	if rn.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run returned %v after cancel; want within drain_timeout (%v) + 1s", rn.took, cfg.DrainTimeout)
	}
	rn.r.commits.flight.mu.Lock()
	n := rn.r.commits.flight.n
	rn.r.commits.flight.mu.Unlock()
	if n != 0 {
		t.Errorf("%d records in flight after Run, want 0 (negative: ended twice)", n)
	}
	if st := e.led.state(wid("a")); st != statePending {
		t.Errorf("a: %q, want pending (every mark failed)", st)
	}
	if c := e.committed()[0]; c > 1 {
		t.Errorf("committed %d, want at most 1 (s): a's mark never landed", c)
	}
}

// The drain's end cuts short a mark the ledger's fence refused, rather
// than one that failed: a member the group dropped took partition 0 in
// the ledger (a late Own) just before the router stopped; during the
// drain, d's dead-letter mark is refused first, and its answer (the
// committer's fenced: the coordinator says partition 0 is still ours, so
// take it again) holds the fence's lock while its Own is slow (PostgreSQL
// slow: ownBound is 10 s); a's mark, hurried by the drain (a486b0e), is
// refused too and its marker waits for that lock when the drain's three
// quarters end. a486b0e leaves a mark that failed (not fenced) because
// the work context ended to the final flush, which takes the partition
// again under its own deadline and marks it; a refused one is ended
// unmarked instead (fenced returns nothing kept once its ctx ended, so a
// is abandoned as if the partition had moved, though the router still
// owns it). Wants a marked and committed (s and a started before the
// stop; d dead-lettered, h hung: committed 2). Failed every run before cea9233: a stays pending
// and partition 0 is committed at 1, a's started workflow re-driven on
// redelivery. (adversary 32b)
func TestShutdownMarksAStartedRecordWhoseRefusedMarkTheDrainsEndCutShort(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	def := DefaultConfig()
	cfg := e.config()
	cfg.Starts.MarkInterval = def.Starts.MarkInterval
	cfg.RevokeTimeout = def.RevokeTimeout
	cfg.DrainTimeout = 2 * time.Second
	releaseA, releaseD, releaseH := e.starter.block(wid("a")), e.starter.block(wid("d")), e.starter.block(wid("h"))
	defer releaseA()
	defer releaseD()
	defer releaseH()
	e.starter.failPermanent(wid("d"))
	e.produce(0, "s", "v")
	e.produce(0, "a", "v")
	e.produce(0, "d", "v")
	e.produce(0, "h", "v")
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool {
		return e.led.state(wid("s")) == stateStarted && e.starter.heldCount(wid("a")) == 1 &&
			e.starter.heldCount(wid("d")) == 1 && e.starter.heldCount(wid("h")) == 1
	}, func() string { return "s not marked, or a, d, h not held in their starts" })
	e.ghostOwn(0)
	workDone := rn.r.workCtx.Done()
	var ownEntered atomic.Bool
	entered := make(chan struct{})
	e.led.mu.Lock()
	e.led.ownGate = func(member string, _ []PartitionRef) {
		if member == "ghost" {
			return
		}
		if ownEntered.CompareAndSwap(false, true) {
			close(entered)
		}
		<-workDone // slow until the drain's end
	}
	e.led.mu.Unlock()
	stopped := make(chan error, 1)
	go func() { stopped <- rn.stop() }()
	eventually(t, 5*time.Second, func() bool { return rn.r.starts.hurried.Load() > 0 }, func() string { return "the drain never began" })
	releaseD() // refused for good by Temporal: dead-lettered, its mark refused by the fence
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("d's refused dead-letter mark never took partition 0 again")
	}
	marks := e.led.callCount("MarkStarted")
	releaseA() // started; its hurried mark is refused, and waits for the fence's lock
	eventually(t, 5*time.Second, func() bool { return e.led.callCount("MarkStarted") > marks }, func() string { return "a's mark never sent" })
	if err := <-stopped; err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("Run returned %v after cancel; MarkStarted calls %d, Own calls %d", rn.took.Round(time.Millisecond),
		e.led.callCount("MarkStarted"), e.led.callCount("Own"))
	if rn.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run returned %v after cancel; want within drain_timeout (%v) + 1s", rn.took, cfg.DrainTimeout)
	}
	if st := e.led.state(wid("a")); st != stateStarted {
		t.Errorf("a: ledger %q after shutdown, want started (its workflow was started before the stop, the partition still ours)", st)
	}
	if c := e.committed()[0]; c != 2 {
		t.Errorf("committed %d, want 2 (s and a; d's dead-letter mark and h's start cut short)", c)
	}
}

// cutShortMixedMark sets up adversary 32b's cut-short refusal with a
// second partition in the same mark: s (partition 0) is marked before the
// stop; a member the group dropped takes partition 0 in the ledger (a late
// Own) just before it; during the drain d's dead-letter mark is refused
// and its answer holds the fence's lock until the drain's end (ownGate);
// c (partition 1) is released and its mark holds the marker (markGate)
// until a (partition 0) and b (partition 1) are both started and queued:
// the marker's next, hurried, mark carries a and b together. The ledger
// refuses a's entry and writes b's (its fence held): the answer to the
// refusal waits for the lock until the drain's end cuts it short, and
// cea9233 keeps the whole batch, b's landed row included, for the final
// flush. afterCut, if set, runs at each mark after that one (the final
// flush's). It returns the runner after Run returned.
func cutShortMixedMark(t *testing.T, e *testEnv, afterCut func(ps []int32)) *runner {
	def := DefaultConfig()
	cfg := e.config()
	cfg.Starts.MarkInterval = def.Starts.MarkInterval
	cfg.RevokeTimeout = def.RevokeTimeout
	cfg.DrainTimeout = 2 * time.Second
	cfg.Starts.Concurrency = 8 // a, b, c, d, h held in their starts at once
	releaseA, releaseD, releaseH := e.starter.block(wid("a")), e.starter.block(wid("d")), e.starter.block(wid("h"))
	releaseB, releaseC := e.starter.block(wid("b")), e.starter.block(wid("c"))
	t.Cleanup(func() { releaseA(); releaseB(); releaseC(); releaseD(); releaseH() })
	e.starter.failPermanent(wid("d"))
	e.produce(0, "s", "v")
	e.produce(0, "a", "v")
	e.produce(0, "d", "v")
	e.produce(0, "h", "v")
	e.produce(1, "c", "v")
	e.produce(1, "b", "v")
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool {
		return e.led.state(wid("s")) == stateStarted && e.starter.heldCount(wid("a")) == 1 &&
			e.starter.heldCount(wid("d")) == 1 && e.starter.heldCount(wid("h")) == 1 &&
			e.starter.heldCount(wid("b")) == 1 && e.starter.heldCount(wid("c")) == 1
	}, func() string {
		return fmt.Sprintf("s %q; held a %d d %d h %d b %d c %d", e.led.state(wid("s")), e.starter.heldCount(wid("a")),
			e.starter.heldCount(wid("d")), e.starter.heldCount(wid("h")), e.starter.heldCount(wid("b")), e.starter.heldCount(wid("c")))
	})
	e.ghostOwn(0)
	workDone := rn.r.workCtx.Done()
	var ownEntered atomic.Bool
	entered := make(chan struct{})
	var cGated, abSeen atomic.Bool
	e.led.mu.Lock()
	e.led.ownGate = func(member string, _ []PartitionRef) {
		if member == "ghost" {
			return
		}
		if ownEntered.CompareAndSwap(false, true) {
			close(entered)
		}
		<-workDone // slow until the drain's end
	}
	e.led.markGate = func(ps []int32) {
		switch {
		case abSeen.Load():
			if afterCut != nil {
				afterCut(ps)
			}
		case slices.Contains(ps, 0) && slices.Contains(ps, 1):
			abSeen.Store(true)
		case len(ps) == 1 && ps[0] == 1 && cGated.CompareAndSwap(false, true):
			deadline := time.Now().Add(3 * time.Second)
			for time.Now().Before(deadline) && (len(e.starter.executionsOf(wid("a"))) == 0 || len(e.starter.executionsOf(wid("b"))) == 0) {
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(50 * time.Millisecond) // their jobs reach the mark queue
		}
	}
	e.led.mu.Unlock()
	stopped := make(chan error, 1)
	go func() { stopped <- rn.stop() }()
	eventually(t, 5*time.Second, func() bool { return rn.r.starts.hurried.Load() > 0 }, func() string { return "the drain never began" })
	releaseD() // refused for good by Temporal: dead-lettered, its mark refused by the fence
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("d's refused dead-letter mark never took partition 0 again")
	}
	releaseC()
	eventually(t, 5*time.Second, func() bool { return cGated.Load() }, func() string { return "c's mark never sent" })
	releaseA()
	releaseB()
	if err := <-stopped; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !abSeen.Load() {
		t.Fatalf("a and b were never marked together (test set-up)")
	}
	t.Logf("Run returned %v after cancel; MarkStarted calls %d, Own calls %d", rn.took.Round(time.Millisecond),
		e.led.callCount("MarkStarted"), e.led.callCount("Own"))
	if rn.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run returned %v after cancel; want within drain_timeout (%v) + 1s", rn.took, cfg.DrainTimeout)
	}
	rn.r.commits.flight.mu.Lock()
	n := rn.r.commits.flight.n
	rn.r.commits.flight.mu.Unlock()
	if n != 0 {
		t.Errorf("%d records in flight after Run, want 0 (negative: ended twice)", n)
	}
	rn.r.starts.mu.Lock()
	held := len(rn.r.starts.heldJobs)
	rn.r.starts.mu.Unlock()
	if held != 0 {
		t.Errorf("%d jobs still held after Run", held)
	}
	return rn
}

// Adversary 32c. A mark cut short by the drain's end (its refusal's
// answer waits for the fence's lock) carries a refused entry (a,
// partition 0) and one whose row it wrote (b, partition 1). cea9233 keeps
// the whole batch for the final flush, which sends it again: a is taken
// again and marked, b's row (already started) answers Recorded. Wants a
// and b started, partitions 0 and 1 committed past them (s, a; c, b),
// nothing in flight, nothing held, Run within drain_timeout + 1 s.
func TestShutdownEndsOkAMarkWhoseRowLandedInARefusedMarkTheDrainsEndCutShort(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	cutShortMixedMark(t, e, nil)
	if st := e.led.state(wid("a")); st != stateStarted {
		t.Errorf("a: ledger %q after shutdown, want started", st)
	}
	if st := e.led.state(wid("b")); st != stateStarted {
		t.Errorf("b: ledger %q after shutdown, want started", st)
	}
	if c := e.committed(); c[0] != 2 || c[1] != 2 {
		t.Errorf("committed %v, want 0:2 (s, a) and 1:2 (c, b)", c)
	}
}

// Adversary 32c. As above, but PostgreSQL fails every mark after the
// cut-short one (the final flush's). b's row landed in the cut-short mark
// (its partition's fence held): before cea9233 b ended ok there (fenced,
// not refused) and partition 1 was committed past it; cea9233 keeps it in
// the batch, and the final flush's failed mark ends it not ok, although
// its row is started and its partition still ours. Wants partition 1
// committed 2 (c, b) and b's row started; a (never marked) pending and
// partition 0 committed 1 (s). Failed every run from cea9233 until 294c051: partition 1 committed 1, b
// redelivered though its mark landed. (guarantee 2)
func TestShutdownCommitsAMarkWhoseRowLandedInACutShortRefusedMarkWhenTheFinalFlushFails(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	var failing atomic.Bool
	cutShortMixedMark(t, e, func([]int32) {
		if failing.CompareAndSwap(false, true) {
			e.led.mu.Lock()
			e.led.markFail = failer{n: -1, err: errTransient}
			e.led.mu.Unlock()
		}
	})
	if st := e.led.state(wid("b")); st != stateStarted {
		t.Errorf("b: ledger %q after shutdown, want started (its cut-short mark wrote it)", st)
	}
	if st := e.led.state(wid("a")); st != statePending {
		t.Errorf("a: ledger %q after shutdown, want pending (every mark after the cut-short one failed)", st)
	}
	c := e.committed()
	if c[1] != 2 {
		t.Errorf("partition 1 committed %d, want 2 (c, and b whose row landed)", c[1])
	}
	if c[0] > 1 {
		t.Errorf("partition 0 committed %d, want at most 1 (s): a never marked", c[0])
	}
}

// Adversary 32c. As above, but the member the group dropped takes
// partition 0 again before every mark after the cut-short one: the final
// flush's kept batch is refused over and over (a taken again each time).
// Wants: Run within drain_timeout + 1 s (the final flush stays within
// flushBy), nothing in flight or held (helper), b ended ok in the final
// flush's first mark (Recorded) and partition 1 committed 2 (c, b); a
// pending, partition 0 committed at most 1 (s).
func TestShutdownWithACutShortMarkRefusedOverAndOverInTheFinalFlushIsBounded(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	var takes atomic.Int32
	cutShortMixedMark(t, e, func(ps []int32) {
		if slices.Contains(ps, 0) {
			takes.Add(1)
			e.ghostOwn(0)
		}
	})
	t.Logf("ghost's takes after the cut-short mark: %d", takes.Load())
	if st := e.led.state(wid("b")); st != stateStarted {
		t.Errorf("b: ledger %q after shutdown, want started", st)
	}
	c := e.committed()
	if c[1] != 2 {
		t.Errorf("partition 1 committed %d, want 2 (c, b)", c[1])
	}
	if c[0] > 1 && e.led.state(wid("a")) != stateStarted {
		t.Errorf("partition 0 committed %d while a is %q", c[0], e.led.state(wid("a")))
	}
}
