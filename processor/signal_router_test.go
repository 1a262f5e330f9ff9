package processor

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor/decide"
)

// signalConfig is the env's config with one signal route: order.* events
// go to the entity workflow order-{data.order_id}.
func (e *testEnv) signalConfig(policy decide.ReusePolicy) Config {
	cfg := e.config()
	cfg.Routes = decide.Routes{{ID: "orders", Mode: decide.ModeSignal, Match: decide.Match{Type: "order.*"}, WorkflowType: "Order", TaskQueue: "q",
		WorkflowIDTemplate: "order-{data.order_id}", IDReusePolicy: policy}}
	return cfg
}

// orderEvent is event id of order order with payload v.
func orderEvent(id, order, v string) []byte {
	return fmt.Appendf(nil, `{"specversion":"1.0","id":%q,"type":"order.updated","source":"shop","data":{"order_id":%q,"v":%q}}`, id, order, v)
}

// N events for K entities, every one sent twice (on both partitions, so
// copies race): each entity workflow has one run, which received each of
// its events exactly once; every delivery key is started with that run;
// no duplicate asked Temporal anything; a copy with another payload is a
// conflict, not a second signal.
func TestSignalRouteDeliversEachEventOnce(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.signalConfig("")
	const n, k = 24, 3
	want := map[string][]string{}
	for i := range n {
		id, order := fmt.Sprintf("e%d", i), fmt.Sprintf("o%d", i%k)
		e.produceRaw(0, orderEvent(id, order, "v"))
		e.produceRaw(1, orderEvent(id, order, "v"))
		want["order-"+order] = append(want["order-"+order], id)
	}
	rn := e.start("r1", cfg)
	e.waitCommittedToEnd(10 * time.Second)

	for entity, ids := range want {
		runs := e.starter.signalsOf(entity)
		if len(runs) != 1 {
			t.Fatalf("%s: %d runs, want 1", entity, len(runs))
		}
		got := slices.Clone(runs[0])
		slices.Sort(got)
		slices.Sort(ids)
		if !slices.Equal(got, ids) {
			t.Errorf("%s received %v, want each of %v once", entity, runs[0], ids)
		}
	}
	for i := range n {
		key := decide.DeliveryKey("orders", fmt.Sprintf("e%d", i))
		run, _ := e.led.row(key)
		entity := fmt.Sprintf("order-o%d", i%k)
		if st := e.led.state(key); st != stateStarted || run != e.starter.executionsOf(entity)[0].runID {
			t.Errorf("%s: ledger %q run %q, want started with %s's run", key, st, run, entity)
		}
		if c := e.starter.lastRunCount(key); c != 0 {
			t.Errorf("%s: %d LastRun calls; a signal route never re-checks a delivered event", key, c)
		}
	}
	if c := len(e.starter.swsCalls()); c != n {
		t.Errorf("%d SignalWithStart calls, want %d (one per event: copies wait on the delivery in flight or are duplicates)", c, n)
	}
	count := func(result string) float64 {
		var m dto.Metric
		if err := rn.r.m.signals.WithLabelValues(result).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	started, signaled := count("started"), count("signaled")
	if started != k || signaled != n-k {
		t.Errorf("dedup_signals_delivered_total started %v signaled %v, want %d and %d", started, signaled, k, n-k)
	}

	// A copy of e0 with another payload, then another whose data names
	// another order: both conflicts of signal-orders:e0.
	e.produceRaw(0, orderEvent("e0", "o0", "other"))
	e.produceRaw(1, orderEvent("e0", "o1", "v"))
	e.waitCommittedToEnd(10 * time.Second)
	if got := e.dlqReasons(); got[string(decide.ReasonConflict)] != 2 || len(got) != 1 {
		t.Errorf("dead letters %v, want 2 conflicts", got)
	}
	if c := len(e.starter.swsCalls()); c != n {
		t.Errorf("%d SignalWithStart calls after the conflicts, want still %d", c, n)
	}
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
}

// A crash between the signal and the mark leaves the delivery's row
// pending; the redelivered record re-drives it, and SignalWithStart is
// sent again with the same request ID: the run recorded it with the first
// signal, so it is not signalled twice. The row ends started with that run.
// If the entity continued as new in between, the new run has no record of
// the request ID and receives the event again: the case the workflow
// covers by deduplicating by event ID (docs/signals.md).
func TestSignalRedriveIsNotSignalledTwice(t *testing.T) {
	t.Run("same run", func(t *testing.T) { testSignalRedrive(t, false) })
	t.Run("continued as new", func(t *testing.T) { testSignalRedrive(t, true) })
}

func testSignalRedrive(t *testing.T, continued bool) {
	e := newTestEnv(t, 1, envOpt{})
	cfg := e.signalConfig("")
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	d, err := decide.NewDecider(cfg.Decide())
	if err != nil {
		t.Fatal(err)
	}
	raw := orderEvent("e1", "o1", "v")
	dec := d.Decide(&kgo.Record{Topic: testTopic, Value: raw})
	key := dec.Intents[0].WorkflowID
	// What the crashed router did: claimed, then signalled, not marked.
	e.led.seed(key, statePending, dec.Intents[0].PayloadHash)
	if _, err := e.starter.Start(context.Background(), dec.Start(0)); err != nil {
		t.Fatal(err)
	}
	if continued {
		e.starter.continueAsNew("order-o1")
	}

	e.produceRaw(0, raw)
	rn := e.start("r1", cfg)
	e.waitCommittedToEnd(10 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	if c := len(e.starter.swsCalls()); c != 2 {
		t.Errorf("%d SignalWithStart calls, want 2 (the crashed router's and the re-drive)", c)
	}
	got := e.starter.signalsOf("order-o1")
	runs := e.starter.executionsOf("order-o1")
	if !continued && (len(got) != 1 || !slices.Equal(got[0], []string{"e1"})) {
		t.Errorf("order-o1 received %v, want one run with e1 once", got)
	}
	if continued && (len(got) != 2 || !slices.Equal(got[0], []string{"e1"}) || !slices.Equal(got[1], []string{"e1"})) {
		t.Errorf("order-o1 received %v, want e1 in the first run and again in the run it continued as", got)
	}
	if run, _ := e.led.row(key); e.led.state(key) != stateStarted || run != runs[len(runs)-1].runID {
		t.Errorf("ledger %q run %q, want started with the entity's run that has the re-drive's answer", e.led.state(key), run)
	}
}

// An event for an entity whose run closed: under allow_duplicate (the
// signal routes' default) it starts the entity's next run; under
// reject_duplicate it cannot be delivered and is dead-lettered
// (temporal_permanent), its row dead_lettered. Neither asks LastRun.
func TestSignalToAClosedEntity(t *testing.T) {
	for _, policy := range []decide.ReusePolicy{"", decide.ReuseRejectDuplicate} {
		name := string(policy)
		if name == "" {
			name = "default_allow_duplicate"
		}
		t.Run(name, func(t *testing.T) {
			e := newTestEnv(t, 1, envOpt{})
			cfg := e.signalConfig(policy)
			e.produceRaw(0, orderEvent("e1", "o1", "v"))
			rn := e.start("r1", cfg)
			e.waitCommittedToEnd(10 * time.Second)
			e.starter.complete("order-o1")
			e.produceRaw(0, orderEvent("e2", "o1", "v"))
			e.produceRaw(0, orderEvent("e1", "o1", "v")) // a duplicate: never delivered again
			e.waitCommittedToEnd(10 * time.Second)
			if err := rn.stop(); err != nil {
				t.Fatal(err)
			}
			got := e.starter.signalsOf("order-o1")
			key2 := decide.DeliveryKey("orders", "e2")
			if policy == "" {
				if len(got) != 2 || !slices.Equal(got[0], []string{"e1"}) || !slices.Equal(got[1], []string{"e2"}) {
					t.Errorf("runs received %v, want [e1] then a new run [e2]", got)
				}
				if e.led.state(key2) != stateStarted || len(e.dlqReasons()) != 0 {
					t.Errorf("e2: ledger %q, dead letters %v", e.led.state(key2), e.dlqReasons())
				}
			} else {
				if len(got) != 1 || !slices.Equal(got[0], []string{"e1"}) {
					t.Errorf("runs received %v, want [e1] only", got)
				}
				if e.led.state(key2) != stateDeadLettered || e.dlqReasons()[string(decide.ReasonTemporalPermanent)] != 1 {
					t.Errorf("e2: ledger %q, dead letters %v; want dead_lettered, one temporal_permanent", e.led.state(key2), e.dlqReasons())
				}
			}
			if c := e.starter.lastRunCount(decide.DeliveryKey("orders", "e1")) + e.starter.lastRunCount("order-o1"); c != 0 {
				t.Errorf("%d LastRun calls", c)
			}
		})
	}
}

// markHeldLedger holds the start pool's first MarkStarted of wid on its
// way to the ledger (begun, the statement not landed): a mark in flight
// while another claim reads the row.
type markHeldLedger struct {
	*fakeLedger
	wid     string
	entered chan struct{}
	hold    chan struct{}
	once    sync.Once
}

func (l *markHeldLedger) MarkStarted(ctx context.Context, started []Started) error {
	for _, s := range started {
		if s.WorkflowID == l.wid {
			l.once.Do(func() {
				close(l.entered)
				<-l.hold
			})
		}
	}
	return l.fakeLedger.MarkStarted(ctx, started)
}

// A copy of a delivery whose claim read the row pending while the first
// copy's SignalWithStart was answered and its mark was in flight (begun,
// not landed) is a copy of the delivery in flight, exactly as one whose
// turn came before the mark landed: had its turn come while the job was
// still in the pool it would have waited on it, and Temporal would have
// heard of the event once. Its turn comes after the mark landed and the
// job left the pool (the claimer descheduled between the answer and the
// dispatch): at 18f1236 it is not in startPool.marked (the mark began
// before the answer), so it owns a second SignalWithStart of the same
// delivery key. The entity continued as new in between (the new run has
// no request IDs), so the event reaches the entity twice, with no crash,
// no revoke and no lost answer (docs/signals.md, "When can an event reach
// an entity twice?": only then). The change's own motivation
// (TestSignalRouteDeliversEachEventOnce's second SignalWithStart) with
// the mark's round trip overlapping the claim's.
func TestACopyThatReadTheRowPendingWhileItsDeliverysMarkWasInFlightIsNotDeliveredAgain(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.signalConfig("")
	key, entity := decide.DeliveryKey("orders", "e1"), "order-o1"
	raw := orderEvent("e1", "o1", "v")
	ml := &markHeldLedger{fakeLedger: e.led, wid: key, entered: make(chan struct{}), hold: make(chan struct{})}
	var letMark sync.Once
	releaseMark := func() { letMark.Do(func() { close(ml.hold) }) }
	defer releaseMark()
	held := false
	var rn *runner
	e.produceRaw(0, raw)
	rn = e.startWith("r1", cfg, func(r *Router, _ *prometheus.Registry) {
		r.starts.ledger = ml
		r.claims.hooks.AfterClaim = func() {
			claims := e.led.claimLog()
			if last := claims[len(claims)-1]; len(last) != 1 || last[0].Partition != 1 {
				return
			}
			// The second copy's claim read the row pending, with the first
			// copy's mark in flight.
			if st := e.led.state(key); st != statePending {
				t.Errorf("the second copy's claim read %q, want pending", st)
			}
			held = true
			releaseMark()
			eventually(t, 10*time.Second, func() bool { return waitersOf(rn.r, key) == -1 && e.led.state(key) == stateStarted },
				func() string { return "the first copy's delivery is not marked and out of the start pool" })
			e.starter.continueAsNew(entity)
		}
	})
	select {
	case <-ml.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first copy's delivery was never marked")
	}
	e.produceRaw(1, raw)
	e.waitCommittedToEnd(10 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	if !held {
		t.Fatal("the claimer was never held: the case did not happen")
	}
	var got []string
	for _, run := range e.starter.signalsOf(entity) {
		got = append(got, run...)
	}
	if c := len(e.starter.swsCalls()); c != 1 || len(got) != 1 {
		t.Errorf("SignalWithStart called %d times for %s; %s received %v (runs %v), want e1 once, one call",
			c, key, entity, got, e.starter.signalsOf(entity))
	}
}

// markLostAnswerLedger holds the start pool's first MarkStarted of wid
// like markHeldLedger, then writes it and loses its answer (a transient
// error after the commit: the connection dropped before the reply). The
// pool's retry then finds the row started already.
type markLostAnswerLedger struct {
	*fakeLedger
	wid     string
	entered chan struct{}
	hold    chan struct{}
	once    sync.Once
}

func (l *markLostAnswerLedger) MarkStarted(ctx context.Context, started []Started) error {
	lost := false
	for _, s := range started {
		if s.WorkflowID == l.wid {
			l.once.Do(func() {
				close(l.entered)
				<-l.hold
				lost = true
			})
		}
	}
	err := l.fakeLedger.MarkStarted(ctx, started)
	if lost && err == nil {
		return errTransient
	}
	return err
}

// The same case as
// TestACopyThatReadTheRowPendingWhileItsDeliverysMarkWasInFlightIsNotDeliveredAgain,
// with the first copy's mark landing but its answer lost (a transient
// error after the commit), which the marker's retry (health.retry) is
// there for: the retry finds the row started and moves nothing. At
// d34cb2d its answer (Moved) then said false although the start's mark
// did move the row after the second copy's claim read it pending, so the
// copy was not ended as the delivery's waiter (startPool.marked), owned a
// second SignalWithStart of the same delivery key, and the entity, which
// continued as new in between, received the event twice. Recorded says
// the row is started at the mark's generation: the copy waits.
func TestACopyThatReadTheRowPendingIsNotDeliveredAgainWhenItsDeliverysMarkAnswerWasLost(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.signalConfig("")
	key, entity := decide.DeliveryKey("orders", "e1"), "order-o1"
	raw := orderEvent("e1", "o1", "v")
	ml := &markLostAnswerLedger{fakeLedger: e.led, wid: key, entered: make(chan struct{}), hold: make(chan struct{})}
	var letMark sync.Once
	releaseMark := func() { letMark.Do(func() { close(ml.hold) }) }
	defer releaseMark()
	held := false
	var rn *runner
	e.produceRaw(0, raw)
	rn = e.startWith("r1", cfg, func(r *Router, _ *prometheus.Registry) {
		r.starts.ledger = ml
		r.claims.hooks.AfterClaim = func() {
			claims := e.led.claimLog()
			if last := claims[len(claims)-1]; len(last) != 1 || last[0].Partition != 1 {
				return
			}
			if st := e.led.state(key); st != statePending {
				t.Errorf("the second copy's claim read %q, want pending", st)
			}
			held = true
			releaseMark()
			eventually(t, 10*time.Second, func() bool { return waitersOf(rn.r, key) == -1 && e.led.state(key) == stateStarted },
				func() string { return "the first copy's delivery is not marked and out of the start pool" })
			e.starter.continueAsNew(entity)
		}
	})
	select {
	case <-ml.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first copy's delivery was never marked")
	}
	e.produceRaw(1, raw)
	e.waitCommittedToEnd(10 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	if !held {
		t.Fatal("the claimer was never held: the case did not happen")
	}
	var got []string
	for _, run := range e.starter.signalsOf(entity) {
		got = append(got, run...)
	}
	if c := len(e.starter.swsCalls()); c != 1 || len(got) != 1 {
		t.Errorf("SignalWithStart called %d times for %s; %s received %v (runs %v), want e1 once, one call",
			c, key, entity, got, e.starter.signalsOf(entity))
	}
}
