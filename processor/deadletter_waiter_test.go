package processor

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// advLedger wraps the fake ledger the start pool uses, to hold the pool
// right after a ledger call landed (the answer is back from PostgreSQL,
// the goroutine has not yet acted on it).
type advLedger struct {
	*fakeLedger
	afterDead func() // after a MarkDeadLettered that succeeded
}

func (l *advLedger) MarkDeadLettered(ctx context.Context, rows []DeadLettered) error {
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
