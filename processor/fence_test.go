package processor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dedupio/dedup/processor/decide"
)

// A claim that is slow across an ordinary revoke (a rebalance moves its
// partition while the statement is still on its way) lands after the new
// owner claimed the record, dead-lettered it (Temporal refused its start
// for good), marked the row dead_lettered and committed it. Without the
// ledger's fence the late claim takes the dead_lettered row back to
// pending, where it stays with no owner: the record is committed, so
// nothing re-drives it. With the fence the late claim changes no row: the
// moved partition's records are dropped and the rest of the batch is
// claimed again.
func TestClaimSlowAcrossARevokeChangesNoRowOfTheNewOwner(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	e.starter.failPermanent(wid("x"))
	e.starter.failPermanent(wid("y"))
	var blocking atomic.Bool
	blocking.Store(true)
	release := make(chan struct{})
	var releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) })
	var held atomic.Int32
	e.led.mu.Lock()
	e.led.gate = func([]decide.Intent) bool {
		if !blocking.Load() {
			return false
		}
		held.Add(1)
		<-release
		return true
	}
	e.led.mu.Unlock()
	offs := map[string]int64{"x": e.produce(0, "x", "v"), "y": e.produce(1, "y", "v")}
	parts := map[string]int32{"x": 0, "y": 1}
	r1 := e.start("r1", e.config())
	eventually(t, 10*time.Second, func() bool { return held.Load() == 1 }, func() string { return "r1's claim never reached the ledger" })
	blocking.Store(false)

	r2 := e.start("r2", e.config())
	var moved string
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
	eventually(t, 10*time.Second, func() bool {
		return e.committed()[parts[moved]] == offs[moved]+1 && e.led.state(wid(moved)) == stateDeadLettered
	}, func() string {
		return fmt.Sprintf("moved %s: committed %v, row %q", moved, e.committed(), e.led.state(wid(moved)))
	})

	// The slow claim lands now.
	releaseOnce.Do(func() { close(release) })
	e.waitCommittedToEnd(15 * time.Second)
	stays(t, time.Second, func() bool { return e.led.state(wid(moved)) == stateDeadLettered },
		func() string {
			return fmt.Sprintf("row of %s is %q after r1's late claim: the new owner dead-lettered it and committed its record",
				moved, e.led.state(wid(moved)))
		})
	for _, rn := range []*runner{r2, r1} {
		if err := rn.stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
	}
	for _, id := range []string{"x", "y"} {
		if st := e.led.state(wid(id)); st != stateDeadLettered {
			t.Errorf("%s: row %q, want dead_lettered", id, st)
		}
	}
}

// A late Own (a member the group had already dropped took the partition in
// the ledger after its new owner did: its Own was retried while PostgreSQL
// was down, and landed last) must not stall the partition: the router whose
// writes are then refused asks the group coordinator, which still assigns it
// the partition, takes the partition again in the ledger and goes on. Found
// by the model (hole-late-own, -DZOMBIE_IN_OWN): without this the owner
// forgets the partition, the late member's commits are rejected, and nobody
// commits the partition again.
func TestALateOwnOfADroppedMemberDoesNotStallThePartition(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	e.produce(0, "x", "v")
	rn := e.start("r1", e.config())
	e.waitCommittedToEnd(10 * time.Second)
	p0 := []PartitionRef{{Topic: testTopic, Partition: 0}}
	// A late Own of an older generation than the owner's takes nothing.
	if epochs, err := e.led.Own(t.Context(), Ownership{Group: e.group, Member: "dropped-member", Generation: 0, Parts: p0}); err != nil || epochs[0] != 0 {
		t.Fatalf("a late Own of generation 0: epochs %v, %v; want 0 (not taken)", epochs, err)
	}
	// One that lands all the same (its coordinator check raced the
	// rebalance): the owner is refused, and takes the partition again.
	if _, err := e.led.Own(t.Context(), Ownership{Group: e.group, Member: "dropped-member", Confirmed: true, Parts: p0}); err != nil {
		t.Fatal(err)
	}
	e.produce(0, "y", "v")
	e.waitCommittedToEnd(15 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, id := range []string{"x", "y"} {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
		if st := e.led.state(wid(id)); st != stateStarted {
			t.Errorf("%s: row %q, want started", id, st)
		}
	}
}

// The owner the group chose keeps its partitions whatever order the bumps
// reach the ledger in. A router assigned the partitions bumps their epochs
// in the assignment callback; when that bump is held up on its way to the
// ledger (a retry's backoff after a transient error, a slow pool) the
// group moves on without it: the second router is given every partition
// and bumps them first, then the first router's bump lands on top. The
// ledger now fences the group's chosen owner out (its claims carry the
// older epoch), and the router forgets the partitions it still owns in
// Kafka: the first router has been kicked out and rejoins, the sticky
// balancer leaves at least one partition where it is, and no assignment
// callback ever bumps that partition again. Its records are never claimed
// nor committed (the lag of a forgotten partition is not even exported).
// Fails on the current code: the partition kept by the second router stays
// uncommitted (bound: 20 s, against the 1 s session and rebalance timeouts).
func TestALateBumpFromAnOwnerTheGroupDroppedDoesNotStallThePartition(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	held := make(chan struct{})
	release := make(chan struct{})
	var once, releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) })
	var first atomic.Bool
	first.Store(true)
	e.led.mu.Lock()
	e.led.ownGate = func(string, []PartitionRef) {
		if first.CompareAndSwap(true, false) {
			once.Do(func() { close(held) })
			<-release
		}
	}
	e.led.mu.Unlock()
	e.start("r1", e.config())
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("r1 never bumped its partitions")
	}
	r2 := e.start("r2", e.config())
	// r2 is given both partitions (r1, stuck in its callback, is dropped
	// from the group) and bumps them.
	eventually(t, 15*time.Second, func() bool {
		r2.r.commits.mu.Lock()
		defer r2.r.commits.mu.Unlock()
		return len(r2.r.commits.parts) == 2
	}, func() string { return "r2 never took both partitions" })
	// r1's bump lands now.
	releaseOnce.Do(func() { close(release) })

	e.produce(0, "x", "v")
	e.produce(1, "y", "v")
	eventually(t, 20*time.Second, e.atEnd, func() string {
		return fmt.Sprintf("committed %v, ends %v; rows x %q, y %q: a partition the group gave to a router is never processed",
			e.committed(), e.ends(), e.led.state(wid("x")), e.led.state(wid("y")))
	})
}

// A claim refused by the ledger's fence is claimed again, its refusals
// counted per partition (unfenced), not per claim. Two polls claimed
// together (gatherPolls), or two partitions in one poll, do not share the
// count: the refusals of a's partition (three late Owns of a member the
// group had dropped, each taken again) do not abandon b's records at
// their partition's first refusal, which left b never started and its
// partition never committed past it (when a count past three gave a
// partition up); b's partition is refused once, taken again, and b is
// claimed.
func TestAPollClaimedWithAnotherIsNotAbandonedForTheOthersRefusals(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	release := e.holdFirstClaim()
	rn := e.start("r1", e.config())
	owned := func() int { return len(rn.owned()) }
	polled := rn.polled
	eventually(t, 10*time.Second, func() bool { return owned() == 2 }, func() string { return "r1 does not own both partitions" })
	// The claimer is held in the claim of h; the poll of a@0 waits for it
	// in the queue, the poll of b@1 behind it.
	e.produce(0, "h", "v")
	eventually(t, 10*time.Second, func() bool { return len(e.led.claimLog()) == 1 }, func() string { return "h never claimed" })
	e.produce(0, "a", "v")
	eventually(t, 10*time.Second, func() bool { return polled() == 2 }, func() string { return fmt.Sprintf("polled %v", polled()) })
	time.Sleep(100 * time.Millisecond)
	e.produce(1, "b", "v")
	eventually(t, 10*time.Second, func() bool { return polled() == 3 }, func() string { return fmt.Sprintf("polled %v", polled()) })
	time.Sleep(100 * time.Millisecond)

	// A member the group dropped takes partition 0 in the ledger before
	// each of the next three claims of a, then partition 1 before the
	// next claim of b.
	ghostDone := e.ghostOwnsBeforeClaims(map[int32]int{0: 3, 1: 1})
	release()

	eventually(t, 10*time.Second, ghostDone, func() string { return "the ghost's Owns did not all happen" })
	eventually(t, 10*time.Second, func() bool { return len(e.starter.executionsOf(wid("b"))) == 1 && e.atEnd() }, func() string {
		return fmt.Sprintf("b: %d executions, committed %v, ends %v: b's poll was abandoned for the refusals of a's",
			len(e.starter.executionsOf(wid("b"))), e.committed(), e.ends())
	})
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
}

// A partition the group still assigns to this router, whose fence a late
// Own of a dropped member bumps before each of four claims of a, is taken
// again after each refusal (committer.fenced: assignedToMe, Own). Its
// records are the router's, not another owner's: abandoning a at the
// fourth refusal ("whatever again says", unfenced) leaves a never
// started while the router still owns partition 0 and keeps polling it,
// and the partition never committed past a (nothing redelivers it until
// the next rebalance). The test holds that a is claimed again and started.
func TestAPartitionTakenAgainAfterEachRefusalStillStartsItsRecords(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	ghostDone := e.ghostOwnsBeforeClaims(map[int32]int{0: 4})
	rn := e.start("r1", e.config())
	e.produce(0, "a", "v")
	eventually(t, 10*time.Second, ghostDone, func() string { return "the ghost's Owns did not all happen" })
	// Another record behind a: started, but the commit waits on a.
	e.produce(0, "b", "v")
	eventually(t, 10*time.Second, func() bool { return len(e.starter.executionsOf(wid("b"))) == 1 },
		func() string { return "b never started" })
	owns := func() int {
		rn.r.commits.mu.Lock()
		defer rn.r.commits.mu.Unlock()
		return len(rn.r.commits.parts)
	}
	eventually(t, 5*time.Second, func() bool { return len(e.starter.executionsOf(wid("a"))) == 1 && e.atEnd() }, func() string {
		return fmt.Sprintf("a: %d executions, committed %v, ends %v, r1 owns %d partition(s): a was abandoned in a partition the router still owns",
			len(e.starter.executionsOf(wid("a"))), e.committed(), e.ends(), owns())
	})
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
}

// One poll of a@0 and b@1, a's partition refused four times by late Owns
// (taken again each time): a is claimed again after each refusal, never
// given up while the router owns its partition, and b's pieces are
// claimed again each time (the refused statements wrote nothing): a and b
// start once each, one Temporal call each, both partitions committed to
// their ends.
func TestAPartitionRefusedFourTimesStartsItsRecordsAndTheOthersOnce(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	ghostDone := e.ghostOwnsBeforeClaims(map[int32]int{0: 4})
	e.produce(0, "a", "v")
	e.produce(1, "b", "v")
	rn := e.start("r1", e.config())
	eventually(t, 10*time.Second, ghostDone, func() string { return "the ghost's Owns did not all happen" })
	eventually(t, 10*time.Second, e.atEnd, func() string {
		return fmt.Sprintf("committed %v, ends %v", e.committed(), e.ends())
	})
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
		if c := e.starter.callCount(wid(id)); c != 1 {
			t.Errorf("%s: %d Temporal start calls, want 1", id, c)
		}
	}
}

// A poll that waited for the claimer across a move of its partition holds
// records of the assignment before; the member that had the partition
// meanwhile dead-lettered c (Temporal refused it for good: row
// dead_lettered) and committed past it. The partition comes back to r1,
// and the waiting poll's claim is refused by the fence. committer.fenced
// finds the partition's assignment newer than the refused fence ("taken
// again meanwhile") and unfenced claims the old assignment's copy of c
// again under the new fence: a late claim that takes the other member's
// dead_lettered row back to pending and starts c, a record the group had
// finished and committed (what TestClaimSlowAcrossARevokeChangesNoRowOfTheNewOwner
// holds for a partition that does not come back). The test holds that no
// row changes and Temporal hears nothing of c from r1.
func TestAWaitingPollFromAnEarlierAssignmentChangesNoRowOfTheMemberBetween(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	release := e.holdFirstClaim()
	rn := e.start("r1", e.config())
	owned := rn.owned
	offC, other := e.pollOfCWaitsAndPartitionOneMoves(rn, "v")
	// The other member dead-lettered c and committed past it.
	e.led.seed(wid("c"), stateDeadLettered, e.hashOf("c", "v"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	eventually(t, 10*time.Second, func() bool {
		other.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{testTopic: {1: {Epoch: -1, Offset: offC + 1}}}, nil)
		return e.committed()[1] == offC+1
	}, func() string { return fmt.Sprintf("the other member could not commit: committed %v", e.committed()) })
	other.Close()
	eventually(t, 10*time.Second, func() bool { return len(owned()) == 2 }, func() string {
		return fmt.Sprintf("r1 owns %v: want partition 1 back", owned())
	})
	time.Sleep(200 * time.Millisecond)

	release()
	e.waitCommittedToEnd(10 * time.Second)
	time.Sleep(300 * time.Millisecond)
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	var claims []string
	for _, c := range e.led.claimLog() {
		var ins []string
		for _, in := range c {
			ins = append(ins, fmt.Sprintf("%s@%d/%d(epoch %d)", in.EventID, in.Partition, in.Offset, in.Fence.Epoch))
		}
		claims = append(claims, "["+strings.Join(ins, " ")+"]")
	}
	if n, st := e.starter.callCount(wid("c")), e.led.state(wid("c")); n != 0 || st != stateDeadLettered {
		t.Errorf("c: %d Temporal start calls from r1, %d executions, row %v: want 0 calls and the other member's dead_lettered row; claims: %s",
			n, len(e.starter.executionsOf(wid("c"))), st, strings.Join(claims, " "))
	}
}

// ghostOwn is a late Own of partition p by a member the group dropped.
func (e *testEnv) ghostOwn(p int32) {
	if _, err := e.led.Own(context.Background(), Ownership{Group: e.group, Member: "ghost", Confirmed: true,
		Parts: []PartitionRef{{testTopic, p}}}); err != nil {
		e.t.Error(err)
	}
}

// Adversary (idea 3). The claimer no longer gives a partition up for the
// number of its refusals (dabd25b), but the marker still does: a
// MarkStarted refused by the fence is sent again under the new fence at
// most three times, and the fourth refusal ends the record failed
// (s.done(j, false)) although the router took the partition again after
// each refusal and still owns it. The record is started in Temporal, its
// row left pending, and the partition is never committed past it while
// the router owns it: a dead end for something that heals (the claim's
// own rule). The test holds that a's mark lands and partition 0 is
// committed past a and b.
func TestAPartitionTakenAgainBeforeEachOfFourMarksStillCommitsItsRecords(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	var mu sync.Mutex
	bumps := 0
	e.led.mu.Lock()
	e.led.markGate = func(ps []int32) {
		mu.Lock()
		defer mu.Unlock()
		if bumps < 4 {
			bumps++
			e.ghostOwn(0)
		}
	}
	e.led.mu.Unlock()
	rn := e.start("r1", e.config())
	e.produce(0, "a", "v")
	eventually(t, 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return bumps == 4 },
		func() string { return "the ghost's Owns did not all happen" })
	e.produce(0, "b", "v")
	eventually(t, 10*time.Second, func() bool { return len(e.starter.executionsOf(wid("b"))) == 1 },
		func() string { return "b never started" })
	owns := func() int {
		rn.r.commits.mu.Lock()
		defer rn.r.commits.mu.Unlock()
		return len(rn.r.commits.parts)
	}
	eventually(t, 5*time.Second, func() bool { return e.led.state(wid("a")) == stateStarted && e.atEnd() }, func() string {
		return fmt.Sprintf("a: %d executions, row %q, committed %v, ends %v, r1 owns %d partition(s), MarkStarted calls %d: a's mark was given up in a partition the router still owns",
			len(e.starter.executionsOf(wid("a"))), e.led.state(wid("a")), e.committed(), e.ends(), owns(), e.led.callCount("MarkStarted"))
	})
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
}

// Adversary (idea 2). A member the group dropped keeps taking partition 0
// in the ledger (its Own lands before every claim of partition 0 for a
// while). A Claim refused by the fence writes nothing, and the claimer
// now claims the whole batch again after each refusal with no cap
// (dabd25b): b@1, polled in the same batch as a@0, is held as long as the
// ghost bumps partition 0, though nothing refuses partition 1 (before,
// the fourth refusal abandoned a and b was claimed). The test holds that
// b, whose partition is not refused, starts within 3 s while the ghost
// keeps bumping partition 0 for 8 s.
func TestAGhostTakingOnePartitionOverAndOverDoesNotHoldAnotherPartitionsRecords(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	bumps, stopGhost := e.ghostKeepsTaking(0, true)
	e.produce(0, "a", "v")
	e.produce(1, "b", "v")
	rn := e.start("r1", e.config())
	eventually(t, 10*time.Second, func() bool { return bumps.Load() >= 1 }, func() string { return "no claim of partition 0" })
	t0 := time.Now()
	var startedB time.Duration = -1
	for time.Since(t0) < 8*time.Second {
		if startedB < 0 && len(e.starter.executionsOf(wid("b"))) == 1 {
			startedB = time.Since(t0)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stopGhost()
	// It heals once the ghost stops.
	e.waitCommittedToEnd(15 * time.Second)
	healed := time.Since(t0)
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	if startedB < 0 || startedB > 3*time.Second {
		t.Errorf("b@1 started %v after the ghost began bumping partition 0 (-1: not while it bumped, 8 s; %d refusals); committed to the end %v after: partition 1's record held behind partition 0's refusals",
			startedB, bumps.Load(), healed)
	}
	for _, id := range []string{"a", "b"} {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
	}
}

// Adversary (idea 3, dead letters). The dead letter's mark (deadLetter,
// starts.go) is sent again under the new fence at most three times as
// well: a ghost's Own before each of four MarkDeadLettered leaves a's row
// pending and a failed (s.done(j, false)) in a partition the router took
// again each time and still owns, so the partition is never committed
// past a, though its dead letter is written. The test holds that a's row
// ends dead_lettered and partition 0 is committed past a and b.
func TestAPartitionTakenAgainBeforeEachOfFourDeadLetterMarksStillCommitsItsRecords(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	e.starter.failPermanent(wid("a"))
	var mu sync.Mutex
	bumps := 0
	e.led.mu.Lock()
	e.led.markGate = func(ps []int32) {
		mu.Lock()
		defer mu.Unlock()
		if bumps < 4 {
			bumps++
			e.ghostOwn(0)
		}
	}
	e.led.mu.Unlock()
	rn := e.start("r1", e.config())
	e.produce(0, "a", "v")
	eventually(t, 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return bumps == 4 },
		func() string { return "the ghost's Owns did not all happen" })
	e.produce(0, "b", "v")
	eventually(t, 10*time.Second, func() bool { return len(e.starter.executionsOf(wid("b"))) == 1 },
		func() string { return "b never started" })
	eventually(t, 5*time.Second, func() bool { return e.led.state(wid("a")) == stateDeadLettered && e.atEnd() }, func() string {
		return fmt.Sprintf("a: row %q, dead letters %d, committed %v, ends %v, MarkDeadLettered calls %d: a's dead-letter mark was given up in a partition the router still owns",
			e.led.state(wid("a")), len(e.dlqRecords()), e.committed(), e.ends(), e.led.callCount("MarkDeadLettered"))
	})
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
}

// Adversary (idea 1). A router stopped while its claimer loops against a
// ghost that takes partition 0 before every claim (its piece waits up
// to 1 s between re-claims): Run returns within its drain timeout,
// nothing is committed past the unstarted a, and the next router, the
// ghost gone, starts a once.
func TestARouterStoppedWhileItsClaimerIsRefusedOverAndOverCommitsNothingAndTheNextStartsOnce(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	var bumping atomic.Bool
	bumping.Store(true)
	var bumps atomic.Int32
	e.led.mu.Lock()
	e.led.gate = func(intents []decide.Intent) bool {
		if bumping.Load() {
			bumps.Add(1)
			e.ghostOwn(0)
		}
		return false
	}
	e.led.mu.Unlock()
	e.produce(0, "a", "v")
	cfg := e.config()
	r1 := e.start("r1", cfg)
	eventually(t, 15*time.Second, func() bool { return bumps.Load() >= 8 }, func() string { return fmt.Sprintf("%d refusals", bumps.Load()) })
	time.Sleep(300 * time.Millisecond) // while its piece waits (refusedWaits)
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if r1.took > cfg.DrainTimeout+500*time.Millisecond {
		t.Errorf("Run took %v to return after cancel, drain timeout %v", r1.took, cfg.DrainTimeout)
	}
	if c := e.committed()[0]; c != -1 {
		t.Errorf("committed %d past the unstarted a", c)
	}
	if n := e.starter.callCount(wid("a")); n != 0 {
		t.Errorf("a: %d Temporal calls from the stopped router", n)
	}
	bumping.Store(false)
	r2 := e.start("r2", cfg)
	e.waitCommittedToEnd(15 * time.Second)
	if err := r2.stop(); err != nil {
		t.Fatal(err)
	}
	if n, c := len(e.starter.executionsOf(wid("a"))), e.starter.callCount(wid("a")); n != 1 || c != 1 {
		t.Errorf("a: %d executions, %d Temporal calls; want 1 and 1", n, c)
	}
}

// Adversary (idea 4). A gathered claim holds records of partition 0 under
// two fences of the current assignment: a@0 routed under epoch 1, b@0
// routed after the router took the partition again (epoch 3; the
// marker's refusal, say). A ghost's Own refuses both (Stale: epochs 1 and
// 3). committer.fenced answers epoch 1 with "taken again meanwhile" (the
// partition's fence, 3) and tries epoch 3's re-take; the coordinator
// cannot say this once (DescribeGroups fails), so epoch 3 is not taken
// again, yet the partition is not forgotten either (out already names it
// from epoch 1's branch). unfenced (dabd25b) then finds the record's own
// fence, 3, refused and abandons a and b, records of the current
// assignment, while the router keeps the partition: nothing commits past
// a until a rebalance. Before dabd25b the pieces were claimed again under
// again's fence, refused once more, and the re-take then succeeded.
// The test holds that a and b start and partition 0 is committed to its end.
func TestARecordOfTheCurrentAssignmentIsNotAbandonedWhenOneOfItsFencesIsTakenAgainMeanwhile(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	hold := make(chan struct{})
	var holdOnce, releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(hold) }) }
	defer release()
	e.led.setAfterClaim(func([]decide.Intent) { holdOnce.Do(func() { <-hold }) })
	rn := e.start("r1", e.config())
	polled := func() float64 {
		var m dto.Metric
		if err := rn.r.m.records.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	rn.waitJoined()
	e.produce(0, "h", "v")
	eventually(t, 10*time.Second, func() bool { return len(e.led.claimLog()) == 1 }, func() string { return "h never claimed" })
	e.produce(0, "a", "v")
	eventually(t, 10*time.Second, func() bool { return polled() == 2 }, func() string { return fmt.Sprintf("polled %v", polled()) })
	time.Sleep(100 * time.Millisecond)
	// The router takes partition 0 again (a ghost's Own, then a refusal
	// answered: what the marker's refusal does).
	e.ghostOwn(0)
	rn.r.commits.mu.Lock()
	part := rn.r.commits.parts[topicPartition{testTopic, 0}]
	rn.r.commits.mu.Unlock()
	ep := part.epoch.Load()
	rn.r.commits.fenced(context.Background(), &FencedError{Stale: []PartitionEpoch{{Group: e.group, Topic: testTopic, Partition: 0, Epoch: ep}}})
	if part.epoch.Load() == ep {
		t.Fatalf("partition 0 not taken again: epoch %d", ep)
	}
	e.produce(0, "b", "v")
	eventually(t, 10*time.Second, func() bool { return polled() == 3 }, func() string { return fmt.Sprintf("polled %v", polled()) })
	time.Sleep(100 * time.Millisecond)

	var mu sync.Mutex
	mixed := 0
	e.led.mu.Lock()
	e.led.gate = func(intents []decide.Intent) bool {
		mu.Lock()
		defer mu.Unlock()
		fences := map[int64]bool{}
		for _, in := range intents {
			fences[in.Fence.Epoch] = true
		}
		if len(fences) > 1 && mixed == 0 {
			mixed++
			// The coordinator cannot answer the next DescribeGroups.
			e.cluster.ControlKey(kmsg.DescribeGroups.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
				req := kreq.(*kmsg.DescribeGroupsRequest)
				resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
				for _, g := range req.Groups {
					rg := kmsg.NewDescribeGroupsResponseGroup()
					rg.Group = g
					rg.ErrorCode = kerr.GroupAuthorizationFailed.Code
					resp.Groups = append(resp.Groups, rg)
				}
				return resp, nil, true
			})
			e.ghostOwn(0)
		}
		return false
	}
	e.led.mu.Unlock()
	release()
	eventually(t, 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return mixed == 1 },
		func() string { return "no claim held both fences of partition 0" })
	owns := func() int {
		rn.r.commits.mu.Lock()
		defer rn.r.commits.mu.Unlock()
		return len(rn.r.commits.parts)
	}
	e.produce(0, "c", "v")
	eventually(t, 10*time.Second, func() bool {
		return len(e.starter.executionsOf(wid("a"))) == 1 && len(e.starter.executionsOf(wid("b"))) == 1 && e.atEnd()
	}, func() string {
		return fmt.Sprintf("a: %d executions, b: %d, c: %d; committed %v, ends %v, r1 owns %d partition(s): records of the current assignment abandoned in a partition the router keeps",
			len(e.starter.executionsOf(wid("a"))), len(e.starter.executionsOf(wid("b"))), len(e.starter.executionsOf(wid("c"))),
			e.committed(), e.ends(), owns())
	})
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
}

// Adversary (idea 1, revoke). A partition revoked while the claimer loops
// against a ghost that takes both partitions before every claim
// (refusedWaits): the moving partition's records are abandoned
// by r1 and started by r2, the ghost stops once r2 owns a partition, and
// every record starts once with one Temporal call, both partitions
// committed to their ends.
func TestARevokeWhileTheClaimerIsRefusedOverAndOverStartsEachRecordOnce(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	var bumping atomic.Bool
	bumping.Store(true)
	var bumps atomic.Int32
	e.led.mu.Lock()
	e.led.gate = func(intents []decide.Intent) bool {
		if bumping.Load() {
			bumps.Add(1)
			e.ghostOwn(0)
			e.ghostOwn(1)
		}
		return false
	}
	e.led.mu.Unlock()
	e.produce(0, "a", "v")
	e.produce(1, "b", "v")
	cfg := e.config()
	r1 := e.start("r1", cfg)
	eventually(t, 15*time.Second, func() bool { return bumps.Load() >= 7 }, func() string { return fmt.Sprintf("%d refusals", bumps.Load()) })
	r2 := e.start("r2", cfg)
	eventually(t, 15*time.Second, func() bool {
		r2.r.commits.mu.Lock()
		defer r2.r.commits.mu.Unlock()
		return len(r2.r.commits.parts) == 1
	}, func() string { return "r2 never took a partition" })
	bumping.Store(false)
	e.waitCommittedToEnd(15 * time.Second)
	for _, rn := range []*runner{r2, r1} {
		if err := rn.stop(); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"a", "b"} {
		if n, c := len(e.starter.executionsOf(wid(id))), e.starter.callCount(wid(id)); n != 1 || c != 1 {
			t.Errorf("%s: %d executions, %d Temporal calls (by %v); want 1 and 1", id, n, c, e.starter.callersOf(wid(id)))
		}
	}
}

// Adversary (idea 4, passing). A poll of the current assignment waiting
// for the claimer while the router takes its partition again (a ghost's
// Own answered by a refusal elsewhere, the marker's say): its claim
// carries the older fence, is refused, committer.fenced answers "taken
// again meanwhile", and unfenced claims it again under the partition's
// new fence (the record's own): a and b start once each, the partition
// is committed to its end.
func TestAWaitingPollOfTheCurrentAssignmentTakenAgainMeanwhileIsClaimedUnderTheNewFence(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	hold := make(chan struct{})
	var holdOnce, releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(hold) }) }
	defer release()
	e.led.setAfterClaim(func([]decide.Intent) { holdOnce.Do(func() { <-hold }) })
	rn := e.start("r1", e.config())
	polled := func() float64 {
		var m dto.Metric
		if err := rn.r.m.records.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	rn.waitJoined()
	e.produce(0, "h", "v")
	eventually(t, 10*time.Second, func() bool { return len(e.led.claimLog()) == 1 }, func() string { return "h never claimed" })
	e.produce(0, "a", "v")
	eventually(t, 10*time.Second, func() bool { return polled() == 2 }, func() string { return fmt.Sprintf("polled %v", polled()) })
	time.Sleep(100 * time.Millisecond)
	e.ghostOwn(0)
	rn.r.commits.mu.Lock()
	part := rn.r.commits.parts[topicPartition{testTopic, 0}]
	rn.r.commits.mu.Unlock()
	ep := part.epoch.Load()
	rn.r.commits.fenced(context.Background(), &FencedError{Stale: []PartitionEpoch{{Group: e.group, Topic: testTopic, Partition: 0, Epoch: ep}}})
	if part.epoch.Load() == ep {
		t.Fatalf("partition 0 not taken again: epoch %d", ep)
	}
	e.produce(0, "b", "v")
	eventually(t, 10*time.Second, func() bool { return polled() == 3 }, func() string { return fmt.Sprintf("polled %v", polled()) })
	time.Sleep(100 * time.Millisecond)
	release()
	e.waitCommittedToEnd(10 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"h", "a", "b"} {
		if n, c := len(e.starter.executionsOf(wid(id))), e.starter.callCount(wid(id)); n != 1 || c != 1 {
			t.Errorf("%s: %d executions, %d Temporal calls; want 1 and 1", id, n, c)
		}
	}
}

// twoPollsOfXAcrossARetake: r1 holds g's MarkStarted (partition 0) and
// the claim of h@0 while it polls x@0 with payload v1 (poll 1), then, if
// retake, a ghost's Own lands before g's mark, which the fence refuses:
// the router takes partition 0 again (a new epoch); then it polls x@0
// with payload v2 (poll 2). The claimer, let go, gathers polls 1 and 2
// into one claim, its x intents under the old and the new fence. It
// returns x's row's payload hash, and the claims' log.
func twoPollsOfXAcrossARetake(t *testing.T, e *testEnv, retake bool) (hash [32]byte, claims string) {
	bump, releaseH := make(chan struct{}), make(chan struct{})
	var bumpOnce, releaseOnce sync.Once
	t.Cleanup(func() { bumpOnce.Do(func() { close(bump) }); releaseOnce.Do(func() { close(releaseH) }) })
	var markHeld, hHeld atomic.Bool
	e.led.mu.Lock()
	e.led.markGate = func(ps []int32) {
		if len(ps) > 0 && ps[0] == 0 && markHeld.CompareAndSwap(false, true) {
			<-bump
			if retake {
				e.ghostOwn(0)
			}
		}
	}
	e.led.gate = func(intents []decide.Intent) bool {
		for _, in := range intents {
			if in.EventID == "h" && hHeld.CompareAndSwap(false, true) {
				<-releaseH
				break
			}
		}
		return false
	}
	e.led.mu.Unlock()
	rn := e.start("r1", e.config())
	epoch := func() int64 {
		rn.r.commits.mu.Lock()
		defer rn.r.commits.mu.Unlock()
		if p := rn.r.commits.parts[topicPartition{testTopic, 0}]; p != nil {
			return p.epoch.Load()
		}
		return -1
	}
	e.produce(0, "g", "v")
	eventually(t, 10*time.Second, func() bool { return markHeld.Load() }, func() string { return "g's mark never sent" })
	e1 := epoch()
	e.produce(0, "h", "v")
	eventually(t, 10*time.Second, func() bool { return hHeld.Load() }, func() string { return "h's claim never sent" })
	e.produce(0, "x", "v1")
	eventually(t, 10*time.Second, func() bool { return rn.polled() == 3 }, func() string { return fmt.Sprintf("polled %v", rn.polled()) })
	time.Sleep(200 * time.Millisecond) // poll 1 decided, its fence stamped, queued
	bumpOnce.Do(func() { close(bump) })
	eventually(t, 10*time.Second, func() bool { return e.led.state(wid("g")) == stateStarted }, func() string { return "g never marked" })
	if e2 := epoch(); retake != (e2 != e1) {
		t.Fatalf("partition 0's epoch %d, then %d (retake %v)", e1, e2, retake)
	}
	e.produce(0, "x", "v2")
	eventually(t, 10*time.Second, func() bool { return rn.polled() == 4 }, func() string { return fmt.Sprintf("polled %v", rn.polled()) })
	time.Sleep(200 * time.Millisecond) // poll 2 decided, its fence stamped, waiting to be queued
	releaseOnce.Do(func() { close(releaseH) })
	e.waitCommittedToEnd(15 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	var cl []string
	for _, c := range e.led.claimLog() {
		var ins []string
		for _, in := range c {
			ins = append(ins, fmt.Sprintf("%s@%d/%d(epoch %d)", in.EventID, in.Partition, in.Offset, in.Fence.Epoch))
		}
		cl = append(cl, "["+strings.Join(ins, " ")+"]")
	}
	e.led.mu.Lock()
	hash = e.led.rows[wid("x")].hash
	e.led.mu.Unlock()
	return hash, strings.Join(cl, " ")
}

// Adversary 27b (idea 1, PASSES: the control). Two polls of one partition
// gathered into one claim, under one fence: the first copy of x in the
// stream (v1) wins its row, the second (v2) is the conflict.
func TestTwoPollsGatheredUnderOneFenceClaimTheFirstCopyFirst(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	hash, claims := twoPollsOfXAcrossARetake(t, e, false)
	if hash != e.hashOf("x", "v1") {
		t.Errorf("x's row holds v2's payload: the later copy claimed first; claims %s", claims)
	}
}

// Adversary 27b (idea 1). The claimer claims a partition's records in
// stream order ("one claimer, fed in poll order, so verdicts follow the
// stream's order", router.go), and 2b8a92d says the split keeps "each
// partition's pieces in order". But the fence is stamped per poll
// (prepare), and gatherPolls joins two polls of one partition stamped
// before and after the router took it again: the ledger refuses the old
// fence only, unfenced puts the new-fence pieces (the later offsets) in
// the clean batch, claimed first, and the old-fence ones (earlier
// offsets) in the retaken batch, claimed after. x@0 v1 then x@0 v2: v2
// wins the row and starts, v1, first in the stream, is dead-lettered as
// the conflict. The test holds that x's row holds v1's payload.
func TestAPartitionsPiecesUnderTwoFencesInOneClaimAreClaimedInStreamOrder(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	hash, claims := twoPollsOfXAcrossARetake(t, e, true)
	if hash != e.hashOf("x", "v1") {
		t.Errorf("x's row holds v2's payload: the later copy (poll 2, new fence) was claimed before the earlier one (poll 1, old fence); claims %s", claims)
	}
}

// Adversary 27b (idea 2, PASSES). A router stopped while its marker loops
// against a ghost that takes partition 0 before every mark: Run returns
// within its drain timeout (the final flush's deadline bounds the
// uncapped retry), a's offset is not committed (its row is not started),
// and a was started once.
func TestARouterStoppedWhileItsMarkerIsRefusedOverAndOverReturnsInTimeAndCommitsNothingPastTheMark(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	var bumps atomic.Int32
	e.led.mu.Lock()
	e.led.markGate = func(ps []int32) {
		bumps.Add(1)
		e.ghostOwn(0)
	}
	e.led.mu.Unlock()
	cfg := e.config()
	rn := e.start("r1", cfg)
	e.produce(0, "a", "v")
	eventually(t, 10*time.Second, func() bool { return bumps.Load() >= 6 }, func() string { return "a's mark never refused six times" })
	err := rn.stop()
	if rn.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run returned %v after cancel (drain timeout %v), err %v", rn.took, cfg.DrainTimeout, err)
	}
	if st := e.led.state(wid("a")); st == stateStarted {
		t.Errorf("a's row %q: marked under a ghost's fence", st)
	}
	if c := e.committed(); c[0] > 0 {
		t.Errorf("committed %v past a, whose row is %q", c, e.led.state(wid("a")))
	}
	if n := len(e.starter.executionsOf(wid("a"))); n != 1 {
		t.Errorf("a: %d executions, want 1", n)
	}
}

