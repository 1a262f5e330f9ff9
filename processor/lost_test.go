package processor

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// OnPartitionsLost as the client calls it: the broker answers a heartbeat
// with UNKNOWN_MEMBER_ID (the member was fenced), franz-go calls the
// router's lost callback, the start in flight is abandoned uncommitted,
// and after the rejoin the record is redelivered and started once.
func TestLostPartitionsThroughTheClient(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	w := wid("x")
	release := e.starter.block(w)
	defer release()
	e.produce(0, "x", "v")
	rn := e.start("r1", e.config())
	eventually(t, 10*time.Second, func() bool { return e.starter.heldCount(w) == 1 },
		func() string { return "x's start never reached Temporal" })

	var fenced atomic.Bool
	e.cluster.ControlKey(kmsg.Heartbeat.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		resp := req.(*kmsg.HeartbeatRequest).ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.UnknownMemberID.Code
		fenced.Store(true)
		return resp, nil, true
	})
	lost := func() float64 {
		var m dto.Metric
		if err := rn.r.m.partitionsGone.WithLabelValues("lost").Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	eventually(t, 10*time.Second, func() bool { return lost() == 1 },
		func() string { return fmt.Sprintf("fenced %v, partitions lost %v", fenced.Load(), lost()) })
	// The start in flight was abandoned with the partition; nothing was
	// committed for it.
	eventually(t, 5*time.Second, func() bool { return e.starter.heldCount(w) == 0 || e.starter.callCount(w) > 1 },
		func() string { return "x's start still held after the loss" })
	if c := e.committed()[0]; c != -1 {
		t.Fatalf("committed %d after the partition was lost", c)
	}
	release()
	e.waitCommittedToEnd(15 * time.Second)
	if n := len(e.starter.executionsOf(w)); n != 1 {
		t.Errorf("x: %d executions, want 1", n)
	}
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// Records of one poll are tracked under the assignment they were fetched
// in: no rebalance (revoke, loss, assignment) runs between a poll and the
// tracking of its records (kgo.BlockRebalanceOnPoll), so a partition
// revoked and assigned back meanwhile cannot take records of the older
// assignment. The test holds the poll loop right after a poll, has a
// second member join (a rebalance that moves a partition), and checks
// that nothing is revoked until the records are tracked.
func TestNoRebalanceBetweenPollAndTracking(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	e.produce(0, "a", "v")
	e.produce(1, "b", "v")
	hold := make(chan struct{})
	held := make(chan struct{})
	var once atomic.Bool
	cfg := e.config()
	cfg.RebalanceTimeout = 10 * time.Second // the member rejoins once it allows the rebalance
	rn1 := e.startWith("r1", cfg, func(r *Router, _ *prometheus.Registry) {
		r.afterPoll = func() {
			if once.CompareAndSwap(false, true) {
				close(held)
				<-hold
			}
		}
	})
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the router never polled")
	}
	revoked := func() float64 {
		var m dto.Metric
		if err := rn1.r.m.partitionsGone.WithLabelValues("revoked").Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	rn2 := e.start("r2", cfg)
	stays(t, 2*time.Second, func() bool { return revoked() == 0 },
		func() string { return "a partition was revoked between a poll and the tracking of its records" })
	close(hold)
	eventually(t, 15*time.Second, func() bool { return revoked() >= 1 },
		func() string { return "the second member never got a partition" })
	e.waitCommittedToEnd(15 * time.Second)
	for _, id := range []string{"a", "b"} {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
	}
	for _, rn := range []*runner{rn1, rn2} {
		if err := rn.stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
	}
}
