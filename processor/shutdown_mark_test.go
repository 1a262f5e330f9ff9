package processor

import (
	"fmt"
	"strings"
	"sync"
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
	cfg.DrainTimeout = time.Second
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

// With the default starts.mark_interval (250ms since 0b3b525) and a
// drain_timeout below it (200ms: Validate accepts it), a record whose
// workflow was started just after a mark (its start released by that
// mark, so it waits for the marker's next tick, 250ms later) and then the
// router stopped: the drain's three quarters (150ms) see no tick, and the
// marker's final flush gets drain_timeout/16 (12.5ms, Run's
// stopStarts(deadline-reserve*3/4)), less than one mark's round trip
// (20ms). The config must either be refused by Validate naming
// kafka.drain_timeout (or starts.mark_interval), or work: a's started
// workflow marked and its record committed by the shutdown. Holds with the
// old default (100ms: a tick lands within the drain). Fails now: a's mark
// is cut by the final flush's deadline, a stays pending and uncommitted,
// and every shutdown of such a router re-drives what it had started.
// (adversary 32)
func TestShutdownWithADrainTimeoutBelowTheDefaultMarkIntervalMarksAndCommitsWhatStarted(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	def := DefaultConfig()
	cfg := e.config()
	cfg.Starts.MarkInterval = def.Starts.MarkInterval
	cfg.RevokeTimeout = def.RevokeTimeout // above mark_interval (Validate)
	cfg.DrainTimeout = 200 * time.Millisecond
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
