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
		e.cluster.SleepControl(func() {
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
