package decide

import (
	"encoding/json"
	"testing"
)

func TestWorkflowIDFormats(t *testing.T) {
	// The seed contract's examples, verbatim.
	if got := WorkflowID("550e8400-e29b-41d4-a716-446655440000", "evt_abc123"); got != "activity-550e8400-e29b-41d4-a716-446655440000:evt_abc123" {
		t.Fatal(got)
	}
	for _, in := range []string{`"2026-03-01T09:00:00Z"`, `"2026-03-01T10:00:00+01:00"`, `"2026-03-01T09:00:00.000Z"`} {
		key, err := scheduledFor(json.RawMessage(`{"scheduled_for":` + in + `}`))
		if err != nil {
			t.Fatal(err)
		}
		if got := WorkflowID("550e8400-e29b-41d4-a716-446655440000", key); got != "activity-550e8400-e29b-41d4-a716-446655440000:2026-03-01T09:00:00+00:00" {
			t.Fatalf("%s: %s", in, got)
		}
	}
	if _, err := scheduledFor(json.RawMessage(`{"scheduled_for":7}`)); err == nil {
		t.Fatal("number accepted as scheduled_for")
	}
}

// ParseWorkflowID is the inverse of WorkflowID and DeliveryKey, and
// refuses every other ID, so that the routes, a scheduled start and the
// ingress's tenant check read dedup's IDs one way.
func TestParseWorkflowIDInvertsTheFormats(t *testing.T) {
	for _, c := range []struct {
		id   string
		want ParsedWorkflowID
	}{
		{WorkflowID("orders", "e1"), ParsedWorkflowID{Route: "orders", Key: "e1"}},
		{WorkflowID("report", "2026-03-01T09:00:00+00:00"), ParsedWorkflowID{Route: "report", Key: "2026-03-01T09:00:00+00:00"}},
		{WorkflowID("orders", "@acme/k:9"), ParsedWorkflowID{Route: "orders", Key: "@acme/k:9"}},
		{DeliveryKey("orders", "e1"), ParsedWorkflowID{Signal: true, Route: "orders", Key: "e1"}},
	} {
		if got, ok := ParseWorkflowID(c.id); !ok || got != c.want {
			t.Errorf("ParseWorkflowID(%q) = %+v, %v; want %+v", c.id, got, ok, c.want)
		}
	}
	for _, id := range []string{"order-42", "activity-orders", "signal-orders", "Activity-orders:e1", ""} {
		if got, ok := ParseWorkflowID(id); ok {
			t.Errorf("ParseWorkflowID(%q) = %+v: not an ID of dedup's", id, got)
		}
	}
	for id, want := range map[string]bool{"activity-x": true, "signal-": true, "order-42": false, "xactivity-a:b": false} {
		if Reserved(id) != want {
			t.Errorf("Reserved(%q) = %v", id, !want)
		}
	}
}