// Adversary 27b (idea 2). The marker lost its cap of three tries
// (2b8a92d): a MarkStarted refused by the fence is sent again, waiting up
// to 1 s, for as long as the router takes the partition again. The
// marker is one goroutine with one batch: while it loops on partition
// 0's job, the started jobs of partition 1 wait in its queue, so a ghost
// taking partition 0 before every mark holds partition 1's records
// (started in Temporal, rows pending, uncommitted) — the hold the same
// commit removes from the claimer. The test holds that b@1, started
// while the ghost keeps bumping partition 0 before each mark, has its row
// marked started within 3 s.
func TestAGhostTakingOnePartitionBeforeEveryMarkDoesNotHoldAnotherPartitionsMarks(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	bumps, stopGhost := e.ghostKeepsTaking(0, false)
	rn := e.start("r1", e.config())
	e.produce(0, "a", "v")
	eventually(t, 10*time.Second, func() bool { return bumps.Load() >= 5 }, func() string { return "a's mark never refused five times" })
	e.produce(1, "b", "v")
	eventually(t, 10*time.Second, func() bool { return len(e.starter.executionsOf(wid("b"))) == 1 }, func() string { return "b never started" })
	t0 := time.Now()
	var markedB time.Duration = -1
	for time.Since(t0) < 6*time.Second {
		if markedB < 0 && e.led.state(wid("b")) == stateStarted {
			markedB = time.Since(t0)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stopGhost()
	e.waitCommittedToEnd(15 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	if markedB < 0 || markedB > 3*time.Second {
		t.Errorf("b@1's row marked started %v after its start (-1: not while the ghost bumped partition 0, 6 s; %d refusals of a's mark): partition 1's mark held behind partition 0's refusals",
			markedB, bumps.Load())
	}
}

// Adversary 27b (idea 1). The claimer splits a refused claim so that the
// unrefused partitions' pieces of the same batch are claimed first
// (2b8a92d), but claim still does not return while a partition taken
// again is refused over and over: the claimer is one goroutine fed in
// poll order, so a poll of partition 1 that comes after it waits in the
// queue for as long as the ghost bumps partition 0. The test holds that
// b@1, produced after the claimer began looping on a@0, starts within 3 s
// while the ghost keeps bumping partition 0.
func TestAGhostTakingOnePartitionOverAndOverDoesNotHoldALaterPollOfAnotherPartition(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	bumps, stopGhost := e.ghostKeepsTaking(0, true)
	rn := e.start("r1", e.config())
	e.produce(0, "a", "v")
	eventually(t, 10*time.Second, func() bool { return bumps.Load() >= 5 }, func() string { return "a's claim never refused five times" })
	e.produce(1, "b", "v")
	t0 := time.Now()
	var startedB time.Duration = -1
	for time.Since(t0) < 6*time.Second {
		if startedB < 0 && len(e.starter.executionsOf(wid("b"))) == 1 {
			startedB = time.Since(t0)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stopGhost()
	e.waitCommittedToEnd(15 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	if startedB < 0 || startedB > 3*time.Second {
		t.Errorf("b@1 (a later poll) started %v after it was produced (-1: not while the ghost bumped partition 0, 6 s; %d refusals): partition 1's poll held behind partition 0's refusals",
			startedB, bumps.Load())
	}
	for _, id := range []string{"a", "b"} {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
	}
}

// Adversary 27b (idea 4). The dead letter's mark lost its cap of three
// tries (2b8a92d) and is retried on the start worker that holds the job
// (deadLetter runs on the worker), waiting up to 1 s a refusal. A ghost
// taking partition 0 before every mark keeps each worker that
// dead-letters a record of partition 0 in that loop: with as many such
// records as workers (4), no start of another partition runs. The test
// holds that b@1, produced while the ghost bumps partition 0 before each
// mark, starts within 3 s.
func TestAGhostTakingOnePartitionBeforeEveryDeadLetterMarkDoesNotHoldAnotherPartitionsStarts(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	bumps, stopGhost := e.ghostKeepsTaking(0, false)
	cfg := e.config()
	for i := 0; i < cfg.Starts.Concurrency; i++ {
		e.starter.failPermanent(wid(fmt.Sprintf("a%d", i)))
	}
	rn := e.start("r1", cfg)
	for i := 0; i < cfg.Starts.Concurrency; i++ {
		e.produce(0, fmt.Sprintf("a%d", i), "v")
	}
	eventually(t, 10*time.Second, func() bool { return bumps.Load() >= int32(4*cfg.Starts.Concurrency) },
		func() string { return "the dead letters' marks were not refused" })
	e.produce(1, "b", "v")
	t0 := time.Now()
	var startedB time.Duration = -1
	for time.Since(t0) < 6*time.Second {
		if startedB < 0 && len(e.starter.executionsOf(wid("b"))) == 1 {
			startedB = time.Since(t0)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stopGhost()
	e.waitCommittedToEnd(15 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	if startedB < 0 || startedB > 3*time.Second {
		t.Errorf("b@1 started %v after it was produced (-1: not while the ghost bumped partition 0, 6 s; %d refusals): every start worker held in partition 0's dead-letter marks",
			startedB, bumps.Load())
	}
}

// Adversary 28. The marker's final flush (407b6aa) now waits
// waitRefused(most) before its FIRST attempt, most being the highest
// markRefused of every job in the batch: jobs of partition 0 that a
// ghost refused many times (waiting, up to 1 s) make the final flush
// sleep before it sends anything, including the mark of another
// partition's job that was never refused. The final flush has a quarter
// of the drain's reserve (125 ms with drain_timeout 2 s), so the sleep
// eats it and b@1's mark, b started in Temporal, is never sent: its row
// is left pending and partition 1 is not committed past it. Before, the
// final flush's first attempt was at once (try 0): b marked, a refused.
// Setup: mark_interval 1 min and mark_batch 2 (a and a2 of partition 0
// flush together; b alone waits in the batch for the final flush); a
// and a2's marks are refused 13+ times (1 s waits); the test holds one
// of their due flushes in the ledger while b's job reaches the marker,
// stops the router, and lets the held flush go 0.8 s later, so their
// next due is after the final flush begins.
func TestAFinalFlushMarksAnotherPartitionsJobWithoutWaitingForAWaitingPartitionsRefusals(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	var bumps atomic.Int32
	var holdNext, held atomic.Bool
	hold := make(chan struct{})
	var holdOnce sync.Once
	release := func() { holdOnce.Do(func() { close(hold) }) }
	defer release()
	e.led.mu.Lock()
	e.led.markGate = func(ps []int32) {
		for _, p := range ps {
			if p == 0 {
				if holdNext.CompareAndSwap(true, false) {
					held.Store(true)
					<-hold
				}
				bumps.Add(1)
				e.ghostOwn(0)
				return
			}
		}
	}
	e.led.mu.Unlock()
	cfg := e.config()
	cfg.Starts.MarkInterval = time.Minute // no tick: marks go by batch (2), by due, or in the final flush
	cfg.RevokeTimeout = 2 * time.Minute   // above mark_interval (Validate); nothing is revoked
	cfg.Starts.MarkBatch = 2
	rn := e.start("r1", cfg)
	e.produce(0, "a", "v")
	e.produce(0, "a2", "v")
	eventually(t, 20*time.Second, func() bool { return bumps.Load() >= 13 }, func() string { return fmt.Sprintf("a's mark refused %d times", bumps.Load()) })
	holdNext.Store(true)
	eventually(t, 5*time.Second, held.Load, func() string { return "a's due flush never held" })
	e.produce(1, "b", "v")
	eventually(t, 10*time.Second, func() bool { return len(rn.r.starts.markQ) == 1 }, func() string { return "b's job never reached the marker" })
	stopped := make(chan error, 1)
	go func() { stopped <- rn.stop() }()
	time.Sleep(800 * time.Millisecond)
	release() // a and a2 refused once more: due again 1 s later, after the final flush began
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if n := len(e.starter.executionsOf(wid("b"))); n != 1 {
		t.Fatalf("b: %d executions, want 1", n)
	}
	if st, c := e.led.state(wid("b")), e.committed(); st != stateStarted || c[1] != 1 {
		t.Errorf("b@1 started in Temporal, its row %q, committed %v (want started, partition 1 at 1): the final flush slept on partition 0's refusals (%d) before sending b's mark; MarkStarted calls %d, Run took %v",
			st, c, bumps.Load(), e.led.callCount("MarkStarted"), rn.took)
	}
}

// Adversary 28. A waiting partition's queue (refusedWaits, 407b6aa)
// takes every later poll's records of it, and they stay in flight while
// it waits: with a backlog on partition 0 (a replay, a lagging
// partition), its queue fills max_in_flight, waitCapacity stops the poll
// loop, and no record of another partition is polled while the ghost
// bumps partition 0: the hold the change removes from the claimer comes
// back through the router's one in-flight budget. Here max_in_flight 10,
// max_poll_records 5, 30 records on partition 0 before the router starts;
// the ghost takes partition 0 before every claim of it. The test holds
// that b@1, produced once partition 0 was refused five times, starts
// within 3 s while the ghost keeps bumping.
func TestAWaitingPartitionsBacklogDoesNotHoldAnotherPartitionsRecords(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	bumps, stopGhost := e.ghostKeepsTaking(0, true)
	for i := 0; i < 30; i++ {
		e.produce(0, fmt.Sprintf("a%d", i), "v")
	}
	cfg := e.config()
	cfg.MaxInFlight, cfg.MaxPollRecords = 10, 5
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return bumps.Load() >= 5 }, func() string { return "partition 0's claim never refused five times" })
	e.produce(1, "b", "v")
	t0 := time.Now()
	var startedB time.Duration = -1
	for time.Since(t0) < 6*time.Second {
		if startedB < 0 && len(e.starter.executionsOf(wid("b"))) == 1 {
			startedB = time.Since(t0)
		}
		time.Sleep(10 * time.Millisecond)
	}
	inFlight := func() int {
		rn.r.commits.flight.mu.Lock()
		defer rn.r.commits.flight.mu.Unlock()
		return rn.r.commits.flight.n
	}()
	polled := rn.polled()
	stopGhost()
	e.waitCommittedToEnd(20 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	if startedB < 0 || startedB > 3*time.Second {
		t.Errorf("b@1 started %v after it was produced (-1: not while the ghost bumped partition 0, 6 s; %d refusals; %v records polled, %d in flight of max_in_flight %d): partition 0's waiting queue holds the in-flight budget",
			startedB, bumps.Load(), polled, inFlight, cfg.MaxInFlight)
	}
	for i := 0; i < 30; i++ {
		if n := len(e.starter.executionsOf(wid(fmt.Sprintf("a%d", i)))); n != 1 {
			t.Errorf("a%d: %d executions, want 1", i, n)
		}
	}
}

// Adversary 28 (PASSES). Stream order inside a waiting partition: x@0
// with payload v1 is refused by a ghost's Own before every claim of
// partition 0 until it waits in its queue; x@0 with v2 (a later poll,
// with y@1 beside it) joins the queue behind it; the ghost stops. The
// first copy in the stream (v1) wins x's row and starts, v2 is the
// conflict, dead-lettered once; y starts meanwhile.
func TestAWaitingPartitionsLaterCopyOfAnEventIsClaimedAfterItsEarlierCopy(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	bumps, stopGhost := e.ghostKeepsTaking(0, true)
	rn := e.start("r1", e.config())
	rn.waitJoined()
	e.produce(0, "x", "v1")
	eventually(t, 10*time.Second, func() bool { return bumps.Load() >= 5 }, func() string { return "x's claim never refused five times" })
	e.produce(0, "x", "v2")
	e.produce(1, "y", "v")
	eventually(t, 5*time.Second, func() bool { return len(e.starter.executionsOf(wid("y"))) == 1 }, func() string { return "y never started" })
	time.Sleep(500 * time.Millisecond) // x v2 in partition 0's queue behind v1
	stopGhost()
	e.waitCommittedToEnd(15 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	e.led.mu.Lock()
	hash := e.led.rows[wid("x")].hash
	e.led.mu.Unlock()
	if hash != e.hashOf("x", "v1") {
		t.Errorf("x's row holds v2's payload: the later copy of a waiting partition was claimed first")
	}
	if n := len(e.starter.executionsOf(wid("x"))); n != 1 {
		t.Errorf("x: %d executions, want 1", n)
	}
	if r := e.dlqReasons(); r[string(decide.ReasonConflict)] != 1 {
		t.Errorf("dead letters %v, want one conflict (x v2)", r)
	}
}

// Adversary 28 (PASSES). Shutdown while a dead-letter mark retries on its
// own goroutine (s.parked, 407b6aa) against a ghost that takes partition
// 0 before every mark: Run returns within its drain timeout, nothing is
// committed past a (its row is not dead_lettered), and the next router,
// the ghost gone, dead-letters a once (one record on the dead-letter
// topic) and commits it.
func TestARouterStoppedWhileADeadLetterMarkRetriesOnItsOwnReturnsInTimeAndCommitsNothingPastIt(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	e.starter.failPermanent(wid("a"))
	var bumping atomic.Bool
	bumping.Store(true)
	var bumps atomic.Int32
	e.led.mu.Lock()
	e.led.markGate = func(ps []int32) {
		if bumping.Load() {
			bumps.Add(1)
			e.ghostOwn(0)
		}
	}
	e.led.mu.Unlock()
	cfg := e.config()
	r1 := e.start("r1", cfg)
	e.produce(0, "a", "v")
	eventually(t, 15*time.Second, func() bool { return bumps.Load() >= 7 }, func() string { return fmt.Sprintf("%d refusals", bumps.Load()) })
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if r1.took > cfg.DrainTimeout+500*time.Millisecond {
		t.Errorf("Run took %v to return after cancel, drain timeout %v", r1.took, cfg.DrainTimeout)
	}
	if c := e.committed()[0]; c != -1 {
		t.Errorf("committed %d past a, whose row is %q", c, e.led.state(wid("a")))
	}
	if st := e.led.state(wid("a")); st == stateDeadLettered {
		t.Errorf("a's row %q under a ghost's fence", st)
	}
	bumping.Store(false)
	r2 := e.start("r2", cfg)
	e.waitCommittedToEnd(15 * time.Second)
	if err := r2.stop(); err != nil {
		t.Fatal(err)
	}
	if st := e.led.state(wid("a")); st != stateDeadLettered {
		t.Errorf("a's row %q, want dead_lettered", st)
	}
	if r := e.dlqReasons(); r[string(decide.ReasonTemporalPermanent)] != 1 {
		t.Errorf("dead letters %v, want one temporal_permanent", r)
	}
}

// pausedPartitions is the partitions of the test topic rn's Kafka client
// has paused (PauseFetchPartitions; not the health pause's topics).
func pausedPartitions(rn *runner) map[int32]bool {
	out := map[int32]bool{}
	for _, p := range rn.r.cl.PauseFetchPartitions(nil)[testTopic] {
		out[p] = true
	}
	return out
}

// lentCount is how many assignments rn lends out of max_in_flight, and
// rn's records in flight.
func lentCount(rn *runner) (lent, inFlight int) {
	f := rn.r.commits.flight
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.lent), f.n
}

// Adversary 28b. 305a298 lends a waiting partition's records in flight
// out of max_in_flight, but at most max_in_flight in all (lentN: min(sum,
// max)). Two waiting partitions together hold more than max_in_flight
// before the second waits: partition 0 waits first (its queue holds about
// max_in_flight, lent), the poll loop then polls partition 1's backlog
// until max_in_flight more are in flight (n - lent >= max), and partition
// 1 then waits too: lent is capped at max, n - max >= max, and
// waitCapacity stops the poll loop again, so no record of partition 2 is
// polled while the ghost bumps 0 and 1: the hold-up of
// TestAWaitingPartitionsBacklogDoesNotHoldAnotherPartitionsRecords, with
// two waiting partitions. max_in_flight 10, max_poll_records 10 (one
// poll batch is what max_in_flight may be exceeded by anyway), 30 records
// on partition 0 before the router starts, 30 on partition 1 in one
// produce once partition 0 waits. Fails 3 of 3: 20 polled, 20 in flight,
// 2 assignments lent, b@2 never polled in 6 s. The test holds that b@2,
// produced once both wait, starts within 3 s while the ghost keeps
// bumping.
func TestTwoWaitingPartitionsBacklogsDoNotHoldAThirdPartitionsRecords(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 3, envOpt{})
	var bumping [2]atomic.Bool
	var bumps [2]atomic.Int32
	e.led.mu.Lock()
	e.led.gate = func(intents []decide.Intent) bool {
		var has [2]bool
		for _, in := range intents {
			if in.Partition < 2 {
				has[in.Partition] = true
			}
		}
		for p := range has {
			if has[p] && bumping[p].Load() {
				bumps[p].Add(1)
				e.ghostOwn(int32(p))
			}
		}
		return false
	}
	e.led.mu.Unlock()
	bumping[0].Store(true)
	for i := 0; i < 30; i++ {
		e.produce(0, fmt.Sprintf("a%d", i), "v")
	}
	cfg := e.config()
	cfg.MaxInFlight, cfg.MaxPollRecords = 10, 10
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return bumps[0].Load() >= 5 && pausedPartitions(rn)[0] },
		func() string {
			return fmt.Sprintf("partition 0 refused %d times, paused %v", bumps[0].Load(), pausedPartitions(rn))
		})
	time.Sleep(300 * time.Millisecond)
	bumping[1].Store(true)
	e.produceAll(1, "c", 30) // one produce: the backlog is there at the first fetch
	eventually(t, 10*time.Second, func() bool { return bumps[1].Load() >= 5 && pausedPartitions(rn)[1] },
		func() string {
			return fmt.Sprintf("partition 1 refused %d times, paused %v", bumps[1].Load(), pausedPartitions(rn))
		})
	time.Sleep(300 * time.Millisecond)
	{
		lent, n := lentCount(rn)
		t.Logf("before b: lent %d, in flight %d, polled %v", lent, n, rn.polled())
	}
	e.produce(2, "b", "v")
	t0 := time.Now()
	var startedB time.Duration = -1
	for time.Since(t0) < 6*time.Second {
		if startedB < 0 && len(e.starter.executionsOf(wid("b"))) == 1 {
			startedB = time.Since(t0)
		}
		time.Sleep(10 * time.Millisecond)
	}
	lent, inFlight := lentCount(rn)
	polled := rn.polled()
	bumping[0].Store(false)
	bumping[1].Store(false)
	e.waitCommittedToEnd(30 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	if startedB < 0 || startedB > 3*time.Second {
		t.Errorf("b@2 started %v after it was produced (-1: not while the ghost bumped partitions 0 and 1, 6 s; refusals %d/%d; %v records polled, %d in flight of max_in_flight %d, %d assignments lent): the two waiting partitions' records beyond max_in_flight hold the in-flight budget",
			startedB, bumps[0].Load(), bumps[1].Load(), polled, inFlight, cfg.MaxInFlight, lent)
	}
	for i := 0; i < 30; i++ {
		for _, id := range []string{fmt.Sprintf("a%d", i), fmt.Sprintf("c%d", i)} {
			if n := len(e.starter.executionsOf(wid(id))); n != 1 {
				t.Errorf("%s: %d executions, want 1", id, n)
			}
		}
	}
}

// produceAll writes events prefix0..prefix(n-1) to partition p in one
// produce request.
func (e *testEnv) produceAll(p int32, prefix string, n int) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: testTopic, Partition: p, Value: value(fmt.Sprintf("%s%d", prefix, i), "v")}
	}
	if err := e.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

// Adversary 28b (pause and resume, over and over). A waiting partition is
// paused (PauseFetchPartitions: kgo drops its buffered records and
// fetches again from its cursor once resumed) and resumed when its queue
// empties. The ghost takes partition 0 before every claim of it in bursts
// (on 600 ms, off 400 ms) while events are produced to partitions 0 and 1
// one by one, so partition 0 waits, is paused, resumed and paused again
// many times with records buffered and polled around each pause. The
// test holds that no record is skipped or taken twice: every event starts
// exactly once, both partitions are committed to their ends, and in the
// end no partition is paused and nothing is lent. PASSES 3 of 3 (about
// 23 refusals, 4 pauses seen a run).
func TestAPartitionPausedAndResumedOverAndOverStartsEveryRecordOnce(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	var bumping atomic.Bool
	var bumps atomic.Int32
	e.led.mu.Lock()
	e.led.gate = func(intents []decide.Intent) bool {
		for _, in := range intents {
			if in.Partition == 0 && bumping.Load() {
				bumps.Add(1)
				e.ghostOwn(0)
				break
			}
		}
		return false
	}
	e.led.mu.Unlock()
	cfg := e.config()
	cfg.MaxInFlight, cfg.MaxPollRecords = 10, 5
	rn := e.start("r1", cfg)
	rn.waitJoined()
	var pauses atomic.Int32
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // bursts, and how often partition 0 was seen paused
		defer wg.Done()
		was := false
		for i := 0; ; i++ {
			bumping.Store(i%10 < 6)
			select {
			case <-stop:
				bumping.Store(false)
				return
			case <-time.After(100 * time.Millisecond):
			}
			if p := pausedPartitions(rn)[0]; p != was {
				if p {
					pauses.Add(1)
				}
				was = p
			}
		}
	}()
	const n = 150
	for i := 0; i < n; i++ {
		e.produce(int32(i%2), fmt.Sprintf("e%d", i), "v")
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	e.waitCommittedToEnd(30 * time.Second)
	eventually(t, 5*time.Second, func() bool { lent, _ := lentCount(rn); return len(pausedPartitions(rn)) == 0 && lent == 0 },
		func() string {
			lent, _ := lentCount(rn)
			return fmt.Sprintf("paused %v, %d lent once everything was committed", pausedPartitions(rn), lent)
		})
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d refusals of partition 0, paused %d times (seen)", bumps.Load(), pauses.Load())
	if pauses.Load() < 2 {
		t.Errorf("partition 0 paused %d times (seen): the scenario did not pause and resume it over and over", pauses.Load())
	}
	for i := 0; i < n; i++ {
		if c := len(e.starter.executionsOf(wid(fmt.Sprintf("e%d", i)))); c != 1 {
			t.Errorf("e%d@%d: %d executions, want 1", i, i%2, c)
		}
	}
}

// Adversary 28b (a waiting partition moves away and comes back). Kafka's
// client keeps a partition paused across rebalances until it is resumed;
// the pause of a waiting partition is lifted only when its queue is
// removed. Partition 1 waits on r1 (the ghost takes it before every claim
// of it: c@1 queued, partition 1 paused, its records lent), then r2 joins
// and takes partition 1 (the ghost stops), starts c and commits it, then
// r2 leaves and partition 1 comes back to r1 under a new assignment. The
// test holds that d@1, produced after it came back, is fetched and
// started by r1 (the old assignment's queue does not keep the new one
// paused), c and d start once each, and r1 ends with nothing paused or
// lent. PASSES 3 of 3.
func TestAWaitingPartitionThatMovesAwayAndBackIsFetchedAgain(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	var bumping atomic.Bool
	var bumps atomic.Int32
	e.led.mu.Lock()
	e.led.gate = func(intents []decide.Intent) bool {
		for _, in := range intents {
			if in.Partition == 1 && bumping.Load() {
				bumps.Add(1)
				e.ghostOwn(1)
				break
			}
		}
		return false
	}
	e.led.mu.Unlock()
	bumping.Store(true)
	r1 := e.start("r1", e.config())
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	e.produce(1, "c", "v")
	eventually(t, 10*time.Second, func() bool { return bumps.Load() >= 5 && pausedPartitions(r1)[1] },
		func() string {
			return fmt.Sprintf("c refused %d times, r1 paused %v", bumps.Load(), pausedPartitions(r1))
		})
	r2 := e.start("r2", e.config())
	eventually(t, 10*time.Second, func() bool { o := r1.owned(); return len(o) == 1 && len(r2.owned()) == 1 }, func() string {
		return fmt.Sprintf("r1 owns %v, r2 %v", r1.owned(), r2.owned())
	})
	if !r2.owned()[1] {
		t.Fatalf("partition 0 moved to r2, not the waiting partition 1 (r1 owns %v)", r1.owned())
	}
	bumping.Store(false)
	eventually(t, 10*time.Second, func() bool { return len(e.starter.executionsOf(wid("c"))) == 1 && e.committed()[1] == 1 },
		func() string {
			return fmt.Sprintf("c executions %d, committed %v", len(e.starter.executionsOf(wid("c"))), e.committed())
		})
	if err := r2.stop(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	e.produce(1, "d", "v")
	eventually(t, 5*time.Second, func() bool { return len(e.starter.executionsOf(wid("d"))) == 1 }, func() string {
		lent, n := lentCount(r1)
		return fmt.Sprintf("d@1 not started after partition 1 came back to r1: r1 paused %v, %d lent, %d in flight", pausedPartitions(r1), lent, n)
	})
	e.waitCommittedToEnd(10 * time.Second)
	if lent, _ := lentCount(r1); len(pausedPartitions(r1)) != 0 || lent != 0 {
		t.Errorf("r1 paused %v, %d lent at the end", pausedPartitions(r1), lent)
	}
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c", "d"} {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
	}
}

// Adversary 28c. The marks' counterpart of
// TestAWaitingPartitionsBacklogDoesNotHoldAnotherPartitionsRecords: a
// partition whose marks the ledger's fence refuses over and over keeps
// them in the marker's waiting list (markDue, 407b6aa), but neither
// pauses its fetching nor lends its records out of max_in_flight (only
// the claimer's refusedWaits hold does, 305a298). A ghost that takes
// partition 0 before every mark (not before claims: the marker's fenced
// takes it again at once, so its claims go through) lets the router poll,
// claim and start partition 0's backlog until max_in_flight of its
// records wait in the marker; waitCapacity then stops the poll loop, and
// no record of partition 1 is polled while the ghost bumps partition 0.
// max_in_flight 10, max_poll_records 5, 30 records on partition 0 before
// the router starts. The test holds that b@1, produced once partition
// 0's marks were refused 20 times, starts within 3 s while the ghost
// keeps bumping. Fails 3 of 3: 10 polled, 10 in flight of 10, 0 lent,
// nothing paused, b@1 never polled in 6 s (26 refusals); heals once the
// ghost stops (every a once).
func TestAWaitingPartitionsMarksBacklogDoesNotHoldAnotherPartitionsRecords(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	bumps, stopGhost := e.ghostKeepsTaking(0, false)
	for i := 0; i < 30; i++ {
		e.produce(0, fmt.Sprintf("a%d", i), "v")
	}
	cfg := e.config()
	cfg.MaxInFlight, cfg.MaxPollRecords = 10, 5
	rn := e.start("r1", cfg)
	eventually(t, 15*time.Second, func() bool { return bumps.Load() >= 20 }, func() string { return "partition 0's marks never refused 20 times" })
	e.produce(1, "b", "v")
	t0 := time.Now()
	var startedB time.Duration = -1
	for time.Since(t0) < 6*time.Second {
		if startedB < 0 && len(e.starter.executionsOf(wid("b"))) == 1 {
			startedB = time.Since(t0)
		}
		time.Sleep(10 * time.Millisecond)
	}
	lent, inFlight := lentCount(rn)
	polled, paused := rn.polled(), pausedPartitions(rn)
	stopGhost()
	e.waitCommittedToEnd(30 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	if startedB < 0 || startedB > 3*time.Second {
		t.Errorf("b@1 started %v after it was produced (-1: not while the ghost bumped partition 0 before its marks, 6 s; %d refusals; %v records polled, %d in flight of max_in_flight %d, %d lent, paused %v): partition 0's waiting marks hold the in-flight budget",
			startedB, bumps.Load(), polled, inFlight, cfg.MaxInFlight, lent, paused)
	}
	for i := 0; i < 30; i++ {
		if n := len(e.starter.executionsOf(wid(fmt.Sprintf("a%d", i)))); n != 1 {
			t.Errorf("a%d: %d executions, want 1", i, n)
		}
	}
	if n := len(e.starter.executionsOf(wid("b"))); n != 1 {
		t.Errorf("b: %d executions, want 1", n)
	}
}

// Adversary 28c (shutdown with everything waiting at once). Partitions 0
// and 1 wait for the ledger's fence in the claimer (a ghost takes each
// before every claim of it: queued, paused, lent), while partition 2's
// marks are refused over and over (the ghost takes it before every mark):
// c@2's mark waits in the marker (markDue) and d@2's dead-letter mark
// (Temporal refuses d for good) retries on its own goroutine (s.parked).
// The router is stopped then. The test holds that Run returns within
// drain_timeout, commits nothing on partitions 0 and 1 (nothing claimed)
// nor past c on partition 2 (its row not marked), leaves nothing paused
// or lent, and that the next router, the ghost gone, starts a@0, b@1 and
// c@2 once each, dead-letters d once and commits every partition to its
// end. PASSES 4 of 4 (withstood): 2 lent, 4 in flight, 0 and 1 paused,
// 12 mark refusals at the stop; Run returns 1.5 s after cancel (drain
// timeout 2 s).
func TestARouterStoppedWhileTwoPartitionsWaitAndAThirdsMarksWaitReturnsInTimeAndTheNextStartsEachOnce(t *testing.T) {
	e := newTestEnv(t, 3, envOpt{})
	e.starter.failPermanent(wid("d"))
	var bumping atomic.Bool
	bumping.Store(true)
	var claimBumps [2]atomic.Int32
	var markBumps atomic.Int32
	e.led.mu.Lock()
	e.led.gate = func(intents []decide.Intent) bool {
		var has [2]bool
		for _, in := range intents {
			if in.Partition < 2 {
				has[in.Partition] = true
			}
		}
		for p := range has {
			if has[p] && bumping.Load() {
				claimBumps[p].Add(1)
				e.ghostOwn(int32(p))
			}
		}
		return false
	}
	e.led.markGate = func(ps []int32) {
		for _, p := range ps {
			if p == 2 && bumping.Load() {
				markBumps.Add(1)
				e.ghostOwn(2)
				return
			}
		}
	}
	e.led.mu.Unlock()
	cfg := e.config()
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 3 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	e.produce(0, "a", "v")
	e.produce(1, "b", "v")
	// c and d in one produce, so that one poll holds both and they are
	// claimed together, before the ghost takes partition 2 at c's first
	// mark: produced one by one, a poll between them claims d after that
	// bump, and the fence refuses d's claim on every try (partition 2
	// paused, d never started: seen once under CI's load).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if err := e.cl.ProduceSync(ctx, &kgo.Record{Topic: testTopic, Partition: 2, Value: value("c", "v")},
		&kgo.Record{Topic: testTopic, Partition: 2, Value: value("d", "v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cancel()
	eventually(t, 15*time.Second, func() bool {
		p := pausedPartitions(r1)
		return p[0] && p[1] && claimBumps[0].Load() >= 5 && claimBumps[1].Load() >= 5 && markBumps.Load() >= 12 &&
			len(e.starter.executionsOf(wid("c"))) == 1 && e.starter.callCount(wid("d")) >= 1
	}, func() string {
		return fmt.Sprintf("paused %v, claim refusals %d/%d, mark refusals %d, c executions %d, d calls %d", pausedPartitions(r1),
			claimBumps[0].Load(), claimBumps[1].Load(), markBumps.Load(), len(e.starter.executionsOf(wid("c"))), e.starter.callCount(wid("d")))
	})
	lent, n := lentCount(r1)
	t.Logf("before stop: %d lent, %d in flight, paused %v, mark refusals %d", lent, n, pausedPartitions(r1), markBumps.Load())
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Run returned %v after cancel", r1.took)
	if r1.took > cfg.DrainTimeout+500*time.Millisecond {
		t.Errorf("Run took %v to return after cancel, drain timeout %v", r1.took, cfg.DrainTimeout)
	}
	if c := e.committed(); c[0] != -1 || c[1] != -1 || c[2] > 0 {
		t.Errorf("committed %v: want nothing on 0 and 1 and nothing past c@2/0 (rows a %q, b %q, c %q, d %q)", c,
			e.led.state(wid("a")), e.led.state(wid("b")), e.led.state(wid("c")), e.led.state(wid("d")))
	}
	if lent, _ := lentCount(r1); lent != 0 {
		t.Errorf("r1 stopped with %d assignments lent", lent)
	}
	bumping.Store(false)
	r2 := e.start("r2", cfg)
	e.waitCommittedToEnd(20 * time.Second)
	if err := r2.stop(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
		if st := e.led.state(wid(id)); st != stateStarted {
			t.Errorf("%s: row %q, want started", id, st)
		}
	}
	if st := e.led.state(wid("d")); st != stateDeadLettered {
		t.Errorf("d: row %q, want dead_lettered", st)
	}
	if r := e.dlqReasons(); r[string(decide.ReasonTemporalPermanent)] != 1 || len(r) != 1 {
		t.Errorf("dead letters %v, want one temporal_permanent (d)", r)
	}
}

// Adversary 28c (pause and resume across transactions). A waiting
// partition is paused (kgo strips its buffered fetch and fetches again
// from its cursor once resumed) while its records come in transactions:
// with read_committed and KeepControlRecords, an aborted transaction's
// records are filtered out by the client and every commit or abort
// marker comes to the poll loop as a control record that ends at once
// (prepare). A cut between a stripped fetch and a re-fetch that landed a
// marker, or an aborted range, on the wrong side would skip a record,
// take one twice, or move the committed offset past a record never
// claimed. The ghost takes partition 0 before every claim of it in
// bursts (on 600 ms, off 400 ms), max_poll_records 3 (polls queue behind
// the claimer when a pause comes), while 120 transactions are produced one
// by one, each with two events on partition 0 and one on partition 1,
// every fourth aborted. The test holds that each committed event starts
// exactly once, no aborted one starts, each committed event is polled
// (tracked) once, both partitions are committed to their ends (past the
// last marker), and nothing stays paused or lent. PASSES 4 of 4
// (withstood): 18 refusals, 3 pauses seen, 270 records polled a run.
func TestAPartitionPausedAndResumedAcrossTransactionsStartsEachCommittedEventOnce(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	var bumping atomic.Bool
	var bumps atomic.Int32
	e.led.mu.Lock()
	e.led.gate = func(intents []decide.Intent) bool {
		for _, in := range intents {
			if in.Partition == 0 && bumping.Load() {
				bumps.Add(1)
				e.ghostOwn(0)
				break
			}
		}
		return false
	}
	e.led.mu.Unlock()
	cfg := e.config()
	cfg.MaxInFlight, cfg.MaxPollRecords = 10, 3
	rn := e.start("r1", cfg)
	rn.waitJoined()
	tx := e.txProducer("tx-28c")
	var pauses atomic.Int32
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		was := false
		for i := 0; ; i++ {
			bumping.Store(i%10 < 6)
			select {
			case <-stop:
				bumping.Store(false)
				return
			case <-time.After(100 * time.Millisecond):
			}
			if p := pausedPartitions(rn)[0]; p != was {
				if p {
					pauses.Add(1)
				}
				was = p
			}
		}
	}()
	const n = 120
	aborted := func(i int) bool { return i%4 == 3 }
	for i := 0; i < n; i++ {
		tx.begin(txEvent{0, fmt.Sprintf("t%da", i)}, txEvent{1, fmt.Sprintf("t%db", i)}, txEvent{0, fmt.Sprintf("t%dc", i)})
		tx.end(!aborted(i))
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	e.waitCommittedToEnd(30 * time.Second)
	eventually(t, 5*time.Second, func() bool { lent, _ := lentCount(rn); return len(pausedPartitions(rn)) == 0 && lent == 0 },
		func() string {
			lent, _ := lentCount(rn)
			return fmt.Sprintf("paused %v, %d lent once everything was committed", pausedPartitions(rn), lent)
		})
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d refusals of partition 0, paused %d times (seen), %v records polled", bumps.Load(), pauses.Load(), rn.polled())
	if want := float64(3 * (n - n/4)); rn.polled() != want {
		t.Errorf("%v records polled, want %v (each committed event once: none fetched again after a pause)", rn.polled(), want)
	}
	if pauses.Load() < 2 {
		t.Errorf("partition 0 paused %d times (seen): the scenario did not pause and resume it over and over", pauses.Load())
	}
	for i := 0; i < n; i++ {
		want := 1
		if aborted(i) {
			want = 0
		}
		for _, s := range []string{"a", "b", "c"} {
			id := fmt.Sprintf("t%d%s", i, s)
			if c := len(e.starter.executionsOf(wid(id))); c != want {
				t.Errorf("%s (aborted %v): %d executions, want %d", id, aborted(i), c, want)
			}
		}
	}
}

// Adversary 28d. de4ddba lends the records in flight of the assignment
// whose mark waits for the ledger's fence (startPool.hold: j.rec.part),
// and pauses its partition, so that they do not hold max_in_flight. But
// the copies of the same event that another partition delivers wait on
// that job (startPool.joinLocked: verdict redrive, the row pending) and
// end only with its mark: they are neither lent nor paused. A ghost
// takes partition 0 before every mark of it; x@0 is claimed and started,
// its mark waits (held: partition 0 paused, lent). Then 15 copies of x
// come on partition 1 (a producer's retries); each is claimed, joins x's
// job as a waiter and stays in flight. With max_in_flight 10 and
// max_poll_records 5 the poll loop stops once 10 of them are in flight
// (waitCapacity: n - lent >= max), and b@2 is never polled while the
// ghost bumps partition 0: partition 0's refusals hold a third
// partition's records through another partition's backlog, the hold-up
// TestAWaitingPartitionsMarksBacklogDoesNotHoldAnotherPartitionsRecords
// was about. The test holds that b@2, produced once the copies are in,
// starts within 3 s while the ghost keeps bumping, and that everything
// heals after (x started once, every partition committed to its end,
// nothing paused or lent). Fails 3 of 3: 11-12 polled, 11-12 in flight of
// 10, 1 assignment lent (partition 0's, 1 record), partition 0 paused,
// 10-11 copies waiting on x's job, b@2 never polled in 6 s (15
// refusals); heals once the ghost stops (x and b once each, committed to
// the ends, nothing paused or lent).
func TestCopiesOnAnotherPartitionWaitingOnAMarkHeldByTheFenceDoNotHoldAThirdPartitionsRecords(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 3, envOpt{})
	bumps, stopGhost := e.ghostKeepsTaking(0, false)
	cfg := e.config()
	cfg.MaxInFlight, cfg.MaxPollRecords = 10, 5
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(rn.owned()) == 3 }, func() string { return fmt.Sprintf("r1 owns %v", rn.owned()) })
	e.produce(0, "x", "v")
	eventually(t, 15*time.Second, func() bool {
		return bumps.Load() >= 6 && pausedPartitions(rn)[0] && len(e.starter.executionsOf(wid("x"))) == 1
	}, func() string {
		return fmt.Sprintf("x@0's mark refused %d times, paused %v", bumps.Load(), pausedPartitions(rn))
	})
	for i := 0; i < 15; i++ {
		e.produce(1, "x", "v")
	}
	// The copies fill the budget, or (since they hold their partition
	// while they wait on x's held job) partition 1 is no longer fetched.
	eventually(t, 10*time.Second, func() bool { return rn.polled() >= 11 || pausedPartitions(rn)[1] }, func() string {
		return fmt.Sprintf("polled %v, paused %v", rn.polled(), pausedPartitions(rn))
	})
	time.Sleep(300 * time.Millisecond)
	{
		lent, n := lentCount(rn)
		t.Logf("before b: lent %d, in flight %d, polled %v, waiters of x %d, paused %v", lent, n, rn.polled(), waitersOf(rn.r, wid("x")), pausedPartitions(rn))
	}
	e.produce(2, "b", "v")
	t0 := time.Now()
	var startedB time.Duration = -1
	for time.Since(t0) < 6*time.Second {
		if startedB < 0 && len(e.starter.executionsOf(wid("b"))) == 1 {
			startedB = time.Since(t0)
		}
		time.Sleep(10 * time.Millisecond)
	}
	lent, inFlight := lentCount(rn)
	polled, paused, waiters := rn.polled(), pausedPartitions(rn), waitersOf(rn.r, wid("x"))
	stopGhost()
	e.waitCommittedToEnd(30 * time.Second)
	if l, _ := lentCount(rn); l != 0 || len(pausedPartitions(rn)) != 0 {
		t.Errorf("healed, but %d assignments lent, paused %v", l, pausedPartitions(rn))
	}
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	if startedB < 0 || startedB > 3*time.Second {
		t.Errorf("b@2 started %v after it was produced (-1: not while the ghost bumped partition 0 before its marks, 6 s; %d refusals; %v records polled, %d in flight of max_in_flight %d, %d assignments lent, paused %v, %d copies waiting on x's job): copies on partition 1 waiting on partition 0's held mark hold the in-flight budget",
			startedB, bumps.Load(), polled, inFlight, cfg.MaxInFlight, lent, paused, waiters)
	}
	for _, id := range []string{"x", "b"} {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
	}
}

// Adversary 28d (holds across a move away and back). A ghost takes
// partitions 0 and 1 before every mark of them, so that on each partition
// a started event's mark waits in the marker (a@0, c@1: job.held) and a
// dead-letter mark retries on its own goroutine (d@0, f@1: Temporal
// refuses them for good): two holds on each partition (fenceHolds count
// 2, both paused and lent). A second router joins and takes one of the
// partitions: r1's waiting mark of it is refused again and not taken
// again (released), its dead-letter goroutine ends on the partition's
// context (released); r2 takes the records over and its own marks wait.
// Then r2 stops (its final flush and dead-letter goroutines release its
// holds), the partition comes back to r1 as a new assignment, and the
// ghost stops. A hold taken twice and released once (or the reverse)
// would leave the partition paused in r1's client, or the old assignment
// lent, and its records of the new assignment never fetched. The test
// holds that r1 ends with nothing paused or lent, b@moved produced after
// the partition came back starts, every partition is committed to its
// end, a and c start once and d and f are dead-lettered once each.
// PASSES 4 of 4 (withstood): r1 holds 2 on each partition before r2
// joins, 2 on the partition it keeps once the other moved (partition 1
// each run), r2 holds 1-2 on the moved one; r1 ends with nothing paused
// or lent.
func TestHoldsOfAWaitingMarkAndADeadLetterMarkAreReleasedWhenTheirPartitionMovesAwayAndBack(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	e.starter.failPermanent(wid("d"))
	e.starter.failPermanent(wid("f"))
	var bumping atomic.Bool
	bumping.Store(true)
	var bumps [2]atomic.Int32
	e.led.mu.Lock()
	e.led.markGate = func(ps []int32) {
		var has [2]bool
		for _, p := range ps {
			has[p] = true
		}
		for p := range has {
			if has[p] && bumping.Load() {
				bumps[p].Add(1)
				e.ghostOwn(int32(p))
			}
		}
	}
	e.led.mu.Unlock()
	cfg := e.config()
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	e.produce(0, "a", "v")
	e.produce(0, "d", "v")
	e.produce(1, "c", "v")
	e.produce(1, "f", "v")
	eventually(t, 15*time.Second, func() bool {
		p := pausedPartitions(r1)
		lent, _ := lentCount(r1)
		return p[0] && p[1] && lent == 2 && bumps[0].Load() >= 10 && bumps[1].Load() >= 10
	}, func() string {
		lent, n := lentCount(r1)
		return fmt.Sprintf("paused %v, %d lent, %d in flight, refusals %d/%d", pausedPartitions(r1), lent, n, bumps[0].Load(), bumps[1].Load())
	})
	t.Logf("r1 before r2 joins: holds per partition %v", holdCounts(r1))
	r2 := e.start("r2", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 1 && len(r2.owned()) == 1 }, func() string {
		return fmt.Sprintf("r1 owns %v, r2 %v", r1.owned(), r2.owned())
	})
	var moved, kept int32 = 0, 1
	if r2.owned()[1] {
		moved, kept = 1, 0
	}
	// r1's holds of the moved partition's old assignment end within a
	// refused mark's wait (at most a second) and its context.
	eventually(t, 5*time.Second, func() bool { return !pausedPartitions(r1)[moved] }, func() string {
		lent, n := lentCount(r1)
		return fmt.Sprintf("r1 still pauses partition %d, which moved to r2 (%d lent, %d in flight)", moved, lent, n)
	})
	if !pausedPartitions(r1)[kept] {
		t.Errorf("r1 resumed partition %d, whose marks still wait", kept)
	}
	eventually(t, 10*time.Second, func() bool { return pausedPartitions(r2)[moved] }, func() string {
		return fmt.Sprintf("r2 never held partition %d (paused %v)", moved, pausedPartitions(r2))
	})
	t.Logf("partition %d moved: r1 holds %v, r2 holds %v", moved, holdCounts(r1), holdCounts(r2))
	if err := r2.stop(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	time.Sleep(500 * time.Millisecond)
	bumping.Store(false)
	e.produce(moved, "b", "v")
	eventually(t, 10*time.Second, func() bool { return len(e.starter.executionsOf(wid("b"))) == 1 }, func() string {
		lent, n := lentCount(r1)
		return fmt.Sprintf("b@%d not started after partition %d came back to r1: r1 paused %v, %d lent, %d in flight", moved, moved, pausedPartitions(r1), lent, n)
	})
	e.waitCommittedToEnd(20 * time.Second)
	eventually(t, 5*time.Second, func() bool { lent, _ := lentCount(r1); return lent == 0 && len(pausedPartitions(r1)) == 0 }, func() string {
		lent, n := lentCount(r1)
		return fmt.Sprintf("r1 healed but paused %v, %d lent, %d in flight", pausedPartitions(r1), lent, n)
	})
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "c", "b"} {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
		if st := e.led.state(wid(id)); st != stateStarted {
			t.Errorf("%s: row %q, want started", id, st)
		}
	}
	for _, id := range []string{"d", "f"} {
		if st := e.led.state(wid(id)); st != stateDeadLettered {
			t.Errorf("%s: row %q, want dead_lettered", id, st)
		}
	}
	if r := e.dlqReasons(); r[string(decide.ReasonTemporalPermanent)] != 2 || len(r) != 1 {
		t.Errorf("dead letters %v, want two temporal_permanent (d, f)", r)
	}
}

// holdCounts is rn's fenceHolds count per partition of the test topic.
func holdCounts(rn *runner) map[int32]int {
	h := rn.r.starts.holds
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[int32]int{}
	for ref, n := range h.refs {
		out[ref.Partition] = n
	}
	return out
}

// Adversary 28e (a waiter's hold across a move away and back). a389c9f
// makes the copies waiting on a job whose mark waits for the ledger's
// fence hold their partitions (startPool.hold, joinLocked: j.holding),
// released only when the job's hold is (hold(j, false)). A job's own
// hold of an old assignment ends when its partition moves (the mark is
// refused and not taken again: TestHoldsOfAWaitingMarkAndADeadLetterMark
// AreReleasedWhenTheirPartitionMovesAwayAndBack), but a waiter's does
// not: it lasts as long as the job it waits on is held, whatever became of
// the waiter's own partition. A ghost takes partition 0 before every mark
// of it: x@0 is started, its mark waits (held). A copy x@1 is claimed
// (re-drive) and waits on x's job, holding partition 1 (paused, lent).
// r2 joins and takes partition 1: it starts x@1's copy itself, marks it
// under its own fence and commits partition 1 past it. r2 stops and
// partition 1 comes back to r1 as a new assignment, in which no record
// waits on anything; but r1's client still pauses partition 1 for the old
// assignment's copy, which waits on x@0's job for as long as the ghost
// bumps partition 0. The test holds that b@1, produced once partition 1
// is back, starts within 5 s while the ghost keeps bumping partition 0
// (as TestAWaitingPartitionThatMovesAwayAndBackIsFetchedAgain does for a
// claimer's queue), and that everything heals after. Fails 3 of 3: r1
// holds {0:1 1:1} once partition 1 is back, paused {0 1}, 2 assignments
// lent (partition 0's and partition 1's old one), b@1 never started in
// 5 s (14 refusals); heals once the ghost stops (x and b once, committed
// to the ends, nothing paused or lent). With a389c9f's marker.go and
// starts.go reverted (setup made not to wait for partition 1's pause)
// it passes: b@1 starts at once.
func TestACopyWaitingOnAHeldMarkDoesNotKeepItsPartitionPausedAfterItMovesAwayAndBack(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	bumps, stopGhost := e.ghostKeepsTaking(0, false)
	defer stopGhost()
	cfg := e.config()
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	e.produce(0, "x", "v")
	eventually(t, 15*time.Second, func() bool {
		return bumps.Load() >= 6 && pausedPartitions(r1)[0] && len(e.starter.executionsOf(wid("x"))) == 1
	}, func() string {
		return fmt.Sprintf("x@0's mark refused %d times, paused %v", bumps.Load(), pausedPartitions(r1))
	})
	e.produce(1, "x", "v")
	eventually(t, 10*time.Second, func() bool { return waitersOf(r1.r, wid("x")) == 1 && pausedPartitions(r1)[1] }, func() string {
		return fmt.Sprintf("waiters of x %d, r1 paused %v", waitersOf(r1.r, wid("x")), pausedPartitions(r1))
	})
	t.Logf("x@1 waits on x@0's held job: r1 holds %v", holdCounts(r1))
	r2 := e.start("r2", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 1 && len(r2.owned()) == 1 }, func() string {
		return fmt.Sprintf("r1 owns %v, r2 %v", r1.owned(), r2.owned())
	})
	if !r2.owned()[1] {
		t.Fatalf("partition 0 moved to r2, not partition 1 (r1 owns %v)", r1.owned())
	}
	eventually(t, 10*time.Second, func() bool { return e.committed()[1] == 1 }, func() string {
		return fmt.Sprintf("r2 never committed x@1: committed %v, row %q", e.committed(), e.led.state(wid("x")))
	})
	if err := r2.stop(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	t.Logf("partition 1 back on r1: r1 holds %v, paused %v", holdCounts(r1), pausedPartitions(r1))
	e.produce(1, "b", "v")
	t0 := time.Now()
	var startedB time.Duration = -1
	for time.Since(t0) < 5*time.Second {
		if len(e.starter.executionsOf(wid("b"))) == 1 {
			startedB = time.Since(t0)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	paused, holds := pausedPartitions(r1), holdCounts(r1)
	lent, inFlight := lentCount(r1)
	refusals := bumps.Load()
	stopGhost()
	e.waitCommittedToEnd(20 * time.Second)
	eventually(t, 5*time.Second, func() bool { l, _ := lentCount(r1); return l == 0 && len(pausedPartitions(r1)) == 0 }, func() string {
		l, n := lentCount(r1)
		return fmt.Sprintf("r1 healed but paused %v, %d lent, %d in flight, holds %v", pausedPartitions(r1), l, n, holdCounts(r1))
	})
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if startedB < 0 {
		t.Errorf("b@1 not started within 5 s of partition 1 coming back to r1 while the ghost bumped partition 0 (%d refusals): r1 paused %v, holds %v, %d assignments lent, %d in flight: the old assignment's copy of x, waiting on x@0's held job, keeps the new assignment paused",
			refusals, paused, holds, lent, inFlight)
	}
	for _, id := range []string{"x", "b"} {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
	}
}

// Adversary 28e (a waiter's hold taken after its partition moved). The
// same hold as in
// TestACopyWaitingOnAHeldMarkDoesNotKeepItsPartitionPausedAfterItMovesAwayAndBack,
// taken in the other order: startPool.hold(j, true) holds the partition
// of every record waiting on j, whether or not its assignment is still
// the router's, so a fix that lets go of a waiter's hold when its
// partition is revoked would still take one for a partition already
// gone. x's starts are held back (the starter blocks them); x@0 is
// claimed and its start waits; its copy x@1 is claimed and waits on x's
// job. r2 joins and takes partition 1 (r1's revoke gives up on the copy:
// its job has not ended), and claims the copy again (re-drive), its start
// blocked too. Then the starts go through: r2 marks x under its fence
// and commits partition 1 past the copy, while x@0's mark is refused over
// and over (a ghost takes partition 0 before every mark of it) and held
// from its fourth refusal on, with the old assignment's copy still among
// its waiters: r1's client pauses partition 1, which it no longer owns.
// r2 stops and partition 1 comes back to r1, paused. The test holds that
// b@1, produced once partition 1 is back, starts within 5 s while the
// ghost keeps bumping partition 0, and that everything heals after.
// Fails 3 of 3: while r1 owns only partition 0 it holds {0:1 1:1} and
// pauses {0 1}; once partition 1 is back the same, 2 assignments lent,
// b@1 never started in 5 s (13 refusals); heals once the ghost stops.
// Passes with a389c9f's marker.go and starts.go reverted.
func TestACopyWhosePartitionMovedBeforeTheMarkItWaitsOnIsHeldDoesNotPauseItsPartition(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	bumps, stopGhost := e.ghostKeepsTaking(0, false)
	defer stopGhost()
	release := e.starter.block(wid("x"))
	defer release()
	cfg := e.config()
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	e.produce(0, "x", "v")
	eventually(t, 10*time.Second, func() bool { return waitersOf(r1.r, wid("x")) == 0 }, func() string { return "x@0's start never submitted" })
	e.produce(1, "x", "v")
	eventually(t, 10*time.Second, func() bool { return waitersOf(r1.r, wid("x")) == 1 }, func() string {
		return fmt.Sprintf("waiters of x %d", waitersOf(r1.r, wid("x")))
	})
	r2 := e.start("r2", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 1 && len(r2.owned()) == 1 }, func() string {
		return fmt.Sprintf("r1 owns %v, r2 %v", r1.owned(), r2.owned())
	})
	if !r2.owned()[1] {
		t.Fatalf("partition 0 moved to r2, not partition 1 (r1 owns %v)", r1.owned())
	}
	eventually(t, 10*time.Second, func() bool { return waitersOf(r2.r, wid("x")) == 0 }, func() string { return "r2 never submitted x@1's start" })
	release()
	eventually(t, 10*time.Second, func() bool { return e.committed()[1] == 1 && bumps.Load() >= 6 && pausedPartitions(r1)[0] }, func() string {
		return fmt.Sprintf("committed %v, row %q, x@0's mark refused %d times, r1 paused %v", e.committed(), e.led.state(wid("x")), bumps.Load(), pausedPartitions(r1))
	})
	t.Logf("x@0's mark held: r1 owns %v, holds %v, paused %v", r1.owned(), holdCounts(r1), pausedPartitions(r1))
	if err := r2.stop(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	t.Logf("partition 1 back on r1: r1 holds %v, paused %v", holdCounts(r1), pausedPartitions(r1))
	e.produce(1, "b", "v")
	t0 := time.Now()
	var startedB time.Duration = -1
	for time.Since(t0) < 5*time.Second {
		if len(e.starter.executionsOf(wid("b"))) == 1 {
			startedB = time.Since(t0)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	paused, holds := pausedPartitions(r1), holdCounts(r1)
	lent, inFlight := lentCount(r1)
	refusals := bumps.Load()
	stopGhost()
	e.waitCommittedToEnd(20 * time.Second)
	eventually(t, 5*time.Second, func() bool { l, _ := lentCount(r1); return l == 0 && len(pausedPartitions(r1)) == 0 }, func() string {
		l, n := lentCount(r1)
		return fmt.Sprintf("r1 healed but paused %v, %d lent, %d in flight, holds %v", pausedPartitions(r1), l, n, holdCounts(r1))
	})
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if startedB < 0 {
		t.Errorf("b@1 not started within 5 s of partition 1 coming back to r1 while the ghost bumped partition 0 (%d refusals): r1 paused %v, holds %v, %d assignments lent, %d in flight: x@0's job, held after partition 1 moved, holds partition 1 for the old assignment's copy",
			refusals, paused, holds, lent, inFlight)
	}
	for _, id := range []string{"x", "b"} {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
	}
}

// Adversary 28f (a gone assignment's copies still in flight, no longer
// lent). 6d72519 ends an assignment's holds with its context (gone): its
// pause count is subtracted and its lend returned, "nothing of it is
// fetched or in flight for long". But copies of the gone assignment that
// wait on another partition's job whose mark the ledger's fence refuses
// over and over stay in flight (counted in inFlight.n) for as long as
// that job is held: nothing ends a waiter when its partition's context
// ends. A ghost takes partition 0 before every mark of it: x@0 is
// started and its mark waits (held). max_in_flight 4, max_poll_records 4:
// 8 copies of x on partition 1 are claimed and wait on x's job, holding
// partition 1 (paused, lent), so the polls go on. r2 joins and takes
// partition 1 (r1's revoke gives up on the copies after revoke_timeout,
// gone returns their lend); r2 starts and commits the copies and stops;
// partition 1 comes back to r1 as a new assignment. r1's old copies are
// still in flight, not lent, and at least max_in_flight of them: its poll
// loop waits for capacity (waitCapacity) and polls nothing, so b@1 is
// never started while the ghost bumps partition 0. The test holds that
// b@1 and then c@1, produced one after the other once partition 1 is
// back, each start within 5 s (the poll loop may already wait in a poll
// that returns b), and that everything heals once the ghost stops.
// Fails 3 of 3: 4 copies wait (one poll, then partition 1 paused), r1
// holds {0:1 1:4}, 2 lent, 5 in flight; once partition 1 is back, holds
// {0:1}, paused {0}, 1 lent (partition 0's), still 5 in flight (x@0 and
// the 4 old copies: 5 - 1 >= max_in_flight 4); b@1 starts (the poll in
// progress), c@1 never in 5 s (14 refusals); heals once the ghost stops.
// At 6d72519^ it fails too, on b@1 (partition 1 stays paused for the old
// copies: 28e).
func TestCopiesOfAGoneAssignmentWaitingOnAHeldMarkDoNotStopThePollsOfItsNextAssignment(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	bumps, stopGhost := e.ghostKeepsTaking(0, false)
	defer stopGhost()
	cfg := e.config()
	cfg.MaxInFlight, cfg.MaxPollRecords = 4, 4
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	e.produce(0, "x", "v")
	eventually(t, 15*time.Second, func() bool {
		return bumps.Load() >= 6 && pausedPartitions(r1)[0] && len(e.starter.executionsOf(wid("x"))) == 1
	}, func() string {
		return fmt.Sprintf("x@0's mark refused %d times, paused %v", bumps.Load(), pausedPartitions(r1))
	})
	const copies = 8
	{
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		recs := make([]*kgo.Record, copies)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: testTopic, Partition: 1, Value: value("x", "v")}
		}
		if err := e.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	eventually(t, 10*time.Second, func() bool {
		_, n := lentCount(r1)
		return waitersOf(r1.r, wid("x")) >= cfg.MaxInFlight && n > cfg.MaxInFlight && pausedPartitions(r1)[1]
	}, func() string {
		lent, n := lentCount(r1)
		return fmt.Sprintf("waiters of x %d, r1 paused %v, %d lent, %d in flight", waitersOf(r1.r, wid("x")), pausedPartitions(r1), lent, n)
	})
	{
		lent, n := lentCount(r1)
		t.Logf("copies of x@1 wait on x@0's held job: r1 holds %v, %d waiters, %d lent, %d in flight", holdCounts(r1), waitersOf(r1.r, wid("x")), lent, n)
	}
	r2 := e.start("r2", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 1 && len(r2.owned()) == 1 }, func() string {
		return fmt.Sprintf("r1 owns %v, r2 %v", r1.owned(), r2.owned())
	})
	if !r2.owned()[1] {
		t.Fatalf("partition 0 moved to r2, not partition 1 (r1 owns %v)", r1.owned())
	}
	eventually(t, 10*time.Second, func() bool { return e.committed()[1] == copies }, func() string {
		return fmt.Sprintf("r2 never committed the copies: committed %v, row %q", e.committed(), e.led.state(wid("x")))
	})
	if err := r2.stop(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	{
		lent, n := lentCount(r1)
		t.Logf("partition 1 back on r1: r1 holds %v, paused %v, %d lent, %d in flight, %d waiters of x", holdCounts(r1), pausedPartitions(r1), lent, n, waitersOf(r1.r, wid("x")))
	}
	// The poll loop may already wait in a poll (it passed waitCapacity
	// before the copies' lend was returned): that poll returns one
	// record. Two are produced one after the other.
	var startedB time.Duration = -1
	var id string
	for _, id = range []string{"b", "c"} {
		e.produce(1, id, "v")
		t0 := time.Now()
		startedB = -1
		for time.Since(t0) < 5*time.Second {
			if len(e.starter.executionsOf(wid(id))) == 1 {
				startedB = time.Since(t0)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if startedB < 0 {
			break
		}
	}
	paused, holds := pausedPartitions(r1), holdCounts(r1)
	lent, inFlight := lentCount(r1)
	waiters, refusals := waitersOf(r1.r, wid("x")), bumps.Load()
	stopGhost()
	e.waitCommittedToEnd(20 * time.Second)
	eventually(t, 5*time.Second, func() bool { l, _ := lentCount(r1); return l == 0 && len(pausedPartitions(r1)) == 0 }, func() string {
		l, n := lentCount(r1)
		return fmt.Sprintf("r1 healed but paused %v, %d lent, %d in flight, holds %v", pausedPartitions(r1), l, n, holdCounts(r1))
	})
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if startedB < 0 {
		t.Errorf("%s@1 not started within 5 s of partition 1 coming back to r1 while the ghost bumped partition 0 (%d refusals): r1 paused %v, holds %v, %d assignments lent, %d in flight of max_in_flight %d, %d copies waiting on x's job: the gone assignment's copies, still waiting on x@0's held job, are no longer lent and fill max_in_flight",
			id, refusals, paused, holds, lent, inFlight, cfg.MaxInFlight, waiters)
	}
	for _, id := range []string{"x", "b", "c"} {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
	}
}

// Adversary 28f (fenceHolds across two assignments, with gone racing the
// holds). Unit test of fenceHolds with a pause and lend that record the
// last call per partition. Over and over: an old assignment of partition
// 0 takes k holds; a new assignment of the same partition takes m; then,
// concurrently, the old assignment's context is cancelled (gone runs on
// context.AfterFunc's goroutine), the old assignment's holds are released
// one by one (some before gone, some after: ignored), new holds of the old
// assignment are tried (not taken once its context is done, or ended by
// gone), and the new assignment takes and releases holds. The test holds
// that while the new assignment still holds, partition 0 is paused and
// the new assignment lent, the old one not lent once gone ran, and that
// once the new assignment released everything nothing is paused, lent or
// counted (refs, parts). PASSES (withstood): 2000 rounds, 0.01 s, and
// with -race (0.1 s); it fails at once with gone unpausing one too many.
func TestFenceHoldsOfTwoAssignmentsOfAPartitionBalanceWhileTheOldOneIsGoneConcurrently(t *testing.T) {
	var mu sync.Mutex
	paused := map[PartitionRef]bool{}
	lent := map[*partition]bool{}
	h := &fenceHolds{
		pause: func(ref PartitionRef, p bool) { mu.Lock(); paused[ref] = p; mu.Unlock() },
		lend:  func(part *partition, l bool) { mu.Lock(); lent[part] = l; mu.Unlock() },
	}
	ref := PartitionRef{testTopic, 0}
	mk := func() *partition {
		ctx, cancel := context.WithCancel(context.Background())
		return &partition{tp: topicPartition{testTopic, 0}, ctx: ctx, cancel: cancel}
	}
	for round := 0; round < 2000; round++ {
		old, cur := mk(), mk()
		k, m := 1+round%3, 1+round%2
		for i := 0; i < k; i++ {
			h.hold(old, true)
		}
		for i := 0; i < m; i++ {
			h.hold(cur, true)
		}
		var wg sync.WaitGroup
		wg.Add(4)
		go func() { defer wg.Done(); old.cancel() }()
		go func() {
			defer wg.Done()
			for i := 0; i < k; i++ {
				h.hold(old, false)
			}
		}()
		go func() {
			defer wg.Done()
			h.hold(old, true)
			h.hold(old, false)
		}()
		go func() {
			defer wg.Done()
			for i := 0; i < 3; i++ {
				h.hold(cur, true)
				h.hold(cur, false)
			}
		}()
		wg.Wait()
		// gone may still be on its way (AfterFunc's goroutine).
		deadline := time.Now().Add(2 * time.Second)
		for {
			h.mu.Lock()
			_, oldIn := h.parts[old]
			h.mu.Unlock()
			if !oldIn || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		h.mu.Lock()
		n, a := h.refs[ref], h.parts[cur]
		_, oldIn := h.parts[old]
		h.mu.Unlock()
		mu.Lock()
		p, lc, lo := paused[ref], lent[cur], lent[old]
		mu.Unlock()
		if oldIn || lo || n != m || a == nil || a.n != m || !p || !lc {
			t.Fatalf("round %d (old %d holds, new %d): the new assignment still holds %d, but refs %d, new's count %v, paused %v, new lent %v, old still counted %v, old lent %v",
				round, k, m, m, n, a, p, lc, oldIn, lo)
		}
		for i := 0; i < m; i++ {
			h.hold(cur, false)
		}
		cur.cancel()
		h.mu.Lock()
		nr, np := len(h.refs), len(h.parts)
		h.mu.Unlock()
		mu.Lock()
		p, lc = paused[ref], lent[cur]
		mu.Unlock()
		if nr != 0 || np != 0 || p || lc {
			t.Fatalf("round %d: everything released, but refs %d, parts %d, paused %v, new lent %v", round, nr, np, p, lc)
		}
	}
}

// Adversary 28g (a claimer's queue of a gone assignment that the next
// assignment's records join). refusedWaits keys its queues by partition
// but holds the partition for the assignment of the queue's first record
// (held[ref]), for as long as the queue exists. 6d72519/2c2960f make a
// gone assignment's holds pause nothing (and lend only that assignment's
// records). When the partition comes back before the old queue is
// claimed again, the new assignment's poll joins the old queue
// (behindWaiting); the old pieces are abandoned (not taken again) and the
// new assignment's piece, refused over and over by a ghost, waits in the
// same queue, still held for the gone assignment: the partition is
// fetched (not paused) and the new assignment's records are not lent, so
// its backlog fills max_in_flight and stops the polls of the other
// partitions: the hold-up of
// TestAWaitingPartitionsBacklogDoesNotHoldAnotherPartitionsRecords, after
// a move away and back. Here the claimer is held in a claim of partition
// 0 (h@0, afterClaim) while partition 1 moves to r2 and back, so that the
// new assignment's poll of c@1 reaches the claimer while the old queue
// still exists. The test holds that once the new assignment's c@1 was
// refused 5 more times, partition 1 is paused in r1 and, after a backlog
// of 30 records on partition 1 in one produce, b@0 starts within 3 s
// while the ghost keeps bumping partition 1.
// FAILS 5 of 8 runs (~17 s): partition 1 back on r1 with the old queue (1
// piece, not being claimed); after the release the new assignment's c@1
// is refused over and over in it, paused map[], holds map[] (no pausing
// hold), 1 lent (the gone assignment, 0 records), 11 in flight of 10,
// 13 polled (c, h, c, d0..d9): b@0 never polled in 6 s (33 refusals).
// Heals once the ghost stops (every record once). Flaky by one race, not
// a bug of the test: once the claimer is released, its loop has both the
// new assignment's poll batch and the old queue's due timer ready, and
// select picks at random; when the timer wins, claim(nil) abandons the old
// piece and removes the queue before the batch arrives, which then makes
// a queue of its own, held for the new assignment (pass).
func TestANewAssignmentsRecordsJoiningAGoneAssignmentsClaimerQueueHoldTheirPartition(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	bumps, stopGhost := e.ghostKeepsTaking(1, true)
	defer stopGhost()
	var blocking atomic.Bool
	unblock := make(chan struct{})
	var unblockOnce sync.Once
	release := func() { unblockOnce.Do(func() { close(unblock) }) }
	t.Cleanup(release)
	e.led.setAfterClaim(func(intents []decide.Intent) {
		if blocking.Load() && slices.ContainsFunc(intents, func(in decide.Intent) bool { return in.Partition == 0 }) {
			<-unblock
		}
	})
	cfg := e.config()
	cfg.MaxInFlight, cfg.MaxPollRecords = 10, 10
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	e.produce(1, "c", "v")
	eventually(t, 10*time.Second, func() bool { return bumps.Load() >= 5 && pausedPartitions(r1)[1] }, func() string {
		return fmt.Sprintf("c refused %d times, r1 paused %v", bumps.Load(), pausedPartitions(r1))
	})
	// The queue's wait grows to a second: h@0 is produced just after a
	// refusal, so that its claim is not the one of the queue's due piece.
	eventually(t, 15*time.Second, func() bool { return bumps.Load() >= 12 }, func() string {
		return fmt.Sprintf("c refused %d times", bumps.Load())
	})
	for n := bumps.Load(); bumps.Load() == n; {
		time.Sleep(time.Millisecond)
	}
	blocking.Store(true)
	e.produce(0, "h", "v")
	eventually(t, 10*time.Second, func() bool {
		for _, c := range e.led.claimLog() {
			if slices.ContainsFunc(c, func(in decide.Intent) bool { return in.Partition == 0 }) {
				return true
			}
		}
		return false
	}, func() string { return "h@0 never claimed" })
	t.Logf("claimer held in h@0's claim; c@1 waits in r1's queue (%d refusals), paused %v, holds %v", bumps.Load(), pausedPartitions(r1), holdCounts(r1))
	r2 := e.start("r2", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 1 && len(r2.owned()) == 1 }, func() string {
		return fmt.Sprintf("r1 owns %v, r2 %v", r1.owned(), r2.owned())
	})
	if !r2.owned()[1] {
		t.Fatalf("partition 0 moved to r2, not partition 1 (r1 owns %v)", r1.owned())
	}
	if err := r2.stop(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	eventually(t, 10*time.Second, func() bool { return r1.polled() >= 3 }, func() string {
		return fmt.Sprintf("r1 polled %v: the new assignment never polled c@1", r1.polled())
	})
	time.Sleep(200 * time.Millisecond)
	t.Logf("partition 1 back on r1, claimer still held: paused %v, holds %v, old queue's first piece being claimed %v", pausedPartitions(r1), holdCounts(r1), oldQueueBusy(r1))
	blocking.Store(false)
	release()
	b0 := bumps.Load()
	eventually(t, 10*time.Second, func() bool { return bumps.Load() >= b0+5 }, func() string {
		return fmt.Sprintf("the new assignment's c@1 refused only %d times more", bumps.Load()-b0)
	})
	time.Sleep(300 * time.Millisecond)
	pausedC, holdsC := pausedPartitions(r1), holdCounts(r1)
	lentC, nC := lentCount(r1)
	t.Logf("new assignment's c@1 waits: paused %v, holds %v, %d lent, %d in flight", pausedC, holdsC, lentC, nC)
	e.produceAll(1, "d", 30)
	time.Sleep(500 * time.Millisecond)
	e.produce(0, "b", "v")
	t0 := time.Now()
	var startedB time.Duration = -1
	for time.Since(t0) < 6*time.Second {
		if len(e.starter.executionsOf(wid("b"))) == 1 {
			startedB = time.Since(t0)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	paused, holds := pausedPartitions(r1), holdCounts(r1)
	lent, inFlight := lentCount(r1)
	polled, refusals := r1.polled(), bumps.Load()
	stopGhost()
	e.waitCommittedToEnd(30 * time.Second)
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if !pausedC[1] {
		t.Errorf("the new assignment's c@1 waits in r1's claimer queue (refused %d times since it came back), but partition 1 is not paused (paused %v, holds %v, %d lent, %d in flight): the queue is held for the gone assignment",
			bumps.Load()-b0, pausedC, holdsC, lentC, nC)
	}
	if startedB < 0 || startedB > 3*time.Second {
		t.Errorf("b@0 started %v after it was produced (-1: not within 6 s while the ghost bumped partition 1, %d refusals): %v polled, %d in flight of max_in_flight %d, %d lent, paused %v, holds %v: the new assignment's backlog, waiting in the gone assignment's queue, holds the in-flight budget",
			startedB, refusals, polled, inFlight, cfg.MaxInFlight, lent, paused, holds)
	}
	for _, id := range []string{"c", "h", "b"} {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
	}
	for i := 0; i < 30; i++ {
		if n := len(e.starter.executionsOf(wid(fmt.Sprintf("d%d", i)))); n != 1 {
			t.Errorf("d%d: %d executions, want 1", i, n)
		}
	}
}

// oldQueueBusy says whether r1's claimer queue of partition 1 has its
// first piece being claimed (read while the claimer is held in a claim:
// a diagnostic only).
func oldQueueBusy(rn *runner) string {
	q := rn.r.claims.waits.queues[PartitionRef{testTopic, 1}]
	if q == nil {
		return "no queue"
	}
	return fmt.Sprintf("%v (%d pieces)", q.busy, len(q.pieces))
}

// Adversary 29a (copies of gone assignments pile up across moves). A
// gone assignment's copies waiting on another partition's held job stay
// in flight, lent, until that job ends (fenceHolds: "nothing of a gone
// assignment is fetched: they are bounded"; inFlight.lend: "each waiting
// partition adds at most what the budget held (MaxInFlight and a poll)
// when it began to wait"). That bound is per assignment, not per
// partition: a partition that moves away and back while the job stays
// held is polled again from its committed offset by each new assignment,
// which cannot commit past copies waiting on the held job, so each move
// adds another poll of copies to the job's waiters, all in flight and
// lent, without bound. A ghost takes partition 0 before every mark of
// it: x@0 is started and its mark waits (held). max_in_flight 4,
// max_poll_records 4: 4 copies of x on partition 1 are claimed (re-drive)
// and wait on x's job. Then, 6 times, another member (which commits
// nothing) joins and takes partition 1 and leaves again: each new
// assignment of partition 1 on r1 polls the 4 copies again and they join
// x's job too. The test holds that r1's records in flight stay within
// what inFlight.lend allows: the budget (max_in_flight and a poll) plus
// as much for each of its two waiting partitions, 3 x (max_in_flight +
// max_poll_records) = 24, and that everything heals once the ghost stops
// (x started once, committed to the ends, nothing paused or lent).
// Fails 4 of 4: 4 more copies and one more lent assignment a move (9,
// 13, 17, 21, 25, 29 in flight; 28 waiters of x, 8 assignments lent
// after 6 moves); heals once the ghost stops. Passes since a gone
// assignment's waiters on a held job end at once (startPool.dropWaitersOf):
// 4 waiters and 5 in flight after each move.
func TestCopiesOfAPartitionMovedAwayAndBackWhileTheyWaitOnAHeldMarkDoNotPileUpInFlight(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	bumps, stopGhost := e.ghostKeepsTaking(0, false)
	defer stopGhost()
	cfg := e.config()
	cfg.MaxInFlight, cfg.MaxPollRecords = 4, 4
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	e.produce(0, "x", "v")
	eventually(t, 15*time.Second, func() bool {
		return bumps.Load() >= 6 && pausedPartitions(r1)[0] && len(e.starter.executionsOf(wid("x"))) == 1
	}, func() string {
		return fmt.Sprintf("x@0's mark refused %d times, paused %v", bumps.Load(), pausedPartitions(r1))
	})
	const copies = 4
	{
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		recs := make([]*kgo.Record, copies)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: testTopic, Partition: 1, Value: value("x", "v")}
		}
		if err := e.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	eventually(t, 10*time.Second, func() bool { return waitersOf(r1.r, wid("x")) == copies && pausedPartitions(r1)[1] }, func() string {
		return fmt.Sprintf("waiters of x %d, r1 paused %v", waitersOf(r1.r, wid("x")), pausedPartitions(r1))
	})
	const moves = 6
	maxN := 0
	for m := 1; m <= moves; m++ {
		polled := r1.polled()
		other := e.otherMember()
		eventually(t, 10*time.Second, func() bool { o := r1.owned(); return len(o) == 1 && o[0] }, func() string {
			other.Close()
			return fmt.Sprintf("move %d: r1 owns %v: want partition 1 moved to the other member", m, r1.owned())
		})
		other.Close()
		eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
		// The new assignment polls the copies again; they join x's job.
		eventually(t, 10*time.Second, func() bool { return r1.polled() >= polled+copies && waitersOf(r1.r, wid("x")) >= copies }, func() string {
			return fmt.Sprintf("move %d: the copies not polled again (%v polled since the move), %d waiters of x", m, r1.polled()-polled, waitersOf(r1.r, wid("x")))
		})
		time.Sleep(200 * time.Millisecond)
		lent, n := lentCount(r1)
		maxN = max(maxN, n)
		t.Logf("after move %d: %d waiters of x, %d in flight, %d assignments lent, paused %v, holds %v", m, waitersOf(r1.r, wid("x")), n, lent, pausedPartitions(r1), holdCounts(r1))
	}
	waiters, refusals := waitersOf(r1.r, wid("x")), bumps.Load()
	lent, _ := lentCount(r1)
	stopGhost()
	e.waitCommittedToEnd(20 * time.Second)
	eventually(t, 5*time.Second, func() bool { l, _ := lentCount(r1); return l == 0 && len(pausedPartitions(r1)) == 0 }, func() string {
		l, n := lentCount(r1)
		return fmt.Sprintf("r1 healed but paused %v, %d lent, %d in flight, holds %v", pausedPartitions(r1), l, n, holdCounts(r1))
	})
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if bound := 3 * (cfg.MaxInFlight + cfg.MaxPollRecords); maxN > bound {
		t.Errorf("after %d moves of partition 1 away and back, r1 had %d records in flight (%d lent assignments, %d copies waiting on x's held job, %d refusals), more than the budget and as much for each of its two waiting partitions, 3 x (max_in_flight %d + max_poll_records %d) = %d: each gone assignment's copies stay in flight and lent, and each new assignment polls them again",
			moves, maxN, lent, waiters, refusals, cfg.MaxInFlight, cfg.MaxPollRecords, bound)
	}
	if n := len(e.starter.executionsOf(wid("x"))); n != 1 {
		t.Errorf("x: %d executions, want 1", n)
	}
}

// lostCount is how many partitions rn lost (OnPartitionsLost).
func lostCount(rn *runner) float64 {
	var m dto.Metric
	if err := rn.r.m.partitionsGone.WithLabelValues("lost").Write(&m); err != nil {
		rn.t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// loseOnce makes the broker answer one heartbeat with UNKNOWN_MEMBER_ID:
// the member's partitions are lost (kgo calls OnPartitionsLost) and it
// joins again.
func (e *testEnv) loseOnce() {
	e.cluster.ControlKey(kmsg.Heartbeat.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		resp := req.(*kmsg.HeartbeatRequest).ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.UnknownMemberID.Code
		return resp, nil, true
	})
}

// Adversary 29b (idea 1: a partition LOST while a hold pauses it). The
// move-away-and-back tests revoke the waiting partition (its records get
// revoke_timeout, then it is forgotten); a loss (the member's session is
// fenced: kgo's OnPartitionsLost) forgets it at once, with the claimer's
// queue of it still holding the old assignment. A ghost takes partition 1
// before every claim of it: c@1 waits in r1's claimer queue, partition 1
// paused. The broker answers one heartbeat with UNKNOWN_MEMBER_ID: r1
// loses both partitions and joins again, the ghost still bumping. The
// test holds that the new assignment's partition 1, whose c@1 is refused
// over and over again, is paused again and that its backlog of 30 does
// not hold partition 0: b@0 starts within 3 s; and that once the ghost
// stops everything heals: c, the backlog and b started once each,
// committed to the ends, nothing paused or lent. Held (passes).
func TestAPartitionLostWhilePausedIsHeldAgainWhenAssignedAgainAndHealsAfter(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	bumps, stopGhost := e.ghostKeepsTaking(1, true)
	defer stopGhost()
	cfg := e.config()
	cfg.MaxInFlight, cfg.MaxPollRecords = 10, 10
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	e.produce(1, "c", "v")
	eventually(t, 10*time.Second, func() bool { return bumps.Load() >= 5 && pausedPartitions(r1)[1] }, func() string {
		return fmt.Sprintf("c refused %d times, r1 paused %v", bumps.Load(), pausedPartitions(r1))
	})
	e.loseOnce()
	eventually(t, 10*time.Second, func() bool { return lostCount(r1) == 2 }, func() string { return fmt.Sprintf("lost %v", lostCount(r1)) })
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	b0 := bumps.Load()
	eventually(t, 10*time.Second, func() bool { return bumps.Load() >= b0+5 && pausedPartitions(r1)[1] }, func() string {
		l, n := lentCount(r1)
		return fmt.Sprintf("after the loss: c refused %d times more, r1 paused %v, holds %v, %d lent, %d in flight", bumps.Load()-b0, pausedPartitions(r1), holdCounts(r1), l, n)
	})
	{
		l, n := lentCount(r1)
		t.Logf("after the loss c@1 waits again: paused %v, holds %v, %d lent, %d in flight", pausedPartitions(r1), holdCounts(r1), l, n)
	}
	e.produceAll(1, "d", 30)
	time.Sleep(500 * time.Millisecond)
	e.produce(0, "b", "v")
	t0 := time.Now()
	var startedB time.Duration = -1
	for time.Since(t0) < 6*time.Second {
		if len(e.starter.executionsOf(wid("b"))) == 1 {
			startedB = time.Since(t0)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	paused, holds := pausedPartitions(r1), holdCounts(r1)
	lent, inFlight := lentCount(r1)
	refusals := bumps.Load()
	stopGhost()
	e.waitCommittedToEnd(30 * time.Second)
	eventually(t, 5*time.Second, func() bool { l, _ := lentCount(r1); return l == 0 && len(pausedPartitions(r1)) == 0 }, func() string {
		l, n := lentCount(r1)
		return fmt.Sprintf("r1 healed but paused %v, %d lent, %d in flight, holds %v", pausedPartitions(r1), l, n, holdCounts(r1))
	})
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if startedB < 0 || startedB > 3*time.Second {
		t.Errorf("b@0 started %v after it was produced (-1: not within 6 s; %d refusals): paused %v, holds %v, %d lent, %d in flight of max_in_flight %d",
			startedB, refusals, paused, holds, lent, inFlight, cfg.MaxInFlight)
	}
	for _, id := range []string{"c", "b"} {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
	}
	for i := 0; i < 30; i++ {
		if n := len(e.starter.executionsOf(wid(fmt.Sprintf("d%d", i)))); n != 1 {
			t.Errorf("d%d: %d executions, want 1", i, n)
		}
	}
}

// Adversary 29c (idea 2: the health pause and the holds of the ledger's
// fence on one client). The health pause pauses and resumes the topics
// (PauseFetchTopics, ResumeFetchTopics: router.pause); a hold pauses and
// resumes one partition (PauseFetchPartitions, ResumeFetchPartitions:
// New's fenceHolds.pause). In franz-go the two are kept apart (a topic's
// "all" flag and its set of partitions), so neither undoes the other:
// with the router's own wiring (New), a health resume while a hold pauses
// partition 1 leaves partition 1 paused, and a hold released while the
// health pause is on leaves the topic paused. Held (passes).
func TestTheHealthPauseAndAHoldOfTheFenceDoNotUndoEachOther(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	r, err := New(e.config(), Options{Ledger: e.led, DeadLetterLog: e.dlq, Starter: e.starter, Log: testLogger("r1"),
		KafkaOpts: []kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.cl.Close()
	defer r.workCancel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	part := &partition{tp: topicPartition{testTopic, 1}, ctx: ctx, cancel: cancel, committed: -1}
	topicPaused := func() bool { return slices.Contains(r.cl.PauseFetchTopics(), testTopic) }
	partPaused := func() bool { return slices.Contains(r.cl.PauseFetchPartitions(nil)[testTopic], 1) }
	lent := func() bool {
		r.commits.flight.mu.Lock()
		defer r.commits.flight.mu.Unlock()
		return r.commits.flight.lent[part]
	}
	check := func(step string, wantTopic, wantPart, wantLent bool) {
		t.Helper()
		if topicPaused() != wantTopic || partPaused() != wantPart || lent() != wantLent {
			t.Errorf("%s: topic paused %v (want %v), partition 1 paused %v (want %v), lent %v (want %v)",
				step, topicPaused(), wantTopic, partPaused(), wantPart, lent(), wantLent)
		}
	}
	holds := r.starts.holds
	holds.hold(part, true)
	check("held", false, true, true)
	r.pause(true)
	check("held, health paused", true, true, true)
	r.pause(false)
	check("held, health resumed", false, true, true)
	r.pause(true)
	holds.hold(part, false)
	check("released while health paused", true, false, false)
	holds.hold(part, true)
	r.pause(false)
	check("held again, health resumed", false, true, true)
	cancel() // the assignment is gone: its hold pauses nothing, still lends
	eventually(t, 5*time.Second, func() bool { return !partPaused() }, func() string { return "partition 1 still paused after its assignment was gone" })
	check("gone", false, false, true)
	holds.hold(part, false)
	check("gone, released", false, false, false)
}

// Adversary 29d (idea 3 for the claimer's queue). The claimer's
// counterpart of
// TestCopiesOfAPartitionMovedAwayAndBackWhileTheyWaitOnAHeldMarkDoNotPileUpInFlight:
// a ghost takes partition 1 before every claim of it, so a backlog of 8
// on partition 1 waits in r1's claimer queue (paused, lent); partition 1
// then moves to another member (which commits nothing) and back, 3
// times. Each new assignment polls the backlog again (once the fetch in
// flight for partition 0 returns: up to 5 s, franz-go's fetch max wait),
// and its poll joins the queue behind the gone assignment's pieces, which
// are abandoned when their turn comes (retakenFor). The test holds that
// r1's records in flight stay within 2 x (max_in_flight +
// max_poll_records) after every move, and that everything heals once the
// ghost stops. Held (passes 3 of 3: 4 in flight and 1 assignment lent
// after each move).
func TestAClaimerQueueOfAPartitionMovedAwayAndBackDoesNotPileUpInFlight(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	bumps, stopGhost := e.ghostKeepsTaking(1, true)
	defer stopGhost()
	cfg := e.config()
	cfg.MaxInFlight, cfg.MaxPollRecords = 4, 4
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	e.produceAll(1, "c", 8)
	eventually(t, 10*time.Second, func() bool { return bumps.Load() >= 5 && pausedPartitions(r1)[1] }, func() string {
		return fmt.Sprintf("c refused %d times, r1 paused %v", bumps.Load(), pausedPartitions(r1))
	})
	const moves = 3
	maxN := 0
	polled := r1.polled()
	for m := 1; m <= moves; m++ {
		other := e.otherMember()
		eventually(t, 10*time.Second, func() bool { o := r1.owned(); return len(o) == 1 && o[0] }, func() string {
			other.Close()
			return fmt.Sprintf("move %d: r1 owns %v: want partition 1 moved to the other member", m, r1.owned())
		})
		other.Close()
		eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
		// The new assignment polls the backlog again (once the fetch in
		// flight for partition 0 returns: up to fetch max wait).
		eventually(t, 10*time.Second, func() bool { return r1.polled() >= polled+4 }, func() string {
			return fmt.Sprintf("move %d: r1 polled %v, %v before the move", m, r1.polled(), polled)
		})
		polled = r1.polled()
		for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			_, n := lentCount(r1)
			maxN = max(maxN, n)
		}
		lent, n := lentCount(r1)
		t.Logf("after move %d: %d in flight (most %d), %d assignments lent, paused %v, holds %v, polled %v, committed %v, owned %v", m, n, maxN, lent, pausedPartitions(r1), holdCounts(r1), r1.polled(), e.committed(), r1.owned())
	}
	stopGhost()
	e.waitCommittedToEnd(20 * time.Second)
	eventually(t, 5*time.Second, func() bool { l, _ := lentCount(r1); return l == 0 && len(pausedPartitions(r1)) == 0 }, func() string {
		l, n := lentCount(r1)
		return fmt.Sprintf("r1 healed but paused %v, %d lent, %d in flight, holds %v", pausedPartitions(r1), l, n, holdCounts(r1))
	})
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if bound := 2 * (cfg.MaxInFlight + cfg.MaxPollRecords); maxN > bound {
		t.Errorf("after %d moves of partition 1 away and back, r1 had up to %d records in flight, more than 2 x (max_in_flight %d + max_poll_records %d) = %d",
			moves, maxN, cfg.MaxInFlight, cfg.MaxPollRecords, bound)
	}
	for i := 0; i < 8; i++ {
		if n := len(e.starter.executionsOf(wid(fmt.Sprintf("c%d", i)))); n != 1 {
			t.Errorf("c%d: %d executions, want 1", i, n)
		}
	}
}

// Adversary 29e (adjacent to the holds: the refusal's answer). When the
// ledger's fence refuses a claim, committer.fenced asks the group
// coordinator (DescribeGroups) whether the partition is still this
// member's; when it cannot say (the request fails: the coordinator moving,
// a timeout) the partition is neither "mine" nor "rebalancing", and is
// forgotten "like lost". But franz-go is told nothing: the group still
// assigns the partition to r1, the client keeps fetching it, and the
// router drops what it polls (trackAll: no assignment), so nothing of the
// partition is started or committed until a rebalance happens to assign
// it again. A ghost takes partition 1 once before c@1's claim; the next
// DescribeGroups fails once (GROUP_AUTHORIZATION_FAILED standing for any
// failure). The test holds that c@1, and d@1 produced after, start within
// 10 s and partition 1 is committed to its end while r1 stays the group's
// only member. Fails 3 of 3: r1 owns {0} only, 1 record polled (c@1),
// neither c nor d started, nothing committed in 10 s. Passes since a
// partition the coordinator cannot place is kept (committer.fenced).
func TestAPartitionIsNotForgottenWhenTheCoordinatorCannotSayWhoseItIsAfterARefusal(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	var once sync.Once
	e.led.mu.Lock()
	e.led.gate = func(intents []decide.Intent) bool {
		if slices.ContainsFunc(intents, func(in decide.Intent) bool { return in.Partition == 1 }) {
			once.Do(func() {
				e.cluster.ControlKey(kmsg.DescribeGroups.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
					req := kreq.(*kmsg.DescribeGroupsRequest)
					resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
					for _, g := range req.Groups {
						rg := kmsg.NewDescribeGroupsResponseGroup()
						rg.Group = g
						rg.ErrorCode = kerr.GroupAuthorizationFailed.Code
						resp.Groups = append(resp.Groups, rg)
					}
					return resp, nil, true
				})
				e.ghostOwn(1)
			})
		}
		return false
	}
	e.led.mu.Unlock()
	e.produce(1, "c", "v")
	time.Sleep(500 * time.Millisecond)
	e.produce(1, "d", "v")
	deadline := time.Now().Add(10 * time.Second)
	healed := func() bool {
		return len(e.starter.executionsOf(wid("c"))) == 1 && len(e.starter.executionsOf(wid("d"))) == 1 && e.atEnd()
	}
	for time.Now().Before(deadline) && !healed() {
		time.Sleep(20 * time.Millisecond)
	}
	c, d, committed, owned, polled := len(e.starter.executionsOf(wid("c"))), len(e.starter.executionsOf(wid("d"))), e.committed(), r1.owned(), r1.polled()
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if c != 1 || d != 1 || committed[1] != 2 {
		t.Errorf("within 10 s: c@1 %d executions, d@1 %d (want 1 each), committed %v (want partition 1 at 2); r1 owns %v, polled %v: the partition was forgotten when DescribeGroups failed once, while the group still assigns it to r1",
			c, d, committed, owned, polled)
	}
}

// Adversary 29f (retakenFor read after another re-take). retakenFor
// compares committer.fenced's answer (the partition's fence when it
// answered) with the record's assignment's fence now. The claimer and the
// marker each call fenced for their own refusal (serialised by fenceMu),
// then use its answer outside that lock: if the other one takes the
// partition again in between, the answer is one epoch behind and a record
// of the live assignment is abandoned as if its partition had moved. The
// marker's window is its loop over the refused batch: before it checks a
// job it ends every job before it (done: the owner and each of its
// waiters, taking startPool.mu and committer.mu). Interleaving: y@1 and
// x@0 are started and their marks go in one batch, y's first. A ghost
// takes partition 0 just before that mark: it is refused (x@0, epoch E1)
// and the marker's fenced takes partition 0 again (E2). Meanwhile a@0's
// claim, held back until then, is refused (E1), answered "taken again
// meanwhile" (E2), sent again under E2, refused again (the ghost took
// partition 0 once more) and the claimer's fenced takes partition 0 again
// (E3), while the marker still ends y (the test holds startPool.mu from
// the marker's re-take until the claimer's is stored, standing for the
// time the marker takes to end y's copies or for it being descheduled:
// with 20000 copies waiting on y and no lock held, it failed once, in a
// run with logging in the ledger's gates, and passed 4 of 4 without). The
// marker then finds x@0's fence (E3) not the one its answer named (E2)
// and abandons x@0, of the assignment the router still owns: nothing is
// committed past it until a rebalance. The test holds that, the ghost
// gone, x's row is marked started and both partitions are committed to
// their ends within 10 s. Fails 4 of 4: x's row pending, partition 0
// committed nowhere (-1, end 2) while r1 owns it. Passes since fenced
// answers with the assignment, not its fence (retakenFor).
func TestAMarkRefusedWhileTheClaimerTakesThePartitionAgainIsNotAbandoned(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	cfg.Starts.MarkInterval = 100 * time.Millisecond
	cfg.RevokeTimeout = time.Second
	relX, relY := e.starter.block(wid("x")), e.starter.block(wid("y"))
	defer relX()
	defer relY()
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	e.produce(1, "y", "v")
	e.produce(0, "x", "v")
	eventually(t, 10*time.Second, func() bool {
		return e.starter.heldCount(wid("x")) == 1 && e.starter.heldCount(wid("y")) == 1
	}, func() string { return "x@0's and y@1's starts never reached Temporal" })
	r1.r.commits.mu.Lock()
	part0 := r1.r.commits.parts[topicPartition{testTopic, 0}]
	r1.r.commits.mu.Unlock()

	var (
		mu          sync.Mutex
		claims0     int
		owns        int
		markBumped  bool
		retaken     = make(chan struct{}) // the marker's fenced is taking partition 0 again
		inGate      = make(chan struct{})
		inGateOnce  sync.Once
		claimWaited atomic.Bool
		heldPool    atomic.Bool
	)
	e.led.mu.Lock()
	e.led.gate = func(intents []decide.Intent) bool {
		if !slices.ContainsFunc(intents, func(in decide.Intent) bool { return in.Partition == 0 }) {
			return false
		}
		mu.Lock()
		claims0++
		n := claims0
		mu.Unlock()
		switch n {
		case 1: // a@0's claim: held back until the marker's fenced takes partition 0 again
			inGateOnce.Do(func() { close(inGate) })
			select {
			case <-retaken:
				claimWaited.Store(true)
			case <-time.After(10 * time.Second):
			}
		case 2: // its claim under the marker's new fence: the ghost takes partition 0 once more
			e.ghostOwn(0)
		}
		return false
	}
	e.led.markGate = func(ps []int32) {
		mu.Lock()
		bump := !markBumped && slices.Contains(ps, 0)
		mu.Unlock()
		if bump {
			e.ghostOwn(0) // not under mu: ownGate takes it
			mu.Lock()
			markBumped = true
			mu.Unlock()
		}
	}
	e.led.ownGate = func(member string, parts []PartitionRef) {
		if member == "ghost" {
			return
		}
		mu.Lock()
		if !markBumped {
			mu.Unlock()
			return
		}
		owns++
		n := owns
		mu.Unlock()
		switch n {
		case 1: // the marker's re-take: it ends y before it checks x
			r1.r.starts.mu.Lock()
			heldPool.Store(true)
			close(retaken)
		case 2: // the claimer's re-take: once stored, the marker goes on
			before := part0.epoch.Load()
			go func() {
				for end := time.Now().Add(5 * time.Second); part0.epoch.Load() == before && time.Now().Before(end); {
					time.Sleep(time.Millisecond)
				}
				heldPool.Store(false)
				r1.r.starts.mu.Unlock()
			}()
		}
	}
	e.led.mu.Unlock()
	defer func() {
		if heldPool.Load() { // the claimer never took partition 0 again
			heldPool.Store(false)
			r1.r.starts.mu.Unlock()
		}
	}()
	e.produce(0, "a", "v")
	select {
	case <-inGate:
	case <-time.After(10 * time.Second):
		t.Fatal("a@0 never claimed")
	}
	// y's start first, so that its mark comes before x's in the batch.
	relY()
	eventually(t, 5*time.Second, func() bool { return len(e.starter.executionsOf(wid("y"))) == 1 }, func() string { return "y never started" })
	relX()
	deadline := time.Now().Add(10 * time.Second)
	healed := func() bool { return e.led.state(wid("x")) == stateStarted && e.atEnd() }
	for time.Now().Before(deadline) && !healed() {
		time.Sleep(20 * time.Millisecond)
	}
	state, committed, ends := e.led.state(wid("x")), e.committed(), e.ends()
	mu.Lock()
	nOwns := owns
	mu.Unlock()
	if heldPool.Load() {
		heldPool.Store(false)
		r1.r.starts.mu.Unlock()
	}
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if !claimWaited.Load() || nOwns < 2 {
		t.Fatalf("interleaving not reached: a@0's claim held back until the marker's re-take %v, re-takes by r1 after the ghost's first bump %d", claimWaited.Load(), nOwns)
	}
	if state != stateStarted || committed[0] != ends[0] || committed[1] != ends[1] {
		t.Errorf("within 10 s of the ghost's last bump: x's row %q (want started), committed %v, ends %v: x@0, of the assignment r1 still owns, was abandoned by the marker (its answer to the refusal named the fence before the claimer's re-take)",
			state, committed, ends)
	}
	for _, id := range []string{"x", "y", "a"} {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
	}
}

// A partition the fence refused, which the coordinator says is still this
// router's, is kept when taking it again in the ledger fails (here: Own
// outlasts fenced's 10 s): its writes are sent again under the same fence,
// and a refusal after retakeBackoff takes it again. Forgotten, franz-go would
// keep fetching it and the router drop what it polls, until a rebalance.
func TestAPartitionIsNotForgottenWhenTakingItAgainInTheLedgerFails(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	var once, slowOnce sync.Once
	e.led.mu.Lock()
	e.led.gate = func(intents []decide.Intent) bool {
		if slices.ContainsFunc(intents, func(in decide.Intent) bool { return in.Partition == 1 }) {
			once.Do(func() {
				e.ghostOwn(1)
				e.led.mu.Lock()
				e.led.ownGate = func(member string, parts []PartitionRef) {
					if member != "ghost" {
						slowOnce.Do(func() { time.Sleep(11 * time.Second) })
					}
				}
				e.led.mu.Unlock()
			})
		}
		return false
	}
	e.led.mu.Unlock()
	e.produce(1, "c", "v")
	time.Sleep(500 * time.Millisecond)
	e.produce(1, "d", "v")
	deadline := time.Now().Add(45 * time.Second) // the failed Own, then retakeBackoff
	healed := func() bool {
		return len(e.starter.executionsOf(wid("c"))) == 1 && len(e.starter.executionsOf(wid("d"))) == 1 && e.atEnd()
	}
	for time.Now().Before(deadline) && !healed() {
		time.Sleep(20 * time.Millisecond)
	}
	c, d, committed, owned := len(e.starter.executionsOf(wid("c"))), len(e.starter.executionsOf(wid("d"))), e.committed(), r1.owned()
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if c != 1 || d != 1 || committed[1] != 2 {
		t.Errorf("within 45 s: c@1 %d executions, d@1 %d (want 1 each), committed %v (want partition 1 at 2); r1 owns %v: the partition was forgotten when taking it again in the ledger failed",
			c, d, committed, owned)
	}
}

// Adversary 29b-2 (idea 2d: a copy of a gone assignment that joins a held
// job after its assignment is gone). 15c4267 ends a gone assignment's
// copies waiting on a held job when fenceHolds learns that the assignment
// is gone (goneNow, from the context.AfterFunc its first hold registers).
// But a copy claimed before its partition moved is dispatched after it
// (the claimer descheduled between the ledger's answer and its dispatch:
// the fake ledger's afterClaim): joinLocked makes it wait on the held job
// and hold its assignment, which is gone already, so no AfterFunc is
// registered (fenceHolds.hold: gone at the first hold) and dropWaitersOf
// is never told: the copy stays in flight and lent as long as the job is
// held. Interleaving, as in
// TestCopiesOfAPartitionMovedAwayAndBackWhileTheyWaitOnAHeldMarkDoNotPileUpInFlight:
// a ghost takes partition 0 before every mark of it, so x@0's job is held;
// at each of 6 moves, 4 copies x@1 polled by partition 1's assignment are
// claimed, held in afterClaim until partition 1 has moved to another
// member (revoke_timeout passes, the assignment is forgotten), then
// dispatched; the other member leaves and partition 1 comes back. The test
// holds r1's records in flight within 29a's bound, 3 x (max_in_flight +
// max_poll_records), and no gone assignment's copy waiting on x's job.
// Fails 4 of 4: 4 more copies wait on x's job after each move (24 after
// 6), 29 records in flight, 7 assignments lent; heals once the ghost
// stops. Passes since a record of a gone assignment never waits on a held
// job (joinLocked, hold).
func TestCopiesDispatchedAfterTheirPartitionMovedDoNotPileUpOnAHeldMark(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	bumps, stopGhost := e.ghostKeepsTaking(0, false)
	defer stopGhost()
	var (
		gmu     sync.Mutex
		gateCh  chan struct{} // non-nil: a claim of partition 1 waits until it is closed
		blocked = make(chan struct{}, 64)
	)
	setGate := func(on bool) {
		gmu.Lock()
		defer gmu.Unlock()
		if on {
			gateCh = make(chan struct{})
			return
		}
		if gateCh != nil {
			close(gateCh)
			gateCh = nil
		}
	}
	defer setGate(false)
	e.led.setAfterClaim(func(intents []decide.Intent) {
		if !slices.ContainsFunc(intents, func(in decide.Intent) bool { return in.Partition == 1 }) {
			return
		}
		gmu.Lock()
		ch := gateCh
		gmu.Unlock()
		if ch == nil {
			return
		}
		select {
		case blocked <- struct{}{}:
		default:
		}
		<-ch
	})
	cfg := e.config()
	cfg.MaxInFlight, cfg.MaxPollRecords = 4, 4
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	e.produce(0, "x", "v")
	eventually(t, 15*time.Second, func() bool {
		return bumps.Load() >= 6 && pausedPartitions(r1)[0] && len(e.starter.executionsOf(wid("x"))) == 1
	}, func() string {
		return fmt.Sprintf("x@0's mark refused %d times, paused %v", bumps.Load(), pausedPartitions(r1))
	})
	const copies = 4
	setGate(true)
	{
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		recs := make([]*kgo.Record, copies)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: testTopic, Partition: 1, Value: value("x", "v")}
		}
		if err := e.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	const moves = 6
	maxN, maxWaiters := 0, 0
	for m := 1; m <= moves; m++ {
		// The current assignment's copies are claimed and held before
		// their dispatch.
		select {
		case <-blocked:
		case <-time.After(15 * time.Second):
			t.Fatalf("move %d: the copies of partition 1 never claimed", m)
		}
		other := e.otherMember()
		eventually(t, 10*time.Second, func() bool { o := r1.owned(); return len(o) == 1 && o[0] }, func() string {
			other.Close()
			return fmt.Sprintf("move %d: r1 owns %v: want partition 1 moved to the other member", m, r1.owned())
		})
		w0 := waitersOf(r1.r, wid("x"))
		setGate(false) // dispatched now, their assignment gone
		time.Sleep(300 * time.Millisecond)
		w := waitersOf(r1.r, wid("x"))
		setGate(true) // the next assignment's copies
		other.Close()
		eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
		lent, n := lentCount(r1)
		maxN, maxWaiters = max(maxN, n), max(maxWaiters, w)
		t.Logf("after move %d: %d waiters of x before the dispatch, %d after, %d in flight, %d assignments lent, paused %v, holds %v", m, w0, w, n, lent, pausedPartitions(r1), holdCounts(r1))
	}
	// The last assignment's copies: claimed and held.
	select {
	case <-blocked:
	case <-time.After(15 * time.Second):
		t.Fatal("the last assignment's copies never claimed")
	}
	lent, n := lentCount(r1)
	maxN = max(maxN, n)
	waiters, refusals := waitersOf(r1.r, wid("x")), bumps.Load()
	setGate(false)
	e.led.setAfterClaim(nil)
	stopGhost()
	e.waitCommittedToEnd(20 * time.Second)
	eventually(t, 5*time.Second, func() bool { l, _ := lentCount(r1); return l == 0 && len(pausedPartitions(r1)) == 0 }, func() string {
		l, n := lentCount(r1)
		return fmt.Sprintf("r1 healed but paused %v, %d lent, %d in flight, holds %v", pausedPartitions(r1), l, n, holdCounts(r1))
	})
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if bound := 3 * (cfg.MaxInFlight + cfg.MaxPollRecords); maxN > bound || maxWaiters > 0 {
		t.Errorf("after %d moves of partition 1 away and back, r1 had up to %d records in flight (bound 3 x (max_in_flight %d + max_poll_records %d) = %d), %d assignments lent, up to %d copies of gone assignments waiting on x's held job (want 0; %d at the end, %d refusals): a copy dispatched after its assignment was gone joins the held job and is never dropped (no AfterFunc: fenceHolds.hold finds it gone at its first hold)",
			moves, maxN, cfg.MaxInFlight, cfg.MaxPollRecords, bound, lent, maxWaiters, waiters, refusals)
	}
	if n := len(e.starter.executionsOf(wid("x"))); n != 1 {
		t.Errorf("x: %d executions, want 1", n)
	}
}

// Adversary 29b-3 (idea 1d: the confirm path). ed0ef94 keeps a partition
// the fence refused when the group coordinator cannot say whose it is
// (DescribeGroups fails): forgotten, franz-go keeps fetching it and the
// router drops what it polls until a rebalance (29e). committer.confirm,
// which asks the same question when the ledger refuses an assignment's
// Own (a later group generation holds the partition: the group was made
// anew and its generations started again), was not changed: when
// DescribeGroups fails there, mine is nil and the partition is not taken,
// not tracked, while the group assigns it to this member: the same dead
// end. Interleaving: before r1 joins, a member of an earlier life of the
// group took partition 1 in the ledger at generation 1000; r1's first
// assignment (generation 1) is refused for partition 1, and the
// DescribeGroups that confirm sends fails once (GROUP_AUTHORIZATION_FAILED,
// as in 29e, standing for any failure kadm does not retry away: with a
// retriable COORDINATOR_LOAD_IN_PROGRESS once, kadm asks again and the
// test passes). The test holds that c@1 starts and partition 1 is
// committed to its end within 10 s while r1 stays the group's only
// member. Fails 4 of 4: r1 owns {0} only, c@1 polled and dropped, never
// started, partition 1 committed nowhere (b@0 starts and commits). Passes
// since confirm tracks such a partition under notTaken, whose first write
// asks again.
func TestAnAssignmentRefusedByALaterGenerationIsNotLeftUntrackedWhenTheCoordinatorCannotSay(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	if _, err := e.led.Own(context.Background(), Ownership{Group: e.group, Member: "earlier-life", Generation: 1000, Confirmed: true,
		Parts: []PartitionRef{{testTopic, 1}}}); err != nil {
		t.Fatal(err)
	}
	var described atomic.Int32
	e.cluster.ControlKey(kmsg.DescribeGroups.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		described.Add(1)
		req := kreq.(*kmsg.DescribeGroupsRequest)
		resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
		for _, g := range req.Groups {
			rg := kmsg.NewDescribeGroupsResponseGroup()
			rg.Group = g
			rg.ErrorCode = kerr.GroupAuthorizationFailed.Code
			resp.Groups = append(resp.Groups, rg)
		}
		return resp, nil, true
	})
	r1 := e.start("r1", e.config())
	r1.waitJoined()
	e.produce(1, "c", "v")
	e.produce(0, "b", "v")
	deadline := time.Now().Add(10 * time.Second)
	healed := func() bool { return len(e.starter.executionsOf(wid("c"))) == 1 && e.atEnd() }
	for time.Now().Before(deadline) && !healed() {
		time.Sleep(20 * time.Millisecond)
	}
	c, b, committed, owned, polled := len(e.starter.executionsOf(wid("c"))), len(e.starter.executionsOf(wid("b"))), e.committed(), r1.owned(), r1.polled()
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if described.Load() != 1 {
		t.Fatalf("interleaving not reached: %d DescribeGroups failed, want 1 (confirm's)", described.Load())
	}
	if c != 1 || b != 1 || committed[1] != 1 {
		t.Errorf("within 10 s: c@1 %d executions, b@0 %d (want 1 each), committed %v (want partition 1 at 1); r1 owns %v, polled %v: the partition the group assigns to r1 was left untracked when DescribeGroups failed once in confirm",
			c, b, committed, owned, polled)
	}
}

// Adversary 29b-4 (idea 1b: liveness of the other partitions while the
// ledger cannot take a partition again). ed0ef94 keeps a partition the
// group assigns to this member when taking it again in the ledger (Own)
// fails, under the same fence: the write refused again takes it again.
// But fenced runs on the caller's goroutine (the claimer, or the marker)
// and its Own retries for up to 10 s; kept under the stale fence, the
// next claim is refused at once and asks again, so the claimer spends 10 s
// in Own at every refusal of the partition (4 in one claim before the
// partition's pieces wait in their queue), claiming no other partition's
// records meanwhile. Before ed0ef94 the first failure forgot the
// partition (a dead end for it alone); now the stall repeats for as long
// as Own fails. Own hangs, for example, on the owners row's lock held by
// the ghost's claim transaction stuck open. Interleaving: a ghost takes
// partition 1 before c@1's first claim; from then on every Own of
// partition 1 by r1 hangs past fenced's 10 s. Once the first one has
// failed, b@0 is produced. The test holds that b@0 starts within 5 s, and
// that everything heals once Own answers again (c, b started once,
// committed to the ends). Fails 4 of 4: b@0 not started within 8 s (the
// claimer is in its second 10 s Own). With ed0ef94's forget on a failed
// Own put back, b@0 starts at once but partition 1 is never committed
// (the 29e dead end): the test asks for both. Passes since fenced does not
// try again for retakeBackoff after a failed Own.
func TestAPartitionWhoseRetakeKeepsFailingDoesNotHoldTheClaimsOfAnotherPartition(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	var (
		once      sync.Once
		hanging   atomic.Bool
		r1Owns    atomic.Int32
		failed    atomic.Int32 // r1's Owns of partition 1 past fenced's 10 s
		release   = make(chan struct{})
		closeOnce sync.Once
	)
	unhang := func() { hanging.Store(false); closeOnce.Do(func() { close(release) }) }
	defer unhang()
	e.led.mu.Lock()
	e.led.gate = func(intents []decide.Intent) bool {
		if slices.ContainsFunc(intents, func(in decide.Intent) bool { return in.Partition == 1 }) {
			once.Do(func() { hanging.Store(true); e.ghostOwn(1) })
		}
		return false
	}
	e.led.ownGate = func(member string, parts []PartitionRef) {
		if member == "ghost" || !hanging.Load() || !slices.ContainsFunc(parts, func(p PartitionRef) bool { return p.Partition == 1 }) {
			return
		}
		r1Owns.Add(1)
		select {
		case <-release:
		case <-time.After(11 * time.Second): // past fenced's 10 s: Own fails
			failed.Add(1)
		}
	}
	e.led.mu.Unlock()
	e.produce(1, "c", "v")
	eventually(t, 20*time.Second, func() bool { return failed.Load() >= 1 }, func() string {
		return fmt.Sprintf("r1 tried to take partition 1 again %d times, %d failed", r1Owns.Load(), failed.Load())
	})
	time.Sleep(100 * time.Millisecond)
	e.produce(0, "b", "v")
	t0 := time.Now()
	startedB := time.Duration(-1)
	for time.Since(t0) < 8*time.Second {
		if len(e.starter.executionsOf(wid("b"))) == 1 {
			startedB = time.Since(t0)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	owns, owned := r1Owns.Load(), r1.owned()
	unhang()
	e.waitCommittedToEnd(40 * time.Second)
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if startedB < 0 || startedB > 5*time.Second {
		t.Errorf("b@0 started %v after it was produced (-1: not within 8 s), while r1's Own of partition 1 kept failing (%d tries so far, r1 owns %v): the claimer waits in fenced's Own at every refusal of partition 1 and claims no other partition's records meanwhile",
			startedB, owns, owned)
	}
	for _, id := range []string{"c", "b"} {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
	}
}

// Adversary 29b-5 (idea 1b, held). ed0ef94 keeps a refused partition,
// neither taken again nor forgotten, while DescribeGroups fails. With the
// coordinator failing every DescribeGroups and a ghost taking partition 1
// before every claim of it, r1 keeps partition 1 (its claims refused over
// and over, waiting: paused, lent): the test holds that b@0 still starts
// within 3 s; that once another member joins and the group moves
// partition 1 to it, r1 lets the partition go (kgo's revoke ends the kept
// assignment: nothing of it stays paused or lent); and that once the
// other member leaves, the ghost stops and DescribeGroups answers again,
// everything heals: c and b started once, committed to the ends. Held
// (passes 3 of 3).
func TestAPartitionKeptWhileTheCoordinatorCannotSayIsLetGoWhenTheGroupMovesIt(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	var failing atomic.Bool
	var described atomic.Int32
	failing.Store(true)
	e.cluster.ControlKey(kmsg.DescribeGroups.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		if !failing.Load() {
			return nil, nil, false
		}
		described.Add(1)
		req := kreq.(*kmsg.DescribeGroupsRequest)
		resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
		for _, g := range req.Groups {
			rg := kmsg.NewDescribeGroupsResponseGroup()
			rg.Group = g
			rg.ErrorCode = kerr.GroupAuthorizationFailed.Code
			resp.Groups = append(resp.Groups, rg)
		}
		return resp, nil, true
	})
	bumps, stopGhost := e.ghostKeepsTaking(1, true)
	defer stopGhost()
	e.produce(1, "c", "v")
	eventually(t, 10*time.Second, func() bool { return bumps.Load() >= 5 && pausedPartitions(r1)[1] && described.Load() >= 5 }, func() string {
		return fmt.Sprintf("c refused %d times, %d DescribeGroups failed, r1 paused %v", bumps.Load(), described.Load(), pausedPartitions(r1))
	})
	e.produce(0, "b", "v")
	t0 := time.Now()
	startedB := time.Duration(-1)
	for time.Since(t0) < 6*time.Second {
		if len(e.starter.executionsOf(wid("b"))) == 1 {
			startedB = time.Since(t0)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if startedB < 0 || startedB > 3*time.Second {
		t.Errorf("b@0 started %v after it was produced (-1: not within 6 s) while partition 1 is kept and refused (%d refusals)", startedB, bumps.Load())
	}
	other := e.otherMember()
	defer other.Close()
	eventually(t, 15*time.Second, func() bool {
		o := r1.owned()
		l, _ := lentCount(r1)
		return len(o) == 1 && o[0] && !pausedPartitions(r1)[1] && l == 0
	}, func() string {
		l, n := lentCount(r1)
		return fmt.Sprintf("the group moved partition 1 away but r1 owns %v, paused %v, %d lent, %d in flight, holds %v", r1.owned(), pausedPartitions(r1), l, n, holdCounts(r1))
	})
	other.Close()
	stopGhost()
	failing.Store(false)
	e.waitCommittedToEnd(30 * time.Second)
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c", "b"} {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
	}
}

// Adversary 29b-6 (idea 1b, the marker's side of 29b-4). The marker, one
// goroutine for every partition's marks, calls fenced for a refused mark
// too: kept under its stale fence while Own keeps failing, x@1's mark is
// refused at once at each resend and the marker spends fenced's 10 s in
// Own each time, marking no other partition's started workflows: their
// records, started in Temporal, are not committed. Interleaving: a ghost
// takes partition 1 just before x@1's first mark; from then on every Own
// of partition 1 by r1 hangs past fenced's 10 s. Once the first one has
// failed, y@0 is produced. The test holds that y@0 is started, its row
// marked and partition 0 committed to its end within 5 s, and that
// everything heals once Own answers again. Fails 3 of 3: y started in
// Temporal, its row pending, nothing committed in 8 s (the marker is in
// its second 10 s Own). With ed0ef94's forget on a failed Own put back,
// y is marked and committed at once but partition 1 never is. Passes
// since fenced does not try again for retakeBackoff after a failed Own.
func TestAMarkWhosePartitionsRetakeKeepsFailingDoesNotHoldAnotherPartitionsMarks(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	var (
		once      sync.Once
		hanging   atomic.Bool
		r1Owns    atomic.Int32
		failed    atomic.Int32
		release   = make(chan struct{})
		closeOnce sync.Once
	)
	unhang := func() { hanging.Store(false); closeOnce.Do(func() { close(release) }) }
	defer unhang()
	e.led.mu.Lock()
	e.led.markGate = func(ps []int32) {
		if slices.Contains(ps, 1) {
			once.Do(func() { hanging.Store(true); e.ghostOwn(1) })
		}
	}
	e.led.ownGate = func(member string, parts []PartitionRef) {
		if member == "ghost" || !hanging.Load() || !slices.ContainsFunc(parts, func(p PartitionRef) bool { return p.Partition == 1 }) {
			return
		}
		r1Owns.Add(1)
		select {
		case <-release:
		case <-time.After(11 * time.Second): // past fenced's 10 s: Own fails
			failed.Add(1)
		}
	}
	e.led.mu.Unlock()
	e.produce(1, "x", "v")
	eventually(t, 20*time.Second, func() bool { return failed.Load() >= 1 }, func() string {
		return fmt.Sprintf("r1 tried to take partition 1 again %d times, %d failed", r1Owns.Load(), failed.Load())
	})
	time.Sleep(100 * time.Millisecond)
	e.produce(0, "y", "v")
	t0 := time.Now()
	done := time.Duration(-1)
	for time.Since(t0) < 8*time.Second {
		if e.led.state(wid("y")) == stateStarted && e.committed()[0] == 1 {
			done = time.Since(t0)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	ys, yState, committed, owns := len(e.starter.executionsOf(wid("y"))), e.led.state(wid("y")), e.committed(), r1Owns.Load()
	unhang()
	e.waitCommittedToEnd(40 * time.Second)
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if done < 0 || done > 5*time.Second {
		t.Errorf("y@0 marked and committed %v after it was produced (-1: not within 8 s; y: %d executions, row %q, committed %v), while r1's Own of partition 1 kept failing (%d tries): the marker waits in fenced's Own at every refusal of x@1's mark and marks no other partition's starts meanwhile",
			done, ys, yState, committed, owns)
	}
	for _, id := range []string{"x", "y"} {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
	}
}

// Adversary 29b-7 (idea 2c, held). dropWaitersOf (told by fenceHolds's
// AfterFunc when an assignment with holds is gone) runs concurrently with
// the held job's own end: hold(j, false) and done(j, ok), whose release
// ends the waiters or, not ok, hands the start over to the first waiter of
// a live assignment. On the start pool itself (no router), with -race:
// copies of a partition P (gone now) and of a live partition Q wait on a
// held job of partition 0; P's context is cancelled while the job ends
// (ok or not, on another goroutine), over 300 rounds. The test holds that
// every record ends exactly once (a takeover job, if any, ended ok after),
// and that every hold is released: no partition paused, none lent, no
// assignment's holds left. Held (passes 3 of 3, with -race).
func TestDroppingAGoneAssignmentsWaitersWhileTheHeldJobEndsEndsEachCopyOnceAndReleasesEveryHold(t *testing.T) {
	for round := 0; round < 300; round++ {
		workCtx, workCancel := context.WithCancel(context.Background())
		var mu sync.Mutex
		ends := map[*record]int{}
		paused := map[PartitionRef]bool{}
		lent := map[*partition]bool{}
		s := &startPool{starting: map[string]*job{}, marked: map[string]struct{}{}, workCtx: workCtx, startQ: make(chan *job, 16),
			end: func(rec *record, ok bool) { mu.Lock(); ends[rec]++; mu.Unlock() }}
		h := &fenceHolds{
			pause: func(ref PartitionRef, p bool) { mu.Lock(); paused[ref] = p; mu.Unlock() },
			lend:  func(part *partition, l bool) { mu.Lock(); lent[part] = l; mu.Unlock() },
			gone:  s.dropWaitersOf,
		}
		s.holds = h
		newPart := func(p int32) *partition {
			ctx, cancel := context.WithCancel(context.Background())
			return &partition{tp: topicPartition{testTopic, p}, ctx: ctx, cancel: cancel, committed: -1}
		}
		o, pp, q := newPart(0), newPart(1), newPart(2)
		req := decide.StartRequest{WorkflowID: wid("x")}
		owner := &record{part: o}
		if s.submitClaimed(context.Background(), owner, req); waitersOf(&Router{starts: s}, wid("x")) != 0 {
			t.Fatal("the owner's job is not in flight")
		}
		j := <-s.startQ
		var recs []*record
		for i := 0; i < 6; i++ {
			part := pp
			if i%3 == 2 {
				part = q
			}
			rec := &record{part: part}
			recs = append(recs, rec)
			if i == 4 {
				s.submit(context.Background(), rec, req, true) // a recheck
				continue
			}
			s.submitClaimed(context.Background(), rec, req)
		}
		s.hold(j, true)
		ok := round%2 == 0
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); pp.cancel() }()
		go func() { defer wg.Done(); s.hold(j, false); s.done(j, ok) }()
		wg.Wait()
		// A takeover (not ok) or the rechecks submitted again: end them ok.
		deadline := time.Now().Add(2 * time.Second)
		for {
			select {
			case nj := <-s.startQ:
				s.done(nj, true)
				continue
			default:
			}
			mu.Lock()
			n := 0
			for _, c := range ends {
				n += c
			}
			mu.Unlock()
			s.mu.Lock()
			inFlight := len(s.starting)
			s.mu.Unlock()
			if (n >= len(recs)+1 && inFlight == 0) || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(2 * time.Millisecond) // a late AfterFunc
		mu.Lock()
		for _, rec := range append([]*record{owner}, recs...) {
			if ends[rec] != 1 {
				t.Errorf("round %d (job ok %v): a copy of partition %d ended %d times, want 1", round, ok, rec.part.tp.partition, ends[rec])
			}
		}
		for ref, p := range paused {
			if p {
				t.Errorf("round %d: partition %d left paused", round, ref.Partition)
			}
		}
		for part, l := range lent {
			if l {
				t.Errorf("round %d: partition %d's assignment left lent", round, part.tp.partition)
			}
		}
		mu.Unlock()
		h.mu.Lock()
		if len(h.parts) != 0 || len(h.refs) != 0 {
			t.Errorf("round %d: holds left: %d assignments, refs %v", round, len(h.parts), h.refs)
		}
		h.mu.Unlock()
		o.cancel()
		q.cancel()
		workCancel()
		if t.Failed() {
			return
		}
	}
}

// Adversary 29b-8 (idea 1e: shutdown while a kept partition's Own keeps
// failing). Run drains for at most drain_timeout once the claimer is done;
// but the claimer may be in fenced, whose Own gets 10 s of its own (its
// context is the committer's parent, which lives until after the drain),
// not the caller's. Since ed0ef94 a partition whose Own fails is kept, so
// the claimer enters that 10 s Own again at every refusal, for as long as
// Own fails: a router stopped then waits out the Own in progress before
// its drain begins. Interleaving: a ghost takes partition 1 before c@1's
// first claim; from then on every Own of partition 1 by r1 hangs past
// fenced's 10 s. Once the first one has failed (r1 keeps partition 1 and
// takes it again at once), r1 is stopped. The test holds that Run returns
// within drain_timeout + 1 s (as
// TestARouterStoppedWhileItsMarkerIsRefusedOverAndOverReturnsInTimeAndCommitsNothingPastTheMark
// does) and that c is not committed. Fails 3 of 3: Run took 10.5 s
// (drain timeout 2 s). Passes with ed0ef94's forget on a failed Own put
// back (the partition forgotten, the claimer idle at the stop). Passes
// since fenced gives up with its caller's ctx (the claimer's ends with
// the poll).
func TestARouterStoppedWhileAKeptPartitionsRetakeKeepsFailingReturnsInTime(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	var (
		once      sync.Once
		hanging   atomic.Bool
		r1Owns    atomic.Int32
		failed    atomic.Int32
		release   = make(chan struct{})
		closeOnce sync.Once
	)
	unhang := func() { hanging.Store(false); closeOnce.Do(func() { close(release) }) }
	defer unhang()
	e.led.mu.Lock()
	e.led.gate = func(intents []decide.Intent) bool {
		if slices.ContainsFunc(intents, func(in decide.Intent) bool { return in.Partition == 1 }) {
			once.Do(func() { hanging.Store(true); e.ghostOwn(1) })
		}
		return false
	}
	e.led.ownGate = func(member string, parts []PartitionRef) {
		if member == "ghost" || !hanging.Load() || !slices.ContainsFunc(parts, func(p PartitionRef) bool { return p.Partition == 1 }) {
			return
		}
		r1Owns.Add(1)
		select {
		case <-release:
		case <-time.After(11 * time.Second): // past fenced's 10 s: Own fails
			failed.Add(1)
		}
	}
	e.led.mu.Unlock()
	e.produce(1, "c", "v")
	eventually(t, 20*time.Second, func() bool { return failed.Load() >= 1 }, func() string {
		return fmt.Sprintf("r1 tried to take partition 1 again %d times, %d failed", r1Owns.Load(), failed.Load())
	})
	time.Sleep(500 * time.Millisecond)
	owns := r1Owns.Load()
	err := r1.stop()
	unhang()
	if err != nil {
		t.Fatal(err)
	}
	if r1.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run took %v to return after cancel, drain timeout %v (r1 tried to take partition 1 again %d times before the stop): the claimer waited out fenced's Own of the kept partition before the drain began",
			r1.took, cfg.DrainTimeout, owns)
	}
	if got := e.committed()[1]; got > 0 {
		t.Errorf("partition 1 committed at %d: past c@1, never started", got)
	}
}

// Adversary 29c-1 (idea d: fenced gives up with its caller's ctx, and a
// failed Own starts retakeBackoff). bff4c65 makes fenced's Own end with
// its caller's ctx, and counts any failed Own as a failure of the ledger:
// the partition is then kept under its stale fence, not taken again for
// retakeBackoff (10 s). The claimer's ctx ends when Run is cancelled, so a
// stop that lands while the claimer takes a partition again cancels that
// Own: the partition goes into a 10 s backoff, and the marker's final
// flush, refused for it, no longer takes it again (kept, in backoff) and
// gives its marks up at flushBy. Before bff4c65 the claimer's Own ran on
// the committer's parent ctx (alive through the drain), took the partition
// again, and the final flush marked under the new fence. Interleaving:
// r1 owns 0 and 1; x@1 is claimed and its start held in Temporal; a ghost
// takes partition 1; y@1's claim is refused and the claimer's fenced asks
// the coordinator (r1's: mine) and sends Own, held in the ledger; r1 is
// stopped; Own is let go (it sees the cancelled ctx: fails, backoff);
// x's start is let go, its mark is refused (ghost's epoch), fenced keeps
// partition 1 without Own (backoff) until the final flush gives up. The
// test holds that x's row ends started and partition 1 is committed past
// x (as it is when the stop does not meet the Own). Passes since an Own
// its caller gave up on starts no backoff.
func TestAStopDuringTheClaimersRetakeDoesNotKeepTheFinalFlushFromMarkingThePartitionsStarts(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	releaseX := e.starter.block(wid("x"))
	defer releaseX()
	offX := e.produce(1, "x", "v")
	eventually(t, 10*time.Second, func() bool { return e.starter.callCount(wid("x")) == 1 }, func() string { return "x@1 never reached Temporal" })
	var (
		entered   = make(chan struct{}, 16)
		release   = make(chan struct{})
		closeOnce sync.Once
		r1Owns    atomic.Int32
	)
	unhang := func() { closeOnce.Do(func() { close(release) }) }
	defer unhang()
	e.ghostOwn(1)
	e.led.mu.Lock()
	e.led.ownGate = func(member string, parts []PartitionRef) {
		if member == "ghost" || !slices.ContainsFunc(parts, func(p PartitionRef) bool { return p.Partition == 1 }) {
			return
		}
		if r1Owns.Add(1) == 1 {
			entered <- struct{}{}
			<-release
		}
	}
	e.led.mu.Unlock()
	e.produce(1, "y", "v")
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("interleaving not reached: the claimer never took partition 1 again after y@1's refusal")
	}
	stopped := make(chan error, 1)
	go func() { stopped <- r1.stop() }()
	time.Sleep(300 * time.Millisecond) // Run's ctx cancelled: the claimer's fenced ctx ends
	unhang()
	time.Sleep(100 * time.Millisecond)
	releaseX()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	st, committed := e.led.state(wid("x")), e.committed()
	if len(e.starter.executionsOf(wid("x"))) != 1 {
		t.Fatalf("interleaving not reached: x has %d executions, want 1 (started during the drain)", len(e.starter.executionsOf(wid("x"))))
	}
	if st != stateStarted || committed[1] < offX+1 {
		t.Errorf("after the stop: x's row %v (want started), partition 1 committed %v (want past x@1 at %d); r1 sent %d Owns of partition 1, took %v: the claimer's Own cancelled by the stop put partition 1 in retakeBackoff, and the final flush, refused, kept it without taking it again and gave x's mark up",
			st, committed, offX, r1Owns.Load(), r1.took)
	}
}

// failDescribeGroups makes every DescribeGroups fail (the coordinator
// cannot say) while failing holds; described counts the failures.
func (e *testEnv) failDescribeGroups() (failing *atomic.Bool, described *atomic.Int32) {
	failing, described = &atomic.Bool{}, &atomic.Int32{}
	failing.Store(true)
	e.cluster.ControlKey(kmsg.DescribeGroups.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		if !failing.Load() {
			return nil, nil, false
		}
		described.Add(1)
		req := kreq.(*kmsg.DescribeGroupsRequest)
		resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
		for _, g := range req.Groups {
			rg := kmsg.NewDescribeGroupsResponseGroup()
			rg.Group = g
			rg.ErrorCode = kerr.GroupAuthorizationFailed.Code
			resp.Groups = append(resp.Groups, rg)
		}
		return resp, nil, true
	})
	return failing, described
}

// Adversary 29d-1 (ideas 1, 2: two real routers and a ghost while the
// coordinator cannot say). Interleaving: r1 owns 4 partitions; every
// DescribeGroups fails; a ghost takes partition 1 before every claim of
// it and partition 2 before every mark of it, so both partitions are kept
// under their stale fences (unsure) and refused over and over by
// whichever router owns them; r2 joins (the group moves partitions from
// r1 to r2 while their records wait refused), leaves, and joins again,
// with events produced to every partition throughout. Then the ghost
// stops and DescribeGroups answers again. The test holds that every event
// is started exactly once, every row ends started, and everything is
// committed to the ends within 30 s (no Own fails here: no retake
// backoff), and that both routers stop within drain_timeout + 1 s. Held
// (passes 4 of 4, 8.3 s).
func TestTwoRoutersAndAGhostWhileTheCoordinatorCannotSayStartEachEventOnceAndCommitEverything(t *testing.T) {
	waitsOnTimers(t)
	twoRoutersAndAGhost(t, true)
}

// Adversary 29d-6 (idea 2): as 29d-1, with the coordinator answering: the
// routers take partitions 1 and 2 again (Confirmed Owns) at each refusal
// while the group moves them between r1 and r2. Held (passes 3 of 3,
// 8.3 s).
func TestTwoRoutersAndAGhostTakingPartitionsAgainWhileTheyMoveStartEachEventOnceAndCommitEverything(t *testing.T) {
	waitsOnTimers(t)
	twoRoutersAndAGhost(t, false)
}

func twoRoutersAndAGhost(t *testing.T, failDescribe bool) {
	e := newTestEnv(t, 4, envOpt{})
	cfg := e.config()
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 4 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	failing, described := e.failDescribeGroups()
	failing.Store(failDescribe)
	claimBumps, stopClaimGhost := e.ghostKeepsTaking(1, true)
	defer stopClaimGhost()
	markBumps, stopMarkGhost := e.ghostKeepsTaking(2, false)
	defer stopMarkGhost()
	var ids []string
	produce := func(round int) {
		for p := int32(0); p < 4; p++ {
			id := fmt.Sprintf("e%d-%d", round, p)
			ids = append(ids, id)
			e.produce(p, id, "v")
		}
	}
	produce(0)
	eventually(t, 10*time.Second, func() bool { return claimBumps.Load() >= 3 && markBumps.Load() >= 3 }, func() string {
		return fmt.Sprintf("ghost bumps: claims %d, marks %d", claimBumps.Load(), markBumps.Load())
	})
	r2 := e.start("r2", cfg)
	for round := 1; round <= 6; round++ {
		produce(round)
		time.Sleep(300 * time.Millisecond)
		if round == 3 {
			if err := r2.stop(); err != nil {
				t.Fatal(err)
			}
			if r2.took > cfg.DrainTimeout+time.Second {
				t.Errorf("r2 (first life) took %v to stop", r2.took)
			}
			r2 = e.start("r2", cfg)
		}
	}
	time.Sleep(time.Second)
	stopClaimGhost()
	stopMarkGhost()
	failing.Store(false)
	e.waitCommittedToEnd(30 * time.Second)
	for _, rn := range []*runner{r1, r2} {
		if err := rn.stop(); err != nil {
			t.Fatal(err)
		}
		if rn.took > cfg.DrainTimeout+time.Second {
			t.Errorf("a router took %v to stop, drain timeout %v", rn.took, cfg.DrainTimeout)
		}
	}
	if failDescribe && described.Load() == 0 {
		t.Fatalf("interleaving not reached: no DescribeGroups failed")
	}
	for _, id := range ids {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions (callers %v), want 1", id, n, e.starter.callersOf(wid(id)))
		}
		if st := e.led.state(wid(id)); st != stateStarted {
			t.Errorf("%s: row %q, want started", id, st)
		}
	}
	t.Logf("ghost bumps: claims %d, marks %d; %d DescribeGroups failed", claimBumps.Load(), markBumps.Load(), described.Load())
}

// Adversary 29d-2 (idea 1: a real takeover while fenced takes a partition
// again). fenced asks the coordinator (DescribeGroups) and then takes the
// partition again with a Confirmed Own, which the ledger grants whatever
// generation holds the partition. The answer can go stale between the two:
// if the member is dropped from the group meanwhile and the partition
// goes to another router, which takes it in the ledger, the late Confirmed
// Own takes it back from the new owner, and the dropped router (which has
// not heard yet) claims and starts its records under the stolen fence.
// Interleaving: r1 owns 0 and 1; a ghost takes partition 1 before x@1's
// first claim; r1's fenced asks the coordinator (Stable, r1 owns 1) and
// its Own is held; the broker stops passing r1's heartbeats to the group
// but answers them (r1 does not notice it was dropped); r2 joins, the
// group drops r1 after its session and gives r2 both partitions, r2 takes
// them in the ledger; r1's Own is let go. The test holds that r1 never
// starts x, nor y@1 produced after the Own is let go (a router the group
// dropped, whose partition another router took in the ledger, changes no
// row and starts nothing of it: no claim lands under the epoch r1's late
// Own took), and that x and y are started once. Fails 5 of 5 (3.4 s):
// r1's late Confirmed Own takes partition 1 back at epoch 4 from r2's 3,
// r1 claims x@0 and y@1 under it and starts y (start calls of y by r1 and
// r2); r2's writes are refused until it takes partition 1 again. The
// generation passed with Confirmed is not checked.
// Also: r2's claim of y is refused and r2 retakes partition 1 in turn (the
// two steal it from each other until r1 hears it was dropped). Passes
// since fenced asks the coordinator again once its Own landed, and does
// not keep (nor write under) a partition now assigned elsewhere, nor use
// the new epoch when that question is unsure (29e).
func TestARetakeConfirmedBeforeTheRouterWasDroppedDoesNotTakeThePartitionFromItsNewOwner(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	r1Member, _ := r1.r.cl.GroupMetadata()
	var (
		once      sync.Once
		faking    atomic.Bool
		entered   = make(chan struct{}, 1)
		release   = make(chan struct{})
		closeOnce sync.Once
		r1Retakes atomic.Int32
	)
	unhang := func() { closeOnce.Do(func() { close(release) }) }
	defer unhang()
	// r1 cut off from Kafka (not from the ledger): its heartbeats and
	// commits get no answer until the cut ends.
	cut := make(chan struct{})
	var cutOnce sync.Once
	endCut := func() { faking.Store(false); cutOnce.Do(func() { close(cut) }) }
	defer endCut()
	for _, key := range []int16{kmsg.Heartbeat.Int16(), kmsg.OffsetCommit.Int16()} {
		e.cluster.ControlKey(key, func(kreq kmsg.Request) (kmsg.Response, error, bool) {
			e.cluster.KeepControl()
			var member string
			switch req := kreq.(type) {
			case *kmsg.HeartbeatRequest:
				member = req.MemberID
			case *kmsg.OffsetCommitRequest:
				member = req.MemberID
			}
			if faking.Load() && member == r1Member {
				e.sleepControl(func() { <-cut })
			}
			return nil, nil, false
		})
	}
	e.led.mu.Lock()
	e.led.gate = func(intents []decide.Intent) bool {
		if slices.ContainsFunc(intents, func(in decide.Intent) bool { return in.Partition == 1 }) {
			once.Do(func() { e.ghostOwn(1) })
		}
		return false
	}
	e.led.ownGate = func(member string, parts []PartitionRef) {
		if member != r1Member || !slices.ContainsFunc(parts, func(p PartitionRef) bool { return p.Partition == 1 }) {
			return
		}
		if r1Retakes.Add(1) == 1 {
			entered <- struct{}{}
			<-release
		}
	}
	e.led.mu.Unlock()
	e.produce(1, "x", "v")
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("interleaving not reached: r1 never took partition 1 again after x@1's refusal")
	}
	faking.Store(true)
	r2 := e.start("r2", cfg)
	tookOver := false
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		if o := r2.owned(); o[0] && o[1] {
			tookOver = true
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !tookOver {
		t.Fatalf("interleaving not reached: r2 owns %v, r1 owns %v", r2.owned(), r1.owned())
	}
	e.led.mu.Lock()
	r2Epoch := e.led.epochs[ownerKey(e.group, testTopic, 1)]
	e.led.mu.Unlock()
	time.Sleep(100 * time.Millisecond)
	unhang()
	time.Sleep(300 * time.Millisecond)
	e.produce(1, "y", "v")
	time.Sleep(2 * time.Second)
	callers, r1Owns := append(e.starter.callersOf(wid("x")), e.starter.callersOf(wid("y"))...), r1.owned()
	yState := e.led.state(wid("y"))
	endCut()
	var stolen []int64
	for _, c := range e.led.claimLog() {
		for _, in := range c {
			if in.Partition == 1 && in.Fence.Epoch == r2Epoch+1 {
				stolen = append(stolen, in.Offset)
			}
		}
	}
	if err := r1.stop(); err != nil {
		t.Log(err)
	}
	e.waitCommittedToEnd(20 * time.Second)
	if err := r2.stop(); err != nil {
		t.Fatal(err)
	}
	if len(stolen) > 0 {
		t.Errorf("claims of partition 1 at offsets %v landed under epoch %d, r1's Confirmed Own let go after r2 took partition 1 at epoch %d: a router the group dropped changed rows of r2's partition",
			stolen, r2Epoch+1, r2Epoch)
	}
	if slices.Contains(callers, "r1") {
		t.Errorf("x@1, y@1 started by %v (y's row %q): r1, dropped from the group while its Confirmed Own of partition 1 was on its way, took partition 1 back from r2 in the ledger (r1 still owns %v) and claimed and started its records",
			callers, yState, r1Owns)
	}
	for _, id := range []string{"x", "y"} {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
	}
}

// Adversary 29d-3 (idea 4: a stop during confirm). An assignment the
// ledger refuses (a later generation holds partition 1) is confirmed by
// the coordinator and taken with a Confirmed Own, in kgo's
// OnPartitionsAssigned; that Own is held (PostgreSQL slow) past the stop.
// The test holds that Run returns within drain_timeout + 1 s, and that
// c@1 produced before is neither started nor committed by r1. The Own
// honours its ctx (ownCtxGate). Fails 5 of 5 (12 s; 3 with a gate blind
// to ctx, 2 with ownCtxGate): Run took 11.8 s for a 2 s drain timeout;
// the Own then lands
// (partition 1 taken at epoch 2 after the stop: its ctx, kgo's callback
// ctx, is not cancelled by the stop, so a ledger that honours ctx would
// hold it as long). Not only confirm's: with the hold moved to the
// assignment's first Own (both partitions) Run took 19.8 s of a 20 s
// hold (health.retry's Own retries until that ctx ends, so a PostgreSQL
// down at an assignment holds the stop the same way). Passes since the
// assignment callback's Owns give up with Run's ctx (committer.stopping).
func TestARouterStoppedWhileConfirmTakesARefusedAssignmentReturnsInTime(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	if _, err := e.led.Own(context.Background(), Ownership{Group: e.group, Member: "earlier-life", Generation: 1000, Confirmed: true,
		Parts: []PartitionRef{{testTopic, 1}}}); err != nil {
		t.Fatal(err)
	}
	e.produce(1, "c", "v")
	var (
		entered   = make(chan struct{}, 1)
		release   = make(chan struct{})
		closeOnce sync.Once
		confirmed atomic.Int32
	)
	unhang := func() { closeOnce.Do(func() { close(release) }) }
	defer unhang()
	e.led.mu.Lock()
	e.led.ownCtxGate = func(ctx context.Context, member string, parts []PartitionRef) {
		if member == "earlier-life" || len(parts) != 1 || parts[0].Partition != 1 {
			return
		}
		if confirmed.Add(1) == 1 {
			entered <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done(): // a statement ends with its ctx
			case <-time.After(12 * time.Second):
			}
		}
	}
	e.led.mu.Unlock()
	cfg := e.config()
	r1 := e.start("r1", cfg)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("interleaving not reached: r1 never confirmed partition 1")
	}
	time.Sleep(200 * time.Millisecond)
	err := r1.stop()
	unhang()
	if err != nil {
		t.Fatal(err)
	}
	if r1.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run took %v to return after cancel, drain timeout %v: the stop waited for confirm's Own", r1.took, cfg.DrainTimeout)
	}
	if n := len(e.starter.executionsOf(wid("c"))); n != 0 || e.committed()[1] > 0 {
		t.Errorf("c@1: %d executions, partition 1 committed %v", n, e.committed()[1])
	}
}

// Adversary 29d-4 (ideas 1, 3: a retake backoff overlapping a real
// rebalance). Interleaving: r1 owns 4 partitions; a ghost takes partition
// 1 before c@1's first claim; r1's Own of partition 1 hangs past fenced's
// 10 s and fails (retakeBackoff: 10 s, partition 1 kept under its stale
// fence, refused meanwhile); during the hang r2 joins (the group moves
// two partitions to r2), events are produced to every partition, and r2
// leaves again once the Own failed (partitions move back to r1). The test
// holds that every event is started once, that everything is committed to
// the ends within 25 s of the failure (10 s backoff + slack; Own answers
// again from then), and that nothing is left paused or lent in r1. Held
// (passes 3 of 3, 26 s; healed 15 s after the failed Own).
func TestARetakeBackoffOverlappingARealRebalanceStartsEachEventOnceAndHeals(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 4, envOpt{})
	cfg := e.config()
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 4 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	r1Member, _ := r1.r.cl.GroupMetadata()
	var (
		once    sync.Once
		hanging atomic.Bool
		failed  atomic.Int32
		entered = make(chan struct{}, 1)
	)
	e.led.mu.Lock()
	e.led.gate = func(intents []decide.Intent) bool {
		if slices.ContainsFunc(intents, func(in decide.Intent) bool { return in.Partition == 1 }) {
			once.Do(func() { hanging.Store(true); e.ghostOwn(1) })
		}
		return false
	}
	e.led.ownGate = func(member string, parts []PartitionRef) {
		if member != r1Member || !hanging.Load() || !slices.ContainsFunc(parts, func(p PartitionRef) bool { return p.Partition == 1 }) {
			return
		}
		if hanging.CompareAndSwap(true, false) {
			entered <- struct{}{}
			time.Sleep(11 * time.Second) // past fenced's 10 s: Own fails
			failed.Add(1)
		}
	}
	e.led.mu.Unlock()
	ids := []string{"c"}
	e.produce(1, "c", "v")
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("interleaving not reached: r1 never took partition 1 again")
	}
	r2 := e.start("r2", cfg)
	for round := 0; round < 8; round++ {
		for p := int32(0); p < 4; p++ {
			id := fmt.Sprintf("e%d-%d", round, p)
			ids = append(ids, id)
			e.produce(p, id, "v")
		}
		time.Sleep(250 * time.Millisecond)
	}
	eventually(t, 15*time.Second, func() bool { return failed.Load() == 1 }, func() string { return "r1's Own never failed" })
	t0 := time.Now()
	if err := r2.stop(); err != nil {
		t.Fatal(err)
	}
	healed := true
	for !e.atEnd() {
		if time.Since(t0) > 25*time.Second {
			healed = false
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	took := time.Since(t0)
	var leftover string
	eventually(t, 5*time.Second, func() bool {
		l, n := lentCount(r1)
		leftover = fmt.Sprintf("paused %v, %d lent, %d in flight, holds %v", pausedPartitions(r1), l, n, holdCounts(r1))
		return len(pausedPartitions(r1)) == 0 && l == 0 && n == 0
	}, func() string { return "after the faults stopped r1 has " + leftover })
	committed := e.committed()
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if !healed {
		t.Errorf("not committed to the ends within 25 s of the failed Own: committed %v, ends %v", committed, e.ends())
	}
	for _, id := range ids {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions (callers %v), want 1", id, n, e.starter.callersOf(wid(id)))
		}
	}
	t.Logf("healed %v after the failed Own", took)
}

// Adversary 29d-5 (idea 4: a stop while the marker's fenced holds the
// fence's lock). fenced is serialised (fenceMu), and the lock is taken
// whatever the caller's ctx: the claimer, refused for the same partition
// while the marker's fenced waits for its Own, waits for the lock, and a
// stop waits for the claimer before its drain. The marker's ctx lives
// through the drain, so its Own gets fenced's 10 s. Interleaving: r1 owns
// 0 and 1; a ghost takes partition 1 just before x@1's mark; the marker's
// fenced asks the coordinator (r1's) and sends Own, which hangs; y@1 is
// produced, its claim is refused and the claimer's fenced waits for the
// lock; r1 is stopped. The Own honours its ctx (ownCtxGate). The test
// holds that Run returns within drain_timeout + 1 s. Fails 4 of 4 (11.7
// s): Run took 11.4 s for a 2 s drain timeout (the marker's Own ran out
// fenced's 10 s, its ctx alive until the drain, which waits for the
// claimer). Without y (the claimer not refused) it passes, Run 1.7 s:
// the marker's Own ends with workCancel. The lock is the cause. Passes
// since a caller of fenced stops waiting for the lock with its ctx
// (fenceLock).
func TestARouterStoppedWhileTheClaimerWaitsForTheMarkersRetakeReturnsInTime(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	r1Member, _ := r1.r.cl.GroupMetadata()
	var (
		once      sync.Once
		hanging   atomic.Bool
		entered   = make(chan struct{}, 1)
		release   = make(chan struct{})
		closeOnce sync.Once
		refusedY  atomic.Int32
	)
	unhang := func() { closeOnce.Do(func() { close(release) }) }
	defer unhang()
	e.led.mu.Lock()
	e.led.markGate = func(ps []int32) {
		if slices.Contains(ps, 1) {
			once.Do(func() { hanging.Store(true); e.ghostOwn(1) })
		}
	}
	e.led.gate = func(intents []decide.Intent) bool {
		if slices.ContainsFunc(intents, func(in decide.Intent) bool { return in.Partition == 1 && in.Offset == 1 }) {
			refusedY.Add(1)
		}
		return false
	}
	e.led.ownCtxGate = func(ctx context.Context, member string, parts []PartitionRef) {
		if member != r1Member || !slices.ContainsFunc(parts, func(p PartitionRef) bool { return p.Partition == 1 }) {
			return
		}
		if hanging.CompareAndSwap(true, false) {
			entered <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done(): // a statement ends with its ctx
			case <-time.After(11 * time.Second):
			}
		}
	}
	e.led.mu.Unlock()
	e.produce(1, "x", "v")
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("interleaving not reached: the marker never took partition 1 again")
	}
	e.produce(1, "y", "v")
	eventually(t, 5*time.Second, func() bool { return refusedY.Load() >= 1 }, func() string { return "y@1 never claimed" })
	time.Sleep(200 * time.Millisecond)
	err := r1.stop()
	unhang()
	if err != nil {
		t.Fatal(err)
	}
	if r1.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run took %v to return after cancel, drain timeout %v: the claimer, refused for partition 1, waited for fenced's lock behind the marker's Own before the drain began",
			r1.took, cfg.DrainTimeout)
	}
}

// Adversary 29e-1 (fix 1: the second question after a re-take's Own).
// The interleaving of 29d-2 (r1 cut off from Kafka; r1's Confirmed Own of
// partition 1, asked for after x@1's refusal, held until r2 took both
// partitions in a later generation), except that the coordinator cannot
// answer fenced's second question in time: that DescribeGroups is held
// until fenced's ctx ends (the 10 s that the first question and the slow
// Own already spent most of; a coordinator moving or loading answers
// COORDINATOR_LOAD_IN_PROGRESS the same way until the deadline). The
// second question is then unsure, and fenced stores the new epoch it took
// from r2 and writes under it. The test holds, as 29d-2, that no claim of
// partition 1 lands under that epoch (it first also held that r1 starts
// neither x@1 nor y@1; r1 rejoins the group and may be given partition 1
// again, under a new epoch, so that check was dropped). Failed 7 of 7;
// passes since fenced uses no new epoch when its second question is
// unsure (the partition kept under its old fence asks again).
func TestARetakeWhoseSecondQuestionCannotBeAnsweredDoesNotTakeThePartitionFromItsNewOwner(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	r1Member, _ := r1.r.cl.GroupMetadata()
	var (
		once         sync.Once
		faking       atomic.Bool
		slowDescribe atomic.Bool
		entered      = make(chan struct{}, 1)
		ownCtx       = make(chan context.Context, 1)
		release      = make(chan struct{})
		closeOnce    sync.Once
		r1Retakes    atomic.Int32
		heldDescribe atomic.Int32
	)
	unhang := func() { closeOnce.Do(func() { close(release) }) }
	defer unhang()
	cut := make(chan struct{})
	var cutOnce sync.Once
	endCut := func() { faking.Store(false); cutOnce.Do(func() { close(cut) }) }
	defer endCut()
	for _, key := range []int16{kmsg.Heartbeat.Int16(), kmsg.OffsetCommit.Int16()} {
		e.cluster.ControlKey(key, func(kreq kmsg.Request) (kmsg.Response, error, bool) {
			e.cluster.KeepControl()
			var member string
			switch req := kreq.(type) {
			case *kmsg.HeartbeatRequest:
				member = req.MemberID
			case *kmsg.OffsetCommitRequest:
				member = req.MemberID
			}
			if faking.Load() && member == r1Member {
				e.sleepControl(func() { <-cut })
			}
			return nil, nil, false
		})
	}
	// The first DescribeGroups once the Own is let go (r1's second
	// question) is answered only after fenced's ctx ended.
	e.cluster.ControlKey(kmsg.DescribeGroups.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		if slowDescribe.CompareAndSwap(true, false) {
			heldDescribe.Add(1)
			ctx := <-ownCtx
			ownCtx <- ctx
			e.sleepControl(func() { <-ctx.Done(); time.Sleep(100 * time.Millisecond) })
		}
		return nil, nil, false
	})
	e.led.mu.Lock()
	e.led.gate = func(intents []decide.Intent) bool {
		if slices.ContainsFunc(intents, func(in decide.Intent) bool { return in.Partition == 1 }) {
			once.Do(func() { e.ghostOwn(1) })
		}
		return false
	}
	e.led.ownCtxGate = func(ctx context.Context, member string, parts []PartitionRef) {
		if member != r1Member || !slices.ContainsFunc(parts, func(p PartitionRef) bool { return p.Partition == 1 }) {
			return
		}
		if r1Retakes.Add(1) == 1 {
			ownCtx <- ctx
			entered <- struct{}{}
			<-release
		}
	}
	e.led.mu.Unlock()
	e.produce(1, "x", "v")
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("interleaving not reached: r1 never took partition 1 again after x@1's refusal")
	}
	faking.Store(true)
	r2 := e.start("r2", cfg)
	tookOver := false
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		if o := r2.owned(); o[0] && o[1] {
			tookOver = true
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !tookOver {
		t.Fatalf("interleaving not reached: r2 owns %v, r1 owns %v", r2.owned(), r1.owned())
	}
	e.led.mu.Lock()
	r2Epoch := e.led.epochs[ownerKey(e.group, testTopic, 1)]
	e.led.mu.Unlock()
	time.Sleep(100 * time.Millisecond)
	fctx := <-ownCtx
	ownCtx <- fctx
	if fctx.Err() != nil {
		t.Fatalf("interleaving not reached: fenced's ctx ended (%v) before the Own was let go", fctx.Err())
	}
	slowDescribe.Store(true)
	unhang()
	<-fctx.Done()
	time.Sleep(300 * time.Millisecond)
	e.produce(1, "y", "v")
	time.Sleep(2 * time.Second)
	callers, r1Owns := append(e.starter.callersOf(wid("x")), e.starter.callersOf(wid("y"))...), r1.owned()
	yState := e.led.state(wid("y"))
	endCut()
	var stolen []int64
	for _, c := range e.led.claimLog() {
		for _, in := range c {
			if in.Partition == 1 && in.Fence.Epoch == r2Epoch+1 {
				stolen = append(stolen, in.Offset)
			}
		}
	}
	if err := r1.stop(); err != nil {
		t.Log(err)
	}
	e.waitCommittedToEnd(20 * time.Second)
	if err := r2.stop(); err != nil {
		t.Fatal(err)
	}
	if heldDescribe.Load() != 1 {
		t.Fatalf("interleaving not reached: %d DescribeGroups held", heldDescribe.Load())
	}
	if len(stolen) > 0 {
		t.Errorf("claims of partition 1 at offsets %v landed under epoch %d, r1's Confirmed Own let go after r2 took partition 1 at epoch %d, its second question unanswered: a router the group dropped changed rows of r2's partition",
			stolen, r2Epoch+1, r2Epoch)
	}
	// r1 may start y@1 later, under an assignment the group gives it
	// again once it has rejoined (a new epoch): only the stolen epoch's
	// writes are checked, above.
	t.Logf("x@1, y@1 started by %v (y's row %q), r1 owns %v", callers, yState, r1Owns)
	for _, id := range []string{"x", "y"} {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
	}
}

