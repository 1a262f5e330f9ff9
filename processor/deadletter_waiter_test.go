package processor

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupio/dedup/processor/decide"
)

// advLedger wraps the fake ledger the start pool uses, to hold the pool
// right after a ledger call landed (the answer is back from PostgreSQL,
// the goroutine has not yet acted on it).
type advLedger struct {
	*fakeLedger
	afterDead  func() // after a MarkDeadLettered that succeeded
	beforeDead func() // before each MarkDeadLettered reaches the ledger
}

func (l *advLedger) MarkDeadLettered(ctx context.Context, rows []DeadLettered) error {
	if l.beforeDead != nil {
		l.beforeDead()
	}
	err := l.fakeLedger.MarkDeadLettered(ctx, rows)
	if err == nil && l.afterDead != nil {
		l.afterDead()
	}
	return err
}

// A copy claimed after the owner's MarkDeadLettered landed, but before the
// owner's job left the in-flight map, re-claims the dead_lettered row (it
// is pending again: "a later claim of the same payload re-claims them"),
// becomes a waiter of the dying job, and is finished ok with it: its
// offset is committed while its row is pending with no owner, no run and
// no dead letter of its own.
//
// Steps: (1) x@p0: Temporal refuses for good; the dead letter is written
// and MarkDeadLettered lands (row dead_lettered); the worker is held just
// after. (2) x@p1 is polled and claimed: the ledger re-claims the row
// (pending, VerdictRedrive); submit finds the dying job in `starting` and
// makes x@p1 its waiter. (3) The worker goes on: done(j, true) ends the
// owner and the waiter ok. (4) Both offsets are committed; the row is
// pending.
//
// Fixed: the job leaves the in-flight map before its MarkDeadLettered, so
// x@p1 starts on its own (refused for good too: its own dead letter, the
// row dead_lettered again).
func TestWaiterJoiningAfterMarkDeadLetteredIsNotCommittedWithAPendingRow(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	w := wid("x")
	e.starter.failPermanent(w)
	landed := make(chan struct{})
	hold := make(chan struct{})
	var once sync.Once
	e.produce(0, "x", "v")
	rn := e.startWith("r1", e.config(), func(r *Router, _ *prometheus.Registry) {
		r.starts.ledger = &advLedger{fakeLedger: e.led, afterDead: func() {
			once.Do(func() {
				close(landed)
				<-hold
			})
		}}
	})
	select {
	case <-landed:
	case <-time.After(10 * time.Second):
		close(hold)
		t.Fatal("MarkDeadLettered never landed")
	}
	if st := e.led.state(w); st != stateDeadLettered {
		close(hold)
		t.Fatalf("row %q after MarkDeadLettered, want dead_lettered", st)
	}
	off1 := e.produce(1, "x", "v")
	// x@p1 is claimed while the owner's worker is held: the row is
	// pending again. (Before the fix x@p1 then waited on the dying job.)
	eventually(t, 10*time.Second, func() bool { return len(e.led.claimLog()) >= 2 }, func() string {
		close(hold)
		return fmt.Sprintf("x@p1 was never claimed (waiters %d, row %q)", waitersOf(rn.r, w), e.led.state(w))
	})
	close(hold)
	e.waitCommittedToEnd(10 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	st := e.led.state(w)
	var own bool
	for _, dl := range e.dlq.recorded() {
		if dl.Partition == 1 && dl.Offset == off1 {
			own = true
		}
	}
	runs := len(e.starter.executionsOf(w))
	if st == statePending || (!own && runs == 0 && st != stateDeadLettered) {
		t.Fatalf("x@p1 (offset %d) committed while its row is %q with no owner: runs %d, its own dead letter %v, Temporal start calls %d",
			off1, st, runs, own, e.starter.callCount(w))
	}
}

// A mark that lands on a dead_lettered row changes nothing (MarkStarted
// moves pending rows only) and reports no error, so it does not say that
// the row is started. A copy whose claim then re-claims that row from
// dead_lettered (pending again, VerdictRedrive) owns it: it must start it
// (Temporal answers with the run the mark was for) and mark it, not finish
// as a duplicate of that mark, which would commit its offset past a row
// left pending with no owner (the model's D and E2).
//
// Steps: (1) x@p0: Temporal refuses for good; the dead letter is written,
// the job leaves the in-flight map, and its MarkDeadLettered is held
// before it lands. (2) x@p1 is claimed meanwhile: the row is pending
// (VerdictRedrive), no job in flight: x@p1 owns a start of its own, held
// in Temporal, which by now takes the workflow (the refusal was lifted: an
// entity reopened, a namespace restored). (3) The MarkDeadLettered lands:
// the row is dead_lettered, x@p0 is committed. (4) x@p0#2 is polled; its
// claim has begun (claimBegins) and is on its way to the ledger when x@p1's
// start is answered and marked: the mark finds the row dead_lettered and
// changes nothing, and x@p1 leaves the pool ok while the claim is in
// progress. (5) The claim re-claims the row (pending, VerdictRedrive).
// The copy must own a start; at 75a60b5 it finds the workflow in
// startPool.marked and finishes as a duplicate: the row stays pending.
func TestACopyThatReclaimsADeadLetteredRowIsNotADuplicateOfAMarkThatFoundItDeadLettered(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	w := wid("x")
	e.starter.failPermanent(w)
	deadEntered, deadHold := make(chan struct{}), make(chan struct{})
	var deadOnce sync.Once
	var holdDead sync.Once
	letDead := func() { holdDead.Do(func() { close(deadHold) }) }
	defer letDead()
	e.produce(0, "x", "v")
	rn := e.startWith("r1", e.config(), func(r *Router, _ *prometheus.Registry) {
		r.starts.ledger = &advLedger{fakeLedger: e.led, beforeDead: func() {
			deadOnce.Do(func() {
				close(deadEntered)
				<-deadHold
			})
		}}
	})
	select {
	case <-deadEntered:
	case <-time.After(10 * time.Second):
		t.Fatal("x@p0 was never dead-lettered")
	}
	// (2) x@p1 owns a start of its own, held in Temporal.
	release := e.starter.block(w)
	defer release()
	e.produce(1, "x", "v")
	eventually(t, 10*time.Second, func() bool { return e.starter.heldCount(w) == 1 },
		func() string { return fmt.Sprintf("x@p1's start not in flight (row %q)", e.led.state(w)) })
	e.starter.allowStarts(w)
	// (3) The dead letter's mark lands.
	letDead()
	eventually(t, 10*time.Second, func() bool { return e.led.state(w) == stateDeadLettered && e.committed()[0] == 1 },
		func() string { return fmt.Sprintf("row %q, committed %v", e.led.state(w), e.committed()) })
	// (4) x@p0#2's claim is held on its way to the ledger while x@p1's
	// start is answered, marked (on the dead_lettered row) and leaves the
	// pool.
	claimEntered, claimHold := make(chan struct{}), make(chan struct{})
	var claimOnce sync.Once
	var holdClaim sync.Once
	letClaim := func() { holdClaim.Do(func() { close(claimHold) }) }
	defer letClaim()
	e.led.mu.Lock()
	e.led.gate = func(intents []decide.Intent) bool {
		for _, in := range intents {
			if in.WorkflowID == w {
				claimOnce.Do(func() {
					close(claimEntered)
					<-claimHold
				})
			}
		}
		return false
	}
	e.led.mu.Unlock()
	off2 := e.produce(0, "x", "v")
	select {
	case <-claimEntered:
	case <-time.After(10 * time.Second):
		t.Fatal("x@p0#2 was never claimed")
	}
	marks := e.led.callCount("MarkStarted")
	release()
	eventually(t, 10*time.Second, func() bool {
		return e.led.callCount("MarkStarted") > marks && waitersOf(rn.r, w) == -1 && e.committed()[1] == 1
	}, func() string {
		return fmt.Sprintf("x@p1's start not marked and out of the pool (MarkStarted calls %d, waiters %d, committed %v)",
			e.led.callCount("MarkStarted"), waitersOf(rn.r, w), e.committed())
	})
	if st := e.led.state(w); st != stateDeadLettered {
		t.Fatalf("row %q after x@p1's mark, want dead_lettered (the mark changed nothing)", st)
	}
	// (5) The claim re-claims the row.
	letClaim()
	e.waitCommittedToEnd(10 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if st := e.led.state(w); st == statePending {
		t.Fatalf("x@p0#2 (offset %d) committed while the row it re-claimed is %q with no owner: Temporal start calls %d, MarkStarted calls %d",
			off2, st, e.starter.callCount(w), e.led.callCount("MarkStarted"))
	}
}
