package ingress

import (
	"slices"
	"strings"
	"testing"

	"github.com/dedupio/dedup/client"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
)

// signalRoute is a signal route on order.updated: every event of order N
// is signalled into the entity workflow order-N.
var signalRoute = decide.Route{ID: "orders", Mode: decide.ModeSignal, Match: decide.Match{Type: "order.updated"},
	WorkflowType: "Order", TaskQueue: "q", WorkflowIDTemplate: "order-{data.order_id}"}

func withSignalRoute(c *client.Config) { c.Routes = append(slices.Clone(c.Routes), signalRoute) }

// postOrder posts a binary-mode CloudEvent order.updated of order 42 as
// token's tenant.
func postOrder(t *testing.T, url, token, id string) resp {
	t.Helper()
	return do(t, "POST", url+"/v1/events", `{"order_id":42,"total":1000}`, "Content-Type", "application/json",
		"Authorization", "Bearer "+token, "Ce-Specversion", "1.0", "Ce-Type", "order.updated", "Ce-Source", "shop", "Ce-Id", id)
}

// Guards against: a tenant writes into another tenant's entity
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
func TestTenantCannotSignalAnotherTenantsEntity(t *testing.T) {
	var routes decide.Routes
	e := newEnv(t, func(c *client.Config) { withSignalRoute(c); routes = slices.Clone(c.Routes) })
	ts := e.server(func(o *Options) { o.Tokens = writeTokens(t, tenantsFile) })
	a := postOrder(t, ts.URL, "acme-token-0123456789", "a-1")
	g := postOrder(t, ts.URL, "globex-token-0123456789", "g-1")
	if a.code == 403 && g.code == 403 && a.json(t)["reason"] == "forbidden" {
		return // fixed: a tenant is refused on a signal route
	}
	if a.code != 202 || g.code != 202 {
		t.Fatalf("acme %d %s, globex %d %s", a.code, a.body, g.code, g.body)
	}
	if err := routes.Validate(); err != nil {
		t.Fatal(err)
	}
	d, err := decide.NewDecider(decide.Config{EventID: eventid.DefaultConfig(), Routes: routes, MaxValueBytes: 1 << 20, NoRoute: "skip"})
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

// Guards against: the status URL the ingress gave a
// tenant for its own signal-route event answered that tenant 404 (the 202
// named the delivery key signal-orders:@acme/a-1, which owns() does not
// grant). Tenants are now refused on signal routes (403, as the test above
// shows), so no tenant gets such a URL: checked here.
func TestTenantGetsNoSignalDeliveryStatusURL(t *testing.T) {
	e := newEnv(t, withSignalRoute)
	ts := e.server(func(o *Options) { o.Tokens = writeTokens(t, tenantsFile) })
	a := postOrder(t, ts.URL, "acme-token-0123456789", "a-1")
	if a.code != 403 || a.header.Get("Location") != "" || strings.Contains(string(a.body), "status_url") {
		t.Errorf("tenant acme on a signal route: %d %s, want 403 and no status URL", a.code, a.body)
	}
	if n := e.written(); n != 0 {
		t.Errorf("%d records written for a refused request", n)
	}
}
