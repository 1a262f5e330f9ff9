package processor

import (
	"fmt"
	"testing"
	"time"
)

// allow_duplicate_failed_only, end to end through the router: a
// redelivered event whose run is still open or completed never runs again;
// one whose run failed starts exactly one new run (generation 2), even when
// two copies of it arrive together; under reject_duplicate a failed run is
// never followed.
func TestFailedOnlyRerunsOnceAfterAFailure(t *testing.T) {
	for _, policy := range []ReusePolicy{ReuseAllowDuplicateFailedOnly, ReuseRejectDuplicate} {
		t.Run(string(policy), func(t *testing.T) {
			e := newTestEnv(t, 2, envOpt{})
			cfg := e.config()
			cfg.Routes[0].IDReusePolicy = policy
			w := wid("x")
			e.produce(0, "x", "v")
			rn := e.start("r1", cfg)
			e.waitCommittedToEnd(10 * time.Second)
			runs := func() int { return len(e.starter.executionsOf(w)) }
			if runs() != 1 || e.led.state(w) != stateStarted {
				t.Fatalf("first delivery: %d runs, ledger %q", runs(), e.led.state(w))
			}

			// Redelivered while the run is open: nothing happens.
			e.produce(1, "x", "v")
			e.waitCommittedToEnd(10 * time.Second)
			if runs() != 1 {
				t.Fatalf("redelivery of an open run started %d runs", runs())
			}

			// The run fails; two copies are redelivered, on both partitions.
			e.starter.fail(w)
			e.produce(0, "x", "v")
			e.produce(1, "x", "v")
			e.waitCommittedToEnd(10 * time.Second)
			want := 1
			if policy == ReuseAllowDuplicateFailedOnly {
				want = 2
			}
			if runs() != want {
				t.Fatalf("after a failed run and two redeliveries: %d runs, want %d", runs(), want)
			}
			if policy == ReuseAllowDuplicateFailedOnly {
				if g := e.starter.executionsOf(w)[1].req.Generation; g != 2 {
					t.Errorf("second run's generation %d, want 2", g)
				}
				if st := e.led.state(w); st != stateStarted {
					t.Errorf("ledger %q after the rerun, want started", st)
				}
			}

			// Redelivered again while the newest run is open: nothing.
			e.produce(0, "x", "v")
			e.waitCommittedToEnd(10 * time.Second)
			if runs() != want {
				t.Fatalf("redelivery after the rerun: %d runs, want %d", runs(), want)
			}
			if err := rn.stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if got := e.dlqReasons(); len(got) != 0 {
				t.Errorf("dead letters %v", got)
			}
			t.Log(fmt.Sprintf("%s: %d runs, ledger calls Rerun=%d", policy, runs(), e.led.callCount("Rerun")))
		})
	}
}
