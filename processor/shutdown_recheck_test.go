package processor

import (
	"fmt"
	"testing"
	"time"

	"github.com/dedupio/dedup/processor/decide"
)

// A recheck re-submitted after the drain is queued for workers that are
// gone: its record never ends, and leaving the group waits revoke_timeout
// for it. Shutdown takes drain_timeout + revoke_timeout.
//
// The marker's final flush (after the workers stopped and stopStarts
// drained the start queue) ends its jobs through done -> release, which
// re-submits their rechecks in a goroutine: submit(s.workCtx, ...) puts a
// new job in the in-flight map and enqueue selects between `startQ <- j`
// (room: the queue was just drained) and `<-s.workCtx.Done()` (closed).
// Go picks at random: half the time the job goes into a queue nobody reads
// any more. The recheck's record stays in flight; r.cl.Close() leaves the
// group, which calls committer.revoked, which waits revoke_timeout for
// the partition's records to end. (The job also stays in `starting`.)
//
// Steps, per workflow (N of them, so that at least one coin falls the
// wrong way): (1) a first router starts run 1 and commits; run 1 fails.
// (2) Router r1 (mark_interval long, so started jobs wait in the marker's
// batch until the final flush, as a start answered in the last tick
// before close(markQ) does): copy A@p0 re-runs, run 2 is created, A's job
// sits in the marker. (3) Copy B@p1 (a duplicate, allow_*) becomes a
// recheck of A's job. (4) Stop: the drain waits drain_timeout (A and B in
// flight), workCancel, workers stop, startQ is drained (empty),
// close(markQ): the final flush marks A's job, done(A, true), release
// re-submits B in a goroutine: new job, enqueue picks startQ or Done.
// (5) Run returns only after revoke_timeout (10s, the default) more.
func TestShutdownDoesNotWaitRevokeTimeoutForARecheckQueuedAfterTheDrain(t *testing.T) {
	waitsOnTimers(t)
	const n = 10
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	cfg.Routes[0].IDReusePolicy = decide.ReuseAllowDuplicateFailedOnly
	id := func(i int) string { return fmt.Sprintf("x%02d", i) }
	for i := 0; i < n; i++ {
		e.produce(0, id(i), "v")
	}
	r0 := e.start("r0", cfg)
	e.waitCommittedToEnd(10 * time.Second)
	if err := r0.stop(); err != nil {
		t.Fatalf("r0: %v", err)
	}
	for i := 0; i < n; i++ {
		e.starter.fail(wid(id(i)))
	}

	cfg1 := cfg
	cfg1.Starts.MarkInterval = time.Hour
	cfg1.Starts.MarkBatch = 10 * n
	cfg1.DrainTimeout = 2 * time.Second
	cfg1.RevokeTimeout = 2 * time.Hour // above mark_interval (Validate): a leave that waited for it would hang the test
	rn := e.start("r1", cfg1)
	for i := 0; i < n; i++ {
		e.produce(0, id(i), "v") // copy A: re-run
	}
	eventually(t, 10*time.Second, func() bool {
		for i := 0; i < n; i++ {
			if len(e.starter.executionsOf(wid(id(i)))) != 2 {
				return false
			}
		}
		return true
	}, func() string { return "the re-runs never created run 2" })
	for i := 0; i < n; i++ {
		e.produce(1, id(i), "v") // copy B: a recheck of A's job
	}
	eventually(t, 10*time.Second, func() bool {
		for i := 0; i < n; i++ {
			if waitersOf(rn.r, wid(id(i))) != 1 {
				return false
			}
		}
		return true
	}, func() string {
		return fmt.Sprintf("copy B is not a recheck of A's job (%d)", waitersOf(rn.r, wid(id(0))))
	})

	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	rn.r.starts.mu.Lock()
	left := len(rn.r.starts.starting)
	rn.r.starts.mu.Unlock()
	queued := len(rn.r.starts.startQ)
	rn.r.commits.flight.mu.Lock()
	inFlight := rn.r.commits.flight.n
	rn.r.commits.flight.mu.Unlock()
	t.Logf("Run returned %s after cancel; after Run: %d jobs in the in-flight map, %d in the start queue, %d records in flight", rn.took, left, queued, inFlight)
	if limit := cfg1.DrainTimeout + 5*time.Second; rn.took > limit {
		t.Fatalf("Run returned %s after cancel, over drain_timeout (%s) + 5s: rechecks re-submitted by the final flush were queued after the drain (start queue %d, in-flight map %d, records in flight %d after Run) and leaving the group waited revoke_timeout (%s) for their records",
			rn.took, cfg1.DrainTimeout, queued, left, inFlight, cfg1.RevokeTimeout)
	}
}
