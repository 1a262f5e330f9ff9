package processor

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Records that retention deleted before the group read them are counted
// (dedup_records_lost_total), not skipped in silence; the lag of the
// partition goes to 0 once the rest is committed, and its series goes
// away with the partition.
func TestRetentionGapIsCountedAndLagFollowsThePartition(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	for _, id := range []string{"a", "b", "c"} {
		e.produce(0, id, "v")
	}
	first := e.start("r1", e.config())
	e.waitCommittedToEnd(10 * time.Second)
	if err := first.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// Offsets 3..7; retention then deletes everything before 6, so 3, 4
	// and 5 are never read.
	for _, id := range []string{"d", "e", "f", "g", "h"} {
		e.produce(0, id, "v")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e.adm.DeleteRecords(ctx, kadm.Offsets{testTopic: {0: {Topic: testTopic, Partition: 0, At: 6}}}); err != nil {
		t.Fatal(err)
	}

	var reg *prometheus.Registry
	rn := e.startWith("r2", e.config(), func(_ *Router, r *prometheus.Registry) { reg = r })
	e.waitCommittedToEnd(10 * time.Second)
	lost := func() float64 {
		var m dto.Metric
		if err := rn.r.m.lost.WithLabelValues(testTopic).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	// The gap check runs beside the poll loop.
	eventually(t, 5*time.Second, func() bool { return lost() == 3 },
		func() string { return fmt.Sprintf("%v records counted lost, want 3 (offsets 3..5)", lost()) })
	for _, id := range []string{"d", "e", "f"} {
		if n := e.starter.callCount(wid(id)); n != 0 {
			t.Errorf("%s was deleted before it was read, yet started %d times", id, n)
		}
	}
	for _, id := range []string{"g", "h"} {
		if n := e.starter.callCount(wid(id)); n != 1 {
			t.Errorf("%s: %d start calls, want 1", id, n)
		}
	}
	eventually(t, 5*time.Second, func() bool { n, sum := lagOf(t, reg); return n == 1 && sum == 0 },
		func() string {
			n, sum := lagOf(t, reg)
			return fmt.Sprintf("dedup_consumer_lag: %d series summing to %v, want 1 at 0", n, sum)
		})

	// Revoked (the committer's callback, called directly): the series goes,
	// and the lag loop does not bring it back for a partition not owned.
	rn.r.commits.revoked(t.Context(), nil, map[string][]int32{testTopic: {0}})
	stays(t, 3*e.config().LagInterval, func() bool { n, _ := lagOf(t, reg); return n == 0 },
		func() string {
			n, _ := lagOf(t, reg)
			return fmt.Sprintf("%d dedup_consumer_lag series after the revoke", n)
		})
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
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
