package processor

import (
	"fmt"
	"testing"
	"time"

	"github.com/dedupio/dedup/processor/decide"
)

// Shutdown while Temporal hangs (or fails transiently) and the start queue
// is full: Run never returns. The start queue is sized for "one start per
// record in flight" (2*(max_in_flight+max_poll_records)); an event that
// matches several routes has one start per route, so a poll can queue
// more starts than that. The claimer then waits in startPool.enqueue for
// room, which only a worker makes, and the workers are stuck in Temporal
// under their partitions' contexts, which end only at workCancel. But Run
// waits for the claimer (<-claimerDone) before the drain and workCancel:
// the drain timeout never starts counting, and Run waits for as long as
// Temporal does.
//
// Steps: (1) 3 routes match every event; max_in_flight 1, max_poll_records
// 4, one worker: the start queue holds 10. (2) 4 events are polled in one
// batch: 12 starts. (3) Temporal holds every start: the worker takes one,
// the queue takes 10, the claimer waits to enqueue the 12th. (4) Run's
// context is cancelled: Run must return within drain_timeout (2s) plus the
// final commit; it does not.
func TestShutdownReturnsWhenTheStartQueueIsFull(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	cfg := e.config()
	cfg.MaxInFlight, cfg.MaxPollRecords, cfg.Starts.Concurrency = 1, 4, 1
	routes := []string{"ra", "rb", "rc"}
	cfg.Routes = nil
	for _, id := range routes {
		cfg.Routes = append(cfg.Routes, decide.Route{ID: id, Match: decide.Match{Type: testType}, WorkflowType: "W", TaskQueue: "q"})
	}
	var releases []func()
	releaseAll := func() {
		for _, r := range releases {
			r()
		}
	}
	defer releaseAll()
	ids := []string{"a", "b", "c", "d"}
	for _, id := range ids {
		for _, rt := range routes {
			releases = append(releases, e.starter.block(decide.WorkflowID(rt, id)))
		}
	}
	for _, id := range ids {
		e.produce(0, id, "v")
	}
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool {
		return len(rn.r.starts.startQ) == cap(rn.r.starts.startQ)
	}, func() string {
		return fmt.Sprintf("start queue %d of %d", len(rn.r.starts.startQ), cap(rn.r.starts.startQ))
	})
	time.Sleep(100 * time.Millisecond) // the claimer reaches enqueue of the 12th start
	t0 := time.Now()
	rn.cancel()
	select {
	case err := <-rn.done:
		rn.once.Do(func() { rn.err = err })
		t.Logf("Run returned after %s: %v", time.Since(t0), err)
	case <-time.After(cfg.DrainTimeout + 5*time.Second):
		releaseAll() // so the test can clean up
		took := time.Since(t0)
		err := <-rn.done
		rn.once.Do(func() { rn.err = err })
		t.Fatalf("Run did not return within %s of the cancel (drain_timeout %s) while Temporal held the starts and the start queue was full; it returned only once Temporal answered (%s)",
			took, cfg.DrainTimeout, time.Since(t0))
	}
}