// slowDescribeGroups makes every DescribeGroups answer late (after d, or
// once release is called) while slow holds: a coordinator slow to
// describe the group (loaded, or a large group). It answers in the end:
// the router hears that it owns its partitions. described counts the slow
// answers.
func (e *testEnv) slowDescribeGroups(d time.Duration) (slow *atomic.Bool, described *atomic.Int32, release func()) {
	slow, described = &atomic.Bool{}, &atomic.Int32{}
	rel := make(chan struct{})
	var once sync.Once
	release = func() { slow.Store(false); once.Do(func() { close(rel) }) }
	e.t.Cleanup(release)
	e.cluster.ControlKey(kmsg.DescribeGroups.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		if slow.Load() {
			described.Add(1)
			e.sleepControl(func() {
				select {
				case <-rel:
				case <-time.After(d):
				}
			})
		}
		return nil, nil, false
	})
	return slow, described, release
}

// Adversary 30-1 (idea: a refusal while another partition's re-take is
// pending; the coordinator's question has no backoff). bff4c65 keeps a
// partition whose re-take (Own) failed from being taken again for
// retakeBackoff, because an Own that hangs at every refusal held the
// claimer, and with it every other partition's claims
// (TestAPartitionWhoseRetakeKeepsFailingDoesNotHoldTheClaimsOfAnotherPartition).
// The question fenced asks first, DescribeGroups, has no such backoff: it
// is asked at every refusal, on the claimer's goroutine, with up to 10 s.
// A coordinator slow to describe the group (here 4 s an answer; it does
// answer, and says the partition is r1's) while a member the group
// dropped keeps taking partition 1 before every claim of it (the 28/29
// ghost) holds the claimer 4 s at each refusal of partition 1: three
// refusals in the claim before the piece waits in its queue, then one
// more at each due re-claim. b@0, a partition nothing refuses, waits in
// the claimer's queue behind them. Session timeout raised to 20 s so that
// the heartbeats that queue behind the slow answers on the same
// connection do not drop r1. The test holds that b@0 starts within 3 s
// (as 29a's ghost test with a fast coordinator does), and that everything
// heals once the ghost stops and the coordinator is quick again. Fails 4
// of 4 (10 s): b@0 not started within 10 s; 2 refusals of partition 1
// and 3 slow DescribeGroups in that time (fenced asks twice per re-take:
// before the Own and after it, 8 s a refusal); heals at once after. The
// same ghost with a quick coordinator passes
// (TestAGhostTakingOnePartitionOverAndOverDoesNotHoldAnotherPartitionsRecords).
func TestAPartitionRefusedWhileTheCoordinatorIsSlowToAnswerDoesNotHoldTheClaimsOfAnotherPartition(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	cfg.SessionTimeout = 20 * time.Second
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	slow, described, release := e.slowDescribeGroups(4 * time.Second)
	slow.Store(true)
	bumps, stopGhost := e.ghostKeepsTaking(1, true)
	defer stopGhost()
	e.produce(1, "c", "v")
	eventually(t, 10*time.Second, func() bool { return described.Load() >= 1 }, func() string {
		return fmt.Sprintf("c@1 refused %d times, %d slow DescribeGroups", bumps.Load(), described.Load())
	})
	e.produce(0, "b", "v")
	t0 := time.Now()
	startedB := time.Duration(-1)
	for time.Since(t0) < 10*time.Second {
		if len(e.starter.executionsOf(wid("b"))) == 1 {
			startedB = time.Since(t0)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	refusals, asked, owned := bumps.Load(), described.Load(), r1.owned()
	stopGhost()
	release()
	e.waitCommittedToEnd(30 * time.Second)
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if startedB < 0 || startedB > 3*time.Second {
		t.Errorf("b@0 started %v after it was produced (-1: not within 10 s) while partition 1 was refused %d times and the coordinator answered %d DescribeGroups 4 s late (r1 owns %v): the claimer asks the coordinator at every refusal of partition 1, without a backoff, and claims no other partition meanwhile",
			startedB, refusals, asked, owned)
	}
	for _, id := range []string{"c", "b"} {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
	}
}

// Adversary 30-2 (idea: shutdown during a hold, with the final flush).
// takeAgain's comment (4e52d90) says the marker's final flush may still
// take a refused partition again. It cannot: fenced's ctx is derived from
// the committer's parent, the router's work context, which Run cancels
// (workCancel) before the marker's final flush. In the final flush,
// fenced's DescribeGroups fails at once (context canceled), the answer is
// "unsure", the partition is kept under its refused fence, and the mark
// is sent again, refused again, until flushBy: a workflow started in
// Temporal, whose partition the router still owns, is left with its row
// pending and its record uncommitted (redelivered to the next owner: lost
// shutdown work, as in 29c, not a lost event). Interleaving: one
// partition; mark_interval 1 min (below revoke_timeout 2 min), so that x@0's
// started job is still in the marker's batch when the drain begins; the
// drain sends it at once (hurry, session 32), and the test holds that mark
// until the drain's end cuts it short, so that it goes with the final
// flush;
// a member the group dropped takes partition 0 once, just before the
// final flush's first mark (its late Own). The test holds that x's row
// ends started and partition 0 is committed past x, as when the same
// late Own lands before a mark during the run. Fails 4 of 4 (1.7 s): x's
// row pending, partition 0 not committed, 6 marks refused in the final
// flush. Passes with fenced's ctx derived from
// context.WithoutCancel(c.parent) (tried, not kept: product code is not
// changed here).
func TestAMarkRefusedInTheFinalFlushIsSentUnderTheFenceTakenAgain(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	cfg := e.config()
	// The batch waits for the drain: the marker's ticker starts with the
	// router, and with 3 s it would mark x before the check below whenever
	// the join and x's start took 2.9 s (never in 120 runs on an idle
	// machine; a join under CI's eight parallel tests can).
	cfg.Starts.MarkInterval = time.Minute
	cfg.RevokeTimeout = 2 * time.Minute // above mark_interval (Validate); nothing is revoked
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 1 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	var finalMarks, ghosted atomic.Int32
	var stopping atomic.Bool
	e.led.mu.Lock()
	e.led.markGate = func(ps []int32) {
		if r1.r.workCtx.Err() == nil && stopping.Load() {
			// The drain sends the batched mark at once (hurry): held
			// until the drain's end cuts it short, it goes with the
			// final flush.
			<-r1.r.workCtx.Done()
			return
		}
		if r1.r.workCtx.Err() == nil || !slices.Contains(ps, 0) {
			return
		}
		if finalMarks.Add(1) == 1 {
			ghosted.Add(1)
			e.ghostOwn(0)
		}
	}
	e.led.mu.Unlock()
	offX := e.produce(0, "x", "v")
	eventually(t, 10*time.Second, func() bool { return len(e.starter.executionsOf(wid("x"))) == 1 }, func() string { return "x@0 never started" })
	time.Sleep(100 * time.Millisecond)
	if st := e.led.state(wid("x")); st != statePending {
		t.Fatalf("interleaving not reached: x's row %q before the stop, want pending (its mark still batched)", st)
	}
	stopping.Store(true)
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if ghosted.Load() != 1 {
		t.Fatalf("interleaving not reached: the final flush sent %d marks of partition 0", finalMarks.Load())
	}
	st, committed := e.led.state(wid("x")), e.committed()
	if st != stateStarted || committed[0] < offX+1 {
		t.Errorf("after the stop: x's row %q (want started), partition 0 committed %v (want past x@0 at %d); the final flush sent %d marks of partition 0, Run took %v: fenced's ctx, derived from the router's work context, is already cancelled in the final flush, so it never takes the partition again, and the mark of a started workflow in a partition the router still owns is given up",
			st, committed[0], offX, finalMarks.Load(), r1.took)
	}
	if r1.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run took %v, drain timeout %v", r1.took, cfg.DrainTimeout)
	}
}

// Adversary 30-3 (idea: a partition LOST, not revoked, while a re-take's
// Own is in flight). A ghost takes partition 1 before c@1's first claim;
// the claimer's fenced asks the coordinator (r1's) and its Own of
// partition 1 is held in the ledger; meanwhile the broker answers one
// heartbeat with UNKNOWN_MEMBER_ID: r1 loses both partitions and joins
// again, its new assignment taking them in the ledger; then the held Own
// lands, after the new assignment's, so the new assignment's fence is
// stale from its first write. The test holds that nothing is left behind:
// c@1 and d@1 (produced once the Own landed) started once each, their
// rows started, committed to the ends within 15 s, nothing paused or
// lent, and that no claim of the lost assignment's records lands under
// the epoch of the held Own. Held (passes 4 of 4): the held Own's
// keepOrForget finds another assignment in parts and neither keeps nor
// forgets; the new assignment's first claim is refused and takes the
// partition again (2 re-takes).
func TestAPartitionLostWhileItsRetakeIsInFlightHealsUnderItsNextAssignment(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	r1Member, _ := r1.r.cl.GroupMetadata()
	var (
		once      sync.Once
		retakes   atomic.Int32
		entered   = make(chan struct{}, 1)
		release   = make(chan struct{})
		closeOnce sync.Once
	)
	unhang := func() { closeOnce.Do(func() { close(release) }) }
	defer unhang()
	e.led.mu.Lock()
	e.led.gate = func(intents []decide.Intent) bool {
		if slices.ContainsFunc(intents, func(in decide.Intent) bool { return in.Partition == 1 }) {
			once.Do(func() { e.ghostOwn(1) })
		}
		return false
	}
	e.led.ownGate = func(member string, parts []PartitionRef) {
		// The first Own of partition 1 alone by r1 after the ghost's:
		// the claimer's re-take (an assignment takes both).
		if member != r1Member || len(parts) != 1 || parts[0].Partition != 1 {
			return
		}
		if retakes.Add(1) == 1 {
			entered <- struct{}{}
			<-release
		}
	}
	e.led.mu.Unlock()
	e.produce(1, "c", "v")
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("interleaving not reached: r1 never took partition 1 again after c@1's refusal")
	}
	e.loseOnce()
	eventually(t, 10*time.Second, func() bool { return lostCount(r1) == 2 }, func() string { return fmt.Sprintf("lost %v", lostCount(r1)) })
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	e.led.mu.Lock()
	assignedEpoch := e.led.epochs[ownerKey(e.group, testTopic, 1)]
	e.led.mu.Unlock()
	unhang()
	eventually(t, 5*time.Second, func() bool {
		e.led.mu.Lock()
		defer e.led.mu.Unlock()
		return e.led.epochs[ownerKey(e.group, testTopic, 1)] > assignedEpoch
	}, func() string { return "the held Own never landed" })
	e.produce(1, "d", "v")
	e.waitCommittedToEnd(15 * time.Second)
	eventually(t, 5*time.Second, func() bool { l, n := lentCount(r1); return l == 0 && n == 0 && len(pausedPartitions(r1)) == 0 }, func() string {
		l, n := lentCount(r1)
		return fmt.Sprintf("r1 healed but paused %v, %d lent, %d in flight, holds %v", pausedPartitions(r1), l, n, holdCounts(r1))
	})
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c", "d"} {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
		if st := e.led.state(wid(id)); st != stateStarted {
			t.Errorf("%s: row %q, want started", id, st)
		}
	}
	for _, c := range e.led.claimLog() {
		for _, in := range c {
			if in.Partition == 1 && in.Fence.Epoch == assignedEpoch+1 {
				t.Errorf("a claim of partition 1 at offset %d landed under epoch %d, the held Own's, which the lost assignment took after the new one's %d",
					in.Offset, in.Fence.Epoch, assignedEpoch)
			}
		}
	}
	t.Logf("r1 re-took partition 1 %d times; new assignment's epoch %d", retakes.Load(), assignedEpoch)
}

