package processor

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
)

func TestDecideSignalRoute(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Brokers, cfg.Group, cfg.Topics, cfg.ResetOffset = []string{"x:1"}, "g", []string{testTopic}, "earliest"
	cfg.Routes = decide.Routes{
		{ID: "orders", Mode: decide.ModeSignal, Match: decide.Match{Type: "order.*"}, WorkflowType: "Order", TaskQueue: "q",
			WorkflowIDTemplate: "order-{data.order_id}", Signal: "order_event"},
		{ID: "audit", Match: decide.Match{Type: "order.created"}, WorkflowType: "W", TaskQueue: "q"},
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	d, err := decide.NewDecider(cfg.Decide())
	if err != nil {
		t.Fatal(err)
	}
	decideOf := func(v string, hs ...kgo.RecordHeader) decide.Decision {
		return d.Decide(&kgo.Record{Topic: testTopic, Partition: 1, Offset: 5, Value: []byte(v), Headers: hs})
	}

	dec := decideOf(`{"specversion":"1.0","id":"e1","type":"order.created","source":"shop","subject":"o/42","data":{"order_id":42,"total":9}}`)
	if dec.DeadLetter != "" || len(dec.Intents) != 2 {
		t.Fatalf("decision %+v", dec)
	}
	in := dec.Intents[0]
	if in.WorkflowID != "signal-orders:e1" || in.WorkflowID != decide.DeliveryKey("orders", "e1") || in.ActivityID != "orders" ||
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
		st.WorkflowType != "Order" || st.TaskQueue != "q" || st.ReusePolicy != decide.ReuseAllowDuplicate || st.EventID() != "e1" {
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
	if d2 := decideOf(`{"specversion":"1.0","id":"e1","type":"order.paid","data":{"order_id":43}}`); d2.Intents[0].WorkflowID != in.WorkflowID ||
		d2.Intents[0].PayloadHash == in.PayloadHash || d2.Entities[0] != "order-43" {
		t.Errorf("same event ID, other data: %+v", d2.Intents)
	}

	// An event the template cannot render is undecodable, naming the
	// path; one whose entity ID is too long is invalid_id.
	for v, reason := range map[string]decide.Reason{
		`{"specversion":"1.0","id":"e2","type":"order.paid","data":{}}`:                                              decide.ReasonUndecodable,
		`{"specversion":"1.0","id":"e3","type":"order.paid","data":{"order_id":""}}`:                                 decide.ReasonUndecodable,
		`{"specversion":"1.0","id":"e4","type":"order.paid","data_base64":"AAEC"}`:                                   decide.ReasonUndecodable,
		`{"specversion":"1.0","id":"e5","type":"order.paid","data":{"order_id":1.5}}`:                                decide.ReasonUndecodable,
		`{"specversion":"1.0","id":"e6","type":"order.paid","data":{"order_id":"` + strings.Repeat("x", 995) + `"}}`: decide.ReasonInvalidID,
	} {
		dec := decideOf(v)
		if dec.DeadLetter != reason || len(dec.Intents) != 0 || reason == decide.ReasonUndecodable && !strings.Contains(dec.Err.Error(), "data.order_id") {
			t.Errorf("%s: dead letter %q (%v), %d intents; want %q naming data.order_id", v, dec.DeadLetter, dec.Err, len(dec.Intents), reason)
		}
	}

	// Binary mode: ce_subject is read too.
	dec = decideOf(`{"order_id":"B"}`, kgo.RecordHeader{Key: "ce_specversion", Value: []byte("1.0")}, kgo.RecordHeader{Key: "ce_id", Value: []byte("e7")},
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
