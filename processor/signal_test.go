package processor

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/schemas"
)

func TestParseIDTemplate(t *testing.T) {
	for _, ok := range []string{"order-{data.order_id}", "{activity_id}/{data.a.b.c}", "singleton", "x-{data.k}-{data.k}", "été-{data.ü}"} {
		if _, err := ParseIDTemplate(ok); err != nil {
			t.Errorf("ParseIDTemplate(%q): %v", ok, err)
		}
	}
	for in, want := range map[string]string{
		"":                        "empty",
		"order-{id}":              "unknown placeholder {id}",
		"order-{data}":            "unknown placeholder {data}",
		"order-{data.}":           "empty path segment",
		"order-{data.a..b}":       "empty path segment",
		"order-{data.a":           "'{' without its '}'",
		"order-{data.{a}}":        "'{' without its '}'",
		"order-}":                 "'}' without its '{'",
		"order-\t{data.a}":        "control character",
		"activity-x:{data.a}":     "activity-",
		strings.Repeat("x", 1001): "over Temporal's 1000",
	} {
		_, err := ParseIDTemplate(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseIDTemplate(%q) = %v, want an error with %q", in, err, want)
		}
	}
}

func TestIDTemplateRender(t *testing.T) {
	tm, err := ParseIDTemplate("{activity_id}/order-{data.order.id}")
	if err != nil {
		t.Fatal(err)
	}
	for data, want := range map[string]string{
		`{"order":{"id":"A-1"}}`:                   "r/order-A-1",
		`{"order":{"id":42},"x":1}`:                "r/order-42",
		`{"order":{"id":-7}}`:                      "r/order--7",
		`{"order":{"id":"ü \"q\""}}`:               `r/order-ü "q"`,
		`{"order":{"id":12345678901234567890123}}`: "r/order-12345678901234567890123",
	} {
		got, err := tm.Render("r", json.RawMessage(data))
		if err != nil || got != want {
			t.Errorf("Render(%s) = %q, %v; want %q", data, got, err, want)
		}
	}
	// Every failure names the path and is undecodable (ErrTemplate).
	for data, want := range map[string]string{
		`{"order":{}}`:               "data.order.id: missing",
		`{}`:                         "data.order.id: missing",
		`{"order":{"id":""}}`:        "empty string",
		`{"order":{"id":"a\u0007"}}`: "control character",
		`{"order":{"id":4.2}}`:       "a non-integer number is not",
		`{"order":{"id":1e3}}`:       "a non-integer number is not",
		`{"order":{"id":true}}`:      "a boolean",
		`{"order":{"id":null}}`:      "null",
		`{"order":{"id":{"a":1}}}`:   "an object",
		`{"order":"x"}`:              "order is not an object",
		`["order"]`:                  "data is not a JSON object",
		`null`:                       "data is not a JSON object",
		`"text"`:                     "data is not a JSON object",
	} {
		_, err := tm.Render("r", json.RawMessage(data))
		if !errors.Is(err, ErrTemplate) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "data.order.id") {
			t.Errorf("Render(%s) = %v, want ErrTemplate naming data.order.id with %q", data, err, want)
		}
	}
	long, err := tm.Render("r", json.RawMessage(`{"order":{"id":"`+strings.Repeat("x", 1000)+`"}}`))
	if !errors.Is(err, ErrWorkflowIDTooLong) {
		t.Errorf("a 1009-byte ID: %q, %v; want ErrWorkflowIDTooLong", long, err)
	}
}