// Adversary 30c-1 (guarantee 3, liveness: a coordinator steadily slower
// than fenceQuestion). 9c9b8ae bounds each question fenced asks the
// coordinator at 2 s and counts one not answered in time as a failure
// (backOff: 10 s, 20 s, ... a minute). A coordinator that answers every
// DescribeGroups, and says the partition is r1's, but takes 3 s to do it
// (a large group, a loaded broker: slow, not failing) never gets to
// answer: every question is cut at 2 s, every refusal backs off again,
// and the partition is never taken again while it stays that slow. A
// single late Own of a dropped member (the ghost takes partition 1 once,
// then is gone) thus stalls partition 1 for as long as the coordinator
// takes more than 2 s. Before 9c9b8ae the same refusal took 3 s + Own + 3
// s and healed. Session timeout 20 s, as in 30-1, so that the heartbeats
// queued behind the slow answers do not drop r1. The test holds that c@1
// starts and partition 1 is committed to its end within 20 s while
// every DescribeGroups takes 3 s. Fails 3 of 3: c@1 not started in 20 s,
// 2 questions asked (both cut at 2 s), partition 1 committed nowhere;
// heals once the coordinator is quick again (the next question after the
// backoff).
func TestAPartitionRefusedOnceIsTakenAgainWhileTheCoordinatorAnswersSteadilyIn3s(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	cfg.SessionTimeout = 20 * time.Second
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	slow, described, release := e.slowDescribeGroups(3 * time.Second)
	slow.Store(true)
	var once sync.Once
	e.led.mu.Lock()
	e.led.gate = func(intents []decide.Intent) bool {
		if slices.ContainsFunc(intents, func(in decide.Intent) bool { return in.Partition == 1 }) {
			once.Do(func() { e.ghostOwn(1) })
		}
		return false
	}
	e.led.mu.Unlock()
	e.produce(1, "c", "v")
	t0 := time.Now()
	healed := func() bool { return len(e.starter.executionsOf(wid("c"))) == 1 && e.committed()[1] == 1 }
	for time.Since(t0) < 20*time.Second && !healed() {
		time.Sleep(20 * time.Millisecond)
	}
	took, ok, asked, committed := time.Since(t0), healed(), described.Load(), e.committed()
	release()
	e.waitCommittedToEnd(45 * time.Second) // the backoff running, then a quick answer
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Errorf("c@1 not started and committed within %v (committed %v) while every DescribeGroups is answered, r1's, in 3 s (%d asked): each question is cut at fenceQuestion (2 s) and backs the partition off, so a coordinator steadily slower than 2 s never lets a partition refused once be taken again",
			took.Round(time.Second), committed, asked)
	}
	if n := len(e.starter.executionsOf(wid("c"))); n != 1 {
		t.Errorf("c: %d executions, want 1", n)
	}
}

