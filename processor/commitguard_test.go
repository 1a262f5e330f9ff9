package processor

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// A commit never moves the group's committed offset backwards: while the
// group's offset (as the router reads it before each commit) is past the
// router's own finished prefix (another member owned the partition since: a
// stale owner let back into the group), the router leaves the partition
// out of its commit; once its prefix passes the group's, it commits again.
// (TestFaultZombie saw kfake let a stalled router back in with its old
// position and accept its commits: the offset went from 672 back to 380.)
func TestCommitsNeverGoBackwards(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	var mu sync.Mutex
	ahead := int64(1000) // what "another member" committed
	groupAt := func(_ context.Context, topics []string) (map[topicPartition]int64, error) {
		mu.Lock()
		defer mu.Unlock()
		return map[topicPartition]int64{{testTopic, 0}: ahead}, nil
	}
	for i := 0; i < 10; i++ {
		e.produce(0, "e"+string(rune('a'+i)), "v")
	}
	var r *Router
	rn := e.startWith("r1", e.config(), func(rt *Router, _ *prometheus.Registry) {
		r = rt
		rt.commits.groupCommitted = groupAt
	})
	behind := func() float64 {
		var m dto.Metric
		if err := r.m.commits.WithLabelValues("behind").Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	eventually(t, 10*time.Second, func() bool { return behind() >= 2 }, func() string { return "the router never held back a commit behind the group's" })
	if got := e.committed()[0]; got != -1 {
		t.Fatalf("the router committed %d while the group was at 1000", got)
	}
	if n := len(e.starter.executionCounts()); n != 10 {
		t.Errorf("%d workflows started, want 10 (held-back commits do not hold back work)", n)
	}

	// The group's offset is behind the router's prefix (10): it commits.
	mu.Lock()
	ahead = 4
	mu.Unlock()
	e.waitCommittedToEnd(10 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}
