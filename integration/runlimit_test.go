package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/sink/starter"
)

// Temporal's per-run signal limit through the router (sink/starter/
// runlimits.go, processor/starts.go), in the namespace whose runs take
// signalLimit signals: the deliveries to an entity whose run is full wait
// for that entity only.

// entityRecord is a signal route's event id for entity ent.
func entityRecord(t *testing.T, topic, id, ent string) *kgo.Record {
	t.Helper()
	v, err := json.Marshal(map[string]any{"specversion": "1.0", "id": id, "type": entityEvent, "data": map[string]any{"entity": ent}})
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: topic, Value: v}
}

// fillRun delivers signalLimit events to entity's workflow through the
// starter, so that its run is at history.maximumSignalsPerExecution (no
// worker reads them: a stopped worker's backlog). It returns the run.
func fillRun(t *testing.T, e *env, route processor.Route, entity string) string {
	t.Helper()
	rts := processor.Routes{route}
	if err := rts.Validate(); err != nil {
		t.Fatal(err)
	}
	st := starter.New(e.tc, starter.Config{Namespace: e.namespace, StartTimeout: 10 * time.Second})
	var run string
	for i := range signalLimit {
		ev := eventid.Event{ID: fmt.Sprintf("fill-%s-%d", entity, i), Rule: eventid.RuleField, Type: entityEvent,
			Data: json.RawMessage(fmt.Sprintf(`{"entity":%q}`, entity))}
		res, err := st.Start(context.Background(), processor.NewSignalRequest(&rts[0], &ev, "ent-"+entity))
		if err != nil {
			t.Fatalf("filling ent-%s: delivery %d: %v", entity, i+1, err)
		}
		run = res.RunID
	}
	return run
}

// More deliveries to a full entity than the router has start workers,
// then, once they have been refused for longer than retry.max, one to
// another entity: the other entity's delivery is fetched and lands while
// the full one's wait (they park without a worker, and Temporal is not
// counted as failing: no pause), and once the full run goes every
// delivery lands, none dead-lettered.
//
// Bound: run_limit_wait is 10 minutes, so a delivery that held a worker
// while it waits would hold it for 10 minutes; the other entity's one
// SignalWithStart on the in-process server takes well under a second, and
// the test gives it a minute.
func TestRunLimitWaitHoldsOnlyTheFullEntity(t *testing.T) {
	e := newEnvIn(t, 1, nsSignalLimit)
	route := signalRoute("nobody", processor.ReuseAllowDuplicate)
	hotRun := fillRun(t, e, route, "hot")

	cfg := e.config()
	cfg.Routes = processor.Routes{route}
	cfg.Starts.Concurrency = 2
	cfg.Temporal.RunLimitWait = 10 * time.Minute
	const hot = signalLimit // > Concurrency, and the next run takes them all
	var recs []*kgo.Record
	var hotIDs []string
	for i := range hot {
		id := fmt.Sprintf("hot-%d", i)
		hotIDs = append(hotIDs, id)
		recs = append(recs, entityRecord(t, e.topic, id, "hot"))
	}
	if err := e.kcl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r := e.startRouter(cfg)
	defer r.stop(t)
	// Two refusals (the first, then a probe a second later): the entity
	// has refused for longer than retry.max (1 s here), after which a
	// refusal counted as Temporal failing would pause every fetch.
	if !eventually(time.Minute, func() bool { return counter(r.reg, "temporal_request_failure_total", "", "") >= 2 }) {
		t.Fatalf("ent-hot's deliveries not refused twice in a minute")
	}
	if err := e.kcl.ProduceSync(context.Background(), entityRecord(t, e.topic, "cold-0", "cold")).FirstErr(); err != nil {
		t.Fatal(err)
	}

	if !eventually(time.Minute, func() bool {
		run, ok := e.currentRun("ent-cold")
		return ok && slices.Equal(eventIDs(e.signalsIn("ent-cold", run)), []string{"cold-0"})
	}) {
		t.Fatalf("ent-cold has not got its event a minute after the router started: the full entity's deliveries hold the start workers")
	}
	if st, run := e.runStatus("ent-hot", ""); run != hotRun || len(e.signalsIn("ent-hot", hotRun)) != signalLimit {
		t.Fatalf("ent-hot: run %s (%s), want the full run %s untouched", run, st, hotRun)
	}

	// What heals it: the full run goes (here its end; continue-as-new in
	// TestRunLimitBacklogDeliveredAfterTheWorkerResumes).
	if err := e.tc.TerminateWorkflow(context.Background(), "ent-hot", hotRun, "test: the run is full"); err != nil {
		t.Fatal(err)
	}
	e.waitCommitted(2 * time.Minute)
	_, run := e.runStatus("ent-hot", "")
	if got := eventIDs(e.signalsIn("ent-hot", run)); run == hotRun || !slices.Equal(got, hotIDs) {
		t.Errorf("ent-hot's run %s has %v, want a new run with each of %v once", run, got, hotIDs)
	}
	if d := e.dlqReasons(); len(d) != 0 {
		t.Errorf("dead letters %v, want none", d)
	}
	counts, err := e.led.Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if counts.Started != hot+1 || counts.Pending != 0 {
		t.Errorf("ledger %+v, want %d started", counts, hot+1)
	}
}