func TestSignalRouteValidate(t *testing.T) {
	sig := func() Route {
		return Route{ID: "orders", Mode: ModeSignal, Match: Match{Type: "order.*"}, WorkflowType: "Order", TaskQueue: "q",
			WorkflowIDTemplate: "order-{data.order_id}"}
	}
	rs := Routes{sig(), {ID: "a", Match: Match{Type: "t"}, WorkflowType: "W", TaskQueue: "q"}}
	if err := rs.Validate(); err != nil {
		t.Fatal(err)
	}
	if r := rs[0]; r.Signal != schemas.DefaultSignalName || r.IDReusePolicy != ReuseAllowDuplicate || r.Key != KeyEventID || r.tmpl == nil {
		t.Errorf("signal route defaults: %+v", r)
	}
	if r := rs[1]; r.Mode != ModeStart || r.IDReusePolicy != ReuseRejectDuplicate {
		t.Errorf("start route defaults: %+v", r)
	}
	if rs[0].MayRerun() || !(&Route{Mode: ModeStart, IDReusePolicy: ReuseAllowDuplicate}).MayRerun() {
		t.Error("a signal route must never re-run a delivered event; an allow_duplicate start route may")
	}
	for want, mut := range map[string]func(*Route){
		"routes[0].mode":                         func(r *Route) { r.Mode = "push" },
		"routes[0].workflow_id_template: empty":  func(r *Route) { r.WorkflowIDTemplate = "" },
		"unknown placeholder {event}":            func(r *Route) { r.WorkflowIDTemplate = "o-{event}" },
		"routes[0].key":                          func(r *Route) { r.Key = KeyScheduledFor },
		"routes[0].definition":                   func(r *Route) { r.Definition = &schemas.ActivityDefinition{} },
		"routes[0].signal":                       func(r *Route) { r.Signal = "a\nb" },
		"routes[0].workflow_id_template: set on": func(r *Route) { r.Mode = "" },
		"routes[0].signal: set on a start route": func(r *Route) { r.Mode, r.WorkflowIDTemplate, r.Signal = ModeStart, "", "s" },
		"routes[0].id_reuse_policy":              func(r *Route) { r.IDReusePolicy = "never" },
	} {
		r := sig()
		mut(&r)
		err := Routes{r}.Validate()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
	// A signal route's explicit policy is kept.
	r := sig()
	r.IDReusePolicy = ReuseRejectDuplicate
	if rs := (Routes{r}); rs.Validate() != nil || rs[0].IDReusePolicy != ReuseRejectDuplicate {
		t.Errorf("explicit reject_duplicate on a signal route: %+v", rs[0])
	}
}

func TestDecideSignalRoute(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Brokers, cfg.Group, cfg.Topics, cfg.ResetOffset = []string{"x:1"}, "g", []string{testTopic}, "earliest"
	cfg.Routes = Routes{
		{ID: "orders", Mode: ModeSignal, Match: Match{Type: "order.*"}, WorkflowType: "Order", TaskQueue: "q",
			WorkflowIDTemplate: "order-{data.order_id}", Signal: "order_event"},
		{ID: "audit", Match: Match{Type: "order.created"}, WorkflowType: "W", TaskQueue: "q"},
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	d, err := NewDecider(cfg)
	if err != nil {
		t.Fatal(err)
	}
	decide := func(v string, hs ...kgo.RecordHeader) Decision {
		return d.Decide(&kgo.Record{Topic: testTopic, Partition: 1, Offset: 5, Value: []byte(v), Headers: hs})
	}

	dec := decide(`{"specversion":"1.0","id":"e1","type":"order.created","source":"shop","subject":"o/42","data":{"order_id":42,"total":9}}`)
	if dec.DeadLetter != "" || len(dec.Intents) != 2 {
		t.Fatalf("decision %+v", dec)
	}
	in := dec.Intents[0]
	if in.WorkflowID != "signal-orders:e1" || in.WorkflowID != DeliveryKey("orders", "e1") || in.ActivityID != "orders" ||
		in.EventID != "e1" || in.PayloadHash != dec.Event.PayloadHash || dec.Entities[0] != "order-42" {
		t.Errorf("signal intent %+v entity %q", in, dec.Entities[0])
	}
	if dec.Intents[1].WorkflowID != "activity-audit:e1" || dec.Entities[1] != "" {
		t.Errorf("the start route's intent beside it: %+v entity %q", dec.Intents[1], dec.Entities[1])
	}
	st := dec.Start(0)
	want := schemas.SignalEvent{EventID: "e1", DeliveryID: "signal-orders:e1", ActivityID: "orders", WorkflowID: "order-42",
		IDRule: "field", Type: "order.created", Source: "shop", Subject: "o/42", Data: json.RawMessage(`{"order_id":42,"total":9}`)}
	if st.Signal == nil || st.WorkflowID != "signal-orders:e1" || st.Signal.WorkflowID != "order-42" || st.Signal.Name != "order_event" ||
		st.WorkflowType != "Order" || st.TaskQueue != "q" || st.ReusePolicy != ReuseAllowDuplicate || st.EventID() != "e1" {
		t.Fatalf("signal request %+v", st)
	}
	got := st.Signal.Input
	if string(got.Data) != string(want.Data) {
		t.Errorf("signal data %s, want %s", got.Data, want.Data)
	}
	got.Data, want.Data = nil, nil
	if !jsonEqual(t, got, want) {
		t.Errorf("signal input %+v, want %+v", got, want)
	}
	if st := dec.Start(1); st.Signal != nil || st.Input.WorkflowID != "activity-audit:e1" {
		t.Errorf("start route's request %+v", st)
	}
	if rt := cfg.Routes.RouteOf("signal-orders:e1"); rt == nil || rt.ID != "orders" {
		t.Errorf("RouteOf(delivery key) = %v", rt)
	}
	if rt := cfg.Routes.RouteOf("activity-orders:e1"); rt != nil {
		t.Errorf("RouteOf(activity-orders:...) = %v; orders is a signal route", rt.ID)
	}

	// The same event with another entity field is the same delivery key:
	// the ledger sees another payload for it (a conflict), not a second
	// delivery to another entity.
	if d2 := decide(`{"specversion":"1.0","id":"e1","type":"order.paid","data":{"order_id":43}}`); d2.Intents[0].WorkflowID != in.WorkflowID ||
		d2.Intents[0].PayloadHash == in.PayloadHash || d2.Entities[0] != "order-43" {
		t.Errorf("same event ID, other data: %+v", d2.Intents)
	}

	// An event the template cannot render is undecodable, naming the
	// path; one whose entity ID is too long is invalid_id.
	for v, reason := range map[string]Reason{
		`{"specversion":"1.0","id":"e2","type":"order.paid","data":{}}`:                                              ReasonUndecodable,
		`{"specversion":"1.0","id":"e3","type":"order.paid","data":{"order_id":""}}`:                                 ReasonUndecodable,
		`{"specversion":"1.0","id":"e4","type":"order.paid","data_base64":"AAEC"}`:                                   ReasonUndecodable,
		`{"specversion":"1.0","id":"e5","type":"order.paid","data":{"order_id":1.5}}`:                                ReasonUndecodable,
		`{"specversion":"1.0","id":"e6","type":"order.paid","data":{"order_id":"` + strings.Repeat("x", 995) + `"}}`: ReasonInvalidID,
	} {
		dec := decide(v)
		if dec.DeadLetter != reason || len(dec.Intents) != 0 || reason == ReasonUndecodable && !strings.Contains(dec.Err.Error(), "data.order_id") {
			t.Errorf("%s: dead letter %q (%v), %d intents; want %q naming data.order_id", v, dec.DeadLetter, dec.Err, len(dec.Intents), reason)
		}
	}

	// Binary mode: ce_subject is read too.
	dec = decide(`{"order_id":"B"}`, kgo.RecordHeader{Key: "ce_specversion", Value: []byte("1.0")}, kgo.RecordHeader{Key: "ce_id", Value: []byte("e7")},
		kgo.RecordHeader{Key: "ce_type", Value: []byte("order.paid")}, kgo.RecordHeader{Key: "ce_subject", Value: []byte("o/B")})
	if dec.DeadLetter != "" || dec.Entities[0] != "order-B" || dec.Start(0).Signal.Input.Subject != "o/B" {
		t.Errorf("binary mode: %+v (%v)", dec.Entities, dec.Err)
	}
}

func jsonEqual(t *testing.T, a, b any) bool {
	t.Helper()
	x, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(x) == string(y)
}
