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