// Adversary 30c-3 (guarantees 2 and 3 on 9c9b8ae's new path: a slow
// second question). A ghost takes partition 1 once, before c@1's first
// claim; r1's first question is answered at once (r1's), its Own of
// partition 1 lands (epoch E), and the second question, asked after the
// Own, takes 4 s (cut at fenceQuestion: slow), every later one is quick.
// 9c9b8ae then drops E (epochs=nil) and backs partition 1 off for 10 s.
// The test holds that no claim of partition 1 is ever sent under E (an
// epoch whose second question went unanswered), that c@1 starts and
// partition 1 is committed to its end within the backoff plus 8 s (the
// next refusal asks again and takes it again), that b@0, produced while
// the second question hangs, starts within 4 s, and that nothing is left
// paused or lent.
func TestARetakeWhoseSecondQuestionIsSlowNeverWritesUnderItsEpochAndHealsAfterTheBackoff(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	cfg.SessionTimeout = 20 * time.Second
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	r1Member, _ := r1.r.cl.GroupMetadata()
	var (
		slowNext  atomic.Bool
		slowed    atomic.Int32
		once      sync.Once
		retakes   atomic.Int32
		droppedAt atomic.Int64 // the epoch of r1's first re-take of partition 1
		rel       = make(chan struct{})
		relOnce   sync.Once
	)
	release := func() { relOnce.Do(func() { close(rel) }) }
	defer release()
	e.cluster.ControlKey(kmsg.DescribeGroups.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		if slowNext.CompareAndSwap(true, false) {
			slowed.Add(1)
			e.sleepControl(func() {
				select {
				case <-rel:
				case <-time.After(4 * time.Second):
				}
			})
		}
		return nil, nil, false
	})
	e.led.mu.Lock()
	e.led.gate = func(intents []decide.Intent) bool {
		if slices.ContainsFunc(intents, func(in decide.Intent) bool { return in.Partition == 1 }) {
			once.Do(func() { e.ghostOwn(1) })
		}
		return false
	}
	e.led.ownGate = func(member string, parts []PartitionRef) {
		if member != r1Member || len(parts) != 1 || parts[0].Partition != 1 {
			return
		}
		if retakes.Add(1) == 1 {
			e.led.mu.Lock()
			droppedAt.Store(e.led.epochs[ownerKey(e.group, testTopic, 1)] + 1)
			e.led.mu.Unlock()
			slowNext.Store(true) // the second question, asked once this Own landed
		}
	}
	e.led.mu.Unlock()
	e.produce(1, "c", "v")
	eventually(t, 10*time.Second, func() bool { return slowed.Load() == 1 }, func() string {
		return fmt.Sprintf("r1 re-took partition 1 %d times, %d slow DescribeGroups", retakes.Load(), slowed.Load())
	})
	e.produce(0, "b", "v")
	t0 := time.Now()
	startedB := time.Duration(-1)
	for time.Since(t0) < 6*time.Second {
		if len(e.starter.executionsOf(wid("b"))) == 1 {
			startedB = time.Since(t0)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	healed := func() bool { return len(e.starter.executionsOf(wid("c"))) == 1 && e.atEnd() }
	for time.Since(t0) < retakeBackoff(1)+8*time.Second && !healed() {
		time.Sleep(20 * time.Millisecond)
	}
	ok, took, committed, ends := healed(), time.Since(t0), e.committed(), e.ends()
	var leftover string
	if ok {
		eventually(t, 5*time.Second, func() bool {
			l, n := lentCount(r1)
			leftover = fmt.Sprintf("paused %v, %d lent, %d in flight, holds %v", pausedPartitions(r1), l, n, holdCounts(r1))
			return len(pausedPartitions(r1)) == 0 && l == 0 && n == 0
		}, func() string { return "healed, but r1 has " + leftover })
	}
	release()
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if startedB < 0 || startedB > 4*time.Second {
		t.Errorf("b@0 started %v after it was produced (-1: not within 6 s) while the second question about partition 1 hung", startedB)
	}
	if !ok {
		t.Errorf("not healed within %v of the slow second question: c@1 %d executions, committed %v, ends %v, r1 re-took partition 1 %d times",
			took.Round(time.Second), len(e.starter.executionsOf(wid("c"))), committed, ends, retakes.Load())
	}
	for _, c := range e.led.claimLog() {
		for _, in := range c {
			if in.Partition == 1 && in.Fence.Epoch == droppedAt.Load() {
				t.Errorf("a claim of partition 1 at offset %d was sent under epoch %d, the re-take whose second question went unanswered", in.Offset, in.Fence.Epoch)
			}
		}
	}
	for _, id := range []string{"c", "b"} {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
	}
	t.Logf("dropped epoch %d; re-takes %d; healed in %v", droppedAt.Load(), retakes.Load(), took.Round(100*time.Millisecond))
}

// Adversary 30c-4 (guarantee 4: 07a8b9b derives fenced's ctx from
// context.WithoutCancel(c.parent), so the router's work context no longer
// ends a question or a re-take; only the caller's ctx and 10 s do). A
// coordinator that never answers DescribeGroups (each held 60 s), and a
// ghost taking partition 1 before every claim of it and partition 0
// before every mark of it, so that the claimer, the marker and the
// marker's final flush all sit in fenced's question when r1 is stopped.
// The test holds that Run returns within drain_timeout + 1 s, that no
// fenced call is left holding the fence's lock once Run returned (no
// question or Own outlives Run), and that nothing is committed past a
// record whose row is not started.
func TestARouterStoppedWhileEveryQuestionHangsReturnsInTimeWithNoFencedCallLeft(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	cfg.SessionTimeout = 20 * time.Second
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	slow, described, _ := e.slowDescribeGroups(60 * time.Second)
	slow.Store(true)
	claimBumps, stopClaimGhost := e.ghostKeepsTaking(1, true)
	defer stopClaimGhost()
	markBumps, stopMarkGhost := e.ghostKeepsTaking(0, false)
	defer stopMarkGhost()
	offs := map[string]int64{}
	for i := 0; i < 3; i++ {
		c, m := fmt.Sprintf("c%d", i), fmt.Sprintf("m%d", i)
		offs[c], offs[m] = e.produce(1, c, "v"), e.produce(0, m, "v")
	}
	eventually(t, 15*time.Second, func() bool { return claimBumps.Load() >= 1 && markBumps.Load() >= 1 && described.Load() >= 2 }, func() string {
		return fmt.Sprintf("claims refused %d, marks refused %d, %d questions", claimBumps.Load(), markBumps.Load(), described.Load())
	})
	time.Sleep(500 * time.Millisecond)
	err := r1.stop()
	lockFree := len(r1.r.commits.fenceLock) == 0
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // a question or Own that outlived Run would hold the lock now
	lockFreeLater := len(r1.r.commits.fenceLock) == 0
	if r1.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run took %v to return after cancel, drain timeout %v (%d questions held)", r1.took, cfg.DrainTimeout, described.Load())
	}
	if !lockFree || !lockFreeLater {
		t.Errorf("a fenced call held the fence's lock after Run returned (at once %v, 3 s later %v): a question or Own outlived Run", !lockFree, !lockFreeLater)
	}
	committed := e.committed()
	for id, off := range offs {
		p := int32(0)
		if id[0] == 'c' {
			p = 1
		}
		if committed[p] > off && e.led.state(wid(id)) != stateStarted {
			t.Errorf("partition %d committed at %d, past %s@%d whose row is %q", p, committed[p], id, off, e.led.state(wid(id)))
		}
	}
}

