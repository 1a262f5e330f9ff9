package processor

import (
	"testing"
	"time"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
)

// Two fires of one slot by two external schedulers (CloudEvents with
// their own IDs, sources and data, one spelling the time with Z, the other with +01:00)
// routed with key scheduled_for: one workflow, one execution, the second a
// duplicate, not a conflict; the input says the slot.
func TestScheduledForRouteDoubleFireIsADuplicate(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	cfg := e.config()
	cfg.Routes = decide.Routes{{ID: "report", Match: decide.Match{Type: "report.due"}, WorkflowType: "W", TaskQueue: "q", Key: decide.KeyScheduledFor}}
	e.produceRaw(0, []byte(`{"specversion":"1.0","id":"cron-a-1","source":"cron-a","type":"report.due","data":{"scheduled_for":"2026-03-01T09:00:00Z","fired_by":"a"}}`))
	e.produceRaw(0, []byte(`{"specversion":"1.0","id":"cron-b-7","source":"cron-b","type":"report.due","data":{"scheduled_for":"2026-03-01T10:00:00+01:00","fired_by":"b"}}`))
	rn := e.start("r1", cfg)
	e.waitCommittedToEnd(10 * time.Second)
	e.produceRaw(0, []byte(`{"specversion":"1.0","id":"cron-b-8","source":"cron-b","type":"report.due","data":{"scheduled_for":"2026-03-01T10:00:00+01:00","retry":1}}`))
	e.waitCommittedToEnd(10 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	const id = "activity-report:2026-03-01T09:00:00+00:00"
	ex := e.starter.executionsOf(id)
	if len(ex) != 1 || len(e.starter.executionCounts()) != 1 {
		t.Fatalf("executions %v, want one of %s", e.starter.executionCounts(), id)
	}
	if in := ex[0].req.Input; in.TriggerKind != schemas.TriggerCron || in.ScheduledFor != "2026-03-01T09:00:00+00:00" || in.EventID != "cron-a-1" {
		t.Errorf("input: kind %q scheduled_for %q event %q", in.TriggerKind, in.ScheduledFor, in.EventID)
	}
	if dl := e.dlq.recorded(); len(dl) != 0 {
		t.Errorf("dead letters: %+v", dl)
	}
	if decide.SlotPayloadHash("report", "2026-03-01T09:00:00+00:00") == decide.SlotPayloadHash("report2", "2026-03-01T09:00:00+00:00") {
		t.Error("slot hash ignores the activity")
	}
}
