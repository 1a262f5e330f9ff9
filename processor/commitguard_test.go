package processor

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
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

// The guard does not stop a router from repairing an offset that is past
// the log (the topic was truncated or recreated below it): the group's
// offset there is where it was when the router was assigned the partition,
// which is no other member's progress. The client restarts from the log
// start, and the router's commits bring the group's offset back into the
// log.
func TestCommitRepairsAnOffsetPastTheLog(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	for i := 0; i < 10; i++ {
		e.produce(0, "e"+string(rune('a'+i)), "v")
	}
	// The empty group was left at 1000 (a simple commit, as after the
	// topic was recreated with fewer records).
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: testTopic, Partition: 0, At: 1000, LeaderEpoch: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if resp, err := e.adm.CommitOffsets(ctx, e.group, offs); err != nil || resp.Error() != nil {
		t.Fatalf("committing 1000 for the empty group: %v %v", err, resp.Error())
	}
	rn := e.start("r1", e.config())
	eventually(t, 15*time.Second, func() bool { return e.committed()[0] == 10 }, func() string {
		return fmt.Sprintf("group offset %d, want 10 (the router's prefix, repairing 1000)", e.committed()[0])
	})
	if n := len(e.starter.executionCounts()); n != 10 {
		t.Errorf("%d workflows started, want 10", n)
	}
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// the commit ticker reads the finished prefix (2), then the group's
// offsets for its guard; meanwhile the partition's last record finishes
// and the revoke commits 3 and forgets the partition; the ticker's commit
// of 2, sent after it, must not land: committed offsets never decrease.
// The test holds the ticker's commit between its read of the prefix and
// its read of the group's offsets, runs the revoke, then lets the ticker
// go on.
func TestTickerCommitNeverLandsBehindTheRevokes(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	e.produce(0, "a", "v")
	e.produce(0, "b", "v")
	e.produce(0, "c", "v")
	release := e.starter.block(wid("c"))
	defer release()

	entered := make(chan struct{})
	gate := make(chan struct{})
	var once sync.Once
	var rt *Router
	rn := e.startWith("r1", e.config(), func(r *Router, _ *prometheus.Registry) {
		rt = r
		r.commits.groupCommitted = func(ctx context.Context, topics []string) (map[topicPartition]int64, error) {
			first := false
			once.Do(func() { first = true })
			if first { // the ticker's first commit: prefix 2 (c is held)
				close(entered)
				select {
				case <-gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return map[topicPartition]int64{}, nil
		}
	})
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the ticker never committed")
	}
	if got := e.committed()[0]; got != -1 {
		t.Fatalf("committed %d before the ticker's commit was let go", got)
	}
	// c finishes; the revoke commits what finished (3).
	release()
	eventually(t, 10*time.Second, func() bool { return e.led.state(wid("c")) == stateStarted },
		func() string { return "c never marked started" })
	revoked := make(chan struct{})
	go func() {
		defer close(revoked)
		rt.commits.revoked(context.Background(), nil, map[string][]int32{testTopic: {0}})
	}()
	select {
	case <-revoked:
	case <-time.After(500 * time.Millisecond): // the revoke waits for the ticker's commit
	}
	close(gate)
	select {
	case <-revoked:
	case <-time.After(10 * time.Second):
		t.Fatal("the revoke never returned")
	}
	// Let the ticker's commit land, if it is to land.
	time.Sleep(300 * time.Millisecond)
	if got := e.committed()[0]; got != 3 {
		t.Fatalf("group's committed offset %d after the revoke committed 3: the ticker's older commit landed after it", got)
	}
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := e.committed()[0]; got != 3 {
		t.Fatalf("group's committed offset %d after stop, want 3", got)
	}
}
