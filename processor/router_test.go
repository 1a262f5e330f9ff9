package processor

import (
	"fmt"
	"testing"
	"time"
)

// One execution per workflow ID, every ledger row started, every offset
// committed, nothing dead-lettered: duplicates in one poll batch (same and
// other partition) and in later batches (once started) are skipped.
func TestHappyPathDuplicatesOneExecutionEach(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	const n = 30
	id := func(i int) string { return fmt.Sprintf("e%02d", i) }
	// First batch: every event on its partition, a copy on the other
	// partition, and every third one twice on its own partition.
	for i := 0; i < n; i++ {
		p := int32(i % 2)
		e.produce(p, id(i), "v")
		e.produce(1-p, id(i), "v")
		if i%3 == 0 {
			e.produce(p, id(i), "v")
		}
	}
	rn := e.start("r1", e.config())
	e.waitCommittedToEnd(10 * time.Second)
	// Later batches: every event again (now started: duplicates), and new
	// ones with their own copies.
	for i := 0; i < n+10; i++ {
		e.produce(int32(i%2), id(i), "v")
		if i >= n {
			e.produce(int32(1-i%2), id(i), "v")
		}
	}
	e.waitCommittedToEnd(10 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for i := 0; i < n+10; i++ {
		if ex := e.starter.executionsOf(wid(id(i))); len(ex) != 1 {
			t.Errorf("%s: %d executions, want 1", id(i), len(ex))
		}
		if st := e.led.state(wid(id(i))); st != stateStarted {
			t.Errorf("%s: ledger state %q, want started", id(i), st)
		}
	}
	if got := len(e.starter.executionCounts()); got != n+10 {
		t.Errorf("%d workflows started, want %d", got, n+10)
	}
	if dl := e.dlq.recorded(); len(dl) != 0 {
		t.Errorf("dead letters: %+v", dl)
	}
	if !e.atEnd() {
		t.Errorf("after Run: committed %v, ends %v", e.committed(), e.ends())
	}
}

// A row pending with payload A (a previous run claimed it and crashed
// before starting) and a copy B of the same event ID with another payload:
// whatever the order B and A are polled in, the workflow starts once, with
// A; B is dead-lettered as a conflict; both offsets are committed.
func TestConflictingCopyBeforeOriginal(t *testing.T) {
	check := func(t *testing.T, e *testEnv, offB int64, pB int32) {
		t.Helper()
		ex := e.starter.executionsOf(wid("e1"))
		if len(ex) != 1 {
			t.Fatalf("%d executions, want 1", len(ex))
		}
		if got := string(ex[0].req.Input.Data); got != string(value("e1", "A")) {
			t.Errorf("started with data %s, want A's", got)
		}
		if st := e.led.state(wid("e1")); st != stateStarted {
			t.Errorf("ledger state %q, want started", st)
		}
		dl := e.dlq.recorded()
		if len(dl) != 1 || dl[0].Reason != string(ReasonConflict) || dl[0].Partition != pB || dl[0].Offset != offB {
			t.Errorf("dead letters %+v, want B (partition %d offset %d) as conflict", dl, pB, offB)
		}
		if got := e.dlqReasons(); len(got) != 1 || got[string(ReasonConflict)] != 1 {
			t.Errorf("dead-letter topic holds %v, want one conflict", got)
		}
	}
	// bFirst reports whether one claim held B before A.
	bFirst := func(e *testEnv, hashB [32]byte) bool {
		for _, c := range e.led.claimLog() {
			for _, in := range c {
				if in.WorkflowID == wid("e1") {
					if in.PayloadHash == hashB {
						return len(c) > 1
					}
					break
				}
			}
		}
		return false
	}
	t.Run("same batch", func(t *testing.T) {
		// B on one partition, A on the other, produced before the router
		// runs: one poll. Which partition the client returns first is up
		// to it, so both placements are tried, and B is polled first in
		// at least one of them; a third case puts B before A on one
		// partition, where the order is certain.
		sawBFirst := false
		for _, c := range []struct {
			name   string
			pB, pA int32
		}{{"B on 1, A on 0", 1, 0}, {"B on 0, A on 1", 0, 1}, {"B then A on 0", 0, 0}} {
			t.Run(c.name, func(t *testing.T) {
				e := newTestEnv(t, 2, envOpt{})
				hashA, hashB := e.hashOf("e1", "A"), e.hashOf("e1", "B")
				e.led.seed(wid("e1"), statePending, hashA)
				offB := e.produce(c.pB, "e1", "B")
				e.produce(c.pA, "e1", "A")
				rn := e.start("r1", e.config())
				e.waitCommittedToEnd(10 * time.Second)
				if err := rn.stop(); err != nil {
					t.Fatalf("Run: %v", err)
				}
				check(t, e, offB, c.pB)
				if bFirst(e, hashB) {
					sawBFirst = true
				}
			})
		}
		if !sawBFirst {
			t.Errorf("no case claimed B before A in one batch: the test did not test the ordering")
		}
	})
	t.Run("across batches", func(t *testing.T) {
		e := newTestEnv(t, 2, envOpt{})
		e.led.seed(wid("e1"), statePending, e.hashOf("e1", "A"))
		rn := e.start("r1", e.config())
		offB := e.produce(1, "e1", "B")
		e.waitCommittedToEnd(10 * time.Second)
		if n := len(e.starter.executionsOf(wid("e1"))); n != 0 {
			t.Fatalf("B started %d workflows", n)
		}
		e.produce(0, "e1", "A")
		e.waitCommittedToEnd(10 * time.Second)
		if err := rn.stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		check(t, e, offB, 1)
	})
}

// Two records whose starts hang; a second router joins the group, and the
// first one gives it one partition (cooperative-sticky: which one is the
// balancer's choice, so both are blocked and the test follows the one that
// moved). The moved record is not committed by the first router (its start
// was still in flight past RevokeTimeout); the second router starts it;
// one execution each.
func TestRevokeWhileStartInFlight(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	releaseX, releaseY := e.starter.block(wid("x")), e.starter.block(wid("y"))
	defer releaseX()
	defer releaseY()
	offs := map[string]int64{"x": e.produce(0, "x", "v"), "y": e.produce(1, "y", "v")}
	parts := map[string]int32{"x": 0, "y": 1}
	r1 := e.start("r1", e.config())
	eventually(t, 10*time.Second, func() bool {
		return e.starter.heldCount(wid("x")) == 1 && e.starter.heldCount(wid("y")) == 1
	}, func() string { return "starts of x and y not in flight" })

	r2 := e.start("r2", e.config())
	var moved, kept string
	eventually(t, 15*time.Second, func() bool {
		for _, id := range []string{"x", "y"} {
			for _, by := range e.starter.callersOf(wid(id)) {
				if by == "r2" {
					moved = id
				}
			}
		}
		return moved != ""
	}, func() string { return "the second router never started a moved record" })
	kept = map[string]string{"x": "y", "y": "x"}[moved]
	// The first router's start of the moved record was abandoned (its
	// partition context ended); the second router's is the one held now.
	eventually(t, 5*time.Second, func() bool { return e.starter.heldCount(wid(moved)) == 1 },
		func() string { return fmt.Sprintf("%d starts of %s held", e.starter.heldCount(wid(moved)), moved) })
	if c := e.committed()[parts[moved]]; c > offs[moved] {
		t.Fatalf("moved record %s committed (%d) before any router started it", moved, c)
	}
	map[string]func(){"x": releaseX, "y": releaseY}[moved]()
	eventually(t, 10*time.Second, func() bool { return e.committed()[parts[moved]] == offs[moved]+1 },
		func() string { return fmt.Sprintf("committed %v", e.committed()) })
	if c := e.committed()[parts[kept]]; c > offs[kept] {
		t.Fatalf("kept record %s committed (%d) while its start is held", kept, c)
	}
	map[string]func(){"x": releaseX, "y": releaseY}[kept]()
	e.waitCommittedToEnd(10 * time.Second)
	for _, rn := range []*runner{r2, r1} {
		if err := rn.stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
	}
	for id, by := range map[string]string{moved: "r2", kept: "r1"} {
		ex := e.starter.executionsOf(wid(id))
		if len(ex) != 1 || ex[0].by != by {
			t.Errorf("%s: executions %+v, want one by %s", id, ex, by)
		}
		if st := e.led.state(wid(id)); st != stateStarted {
			t.Errorf("%s: ledger state %q", id, st)
		}
	}
}

// A lost partition (the committer's lost callback, called directly: kfake
// does not make a member lose partitions on demand) commits nothing
// afterwards, neither the record whose start was in flight nor later ones;
// the other partition goes on.
func TestLostPartitionCommitsNothing(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	release := e.starter.block(wid("x"))
	defer release()
	e.produce(0, "x", "v")
	e.produce(1, "y", "v")
	rn := e.start("r1", e.config())
	eventually(t, 10*time.Second, func() bool {
		return e.starter.heldCount(wid("x")) == 1 && e.committed()[1] == 1
	}, func() string {
		return fmt.Sprintf("x held %d, committed %v", e.starter.heldCount(wid("x")), e.committed())
	})

	rn.r.commits.lost(t.Context(), nil, map[string][]int32{testTopic: {0}})
	// The start in flight is abandoned with the partition.
	eventually(t, 5*time.Second, func() bool { return e.starter.heldCount(wid("x")) == 0 },
		func() string { return "x's start still held after the loss" })
	release()
	e.produce(0, "z", "v")
	e.produce(1, "w", "v")
	eventually(t, 10*time.Second, func() bool { return e.committed()[1] == 2 },
		func() string { return fmt.Sprintf("committed %v", e.committed()) })
	stays(t, 300*time.Millisecond, func() bool { return e.committed()[0] == -1 },
		func() string { return fmt.Sprintf("lost partition committed: %v", e.committed()) })
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if c := e.committed()[0]; c != -1 {
		t.Errorf("lost partition committed to %d by the final commit", c)
	}
	if n := len(e.starter.executionsOf(wid("x"))); n != 0 {
		t.Errorf("x: %d executions after its start was abandoned", n)
	}
}

// The owner copy of a workflow (partition 0) hangs in the starter; a later
// copy on partition 1 waits on it. Partition 0 is revoked (the committer's
// revoked callback, called directly, because cooperative-sticky picks which
// partition moves): the waiter takes the start over, partition 1 commits,
// one execution; partition 0 is not committed.
func TestWaiterTakesOverWhenOwnerRevoked(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	w := wid("x")
	release := e.starter.block(w)
	defer release()
	e.produce(0, "x", "v")
	rn := e.start("r1", e.config())
	eventually(t, 10*time.Second, func() bool { return e.starter.heldCount(w) == 1 },
		func() string { return "owner's start not in flight" })
	e.produce(1, "x", "v")
	eventually(t, 10*time.Second, func() bool { return waitersOf(rn.r, w) == 1 },
		func() string { return fmt.Sprintf("waiters %d", waitersOf(rn.r, w)) })

	// revoked waits RevokeTimeout for the owner, commits nothing for
	// partition 0, and forgets it: the owner's start is abandoned.
	rn.r.commits.revoked(t.Context(), nil, map[string][]int32{testTopic: {0}})
	eventually(t, 5*time.Second, func() bool { return e.starter.callCount(w) == 2 && e.starter.heldCount(w) == 1 },
		func() string {
			return fmt.Sprintf("calls %d held %d: the waiter did not take over", e.starter.callCount(w), e.starter.heldCount(w))
		})
	release()
	eventually(t, 10*time.Second, func() bool { return e.committed()[1] == 1 },
		func() string { return fmt.Sprintf("committed %v", e.committed()) })
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := len(e.starter.executionsOf(w)); n != 1 {
		t.Errorf("%d executions, want 1", n)
	}
	if st := e.led.state(w); st != stateStarted {
		t.Errorf("ledger state %q, want started", st)
	}
	if c := e.committed()[0]; c != -1 {
		t.Errorf("revoked partition committed to %d", c)
	}
}

// Temporal refuses a start for good while another copy waits on it: both
// records finish, one dead letter temporal_permanent (the owner's), the
// ledger row ends dead_lettered, both offsets are committed.
func TestPermanentStartErrorWithWaiter(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	w := wid("x")
	release := e.starter.block(w)
	defer release()
	offOwner := e.produce(0, "x", "v")
	rn := e.start("r1", e.config())
	eventually(t, 10*time.Second, func() bool { return e.starter.heldCount(w) == 1 },
		func() string { return "owner's start not in flight" })
	e.produce(1, "x", "v")
	eventually(t, 10*time.Second, func() bool { return waitersOf(rn.r, w) == 1 },
		func() string { return fmt.Sprintf("waiters %d", waitersOf(rn.r, w)) })
	e.starter.failPermanent(w)
	release()
	e.waitCommittedToEnd(10 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	dl := e.dlq.recorded()
	if len(dl) != 1 || dl[0].Reason != string(ReasonTemporalPermanent) || dl[0].Partition != 0 || dl[0].Offset != offOwner || dl[0].WorkflowID != w {
		t.Errorf("dead letters %+v, want the owner's, temporal_permanent", dl)
	}
	if got := e.dlqReasons(); len(got) != 1 || got[string(ReasonTemporalPermanent)] != 1 {
		t.Errorf("dead-letter topic holds %v, want one temporal_permanent", got)
	}
	if st := e.led.state(w); st != stateDeadLettered {
		t.Errorf("ledger state %q, want dead_lettered", st)
	}
	if n := len(e.starter.executionsOf(w)); n != 0 {
		t.Errorf("%d executions", n)
	}
	if c := e.starter.callCount(w); c != 1 {
		t.Errorf("Temporal asked %d times, want once", c)
	}
}
