package ops

import (
	"context"
	"strings"
	"testing"

	"github.com/dedupio/dedup/processor/decide"
)

// dedup explain of a signal route's delivery: the decision names the
// delivery key and the entity workflow; the delivery is found by record,
// by event ID and by its key, claimed, with the run that took the signal;
// no ledger/Temporal disagreement is judged of a delivery key (it is no
// Temporal workflow); the text says "delivery ... into workflow ...".
func TestExplainSignalRoute(t *testing.T) {
	f := newFixture(t)
	f.withRoute(decide.Route{ID: "orders", Mode: decide.ModeSignal, Match: decide.Match{Type: "order.created"},
		WorkflowIDTemplate: "order-{data.v}", WorkflowType: "Order", TaskQueue: "q"})
	tl := f.tool()
	ctx := context.Background()
	rA := f.produce(0, order("a", "1"))
	f.route(tl, rA, true)
	f.commit(0, rA.Offset+1)

	for _, q := range []Query{{Topic: topic, Partition: &rA.Partition, Offset: &rA.Offset}, {EventID: "a"}, {WorkflowID: "signal-orders:a"}} {
		ex, _, _ := tl.Explain(ctx, q)
		if got := workflowVerdicts(ex); got != "activity-confirm:a=claimed,activity-crm:a=claimed,signal-orders:a=claimed" {
			t.Fatalf("explain %+v: %s", q, got)
		}
		var m *RouteMatch
		for i := range ex.Decision.Routes {
			if ex.Decision.Routes[i].Route.ID == "orders" {
				m = &ex.Decision.Routes[i]
			}
		}
		if m == nil || m.WorkflowID != "signal-orders:a" || m.EntityWorkflowID != "order-1" || m.Route.Mode != decide.ModeSignal ||
			m.Route.Signal != "event" || m.Route.WorkflowIDTemplate != "order-{data.v}" || m.Route.IDReusePolicy != "allow_duplicate" {
			t.Fatalf("explain %+v: the signal route's match %+v", q, m)
		}
		for _, w := range ex.Workflows {
			if w.WorkflowID != "signal-orders:a" {
				continue
			}
			if w.EntityWorkflowID != "order-1" || w.Ledger == nil || w.Ledger.State != "started" || w.Ledger.RunID != "run-a" ||
				len(w.Disagreements) != 0 || w.Route == nil || w.Route.ID != "orders" {
				t.Errorf("explain %+v: the delivery %+v", q, w)
			}
		}
		var b strings.Builder
		ex.text(&b)
		for _, want := range []string{"delivery   signal-orders:a  into workflow order-1",
			`route orders (signal "event" to Order, allow_duplicate) -> delivery signal-orders:a into workflow order-1`,
			`route    orders: signal "event", workflow ID order-{data.v}, Order on q, allow_duplicate`} {
			if !strings.Contains(b.String(), want) {
				t.Errorf("explain %+v: the text has no %q:\n%s", q, want, b.String())
			}
		}
	}
}
