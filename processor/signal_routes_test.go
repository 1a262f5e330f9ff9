package processor

import (
	"fmt"
	"testing"
	"time"

	"github.com/dedupio/dedup/processor/decide"
)

// Guards against: a signal route's template can render an entity
// workflow ID inside a start route's ID space (activity-{route}:{key}).
//
// ParseIDTemplate refuses a template whose literal text starts with
// "activity-", but not one that starts with a placeholder: with
// "{data.ref}" (or "{data.kind}-{data.id}", ...) the event's data picks
// the whole ID, and Render never checks what it rendered. An event with
// data.ref = "activity-payments:p9" is signalled with start into the
// workflow ID that route payments owns for event p9: SignalWithStart
// creates a Ref workflow there (or, USE_EXISTING, signals an open Pay run
// with a signal it never asked for). When event p9 then arrives, its start
// is "already started" (conflict policy FAIL), which the router counts as
// started: the ledger says p9 started, with the Ref run, and no Pay
// workflow ever runs. The event's author, not the operator, chooses the
// workflow ID: whoever can produce to the topic (a tenant through the
// ingress) can pre-empt any start route's workflow. Rendered IDs starting
// with activity- (dedup's own prefix) should be dead-lettered (invalid_id)
// as the literal prefix is refused at load.
func TestSignalTemplateCannotRenderIntoStartRouteIDs(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	cfg := e.config()
	cfg.Routes = decide.Routes{
		{ID: "payments", Match: decide.Match{Type: "payment.made"}, WorkflowType: "Pay", TaskQueue: "q"},
		{ID: "refs", Mode: decide.ModeSignal, Match: decide.Match{Type: "ref.added"}, WorkflowType: "Ref", TaskQueue: "q",
			WorkflowIDTemplate: "{data.ref}"},
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the config is accepted (the finding needs it to be): %v", err)
	}
	target := decide.WorkflowID("payments", "p9") // activity-payments:p9
	// The signal event first (the fake Temporal cannot signal into a
	// start route's run, which has no signal request IDs: the reverse
	// order is the "unasked signal into an open Pay run" case).
	rn := e.start("r1", cfg)
	e.produceRaw(0, fmt.Appendf(nil, `{"specversion":"1.0","id":"x1","type":"ref.added","data":{"ref":%q}}`, target))
	e.waitCommittedToEnd(10 * time.Second)
	e.produceRaw(0, []byte(`{"specversion":"1.0","id":"p9","type":"payment.made","data":{"amount":100}}`))
	e.waitCommittedToEnd(10 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	for _, x := range e.starter.executionsOf(target) {
		if x.req.Signal != nil || x.req.WorkflowType != "Pay" {
			t.Errorf("%s (route payments' workflow for event p9) has a run %s of type %s made by a signal route's delivery %s; "+
				"the event's data chose another route's workflow ID", target, x.runID, x.req.WorkflowType, x.req.WorkflowID)
		}
	}
	run, _ := e.led.row(target)
	if st := e.led.state(target); st == stateStarted {
		for _, x := range e.starter.executionsOf(target) {
			if x.runID == run && x.req.WorkflowType != "Pay" {
				t.Errorf("the ledger marks %s started with run %s, a %s workflow: payment p9 was never started", target, run, x.req.WorkflowType)
			}
		}
	}
}

// Guards against: two signal routes may name one entity workflow with
// different workflow types (and signal names), and the config is
// accepted.
//
// Routes orders (type Order, signal "event") and audit (type Audit,
// signal "audit") both render order-{data.order_id}. Whichever event
// comes first starts order-42 with its type; every delivery of the other
// route is SignalWithStart into that open run (USE_EXISTING: the type in
// the request is ignored for an open run), under a signal name the running
// workflow does not read: Temporal accepts it, the ledger marks it
// started, and the event is silently lost (dropped at the next
// continue-as-new or close). Identical templates on two signal routes with
// different workflow types or signal names are detectable at load and
// should be a config error naming both routes.
func TestTwoSignalRoutesOnOneEntityWithTwoTypesAreRefused(t *testing.T) {
	rs := decide.Routes{
		{ID: "orders", Mode: decide.ModeSignal, Match: decide.Match{Type: "order.*"}, WorkflowType: "Order", TaskQueue: "q",
			WorkflowIDTemplate: "order-{data.order_id}"},
		{ID: "audit", Mode: decide.ModeSignal, Match: decide.Match{Type: "order.*"}, WorkflowType: "Audit", TaskQueue: "q",
			WorkflowIDTemplate: "order-{data.order_id}", Signal: "audit"},
	}
	if err := rs.Validate(); err == nil {
		t.Errorf("routes orders (Order, signal event) and audit (Audit, signal audit) both signal order-{data.order_id}: accepted; " +
			"every delivery of the second into the first's run is a signal nobody reads, marked delivered")
	}
}
