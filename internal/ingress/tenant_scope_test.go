package ingress

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/client"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
)

// Guards against: `routes: []` in the tokens file means "every route".
//
// parseTokens leaves Principal.routes nil ("any") when len(e.Routes) == 0,
// so an operator who writes an explicit empty list to give a tenant no
// route (or whose templating renders an empty list) gives it all of them.
// An explicit empty allow-list failing open is the wrong direction for an
// authorization list: it should start nothing (403) or be refused at load.
func TestEmptyRoutesListIsNotEveryRoute(t *testing.T) {
	e := newEnv(t, nil)
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	const file = "tokens:\n- {tenant: acme, token: acme-token-0123456789, event_types: [\"*\"], routes: []}\n"
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := LoadTokens("ingress.tokens_file", path)
	if err != nil {
		return // refused at load: fine
	}
	ts := e.server(func(o *Options) { o.Tokens = tokens })
	r := do(t, "POST", ts.URL+"/v1/events", `{"type":"order.created"}`, "Content-Type", "application/json",
		"Authorization", "Bearer acme-token-0123456789", "Idempotency-Key", `"o-1"`)
	if r.code != 403 {
		t.Errorf("a token with routes: [] starts route confirm: %d %s, want 403 (or LoadTokens refusing the file)", r.code, r.body)
	}
}

// Guards against: a tenant reads a workflow that is not its own.
//
// owns() grants tenant acme every workflow ID of the form
// activity-{route}:acme/...; but such an ID is also what an unscoped event
// with the ID "acme/..." gets: one written to Kafka directly (the Go
// client, any producer), or a replayed dead letter (processor/replay
// TestReplayKeepsTheTenant). Tenant acme then reads that event's ledger
// state, event ID and run (and result, with a run reader) through GET
// /v1/workflows, which the doc says "answers the owning tenant only".
func TestTenantCannotReadAnUnscopedWorkflow(t *testing.T) {
	e := newEnv(t, nil)
	ts := e.server(func(o *Options) { o.Tokens = writeTokens(t, tenantsFile) })
	// A direct producer's CloudEvent with the ID acme/payroll-7 (no
	// dedup-tenant header), claimed and started by a router.
	p, err := e.c.Prepare(&kgo.Record{Value: []byte(`{"salary":1}`), Headers: []kgo.RecordHeader{
		{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_id", Value: []byte("acme/payroll-7")},
		{Key: "ce_type", Value: []byte("order.created")}, {Key: "content-type", Value: []byte("application/json")}}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Event.Tenant != "" {
		t.Fatalf("tenant %q", p.Event.Tenant)
	}
	in := decide.Intent{WorkflowID: p.Targets[0].WorkflowID, ActivityID: "confirm", EventID: p.Event.ID, IDRule: string(p.Event.Rule), PayloadHash: p.Event.PayloadHash, Topic: topic}
	ctx := context.Background()
	if _, err := e.led.Claim(ctx, []decide.Intent{in}); err != nil {
		t.Fatal(err)
	}
	if err := e.led.MarkStarted(ctx, []processor.Started{{WorkflowID: in.WorkflowID, RunID: "run-payroll", Generation: 1}}); err != nil {
		t.Fatal(err)
	}
	r := do(t, "GET", ts.URL+"/v1/workflows/"+in.WorkflowID, "", "Authorization", "Bearer acme-token-0123456789")
	if r.code != 404 {
		t.Errorf("tenant acme reads %s, which an unscoped producer's event started: %d %s, want the 404 of a workflow not its own",
			in.WorkflowID, r.code, r.body)
	}
}

// Guards against: a 202 for an event whose workflow can never start.
//
// event_id.max_id_length (1..900) bounds the key a tenant sends; the
// ingress then prefixes "{tenant}/" (up to 64 bytes) and the workflow ID
// adds "activity-{route}:". With max_id_length 900, a 63-byte tenant and
// a route whose ID is a UUID (the seed contract's activity IDs), a
// CloudEvent whose id is 900 bytes gets a 1,010-byte workflow ID. Temporal
// caps workflow IDs at 1,000 characters by default (limit.maxIDLength), so
// the start is refused for good and the router dead-letters the record:
// an event answered 202 that never starts. (Without tenants the same
// config gives 946 bytes, which fits: the tenant prefix is what pushes it
// over.) Nothing checks the assembled workflow ID's length: neither the
// config validation nor Prepare.
func TestWorkflowIDOverTemporalLimitIsNot202(t *testing.T) {
	const route = "550e8400-e29b-41d4-a716-446655440000"
	e := newEnv(t, func(c *client.Config) {
		c.EventID.MaxIDLength = 900
		c.Routes = decide.Routes{{ID: route, Match: decide.Match{Type: "order.created"}, WorkflowType: "W", TaskQueue: "q"}}
	})
	tenant := "acme-corporation-" + strings.Repeat("x", eventid.MaxTenantLength-len("acme-corporation-"))
	tokens := writeTokens(t, "tokens:\n- {tenant: "+tenant+", token: acme-token-0123456789, event_types: [\"*\"], routes: [\"*\"], read_status: true}\n")
	ts := e.server(func(o *Options) { o.Tokens = tokens; o.MaxBodyBytes = 4096 })
	id := strings.Repeat("k", 900)
	body := `{"specversion":"1.0","id":"` + id + `","type":"order.created","source":"shop","data":{}}`
	r := do(t, "POST", ts.URL+"/v1/events", body, "Content-Type", "application/cloudevents+json", "Authorization", "Bearer acme-token-0123456789")
	if r.code == 202 {
		wf := r.json(t)["workflows"].([]any)[0].(map[string]any)["workflow_id"].(string)
		if len(wf) > 1000 {
			t.Errorf("202 for an event whose workflow ID is %d bytes, over Temporal's 1,000 (limit.maxIDLength): it can never start", len(wf))
		}
	}
}

// Guards against: event_types ["*"] is not "any type".
//
// The tokens file documents event_types as path.Match patterns with
// `["*"]: any`, but path.Match's '*' never matches '/', so a token with
// ["*"] is refused (403) every event type that holds a slash (URL- or
// path-like CloudEvents types, "com.example/order.created"), although a
// route matches it (routes' Match: "*" is every type, "x.*" a plain
// prefix). The two pattern languages disagree: a tenant's ["order.*"]
// refuses "order.eu/created", which route "order.*" starts.
func TestStarEventTypesIsAnyType(t *testing.T) {
	e := newEnv(t, func(c *client.Config) {
		c.Routes = decide.Routes{{ID: "all", Match: decide.Match{Type: "*"}, WorkflowType: "W", TaskQueue: "q"}}
	})
	ts := e.server(func(o *Options) { o.Tokens = writeTokens(t, tenantsFile) }) // globex: event_types ["*"]
	for _, typ := range []string{"com.example/order.created", "https://example.com/events/order"} {
		r := do(t, "POST", ts.URL+"/v1/events", `{"type":"`+typ+`"}`, "Content-Type", "application/json",
			"Authorization", "Bearer globex-token-0123456789", "Idempotency-Key", `"k-`+typ[:3]+`"`)
		if r.code != 202 {
			t.Errorf("globex (event_types [\"*\"]: any), type %q: %d %s", typ, r.code, r.body)
		}
	}
}