// Adversary 30c-5 (07a8b9b's claim: "the final flush still takes a
// refused partition again, so its last marks land"). It takes it again,
// but then waits before it sends the mark under the new fence:
// marker.flush's final loop waits waitRefused(most) between sends, most
// being the job's refusals counted during the run (markRefused), up to
// 1 s, while the final flush has what the drain left before flushBy
// (drain_timeout/16 below 20 s: 125 ms here). A job whose mark was
// refused more than three times before the stop (a member the group
// dropped took the partition before each of x@0's marks, r1 took it
// again each time: 29's ghost), refused once more in the final flush and
// taken again, is given up at flushBy: x's row pending and partition 0
// not committed past it, although the final flush holds the fence that
// would let the mark land. Interleaving: one partition; the ghost takes
// partition 0 before every mark of it, until the final flush's first
// mark (its last bump); r1 is stopped once x's mark was refused 6 times.
// The test holds that x's row ends started and partition 0 is committed
// past x (as 30-2, where the mark had not been refused before). Lost
// shutdown work (redelivered, re-driven), the class of 30-2.
func TestAMarkRefusedOftenBeforeTheStopIsSentInTheFinalFlushUnderTheFenceTakenAgain(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	cfg := e.config()
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 1 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	var bumps, finalMarks atomic.Int32
	var taking atomic.Bool
	taking.Store(true)
	e.led.mu.Lock()
	e.led.markGate = func(ps []int32) {
		if !slices.Contains(ps, 0) {
			return
		}
		final := r1.r.workCtx.Err() != nil
		if final {
			finalMarks.Add(1)
		}
		if taking.Load() {
			bumps.Add(1)
			e.ghostOwn(0)
			if final {
				taking.Store(false) // the ghost's last bump: the final flush's first mark
			}
		}
	}
	e.led.mu.Unlock()
	offX := e.produce(0, "x", "v")
	eventually(t, 10*time.Second, func() bool { return bumps.Load() >= 6 }, func() string {
		return fmt.Sprintf("x@0: %d executions, its mark refused %d times", len(e.starter.executionsOf(wid("x"))), bumps.Load())
	})
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	st, committed := e.led.state(wid("x")), e.committed()
	if finalMarks.Load() == 0 || taking.Load() {
		t.Fatalf("interleaving not reached: the final flush sent %d marks of partition 0, the ghost still taking %v", finalMarks.Load(), taking.Load())
	}
	if st != stateStarted || committed[0] < offX+1 {
		t.Errorf("after the stop: x's row %q (want started), partition 0 committed %v (want past x@0 at %d); x's mark refused %d times, the final flush sent %d marks of partition 0 (the first refused by the ghost's last bump), Run took %v: after taking the partition again the final flush waits waitRefused for the refusals of the run before sending the mark, past flushBy",
			st, committed[0], offX, bumps.Load(), finalMarks.Load(), r1.took)
	}
	if r1.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run took %v, drain timeout %v", r1.took, cfg.DrainTimeout)
	}
}

