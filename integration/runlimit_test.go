package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/sink/starter"
	"github.com/dedupio/dedup/worker/signals"
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
func fillRun(t *testing.T, e *env, route decide.Route, entity string) string {
	t.Helper()
	rts := decide.Routes{route}
	if err := rts.Validate(); err != nil {
		t.Fatal(err)
	}
	st := starter.New(e.tc, starter.Config{Namespace: e.namespace, StartTimeout: 10 * time.Second})
	var run string
	for i := range signalLimit {
		ev := eventid.Event{ID: fmt.Sprintf("fill-%s-%d", entity, i), Rule: eventid.RuleField, Type: entityEvent,
			Data: json.RawMessage(fmt.Sprintf(`{"entity":%q}`, entity))}
		res, err := st.Start(context.Background(), decide.NewSignalRequest(&rts[0], &ev, "ent-"+entity))
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
	route := signalRoute("nobody", decide.ReuseAllowDuplicate)
	hotRun := fillRun(t, e, route, "hot")

	cfg := e.config()
	cfg.Routes = decide.Routes{route}
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

// lagInput is lagEntityWorkflow's input: what the chain of runs delivered
// so far, and the Receiver's carried state.
type lagInput struct {
	Delivered []string      `json:"delivered,omitempty"`
	Signals   signals.State `json:"signals"`
}

// lagEntityWorkflow is an entity workflow as users write it (the
// Receiver of worker/signals), continuing as new at MaxSeen handled
// events, below nsSignalLimit's limit as the defaults are below the
// server's (2,000 and 10,000). The query "events" answers what the chain
// delivered, in order.
func lagEntityWorkflow(ctx workflow.Context, in lagInput) error {
	got := in.Delivered
	if err := workflow.SetQueryHandler(ctx, "events", func() ([]string, error) { return got, nil }); err != nil {
		return err
	}
	r, err := signals.NewReceiver(ctx, signals.Options{MaxSeen: signalLimit - 1}, in.Signals)
	if err != nil {
		return err
	}
	for {
		ev, ok := r.Receive(ctx)
		if !ok {
			break
		}
		got = append(got, ev.EventID)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return workflow.NewContinueAsNewError(ctx, "LagEntity", lagInput{Delivered: got, Signals: r.State()})
}

// A signal route whose entity workflow's worker is stopped: the run holds
// a backlog of unread signals up to the server's limit and refuses the
// rest, which wait (parked, nothing dead-lettered, nothing committed past
// them). When the worker resumes, the run reads its backlog and continues
// as new, the next runs take the waiting deliveries, and every event is
// delivered once.
func TestRunLimitBacklogDeliveredAfterTheWorkerResumes(t *testing.T) {
	e := newEnvIn(t, 1, nsSignalLimit)
	queue := "lag-" + e.name
	route := signalRoute(queue, decide.ReuseAllowDuplicate)
	route.WorkflowType = "LagEntity"
	cfg := e.config()
	cfg.Routes = decide.Routes{route}
	cfg.Temporal.RunLimitWait = 10 * time.Minute
	const n = 3 * signalLimit // three full runs
	var recs []*kgo.Record
	var want []string
	for i := range n {
		id := fmt.Sprintf("lag-%d", i)
		want = append(want, id)
		recs = append(recs, entityRecord(t, e.topic, id, "lag"))
	}
	if err := e.kcl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r := e.startRouter(cfg)
	defer r.stop(t)

	// The backlog: no worker reads the run; it is full and refuses the rest.
	if !eventually(time.Minute, func() bool { return counter(r.reg, "temporal_request_failure_total", "", "") >= 1 }) {
		t.Fatal("no delivery refused in a minute: the run did not reach its signal limit")
	}
	first, ok := e.currentRun("ent-lag")
	if !ok {
		t.Fatal("ent-lag has no run")
	}
	if got := e.signalsIn("ent-lag", first); len(got) != signalLimit {
		t.Fatalf("the stopped worker's run has %d signals, want %d (its limit)", len(got), signalLimit)
	}
	if d := e.dlqReasons(); len(d) != 0 {
		t.Fatalf("dead letters %v while the run is full, want none", d)
	}

	// The worker resumes.
	w := sdkworker.New(e.tc, queue, sdkworker.Options{})
	w.RegisterWorkflowWithOptions(lagEntityWorkflow, workflow.RegisterOptions{Name: "LagEntity"})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	e.waitCommitted(3 * time.Minute)

	var got []string
	if !eventually(time.Minute, func() bool {
		v, err := e.tc.QueryWorkflow(context.Background(), "ent-lag", "", "events")
		got = nil
		return err == nil && v.Get(&got) == nil && len(got) >= n
	}) {
		t.Fatalf("ent-lag's chain delivered %v, want its %d events", got, n)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("ent-lag's chain delivered %v, want each of %v once", got, want)
	}
	if _, run := e.runStatus("ent-lag", ""); run == first {
		t.Errorf("ent-lag is still on its first run %s, want it continued as new", run)
	}
	if d := e.dlqReasons(); len(d) != 0 {
		t.Errorf("dead letters %v, want none", d)
	}
	counts, err := e.led.Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if counts.Started != n || counts.Pending != 0 {
		t.Errorf("ledger %+v, want %d started", counts, n)
	}
}

// Past temporal.run_limit_wait a delivery to a full run is reported (a
// transient start error) and waits on, never dead-lettered; a router
// stopped while it waits stops at once, commits nothing past it, and the
// next router delivers it once the run goes.
//
// Bound: run_limit_wait is 1 ms, so the first delivery parked is past it
// at its next wake (the probe's backoff, 1 s): the test gives it a minute.
func TestRunLimitStuckDeliveryIsReportedAndWaitsAcrossARestart(t *testing.T) {
	e := newEnvIn(t, 1, nsSignalLimit)
	route := signalRoute("nobody", decide.ReuseAllowDuplicate)
	hotRun := fillRun(t, e, route, "stuck")
	cfg := e.config()
	cfg.Routes = decide.Routes{route}
	cfg.Temporal.RunLimitWait = time.Millisecond
	if err := e.kcl.ProduceSync(context.Background(), entityRecord(t, e.topic, "stuck-0", "stuck")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r := e.startRouter(cfg)
	if !eventually(time.Minute, func() bool {
		return counter(r.reg, "dedup_workflow_start_errors_total", "kind", "transient") >= 1
	}) {
		t.Fatal("the delivery to the full run not reported as a transient start error in a minute")
	}
	r.stop(t) // fails the test if the router takes a minute to stop
	if d := e.dlqReasons(); len(d) != 0 {
		t.Fatalf("dead letters %v, want none", d)
	}
	if done, state := e.committedAtEnd(); done {
		t.Fatalf("committed %s past the waiting delivery", state)
	}

	if err := e.tc.TerminateWorkflow(context.Background(), "ent-stuck", hotRun, "test: the run is full"); err != nil {
		t.Fatal(err)
	}
	r = e.startRouter(cfg)
	defer r.stop(t)
	e.waitCommitted(2 * time.Minute)
	_, run := e.runStatus("ent-stuck", "")
	if got := eventIDs(e.signalsIn("ent-stuck", run)); run == hotRun || !slices.Equal(got, []string{"stuck-0"}) {
		t.Errorf("ent-stuck's run %s has %v, want a new run with stuck-0", run, got)
	}
	if d := e.dlqReasons(); len(d) != 0 {
		t.Errorf("dead letters %v, want none", d)
	}
}
