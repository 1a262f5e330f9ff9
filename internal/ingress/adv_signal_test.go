package ingress

import (
	"context"
	"slices"
	"testing"

	"github.com/dedupio/dedup/client"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/eventid"
)

// signalRoute is a signal route on order.updated: every event of order N
// is signalled into the entity workflow order-N.
var signalRoute = processor.Route{ID: "orders", Mode: processor.ModeSignal, Match: processor.Match{Type: "order.updated"},
	WorkflowType: "Order", TaskQueue: "q", WorkflowIDTemplate: "order-{data.order_id}"}

func withSignalRoute(c *client.Config) { c.Routes = append(slices.Clone(c.Routes), signalRoute) }

// postOrder posts a binary-mode CloudEvent order.updated of order 42 as
// token's tenant.
func postOrder(t *testing.T, url, token, id string) resp {
	t.Helper()
	return do(t, "POST", url+"/v1/events", `{"order_id":42,"total":1000}`, "Content-Type", "application/json",
		"Authorization", "Bearer "+token, "Ce-Specversion", "1.0", "Ce-Type", "order.updated", "Ce-Source", "shop", "Ce-Id", id)
}

// ADVERSARY FINDING: a tenant writes into another tenant's entity
// workflow through a signal route.
//
// The ingress scopes a tenant's event ID (@acme/a-1) and refuses tenants
// the routes whose workflow ID does not come from the event ID (key:
// scheduled_for), because there the tenant would share workflows with
// others. A signal route's workflow ID does not come from the event ID
// either: the template renders it from the event's data, which the tenant
// writes. Tenants acme and globex each send order.updated with
// data.order_id 42: both are accepted (202) and both are signalled into
// the one entity workflow order-42. Tenant acme can so append events
// (orders, payments, totals) to globex's order 42, and read nothing of it
// but change its state: a cross-tenant write. A tenant's event on a signal
// route must be refused (403, as for scheduled_for routes) or its entity
// scoped by tenant.
func TestAdvTenantSignalsAnotherTenantsEntity(t *testing.T) {
	var routes processor.Routes
	e := newEnv(t, func(c *client.Config) { withSignalRoute(c); routes = slices.Clone(c.Routes) })
	ts := e.server(func(o *Options) { o.Tokens = writeTokens(t, tenantsFile) })
	a := postOrder(t, ts.URL, "acme-token-0123456789", "a-1")
	g := postOrder(t, ts.URL, "globex-token-0123456789", "g-1")
	if a.code != 202 || g.code != 202 {
		return // a tenant refused on a signal route: fine
	}
	if err := routes.Validate(); err != nil {
		t.Fatal(err)
	}
	d, err := processor.NewDecider(processor.Config{EventID: eventid.DefaultConfig(), Routes: routes, MaxValueBytes: 1 << 20, NoRoute: "skip"})
	if err != nil {
		t.Fatal(err)
	}
	entity := map[string]string{} // tenant -> entity workflow
	for _, rec := range e.records(2) {
		dec := d.Decide(rec)
		if dec.DeadLetter != "" || len(dec.Entities) != 1 {
			t.Fatalf("decision %+v", dec)
		}
		entity[dec.Event.Tenant] = dec.Entities[0]
	}
	if entity["acme"] == entity["globex"] {
		t.Errorf("tenants acme and globex both deliver into entity workflow %q (data.order_id 42): a tenant writes into another's workflow", entity["acme"])
	}
}

// ADVERSARY FINDING: the status URL the ingress gives a tenant for its own
// signal-route event answers that tenant 404.
//
// The 202 names the delivery key signal-orders:@acme/a-1 as the event's
// workflow, with status_url /v1/workflows/signal-orders:@acme/a-1 (and
// Location). owns() only grants a tenant IDs of the form
// activity-{route}:@{tenant}/..., so the owner's GET of its own status URL
// is the "not yours" 404, even once the router delivered the event. (With
// the anonymous principal the same GET is 200.) Either owns() reads
// delivery keys too, or the 202 must not hand out a URL that cannot work.
func TestAdvTenantCannotReadItsSignalDelivery(t *testing.T) {
	e := newEnv(t, withSignalRoute)
	ts := e.server(func(o *Options) { o.Tokens = writeTokens(t, tenantsFile) })
	a := postOrder(t, ts.URL, "acme-token-0123456789", "a-1")
	if a.code != 202 {
		t.Skipf("refused: %d %s", a.code, a.body)
	}
	ws, _ := a.json(t)["workflows"].([]any)
	if len(ws) != 1 {
		t.Fatalf("202 %s", a.body)
	}
	w := ws[0].(map[string]any)
	key, statusURL := w["workflow_id"].(string), w["status_url"].(string)
	if key != processor.DeliveryKey("orders", "@acme/a-1") {
		t.Fatalf("workflow_id %q", key)
	}
	// The router delivered it: its row is started.
	rec := e.records(1)[0]
	p, err := e.c.Prepare(rec)
	if err != nil {
		t.Fatal(err)
	}
	in := processor.Intent{WorkflowID: key, ActivityID: "orders", EventID: p.Event.ID, IDRule: string(p.Event.Rule), PayloadHash: p.Event.PayloadHash, Topic: topic}
	ctx := context.Background()
	if _, err := e.led.Claim(ctx, []processor.Intent{in}); err != nil {
		t.Fatal(err)
	}
	if err := e.led.MarkStarted(ctx, []processor.Started{{WorkflowID: key, RunID: "run-order-42", Generation: 1}}); err != nil {
		t.Fatal(err)
	}
	r := do(t, "GET", ts.URL+statusURL, "", "Authorization", "Bearer acme-token-0123456789")
	if r.code != 200 {
		t.Errorf("tenant acme GETs the status_url of its own delivered event (%s): %d %s", statusURL, r.code, r.body)
	}
}