// Adversary 30d-1 (guarantee 3 on fd65547's questionBound: the 10 s that
// bounds all of fenced). questionBound lets a question about a partition
// whose questions were slow take 4, then 8 s, so that a coordinator
// steadily slower than 2 s is answered in the end. But fenced's ctx, which
// bounds the first question, the Own and the second question together, is
// 10 s: a coordinator answering steadily in 6 s answers the 8 s question
// (r1's), the Own lands, and the second question is cut by fenced's ctx at
// 10 s, not by its bound. ask then says unsure but not slow (ctx.Err() !=
// nil), so takeAgain keeps the old fence (keepOld) and deletes the
// partition's retakes entry: its slow count is back to 0, and the next
// question is cut at 2 s again. The cycle never ends while the coordinator
// stays at 6 s: each re-take bumps the ledger's epoch for nothing and holds
// the claimer 10 s. The test holds that c@1 starts and partition 1 is
// committed within 60 s (2 + 5 + 4 + 10 + 8 s of questions and backoffs
// by design, plus the Own and the second question) while every
// DescribeGroups is answered, r1's, in 6 s; then that it heals once the
// coordinator is quick. Fails 4 of 4: c@1 not started in 60 s, 8
// questions, 2 Owns by r1 whose epochs were never used; heals once quick.
func TestAPartitionRefusedOnceIsTakenAgainWhileTheCoordinatorAnswersSteadilyIn6s(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	cfg.SessionTimeout = 45 * time.Second
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	slow, described, release := e.slowDescribeGroups(6 * time.Second)
	slow.Store(true)
	var once sync.Once
	e.led.mu.Lock()
	e.led.gate = func(intents []decide.Intent) bool {
		if slices.ContainsFunc(intents, func(in decide.Intent) bool { return in.Partition == 1 }) {
			once.Do(func() { e.ghostOwn(1) })
		}
		return false
	}
	e.led.mu.Unlock()
	e.produce(1, "c", "v")
	t0, owns0 := time.Now(), e.led.callCount("Own")
	healed := func() bool { return len(e.starter.executionsOf(wid("c"))) == 1 && e.committed()[1] == 1 }
	for time.Since(t0) < 60*time.Second && !healed() {
		time.Sleep(20 * time.Millisecond)
	}
	took, ok, asked, committed, owns := time.Since(t0), healed(), described.Load(), e.committed(), e.led.callCount("Own")-owns0
	release()
	e.waitCommittedToEnd(90 * time.Second)
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Errorf("c@1 not started and committed within %v (committed %v) while every DescribeGroups is answered, r1's, in 6 s (%d asked, %d Owns, the ghost's one included): the second question is cut by fenced's 10 s ctx, not by questionBound, is not counted slow, and takeAgain deletes the retakes entry, so the bound never grows past 8 s",
			took.Round(time.Second), committed, asked, owns)
	}
	if n := len(e.starter.executionsOf(wid("c"))); n != 1 {
		t.Errorf("c: %d executions, want 1", n)
	}
}

// Adversary 30d-2 (guarantee 3 and adversary 30-1's hold, on fd65547's
// questionBound at its cap). A question about a partition slow 3 times in a
// row may take 10 s, the same 10 s as fenced's ctx, which is made first and
// so expires first: an unanswered question is then cut by ctx, and ask says
// unsure but not slow (ctx.Err() != nil). Nothing backs the partition off
// any more: every later refusal asks again for 10 s, on the claimer's
// goroutine, back to back, where slowBackoff promises one question a
// 15, 20, 25 s. Here a ghost takes partition 1 once and every
// DescribeGroups takes 11 s (a coordinator that does not answer within the
// longest bound). By design the questions are 2 s at 0 s, 4 s at ~7 s,
// 8 s at ~21 s, 10 s at ~44 s (slow 4: the next at ~74 s): at most 2 begin
// between 50 and 90 s. Session timeout 60 s so that heartbeats queued
// behind the slow answers do not drop r1. Then the coordinator is quick
// again, and partition 1 is committed to its end. Fails 3 of 3: 4
// questions began between 50 and 90 s (8 in all); heals once quick.
func TestACoordinatorSlowerThanTheLongestQuestionBoundIsNotAskedAtEveryRefusal(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	cfg.SessionTimeout = 60 * time.Second
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	slow, described, release := e.slowDescribeGroups(11 * time.Second)
	slow.Store(true)
	var once sync.Once
	e.led.mu.Lock()
	e.led.gate = func(intents []decide.Intent) bool {
		if slices.ContainsFunc(intents, func(in decide.Intent) bool { return in.Partition == 1 }) {
			once.Do(func() { e.ghostOwn(1) })
		}
		return false
	}
	e.led.mu.Unlock()
	e.produce(1, "c", "v")
	t0 := time.Now()
	time.Sleep(50 * time.Second)
	at50 := described.Load()
	time.Sleep(40 * time.Second)
	in40 := described.Load() - at50
	owned := r1.owned()
	release()
	e.waitCommittedToEnd(60 * time.Second)
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if in40 > 2 {
		t.Errorf("%d questions began between 50 and 90 s (of %d in %v; r1 owns %v) while every DescribeGroups takes 11 s: a question at questionBound's 10 s cap is cut by fenced's own 10 s ctx, ask does not call it slow, and nothing backs the partition off: the claimer is held 10 s at every refusal",
			in40, described.Load(), time.Since(t0).Round(time.Second), owned)
	}
	if n := len(e.starter.executionsOf(wid("c"))); n != 1 {
		t.Errorf("c: %d executions, want 1", n)
	}
}

// Adversary 31-1 (focus a/d: the final flush and backingOff). 07a8b9b
// makes the marker's final flush able to take a refused partition again
// (30-2), but fd65547's backingOff answers a refusal of a partition that
// backs off (its last question was slow) by keeping it WITHOUT asking,
// in the final flush too, where no claimer is held any more (the
// backoff's reason) and the flush has its own deadline. Interleaving: one
// partition; a member the group dropped takes partition 0 once, before
// x@0's first mark; the coordinator answers DescribeGroups in 3 s, so the
// marker's question is cut at 2 s (slow: partition 0 backs off 5 s); the
// coordinator is quick again 2.5 s after the question began, and r1 is
// stopped at once: the drain (1.5 s) and the final flush run inside the
// backoff. The test holds, as 30-2 does for a refusal with no backoff,
// that x's row ends started and partition 0 is committed past x: the
// final flush asks the (now quick) coordinator and sends the mark under
// the fence it takes again. Held (passes 3 of 3, 4 s): Run cancels the
// work context before the final flush, so every partition's ctx is done,
// and fenced's sweep of c.retakes (part.ctx.Err() != nil) drops the
// partition's backoff before backingOff looks: the final flush asks the
// quick coordinator and takes the partition again.
func TestAMarkRefusedInTheFinalFlushWhileItsPartitionBacksOffIsSentUnderTheFenceTakenAgain(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	cfg := e.config()
	cfg.SessionTimeout = 20 * time.Second
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 1 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	slow, described, release := e.slowDescribeGroups(3 * time.Second)
	slow.Store(true)
	var once sync.Once
	var finalMarks atomic.Int32
	e.led.mu.Lock()
	e.led.markGate = func(ps []int32) {
		if !slices.Contains(ps, 0) {
			return
		}
		if r1.r.workCtx.Err() != nil {
			finalMarks.Add(1)
		}
		once.Do(func() { e.ghostOwn(0) })
	}
	e.led.mu.Unlock()
	offX := e.produce(0, "x", "v")
	eventually(t, 10*time.Second, func() bool { return described.Load() >= 1 }, func() string {
		return fmt.Sprintf("x@0: %d executions, no question asked", len(e.starter.executionsOf(wid("x"))))
	})
	time.Sleep(2500 * time.Millisecond) // the question cut at 2 s: partition 0 backs off 5 s
	release()
	askedBefore := described.Load()
	var quick atomic.Int32
	e.cluster.ControlKey(kmsg.DescribeGroups.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		quick.Add(1)
		return nil, nil, false
	})
	if st := e.led.state(wid("x")); st != statePending {
		t.Fatalf("interleaving not reached: x's row %q before the stop, want pending", st)
	}
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	st, committed := e.led.state(wid("x")), e.committed()
	if finalMarks.Load() == 0 {
		t.Fatalf("interleaving not reached: the final flush sent no mark of partition 0")
	}
	if st != stateStarted || committed[0] < offX+1 {
		t.Errorf("after the stop: x's row %q (want started), partition 0 committed %v (want past x@0 at %d); %d slow questions before the stop, %d questions after the coordinator was quick again, the final flush sent %d marks of partition 0, Run took %v: the final flush keeps a partition that backs off (backingOff) under its refused fence without asking, and gives the mark of a started workflow up at flushBy",
			st, committed[0], offX, askedBefore, quick.Load(), finalMarks.Load(), r1.took)
	}
	if r1.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run took %v, drain timeout %v", r1.took, cfg.DrainTimeout)
	}
}

// Adversary 31-2 (focus a: shutdown with WithoutCancel and 18b2159's
// independent bounds). fenced's ctx is context.WithoutCancel(c.parent),
// ended only by its caller's ctx; each question has questionBound (up to
// 10 s) and the Own ownBound (10 s), no shared budget: a question, an Own
// and a second question may hold a caller 30 s. Here the ledger's Own of
// r1 ends only with its ctx (a statement on a pool that does not answer),
// a member the group dropped takes partition 0 before every mark of it and
// partition 1 before every claim of it, so that the marker (on the work
// context, then in its final flush) and the claimer (on the poll's ctx)
// sit in a re-take's Own, or back off after one, when r1 is stopped. The
// test holds that Run returns within drain_timeout + 1 s, that no fenced
// call holds the fence's lock once Run returned (nor 3 s later: no Own or
// question outlives Run), that every Own of r1 that began returned, and
// that nothing is committed past a record whose row is not started.
func TestARouterStoppedWhileEveryRetakesOwnHangsReturnsInTimeWithNoOwnLeft(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	var began, ended atomic.Int32
	e.led.mu.Lock()
	e.led.ownCtxGate = func(ctx context.Context, member string, parts []PartitionRef) {
		if member == "ghost" {
			return
		}
		began.Add(1)
		defer ended.Add(1)
		select {
		case <-ctx.Done():
		case <-time.After(60 * time.Second):
		}
	}
	e.led.mu.Unlock()
	claimBumps, stopClaimGhost := e.ghostKeepsTaking(1, true)
	defer stopClaimGhost()
	markBumps, stopMarkGhost := e.ghostKeepsTaking(0, false)
	defer stopMarkGhost()
	offs := map[string]int64{}
	for i := 0; i < 3; i++ {
		c, m := fmt.Sprintf("c%d", i), fmt.Sprintf("m%d", i)
		offs[c], offs[m] = e.produce(1, c, "v"), e.produce(0, m, "v")
	}
	eventually(t, 15*time.Second, func() bool { return claimBumps.Load() >= 1 && markBumps.Load() >= 1 && began.Load() >= 2 }, func() string {
		return fmt.Sprintf("claims refused %d, marks refused %d, %d Owns of r1 began", claimBumps.Load(), markBumps.Load(), began.Load())
	})
	time.Sleep(500 * time.Millisecond)
	err := r1.stop()
	lockFree := len(r1.r.commits.fenceLock) == 0
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	lockFreeLater := len(r1.r.commits.fenceLock) == 0
	if r1.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run took %v to return after cancel, drain timeout %v (%d Owns of r1 began, %d ended)", r1.took, cfg.DrainTimeout, began.Load(), ended.Load())
	}
	if !lockFree || !lockFreeLater {
		t.Errorf("a fenced call held the fence's lock after Run returned (at once %v, 3 s later %v): an Own or question outlived Run", !lockFree, !lockFreeLater)
	}
	if b, en := began.Load(), ended.Load(); b != en {
		t.Errorf("%d Owns of r1 began, %d ended, 3 s after Run returned: an Own outlived Run", b, en)
	}
	committed := e.committed()
	for id, off := range offs {
		p := int32(0)
		if id[0] == 'c' {
			p = 1
		}
		if committed[p] > off && e.led.state(wid(id)) != stateStarted {
			t.Errorf("partition %d committed at %d, past %s@%d whose row is %q", p, committed[p], id, off, e.led.state(wid(id)))
		}
	}
}

