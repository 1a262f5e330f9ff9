package processor

import (
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