// Adversary 31-3 (focus d: backingOff and a partition revoked while it
// backs off). r1 owns 2 partitions; a member the group dropped takes each
// partition before every claim of it, and the coordinator answers
// DescribeGroups in 3 s: r1's questions are cut at 2 s, and both
// partitions back off (slowBackoff), their claims refused and kept
// without asking, their pieces in the claimer's queues (paused, lent).
// Then r2 joins: one partition moves to r2 while it backs off in r1 (its
// revoke must let it go: backingOff keeps no partition being revoked).
// Once r2 owns one, the ghost stops and the coordinator is quick again.
// The test holds that r2 owned a partition within 10 s of joining (the
// revoke was not held), that everything is committed to the ends within
// 30 s (the backoff, then the re-takes), that each event started once,
// that nothing is left paused, lent or in flight in either router, and
// that r1's c.retakes keeps no entry of a partition it no longer owns
// beyond the one assignment r2 took (guarantee 5). Held (passes 3 of 3,
// 4 s): r2 owned a partition 1 s after joining, everything committed
// 50 ms after the last produce, one entry of a gone assignment left in
// r1's retakes (swept at the next refusal with candidates: bounded by
// the partitions of the last fenced call).
func TestAPartitionRevokedWhileItBacksOffIsLetGoAndEverythingHeals(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	cfg.SessionTimeout = 20 * time.Second
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	slow, described, release := e.slowDescribeGroups(3 * time.Second)
	slow.Store(true)
	var taking atomic.Bool
	var bumps atomic.Int32
	taking.Store(true)
	e.led.mu.Lock()
	e.led.gate = func(intents []decide.Intent) bool {
		if !taking.Load() {
			return false
		}
		seen := map[int32]bool{}
		for _, in := range intents {
			if !seen[in.Partition] {
				seen[in.Partition] = true
				bumps.Add(1)
				e.ghostOwn(in.Partition)
			}
		}
		return false
	}
	e.led.mu.Unlock()
	var ids []string
	for p := int32(0); p < 2; p++ {
		id := fmt.Sprintf("a%d", p)
		ids = append(ids, id)
		e.produce(p, id, "v")
	}
	eventually(t, 15*time.Second, func() bool { return described.Load() >= 1 }, func() string { return "no question asked" })
	time.Sleep(2500 * time.Millisecond) // cut at 2 s: backing off
	r2 := e.start("r2", cfg)
	tj := time.Now()
	joined := true
	for len(r2.owned()) == 0 {
		if time.Since(tj) > 10*time.Second {
			joined = false
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	joinTook := time.Since(tj)
	taking.Store(false)
	release()
	for round := 0; round < 4; round++ {
		for p := int32(0); p < 2; p++ {
			id := fmt.Sprintf("e%d-%d", round, p)
			ids = append(ids, id)
			e.produce(p, id, "v")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t0 := time.Now()
	healed := true
	for !e.atEnd() {
		if time.Since(t0) > 30*time.Second {
			healed = false
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	took := time.Since(t0)
	for _, rn := range []*runner{r1, r2} {
		var leftover string
		eventually(t, 5*time.Second, func() bool {
			l, n := lentCount(rn)
			leftover = fmt.Sprintf("paused %v, %d lent, %d in flight, holds %v", pausedPartitions(rn), l, n, holdCounts(rn))
			return len(pausedPartitions(rn)) == 0 && l == 0 && n == 0
		}, func() string { return "after the faults stopped a router has " + leftover })
	}
	r1.r.commits.fenceLock <- struct{}{}
	gone := 0
	for part := range r1.r.commits.retakes {
		if part.ctx.Err() != nil {
			gone++
		}
	}
	<-r1.r.commits.fenceLock
	committed := e.committed()
	for _, rn := range []*runner{r2, r1} {
		if err := rn.stop(); err != nil {
			t.Fatal(err)
		}
	}
	if !joined {
		t.Errorf("r2 owned no partition within 10 s of joining while r1's partitions backed off (r1 owns %v)", r1.owned())
	}
	if !healed {
		t.Errorf("not committed to the ends within 30 s of the faults' end: committed %v, ends %v", committed, e.ends())
	}
	if gone > 1 {
		t.Errorf("r1's retakes keeps %d entries of gone assignments", gone)
	}
	for _, id := range ids {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions (callers %v), want 1", id, n, e.starter.callersOf(wid(id)))
		}
	}
	t.Logf("r2 joined in %v, %d ghost takes, %d slow questions; healed %v after; %d gone entries in r1's retakes", joinTook, bumps.Load(), described.Load(), took, gone)
}

// Adversary 31-4 (focus c: d637f05's final-flush wait, waitRefused(ctx,
// sent), with refusals from several partitions). Two partitions; x@0 and
// y@1 started, their marks batched (mark_interval 1 min) when r1 is
// stopped (the drain's hurried mark of them held until the drain's end
// cuts it short, so that they go with the final flush); a member the group dropped takes both partitions before each
// of the final flush's first three marks (three refusals naming both
// partitions, each answered by fenced taking both again), then is gone.
// The final flush's sends 1 to 3 do not wait (sent <= 3), so the fourth
// send lands within the short flush (what the drain left). The test holds
// that both rows end started and both partitions are committed past
// them, with Run within drain_timeout + 1 s.
func TestMarksOfTwoPartitionsRefusedThriceInTheFinalFlushLandBeforeFlushBy(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	// The batch waits for the drain: the marker's ticker starts with the
	// router, and with 3 s it would mark x before the check below whenever
	// the join and x's start took 2.9 s (never in 120 runs on an idle
	// machine; a join under CI's eight parallel tests can).
	cfg.Starts.MarkInterval = time.Minute
	cfg.RevokeTimeout = 2 * time.Minute // above mark_interval (Validate); nothing is revoked
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	var finalMarks, bumps atomic.Int32
	var stopping atomic.Bool
	e.led.mu.Lock()
	e.led.markGate = func(ps []int32) {
		if r1.r.workCtx.Err() == nil {
			if stopping.Load() {
				// The drain's mark (hurry), held until the drain's end
				// cuts it short: it goes with the final flush.
				<-r1.r.workCtx.Done()
			}
			return
		}
		if finalMarks.Add(1) <= 3 {
			for _, p := range []int32{0, 1} {
				if slices.Contains(ps, p) {
					bumps.Add(1)
					e.ghostOwn(p)
				}
			}
		}
	}
	e.led.mu.Unlock()
	offX, offY := e.produce(0, "x", "v"), e.produce(1, "y", "v")
	eventually(t, 10*time.Second, func() bool {
		return len(e.starter.executionsOf(wid("x"))) == 1 && len(e.starter.executionsOf(wid("y"))) == 1
	}, func() string { return "x@0 or y@1 never started" })
	time.Sleep(100 * time.Millisecond)
	if e.led.state(wid("x")) != statePending || e.led.state(wid("y")) != statePending {
		t.Fatalf("interleaving not reached: rows %q %q before the stop, want pending", e.led.state(wid("x")), e.led.state(wid("y")))
	}
	stopping.Store(true)
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	committed := e.committed()
	if bumps.Load() < 6 {
		t.Fatalf("interleaving not reached: %d ghost takes in %d final marks", bumps.Load(), finalMarks.Load())
	}
	for _, c := range []struct {
		id  string
		p   int32
		off int64
	}{{"x", 0, offX}, {"y", 1, offY}} {
		if st := e.led.state(wid(c.id)); st != stateStarted || committed[c.p] < c.off+1 {
			t.Errorf("%s: row %q (want started), partition %d committed %v (want past %d); %d final marks, %d ghost takes, Run took %v",
				c.id, st, c.p, committed[c.p], c.off, finalMarks.Load(), bumps.Load(), r1.took)
		}
	}
	if r1.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run took %v, drain timeout %v", r1.took, cfg.DrainTimeout)
	}
}

// stayingWatch samples, every 20 ms until stop, what a partition that
// stays assigned to rn piles up while it backs off (records in flight,
// assignments lent) and whether a partition is ever committed past a
// record whose row is not started (ids: the record ids by partition and
// offset). Adversary 31b's helper.
type stayingWatch struct {
	maxInFlight, maxLent int
	pastUnstarted        []string
	stop                 func()
}

func (e *testEnv) watchStaying(rn *runner, ids func() map[int32]map[int64]string) *stayingWatch {
	w := &stayingWatch{}
	done, finished := make(chan struct{}), make(chan struct{})
	var once sync.Once
	w.stop = func() { once.Do(func() { close(done); <-finished }) }
	go func() {
		defer close(finished)
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			l, n := lentCount(rn)
			w.maxInFlight, w.maxLent = max(w.maxInFlight, n), max(w.maxLent, l)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			resp, err := e.adm.FetchOffsets(ctx, e.group)
			cancel()
			if err != nil {
				continue
			}
			for p, offs := range ids() {
				o, ok := resp.Lookup(testTopic, p)
				if !ok || o.Err != nil {
					continue
				}
				for off, id := range offs {
					if off < o.At && e.led.state(wid(id)) != stateStarted && len(w.pastUnstarted) < 10 {
						w.pastUnstarted = append(w.pastUnstarted, fmt.Sprintf("%s@%d (row %q, committed %d)", id, p, e.led.state(wid(id)), o.At))
					}
				}
			}
		}
	}()
	return w
}

// Adversary 31b-1 (focus a and b: a partition that STAYS assigned while it
// backs off after a slow question). A member the group dropped takes
// partition 1 once, before c@1's first claim; the coordinator answers
// DescribeGroups in 3 s, so the question is cut at 2 s (slow: partition
// 1 backs off 5 s, kept under its refused fence); 2.5 s after the
// question began the coordinator is quick again, with the ghost gone. No
// rebalance: r1 owns both partitions throughout. During the backoff 30
// more records arrive on partition 1, and one record every 200 ms on
// partition 0. The test holds that each of partition 0's records starts
// within 1.5 s (it keeps flowing), that r1 never has more than
// max_in_flight + max_poll_records records in flight, that partition 1's
// claims are not sent more than 40 times in the backoff (no spin), that
// every record starts once and everything is committed to the ends
// within 8 s of the backoff's end, that no partition is ever committed
// past a record whose row is not started, and that nothing is left
// paused, lent or in flight. Held (passes 4 of 4, 11.7 s): partition 0's
// worst start 6 ms, 7 claims of partition 1 in the rest of the backoff,
// at most 10 in flight, 1 lent; healed 4.6 s after the backoff's end:
// ~1 s because the claimer's queue waits refusedWait again after the
// re-take that answered its refusal (claim: requeue), ~3 s for the
// resumed partition's next fetch.
func TestAPartitionThatStaysAssignedWhileItBacksOffAfterASlowQuestionHoldsNothingElseAndHealsAfterIt(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	cfg.SessionTimeout = 20 * time.Second
	cfg.MaxInFlight, cfg.MaxPollRecords = 10, 5
	r1 := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	slow, described, release := e.slowDescribeGroups(3 * time.Second)
	slow.Store(true)
	var once sync.Once
	var p1Claims atomic.Int32
	e.led.mu.Lock()
	e.led.gate = func(intents []decide.Intent) bool {
		if slices.ContainsFunc(intents, func(in decide.Intent) bool { return in.Partition == 1 }) {
			p1Claims.Add(1)
			once.Do(func() { e.ghostOwn(1) })
		}
		return false
	}
	e.led.mu.Unlock()
	var idsMu sync.Mutex
	ids := map[int32]map[int64]string{0: {}, 1: {}}
	add := func(p int32, id string) {
		off := e.produce(p, id, "v")
		idsMu.Lock()
		ids[p][off] = id
		idsMu.Unlock()
	}
	snapshot := func() map[int32]map[int64]string {
		idsMu.Lock()
		defer idsMu.Unlock()
		out := map[int32]map[int64]string{}
		for p, m := range ids {
			out[p] = maps.Clone(m)
		}
		return out
	}
	w := e.watchStaying(r1, snapshot)
	defer w.stop()
	add(1, "c")
	eventually(t, 10*time.Second, func() bool { return described.Load() >= 1 }, func() string { return "no question asked" })
	tq := time.Now()
	backoffEnds := tq.Add(fenceQuestion + slowBackoff(1))
	time.Sleep(2500 * time.Millisecond) // cut at 2 s: backing off
	release()
	claims0 := p1Claims.Load()
	for i := 0; i < 30; i++ {
		add(1, fmt.Sprintf("d%d", i))
	}
	var worst time.Duration
	for i := 0; time.Now().Before(backoffEnds.Add(-300 * time.Millisecond)); i++ {
		id := fmt.Sprintf("b%d", i)
		add(0, id)
		t0 := time.Now()
		for len(e.starter.executionsOf(wid(id))) == 0 && time.Since(t0) < 3*time.Second {
			time.Sleep(5 * time.Millisecond)
		}
		worst = max(worst, time.Since(t0))
		time.Sleep(200 * time.Millisecond)
	}
	inBackoff := p1Claims.Load() - claims0
	healed := func() bool {
		for _, offs := range snapshot() {
			for _, id := range offs {
				if len(e.starter.executionsOf(wid(id))) != 1 {
					return false
				}
			}
		}
		return e.atEnd()
	}
	for time.Now().Before(backoffEnds.Add(8*time.Second)) && !healed() {
		time.Sleep(20 * time.Millisecond)
	}
	ok, healedAfter, committed, ends := healed(), time.Since(backoffEnds), e.committed(), e.ends()
	var leftover string
	if ok {
		eventually(t, 5*time.Second, func() bool {
			l, n := lentCount(r1)
			leftover = fmt.Sprintf("paused %v, %d lent, %d in flight, holds %v", pausedPartitions(r1), l, n, holdCounts(r1))
			return len(pausedPartitions(r1)) == 0 && l == 0 && n == 0
		}, func() string { return "healed, but r1 has " + leftover })
	}
	w.stop()
	owned := r1.owned()
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if len(owned) != 2 {
		t.Fatalf("interleaving not reached: r1 owns %v at the end, want both (no rebalance)", owned)
	}
	if worst > 1500*time.Millisecond {
		t.Errorf("a record of partition 0 took %v to start while partition 1 backed off", worst)
	}
	if w.maxInFlight > cfg.MaxInFlight+cfg.MaxPollRecords {
		t.Errorf("r1 had %d records in flight while partition 1 backed off (max_in_flight %d, max_poll_records %d)", w.maxInFlight, cfg.MaxInFlight, cfg.MaxPollRecords)
	}
	if inBackoff > 40 {
		t.Errorf("partition 1's claims were sent %d times in the rest of its backoff (~%v)", inBackoff, slowBackoff(1)-500*time.Millisecond)
	}
	if !ok {
		t.Errorf("not healed within 8 s of the backoff's end: committed %v, ends %v, %d slow questions", committed, ends, described.Load())
	}
	if len(w.pastUnstarted) > 0 {
		t.Errorf("committed past records whose rows are not started: %v", w.pastUnstarted)
	}
	for _, offs := range snapshot() {
		for _, id := range offs {
			if n := len(e.starter.executionsOf(wid(id))); n != 1 {
				t.Errorf("%s: %d executions, want 1", id, n)
			}
		}
	}
	t.Logf("partition 0's worst start %v; %d claims of partition 1 in the backoff; max in flight %d, max lent %d; healed %v after the backoff's end",
		worst, inBackoff, w.maxInFlight, w.maxLent, healedAfter.Round(100*time.Millisecond))
}

// Adversary 31b-2 (focus c: a ghost that takes a partition only once,
// then every write of it refused while it backs off after a failed Own).
// Three partitions, no rebalance. A member the group dropped takes
// partition 1 once before a claim of it and partition 0 once before a
// mark of it; r1's first re-take (Own) of each fails at once (the ledger
// down for that one statement), so each backs off retakeBackoff(1), 10 s,
// kept under its refused fence: every claim of partition 1 and every mark
// of partition 0 is refused again until the backoff ends (backingOff).
// Records keep arriving on 0 and 1 meanwhile, and on partition 2 one every
// 250 ms. The test holds that partition 2 keeps flowing (each record
// started within 1.5 s), that the refused writes do not spin (at most 60
// claims of partition 1 and 60 marks of partition 0 in the backoff), that
// r1 never has more than max_in_flight + max_poll_records in flight, that
// every record starts exactly once and everything is committed to the
// ends within 10 s of the backoff's end, that no partition is ever
// committed past a record whose row is not started, and that nothing is
// left paused, lent or in flight. Held (passes 4 of 4, 14.6 s): 14
// claims of partition 1 and 14 marks of partition 0 in the backoff, at
// most 10 in flight, 2 lent, partition 2's worst start 6 ms, healed 3.5 s
// after the backoff's end plus a second, nothing committed past an
// unstarted row.
func TestPartitionsKeptUnderARefusedFenceAfterAFailedRetakeDoNotSpinLoseOrDuplicateAndHealAfterTheBackoff(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 3, envOpt{})
	cfg := e.config()
	cfg.MaxInFlight, cfg.MaxPollRecords = 10, 5
	var failed [2]atomic.Bool
	var failedAt atomic.Int64
	r1 := e.startWith("r1", cfg, func(r *Router, _ *prometheus.Registry) {
		own := r.commits.own
		r.commits.own = func(ctx context.Context, o Ownership) ([]int64, error) {
			if o.Confirmed && len(o.Parts) == 1 && o.Parts[0].Partition < 2 && failed[o.Parts[0].Partition].CompareAndSwap(false, true) {
				failedAt.CompareAndSwap(0, time.Now().UnixNano())
				return nil, errors.New("the ledger is down for this one statement")
			}
			return own(ctx, o)
		}
	})
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 3 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	var onceClaim, onceMark sync.Once
	var p1Claims, p0Marks atomic.Int32
	e.led.mu.Lock()
	e.led.gate = func(intents []decide.Intent) bool {
		if slices.ContainsFunc(intents, func(in decide.Intent) bool { return in.Partition == 1 }) {
			p1Claims.Add(1)
			onceClaim.Do(func() { e.ghostOwn(1) })
		}
		return false
	}
	e.led.markGate = func(ps []int32) {
		if slices.Contains(ps, 0) {
			p0Marks.Add(1)
			onceMark.Do(func() { e.ghostOwn(0) })
		}
	}
	e.led.mu.Unlock()
	var idsMu sync.Mutex
	ids := map[int32]map[int64]string{0: {}, 1: {}, 2: {}}
	add := func(p int32, id string) {
		off := e.produce(p, id, "v")
		idsMu.Lock()
		ids[p][off] = id
		idsMu.Unlock()
	}
	snapshot := func() map[int32]map[int64]string {
		idsMu.Lock()
		defer idsMu.Unlock()
		out := map[int32]map[int64]string{}
		for p, m := range ids {
			out[p] = maps.Clone(m)
		}
		return out
	}
	w := e.watchStaying(r1, snapshot)
	defer w.stop()
	add(0, "m")
	add(1, "c")
	eventually(t, 10*time.Second, func() bool { return failed[0].Load() && failed[1].Load() }, func() string {
		return fmt.Sprintf("re-takes failed: 0 %v, 1 %v", failed[0].Load(), failed[1].Load())
	})
	backoffEnds := time.Unix(0, failedAt.Load()).Add(retakeBackoff(1) + time.Second)
	claims0, marks0 := p1Claims.Load(), p0Marks.Load()
	var worst time.Duration
	for i := 0; time.Now().Before(backoffEnds.Add(-1500 * time.Millisecond)); i++ {
		if i < 20 {
			add(0, fmt.Sprintf("m%d", i))
			add(1, fmt.Sprintf("c%d", i))
		}
		id := fmt.Sprintf("b%d", i)
		add(2, id)
		t0 := time.Now()
		for len(e.starter.executionsOf(wid(id))) == 0 && time.Since(t0) < 3*time.Second {
			time.Sleep(5 * time.Millisecond)
		}
		worst = max(worst, time.Since(t0))
		time.Sleep(250 * time.Millisecond)
	}
	inClaims, inMarks := p1Claims.Load()-claims0, p0Marks.Load()-marks0
	healed := func() bool {
		for _, offs := range snapshot() {
			for _, id := range offs {
				if len(e.starter.executionsOf(wid(id))) != 1 {
					return false
				}
			}
		}
		return e.atEnd()
	}
	for time.Now().Before(backoffEnds.Add(10*time.Second)) && !healed() {
		time.Sleep(20 * time.Millisecond)
	}
	ok, healedAfter, committed, ends := healed(), time.Since(backoffEnds), e.committed(), e.ends()
	var leftover string
	if ok {
		eventually(t, 5*time.Second, func() bool {
			l, n := lentCount(r1)
			leftover = fmt.Sprintf("paused %v, %d lent, %d in flight, holds %v", pausedPartitions(r1), l, n, holdCounts(r1))
			return len(pausedPartitions(r1)) == 0 && l == 0 && n == 0
		}, func() string { return "healed, but r1 has " + leftover })
	}
	w.stop()
	owned := r1.owned()
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if len(owned) != 3 {
		t.Fatalf("interleaving not reached: r1 owns %v at the end, want all three (no rebalance)", owned)
	}
	if worst > 1500*time.Millisecond {
		t.Errorf("a record of partition 2 took %v to start while partitions 0 and 1 backed off", worst)
	}
	if w.maxInFlight > cfg.MaxInFlight+cfg.MaxPollRecords {
		t.Errorf("r1 had %d records in flight while partitions 0 and 1 backed off (max_in_flight %d, max_poll_records %d)", w.maxInFlight, cfg.MaxInFlight, cfg.MaxPollRecords)
	}
	if inClaims > 60 || inMarks > 60 {
		t.Errorf("in the backoff, partition 1's claims were sent %d times and partition 0's marks %d times", inClaims, inMarks)
	}
	if !ok {
		t.Errorf("not healed within 10 s of the backoff's end: committed %v, ends %v", committed, ends)
	}
	if len(w.pastUnstarted) > 0 {
		t.Errorf("committed past records whose rows are not started: %v", w.pastUnstarted)
	}
	for p, offs := range snapshot() {
		for _, id := range offs {
			if n := len(e.starter.executionsOf(wid(id))); n != 1 {
				t.Errorf("%s@%d: %d executions, want 1", id, p, n)
			}
			if st := e.led.state(wid(id)); st != stateStarted {
				t.Errorf("%s@%d: row %q, want started", id, p, st)
			}
		}
	}
	t.Logf("partition 2's worst start %v; in the backoff %d claims of partition 1, %d marks of partition 0; max in flight %d, max lent %d; healed %v after the backoff's end",
		worst, inClaims, inMarks, w.maxInFlight, w.maxLent, healedAfter.Round(100*time.Millisecond))
}

// Adversary 31b-3 (focus d: the mixed case in one statement). Partition 0
// backs off after a failed re-take (retakeBackoff, 10 s: a member the group
// dropped took it once before m@0's mark, and r1's first Own of it failed
// at once), its mark waiting and sent again about once a second under the
// refused fence. x@1 is started meanwhile; mark_interval 2 s, so x's mark
// goes out with m's next resend, in one MarkStarted naming both
// partitions, and the ghost takes partition 1 just before that statement:
// the refusal names partition 0 (backing off) and partition 1 (refused for
// the first time). The test holds that partition 1 is asked about and
// taken again at once, not kept by partition 0's backoff: x's row is
// started and partition 1 committed past x within 3 s of that refusal
// (partition 0's backoff has seconds left), r1 took partition 1 again
// exactly once; and that partition 0 heals within 5 s of its backoff's
// end (m started once, committed past m). Held (passes 4 of 4, 13.6 s):
// x marked within 70 ms of the mixed refusal (backingOff keeps only a
// refusal whose partitions all back off; the others are asked about and
// taken again), m 1.6 s after partition 0's backoff.
func TestAPartitionRefusedFirstInTheSameMarkAsOneThatBacksOffIsTakenAgainAtOnce(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	cfg.Starts.MarkInterval = 2 * time.Second
	cfg.RevokeTimeout = 3 * time.Second
	var failed atomic.Bool
	var failedAt atomic.Int64
	var retakes1 atomic.Int32
	r1 := e.startWith("r1", cfg, func(r *Router, _ *prometheus.Registry) {
		own := r.commits.own
		r.commits.own = func(ctx context.Context, o Ownership) ([]int64, error) {
			if o.Confirmed && slices.ContainsFunc(o.Parts, func(p PartitionRef) bool { return p.Partition == 1 }) {
				retakes1.Add(1)
			}
			if o.Confirmed && len(o.Parts) == 1 && o.Parts[0].Partition == 0 && failed.CompareAndSwap(false, true) {
				failedAt.Store(time.Now().UnixNano())
				return nil, errors.New("the ledger is down for this one statement")
			}
			return own(ctx, o)
		}
	})
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	var once0, once1 sync.Once
	var mixedAt atomic.Int64
	e.led.mu.Lock()
	e.led.markGate = func(ps []int32) {
		if slices.Contains(ps, 0) {
			once0.Do(func() { e.ghostOwn(0) })
		}
		if slices.Contains(ps, 0) && slices.Contains(ps, 1) && failed.Load() {
			once1.Do(func() {
				mixedAt.Store(time.Now().UnixNano())
				e.ghostOwn(1)
			})
		}
	}
	e.led.mu.Unlock()
	offM := e.produce(0, "m", "v")
	eventually(t, 10*time.Second, failed.Load, func() string { return "r1's re-take of partition 0 never failed" })
	offX := e.produce(1, "x", "v")
	eventually(t, 10*time.Second, func() bool { return mixedAt.Load() != 0 }, func() string {
		return fmt.Sprintf("no mark named both partitions: x %d executions, row %q", len(e.starter.executionsOf(wid("x"))), e.led.state(wid("x")))
	})
	mixed := time.Unix(0, mixedAt.Load())
	backoffEnds := time.Unix(0, failedAt.Load()).Add(retakeBackoff(1))
	xOK := func() bool { return e.led.state(wid("x")) == stateStarted && e.committed()[1] >= offX+1 }
	for time.Since(mixed) < 3*time.Second && !xOK() {
		time.Sleep(20 * time.Millisecond)
	}
	xTook, xDone, xState, xLeft := time.Since(mixed), xOK(), e.led.state(wid("x")), time.Until(backoffEnds)
	mOK := func() bool { return e.led.state(wid("m")) == stateStarted && e.committed()[0] >= offM+1 }
	for time.Now().Before(backoffEnds.Add(5*time.Second)) && !mOK() {
		time.Sleep(20 * time.Millisecond)
	}
	mDone, mAfter, committed := mOK(), time.Since(backoffEnds), e.committed()
	owned := r1.owned()
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if len(owned) != 2 {
		t.Fatalf("interleaving not reached: r1 owns %v at the end, want both (no rebalance)", owned)
	}
	if !xDone {
		t.Errorf("x@1 not marked and committed within %v of the refusal that named partition 1 with partition 0 backing off (row %q, committed %v, %d re-takes of partition 1, partition 0's backoff had %v left)",
			xTook.Round(100*time.Millisecond), xState, committed, retakes1.Load(), xLeft.Round(100*time.Millisecond))
	}
	if n := retakes1.Load(); n != 1 {
		t.Errorf("r1 took partition 1 again %d times, want 1", n)
	}
	if !mDone {
		t.Errorf("m@0 not marked and committed within 5 s of partition 0's backoff's end: row %q, committed %v", e.led.state(wid("m")), committed)
	}
	for _, id := range []string{"m", "x"} {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
	}
	t.Logf("x marked %v after the mixed refusal (partition 0's backoff had %v left); m healed %v after the backoff's end",
		xTook.Round(10*time.Millisecond), xLeft.Round(100*time.Millisecond), mAfter.Round(100*time.Millisecond))
}

// Adversary 31b-4 (focus c, on the dead-letter marks: refused writes of a
// partition that backs off must not spin or flood the ledger). 40 records
// of partition 0 whose starts Temporal refuses for good (a route whose
// workflow the worker does not know: every start dead-lettered); a member
// the group dropped takes partition 0 once, before the first dead-letter
// mark; r1's first re-take (Own) of it fails at once, so partition 0 backs
// off retakeBackoff(1), 10 s, kept under its refused fence. The started
// marks of such a partition go out together, one statement about every
// second (TestPartitionsKeptUnderARefusedFenceAfterAFailedRetake...: 14 in
// the backoff). The test holds that the dead-letter marks of the
// partition are not sent more than 60 times in the backoff (a statement a
// second, with margin), that partition 1 keeps flowing, and that it all
// heals after the backoff: every row dead_lettered, one dead letter each,
// everything committed. Fails 4 of 4 (11.6 s): 560 MarkDeadLettered
// statements in the 10 s backoff, 14 per record, every one refused (no
// log flood: the refusals kept by backingOff log nothing); heals 1.5 s
// after the backoff, each record dead-lettered once. Cause:
// startPool.deadLetter/markDeadLettered (starts.go) send each job's
// dead-letter mark again from a goroutine of its own, on waitRefused's
// per-job schedule (immediately thrice, then 100 ms more each, at most
// a second), not together as the marker's waiting marks are; while
// committer.fenced keeps the partition under its refused fence for the
// backoff (backingOff, assign.go/retake.go: up to a minute), every
// in-flight dead-lettered record of it costs the ledger about a refused
// statement a second (max_in_flight 1000: ~1000 statements a second
// for up to a minute).
// Fixed: a dead-letter mark of a partition that backs off is not sent
// until the backoff ends (backsOff, waitBackoff in retake.go): 0
// statements in the backoff, 60-75 from the failed re-take until healed
// (one refused at the backoff's end and one under the new fence, a
// record at most), against 560 and 627. The window ends 100 ms before
// the backoff does, and the total is held too.
func TestDeadLetterMarksOfAPartitionThatBacksOffDoNotFloodTheLedger(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	var failed atomic.Bool
	var failedAt atomic.Int64
	r1 := e.startWith("r1", cfg, func(r *Router, _ *prometheus.Registry) {
		own := r.commits.own
		r.commits.own = func(ctx context.Context, o Ownership) ([]int64, error) {
			if o.Confirmed && len(o.Parts) == 1 && o.Parts[0].Partition == 0 && failed.CompareAndSwap(false, true) {
				failedAt.Store(time.Now().UnixNano())
				return nil, errors.New("the ledger is down for this one statement")
			}
			return own(ctx, o)
		}
	})
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	const n = 40
	for i := 0; i < n; i++ {
		e.starter.failPermanent(wid(fmt.Sprintf("f%d", i)))
	}
	var once sync.Once
	e.led.mu.Lock()
	e.led.markGate = func(ps []int32) {
		if slices.Contains(ps, 0) {
			once.Do(func() { e.ghostOwn(0) })
		}
	}
	e.led.mu.Unlock()
	e.produceAll(0, "f", n)
	eventually(t, 10*time.Second, failed.Load, func() string { return "r1's re-take of partition 0 never failed" })
	backoffEnds := time.Unix(0, failedAt.Load()).Add(retakeBackoff(1))
	marks0 := e.led.callCount("MarkDeadLettered")
	var worst time.Duration
	for i := 0; time.Now().Before(backoffEnds.Add(-time.Second)); i++ {
		id := fmt.Sprintf("b%d", i)
		e.produce(1, id, "v")
		t0 := time.Now()
		for len(e.starter.executionsOf(wid(id))) == 0 && time.Since(t0) < 3*time.Second {
			time.Sleep(5 * time.Millisecond)
		}
		worst = max(worst, time.Since(t0))
		time.Sleep(300 * time.Millisecond)
	}
	// Counted until just before the backoff ends: at its end every
	// record's mark is sent once more (the first refused takes the
	// partition again, the others go again under its new fence), counted
	// below with the total.
	for time.Now().Before(backoffEnds.Add(-100 * time.Millisecond)) {
		time.Sleep(10 * time.Millisecond)
	}
	inBackoff := e.led.callCount("MarkDeadLettered") - marks0
	healed := func() bool {
		for i := 0; i < n; i++ {
			if e.led.state(wid(fmt.Sprintf("f%d", i))) != stateDeadLettered {
				return false
			}
		}
		return e.atEnd()
	}
	for time.Since(backoffEnds) < 10*time.Second && !healed() {
		time.Sleep(20 * time.Millisecond)
	}
	ok, after, committed := healed(), time.Since(backoffEnds), e.committed()
	total := e.led.callCount("MarkDeadLettered") - marks0
	owned := r1.owned()
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if len(owned) != 2 {
		t.Fatalf("interleaving not reached: r1 owns %v at the end, want both (no rebalance)", owned)
	}
	if inBackoff > 60 {
		t.Errorf("%d MarkDeadLettered statements in partition 0's %v backoff, every one refused (%d records): each dead-letter mark is sent again on its own, about once a second, not together",
			inBackoff, retakeBackoff(1), n)
	}
	if total > 3*n {
		t.Errorf("%d MarkDeadLettered statements from the failed re-take until healed (%d records): more than three a record", total, n)
	}
	if worst > 1500*time.Millisecond {
		t.Errorf("a record of partition 1 took %v to start while partition 0 backed off", worst)
	}
	if !ok {
		t.Errorf("not healed within 10 s of the backoff's end: committed %v, ends %v", committed, e.ends())
	}
	if r := e.dlqReasons(); r[string(decide.ReasonTemporalPermanent)] != n {
		t.Errorf("dead letters %v, want %d temporal_permanent", r, n)
	}
	t.Logf("%d MarkDeadLettered in the backoff, %d until healed; partition 1's worst start %v; healed %v after the backoff's end", inBackoff, total, worst, after.Round(100*time.Millisecond))
}

// Adversary 31b-5 (focus d, in a claim: a gathered claim naming a
// partition that backs off and one refused for the first time). m@0 is
// started and its mark waits for mark_interval (2 s); the claimer is held
// in w@1's claim while y@0 and z@1 are produced together (one poll,
// claimed together next). A member the group dropped then takes partition
// 0 before m's mark, and r1's first re-take (Own) of it fails at once:
// partition 0 backs off retakeBackoff(1), 10 s (its fetch paused by the
// waiting mark, y@0 already polled). The claimer is let go, and the ghost
// takes partition 1 just before the claim that holds y@0 and z@1: its
// refusal names partition 0 (backing off) and partition 1 (refused for
// the first time). The test holds that z@1 starts within 3 s of that
// refusal (partition 1 asked about and taken again, not kept by
// partition 0's backoff), that r1 took partition 1 again once, and that
// y@0 and m@0 start once and partition 0 is committed to its end within 5
// s of its backoff's end. Held (passes 4 of 4, 14 s): z started 10 ms
// after the mixed refusal (9.7 s of partition 0's backoff left), partition
// 1 taken again once, healed 2 s after the backoff's end.
func TestAPartitionRefusedFirstInTheSameClaimAsOneThatBacksOffIsTakenAgainAtOnce(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	cfg.Starts.MarkInterval = 2 * time.Second
	cfg.RevokeTimeout = 3 * time.Second
	var failed atomic.Bool
	var failedAt atomic.Int64
	var retakes1 atomic.Int32
	r1 := e.startWith("r1", cfg, func(r *Router, _ *prometheus.Registry) {
		own := r.commits.own
		r.commits.own = func(ctx context.Context, o Ownership) ([]int64, error) {
			if o.Confirmed && slices.ContainsFunc(o.Parts, func(p PartitionRef) bool { return p.Partition == 1 }) {
				retakes1.Add(1)
			}
			if o.Confirmed && len(o.Parts) == 1 && o.Parts[0].Partition == 0 && failed.CompareAndSwap(false, true) {
				failedAt.Store(time.Now().UnixNano())
				return nil, errors.New("the ledger is down for this one statement")
			}
			return own(ctx, o)
		}
	})
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	holdW := make(chan struct{})
	var holdOnce sync.Once
	defer holdOnce.Do(func() { close(holdW) })
	var once0, once1 sync.Once
	var mixedAt atomic.Int64
	has := func(intents []decide.Intent, id string) bool {
		return slices.ContainsFunc(intents, func(in decide.Intent) bool { return in.WorkflowID == wid(id) })
	}
	e.led.mu.Lock()
	e.led.gate = func(intents []decide.Intent) bool {
		if has(intents, "w") {
			<-holdW
		}
		if has(intents, "y") && has(intents, "z") && failed.Load() {
			once1.Do(func() {
				mixedAt.Store(time.Now().UnixNano())
				e.ghostOwn(1)
			})
		}
		return false
	}
	e.led.markGate = func(ps []int32) {
		if slices.Contains(ps, 0) {
			once0.Do(func() { e.ghostOwn(0) })
		}
	}
	e.led.mu.Unlock()
	offM := e.produce(0, "m", "v")
	eventually(t, 10*time.Second, func() bool { return len(e.starter.executionsOf(wid("m"))) == 1 }, func() string { return "m never started" })
	e.produce(1, "w", "v")
	time.Sleep(200 * time.Millisecond) // the claimer held in w's claim
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if err := e.cl.ProduceSync(ctx, &kgo.Record{Topic: testTopic, Partition: 0, Value: value("y", "v")},
		&kgo.Record{Topic: testTopic, Partition: 1, Value: value("z", "v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cancel()
	eventually(t, 10*time.Second, failed.Load, func() string { return "r1's re-take of partition 0 never failed" })
	time.Sleep(300 * time.Millisecond)
	holdOnce.Do(func() { close(holdW) })
	eventually(t, 10*time.Second, func() bool { return mixedAt.Load() != 0 }, func() string {
		return "no claim held y@0 and z@1 together after partition 0 began to back off"
	})
	mixed := time.Unix(0, mixedAt.Load())
	backoffEnds := time.Unix(0, failedAt.Load()).Add(retakeBackoff(1))
	for time.Since(mixed) < 3*time.Second && len(e.starter.executionsOf(wid("z"))) == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	zTook, zDone, zLeft := time.Since(mixed), len(e.starter.executionsOf(wid("z"))) == 1, time.Until(backoffEnds)
	healed := func() bool {
		for _, id := range []string{"m", "y", "w", "z"} {
			if e.led.state(wid(id)) != stateStarted {
				return false
			}
		}
		return e.atEnd()
	}
	for time.Now().Before(backoffEnds.Add(5*time.Second)) && !healed() {
		time.Sleep(20 * time.Millisecond)
	}
	ok, after, committed := healed(), time.Since(backoffEnds), e.committed()
	owned := r1.owned()
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if len(owned) != 2 {
		t.Fatalf("interleaving not reached: r1 owns %v at the end, want both (no rebalance)", owned)
	}
	if !zDone {
		t.Errorf("z@1 not started within %v of the claim refused for partitions 0 (backing off, %v left) and 1 (first refusal); %d re-takes of partition 1",
			zTook.Round(100*time.Millisecond), zLeft.Round(100*time.Millisecond), retakes1.Load())
	}
	if n := retakes1.Load(); n != 1 {
		t.Errorf("r1 took partition 1 again %d times, want 1", n)
	}
	if !ok {
		t.Errorf("not healed within 5 s of partition 0's backoff's end: committed %v (m@0 at %d), ends %v", committed, offM, e.ends())
	}
	for _, id := range []string{"m", "y", "w", "z"} {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
	}
	t.Logf("z started %v after the mixed refusal (partition 0's backoff had %v left); healed %v after the backoff's end",
		zTook.Round(10*time.Millisecond), zLeft.Round(100*time.Millisecond), after.Round(100*time.Millisecond))
}

// Adversary 31c-1 (guarantee 2: a dead-letter mark is not held past its
// partition's backoff). f435198 holds a dead-letter mark sent again until
// its partition's backoff ends (waitBackoff), reading backoffUntil once
// and sleeping on a timer to that instant. But a backoff can be made
// shorter while it lasts: a refusal naming the partition together with
// one not backing off is asked about (backingOff keeps only a refusal
// whose partitions all back off), and when that question is slow
// committer.backOff(cands, true) sets every candidate's until to now +
// slowBackoff(1), 5 s, also the one that was backing off 20 s. Here:
// partition 0's first two re-takes (Own) fail (backoff 10 s, then 20 s),
// with 10 dead-lettered records and a started record m of partition 0 in
// flight; then a started mark naming m@0 and x@1 is refused (the ghost
// takes partition 1) while the coordinator is slow to answer: partition
// 0's backoff is cut to 5 s; it then is taken again (m's mark) and m
// lands. The test holds that the dead-letter marks land within 5 s of m's
// (the partition taken again, the marks would succeed). Fails 4 of 4
// (30 s): the backoff cut to 7 s after the mixed refusal, m marked 11.5 s
// before the 20 s backoff's original end, the dead-letter marks 11.5 s
// after m: asleep on waitBackoff's timer (retake.go:waitBackoff reads
// backoffUntil once; neither backOff's shorter until nor takeAgain's
// clearing wakes it) until the original end. With retakeBackoff at a
// minute, a mark that would succeed is held up to ~55 s.
func TestDeadLetterMarksLandSoonAfterTheirPartitionIsTakenAgainWhenItsBackoffWasCutShort(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	cfg.SessionTimeout = 20 * time.Second
	cfg.Starts.MarkInterval = 2 * time.Second
	cfg.RevokeTimeout = 3 * time.Second
	var fails atomic.Int32
	var failedAt atomic.Int64
	r1 := e.startWith("r1", cfg, func(r *Router, _ *prometheus.Registry) {
		own := r.commits.own
		r.commits.own = func(ctx context.Context, o Ownership) ([]int64, error) {
			if o.Confirmed && len(o.Parts) == 1 && o.Parts[0].Partition == 0 {
				if n := fails.Load(); n < 2 && fails.CompareAndSwap(n, n+1) {
					failedAt.Store(time.Now().UnixNano())
					return nil, errors.New("the ledger is down for this one statement")
				}
			}
			return own(ctx, o)
		}
	})
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	slow, described, release := e.slowDescribeGroups(3 * time.Second)
	const n = 10
	for i := 0; i < n; i++ {
		e.starter.failPermanent(wid(fmt.Sprintf("f%d", i)))
	}
	var once0, once1 sync.Once
	var mixedAt atomic.Int64
	e.led.mu.Lock()
	e.led.markGate = func(ps []int32) {
		if slices.Contains(ps, 0) {
			once0.Do(func() { e.ghostOwn(0) })
		}
		if slices.Contains(ps, 0) && slices.Contains(ps, 1) && fails.Load() == 2 {
			once1.Do(func() {
				mixedAt.Store(time.Now().UnixNano())
				slow.Store(true)
				e.ghostOwn(1)
			})
		}
	}
	e.led.mu.Unlock()
	e.produce(0, "m", "v")
	e.produceAll(0, "f", n)
	eventually(t, 15*time.Second, func() bool { return fails.Load() == 1 }, func() string { return "r1's re-take of partition 0 never failed" })
	eventually(t, 20*time.Second, func() bool { return fails.Load() == 2 }, func() string { return "r1's re-take of partition 0 never failed twice" })
	originalEnd := time.Unix(0, failedAt.Load()).Add(retakeBackoff(2))
	e.produce(1, "x", "v")
	eventually(t, 10*time.Second, func() bool { return mixedAt.Load() != 0 && described.Load() >= 1 }, func() string {
		return "no slow question after a mark naming both partitions"
	})
	time.Sleep(2500 * time.Millisecond) // the question cut at 2 s: both back off 5 s
	release()
	var until time.Time
	r1.r.commits.mu.Lock()
	if p := r1.r.commits.parts[topicPartition{testTopic, 0}]; p != nil {
		until = time.Unix(0, p.backoffUntil.Load())
	}
	r1.r.commits.mu.Unlock()
	var mAt, fAt time.Time
	fDone := func() bool {
		for i := 0; i < n; i++ {
			if e.led.state(wid(fmt.Sprintf("f%d", i))) != stateDeadLettered {
				return false
			}
		}
		return true
	}
	for time.Now().Before(originalEnd.Add(5*time.Second)) && (mAt.IsZero() || fAt.IsZero()) {
		if mAt.IsZero() && e.led.state(wid("m")) == stateStarted {
			mAt = time.Now()
		}
		if fAt.IsZero() && fDone() {
			fAt = time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
	healed := func() bool { return fDone() && e.atEnd() }
	eventually(t, 10*time.Second, healed, func() string { return fmt.Sprintf("not healed: committed %v, ends %v", e.committed(), e.ends()) })
	owned := r1.owned()
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if len(owned) != 2 {
		t.Fatalf("interleaving not reached: r1 owns %v at the end, want both (no rebalance)", owned)
	}
	if mAt.IsZero() {
		t.Fatalf("m@0 not started before the original backoff's end + 5 s")
	}
	if !until.Before(originalEnd.Add(-3 * time.Second)) {
		t.Fatalf("interleaving not reached: partition 0's backoff was not cut short (until %v, original end %v)", until, originalEnd)
	}
	if fAt.IsZero() || fAt.Sub(mAt) > 5*time.Second {
		late := "never"
		if !fAt.IsZero() {
			late = fAt.Sub(mAt).Round(100 * time.Millisecond).String()
		}
		t.Errorf("partition 0 taken again (m@0 marked) %v before its 20 s backoff's original end, but its dead-letter marks landed %s after m's: waitBackoff sleeps to the backoff's end read once, though backOff cut it to %v",
			originalEnd.Sub(mAt).Round(100*time.Millisecond), late, until.Sub(time.Unix(0, mixedAt.Load())).Round(100*time.Millisecond))
	}
	for _, id := range []string{"m", "x"} {
		if c := len(e.starter.executionsOf(wid(id))); c != 1 {
			t.Errorf("%s: %d executions, want 1", id, c)
		}
	}
	if r := e.dlqReasons(); r[string(decide.ReasonTemporalPermanent)] != n {
		t.Errorf("dead letters %v, want %d temporal_permanent", r, n)
	}
	t.Logf("backoff cut to %v after the mixed refusal; m marked %v before the original end; dead-letter marks %v after m",
		until.Sub(time.Unix(0, mixedAt.Load())).Round(100*time.Millisecond), originalEnd.Sub(mAt).Round(100*time.Millisecond), fAt.Sub(mAt).Round(100*time.Millisecond))
}

// Adversary 31c-2 (guarantee 2, a partition revoked while it backs off,
// with dead-letter marks waiting on its backoff). Both partitions carry 5
// dead-lettered records each; a member the group dropped takes each
// partition before its first dead-letter mark, and r1's first re-take
// (Own) of each fails: both back off 10 s, their dead-letter marks parked
// (f435198: the first try skipped, the next one asleep in waitBackoff).
// r2 then joins (session and rebalance timeouts 20 s, revoke_timeout 8
// s): r1 revokes one of them. Before f435198 a mark of a revoking
// partition was sent again within about a second, refused, not kept
// (backingOff keeps no revoking partition) and abandoned: the revoke
// ended at once. The test holds that r2 owns a partition within 4 s of
// joining, and that everything heals (every row dead_lettered, one dead
// letter each, committed to the ends). Fails 3 of 3 (10 s): r2 owns a
// partition 8.1 s after joining, revoke_timeout (default 10 s) to the
// millisecond; heals 1.4 s after. With f435198^'s starts.go it passes (r2
// owns a partition 200 ms after joining). Cause: markDeadLettered
// (starts.go) skips the first try of a backing-off partition and
// waitBackoff (retake.go) wakes only at the backoff's end, the ctx or the
// partition's context, which committer.revoked cancels (forget) only
// after flight.waitIdle: nothing looks at part.revoking, so the parked
// marks hold the revoke (and the group's rebalance) for revoke_timeout.
func TestARevokeOfAPartitionWhoseDeadLetterMarksWaitOnItsBackoffIsNotHeld(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	cfg.SessionTimeout = 20 * time.Second
	cfg.RebalanceTimeout = 20 * time.Second
	cfg.RevokeTimeout = 8 * time.Second
	var failed [2]atomic.Bool
	r1 := e.startWith("r1", cfg, func(r *Router, _ *prometheus.Registry) {
		own := r.commits.own
		r.commits.own = func(ctx context.Context, o Ownership) ([]int64, error) {
			if o.Confirmed && len(o.Parts) == 1 && failed[o.Parts[0].Partition].CompareAndSwap(false, true) {
				return nil, errors.New("the ledger is down for this one statement")
			}
			return own(ctx, o)
		}
	})
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	const n = 5
	for p := 0; p < 2; p++ {
		for i := 0; i < n; i++ {
			e.starter.failPermanent(wid(fmt.Sprintf("f%d-%d", p, i)))
		}
	}
	var once [2]sync.Once
	e.led.mu.Lock()
	e.led.markGate = func(ps []int32) {
		for _, p := range ps {
			once[p].Do(func() { e.ghostOwn(p) })
		}
	}
	e.led.mu.Unlock()
	e.produceAll(0, "f0-", n)
	e.produceAll(1, "f1-", n)
	eventually(t, 15*time.Second, func() bool { return failed[0].Load() && failed[1].Load() }, func() string { return "r1's re-takes never failed" })
	time.Sleep(500 * time.Millisecond)
	r2 := e.start("r2", cfg)
	tj := time.Now()
	for len(r2.owned()) == 0 && time.Since(tj) < 15*time.Second {
		time.Sleep(20 * time.Millisecond)
	}
	joinTook := time.Since(tj)
	healed := func() bool {
		for p := 0; p < 2; p++ {
			for i := 0; i < n; i++ {
				if e.led.state(wid(fmt.Sprintf("f%d-%d", p, i))) != stateDeadLettered {
					return false
				}
			}
		}
		return e.atEnd()
	}
	t0 := time.Now()
	eventually(t, 30*time.Second, healed, func() string { return fmt.Sprintf("not healed: committed %v, ends %v", e.committed(), e.ends()) })
	healTook := time.Since(t0)
	for _, rn := range []*runner{r2, r1} {
		if err := rn.stop(); err != nil {
			t.Fatal(err)
		}
	}
	if joinTook > 4*time.Second {
		t.Errorf("r2 owned no partition for %v after joining: r1's revoke of a partition backing off waited for its parked dead-letter marks (revoke_timeout %v)",
			joinTook.Round(100*time.Millisecond), cfg.RevokeTimeout)
	}
	if r := e.dlqReasons(); r[string(decide.ReasonTemporalPermanent)] < 2*n {
		t.Errorf("dead letters %v, want %d temporal_permanent at least", r, 2*n)
	}
	t.Logf("r2 owned a partition %v after joining; healed %v after", joinTook.Round(100*time.Millisecond), healTook.Round(100*time.Millisecond))
}

// Adversary 31c-3 (guarantee 3: shutdown while dead-letter marks wait on
// a backoff). 40 dead-lettered records of partition 0 whose re-take (Own)
// failed once: partition 0 backs off 10 s, every dead-letter mark parked
// (its first try skipped, the next asleep in waitBackoff). r1 is stopped
// 1 s into the backoff. The test holds that Run returns within
// drain_timeout (2 s) + 1 s, that nothing of partition 0 is committed
// past a row not dead_lettered, and (TestMain's goleak) that no parked
// goroutine is left. Held (passes 3 of 3, 2.5 s): Run returned 1.5 s
// after its cancel, nothing of partition 0 committed.
func TestARouterStoppedWhileDeadLetterMarksWaitOnTheirPartitionsBackoffReturnsInTime(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	var failed atomic.Bool
	var failedAt atomic.Int64
	r1 := e.startWith("r1", cfg, func(r *Router, _ *prometheus.Registry) {
		own := r.commits.own
		r.commits.own = func(ctx context.Context, o Ownership) ([]int64, error) {
			if o.Confirmed && len(o.Parts) == 1 && o.Parts[0].Partition == 0 && failed.CompareAndSwap(false, true) {
				failedAt.Store(time.Now().UnixNano())
				return nil, errors.New("the ledger is down for this one statement")
			}
			return own(ctx, o)
		}
	})
	eventually(t, 10*time.Second, func() bool { return len(r1.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", r1.owned()) })
	const n = 40
	for i := 0; i < n; i++ {
		e.starter.failPermanent(wid(fmt.Sprintf("f%d", i)))
	}
	var once sync.Once
	e.led.mu.Lock()
	e.led.markGate = func(ps []int32) {
		if slices.Contains(ps, 0) {
			once.Do(func() { e.ghostOwn(0) })
		}
	}
	e.led.mu.Unlock()
	offs := make([]int64, n)
	for i := 0; i < n; i++ {
		offs[i] = e.produce(0, fmt.Sprintf("f%d", i), "v")
	}
	eventually(t, 10*time.Second, failed.Load, func() string { return "r1's re-take of partition 0 never failed" })
	time.Sleep(time.Second)
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if left := time.Until(time.Unix(0, failedAt.Load()).Add(retakeBackoff(1))); left < 3*time.Second {
		t.Fatalf("interleaving not reached: the backoff had only %v left when Run returned", left)
	}
	if limit := cfg.DrainTimeout + time.Second; r1.took > limit {
		t.Errorf("Run returned %v after its cancel while partition 0's dead-letter marks waited on its backoff, want within %v", r1.took.Round(100*time.Millisecond), limit)
	}
	committed := e.committed()[0]
	for i := 0; i < n; i++ {
		if offs[i] < committed && e.led.state(wid(fmt.Sprintf("f%d", i))) != stateDeadLettered {
			t.Errorf("partition 0 committed to %d past f%d@%d, whose row is %q", committed, i, offs[i], e.led.state(wid(fmt.Sprintf("f%d", i))))
		}
	}
	t.Logf("Run returned %v after its cancel; partition 0 committed to %d", r1.took.Round(10*time.Millisecond), committed)
}

// The ledger's fence pauses a partition while its claims wait (refused.go,
// fenceHolds): its buffered records are dropped and fetched again when it
// resumes. Under kafka.fetch_max_partition_bytes of 1 byte (one batch a
// fetch, of the first partition with data) and three partitions of
// several 16 KiB batches each, late Owns of a member the group dropped
// refuse partitions 0 and 1 (three and two times): every event starts
// once and every partition is committed to its end.
func TestFencePausesUnderAOneByteFetchBoundLeaveNoRecordBehind(t *testing.T) {
	e := newTestEnv(t, 3, envOpt{})
	pr, err := kgo.NewClient(kgo.SeedBrokers(e.cluster.ListenAddrs()...), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ids []string
	for p := int32(0); p < 3; p++ {
		for b := range 6 {
			recs := make([]*kgo.Record, 8)
			for i := range recs {
				id := fmt.Sprintf("p%d-%d-%d", p, b, i)
				ids = append(ids, id)
				recs[i] = &kgo.Record{Topic: testTopic, Partition: p, Value: value(id, strings.Repeat("x", 2<<10))}
			}
			if err := pr.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	ghostDone := e.ghostOwnsBeforeClaims(map[int32]int{0: 3, 1: 2})
	cfg := e.config()
	cfg.FetchMaxPartitionBytes = 1
	cfg.MaxPollRecords = 8
	rn := e.start("r1", cfg)
	eventually(t, 20*time.Second, ghostDone, func() string { return "the ghost's Owns did not all happen" })
	e.waitCommittedToEnd(60 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
	}
}
