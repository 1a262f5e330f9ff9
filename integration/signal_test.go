package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/converter"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/sink/starter"
)

// Signal routes against the real Temporal server (v1.32): what Temporal
// itself drops of a re-sent SignalWithStart, and what dedup's router
// delivers, with duplicate records and with a crash between the signal
// and the ledger mark. docs/signals.md.

// The lab's entity event types: the entity workflow continues as new after
// a rollover event and completes after a close event.
const (
	entityEvent    = "entity.event"
	entityRollover = "entity.rollover"
	entityClose    = "entity.close"
)

// entityWorkflow is the lab's entity workflow. It keeps every event ID it
// is signalled, as received: it does not deduplicate (a real entity
// workflow does, by event ID), so that the tests see what was delivered.
// The query "events" answers them.
func entityWorkflow(ctx workflow.Context) ([]string, error) {
	var got []string
	if err := workflow.SetQueryHandler(ctx, "events", func() ([]string, error) { return got, nil }); err != nil {
		return nil, err
	}
	ch := workflow.GetSignalChannel(ctx, schemas.DefaultSignalName)
	for {
		var ev schemas.SignalEvent
		ch.Receive(ctx, &ev)
		got = append(got, ev.EventID)
		if ev.Type != entityRollover && ev.Type != entityClose {
			continue
		}
		// The run ends: take what is buffered first (never drop a signal).
		for {
			var more schemas.SignalEvent
			if !ch.ReceiveAsync(&more) {
				break
			}
			got = append(got, more.EventID)
		}
		if ev.Type == entityClose {
			return got, nil
		}
		return nil, workflow.NewContinueAsNewError(ctx, entityWorkflow)
	}
}

// startEntityWorker runs entityWorkflow, as "Entity", on queue.
func startEntityWorker(t *testing.T, e *env, queue string) {
	t.Helper()
	w := sdkworker.New(e.tc, queue, sdkworker.Options{})
	w.RegisterWorkflowWithOptions(entityWorkflow, workflow.RegisterOptions{Name: "Entity"})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
}

// signalRoute is the lab's signal route: entity.* events go to the entity
// workflow ent-{data.entity}.
func signalRoute(queue string, policy decide.ReusePolicy) decide.Route {
	return decide.Route{ID: "entities", Mode: decide.ModeSignal, Match: decide.Match{Type: "entity.*"},
		WorkflowIDTemplate: "ent-{data.entity}", WorkflowType: "Entity", TaskQueue: queue, IDReusePolicy: policy}
}

// signal is one signal in a run's history: the event it carried
// (schemas.SignalEvent) and its request ID.
type signal struct{ EventID, RequestID string }

// signalsIn are the signals in a run's history, in order (one per
// WorkflowExecutionSignaled event).
func (e *env) signalsIn(id, runID string) []signal {
	e.t.Helper()
	var out []signal
	for _, ev := range e.history(id, runID) {
		if ev.GetEventType() != enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED {
			continue
		}
		a := ev.GetWorkflowExecutionSignaledEventAttributes()
		var in schemas.SignalEvent
		if err := converter.GetDefaultDataConverter().FromPayloads(a.GetInput(), &in); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, signal{EventID: in.EventID, RequestID: a.GetRequestId()})
	}
	return out
}

// eventIDs are the signals' event IDs, sorted.
func eventIDs(ss []signal) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.EventID
	}
	slices.Sort(out)
	return out
}

// runStatus is a run's status, and the workflow's current run ID when
// runID is "".
func (e *env) runStatus(id, runID string) (enumspb.WorkflowExecutionStatus, string) {
	e.t.Helper()
	d, err := e.tc.DescribeWorkflowExecution(context.Background(), id, runID)
	if err != nil {
		e.t.Fatal(err)
	}
	info := d.GetWorkflowExecutionInfo()
	return info.GetStatus(), info.GetExecution().GetRunId()
}

// settledSignals is signalsIn once the run has no workflow task pending: a
// signal that arrives while a workflow task runs is buffered, out of the
// history, until that task completes; with none pending, every signal
// Temporal accepted before is in the history.
func (e *env) settledSignals(id, runID string) []signal {
	e.t.Helper()
	settled := eventually(time.Minute, func() bool {
		d, err := e.tc.DescribeWorkflowExecution(context.Background(), id, runID)
		return err == nil && d.GetPendingWorkflowTask() == nil
	})
	if !settled {
		e.t.Fatalf("workflow %s run %s still has a workflow task pending after a minute", id, runID)
	}
	return e.signalsIn(id, runID)
}

// currentRun is the workflow's current run, if it has one.
func (e *env) currentRun(id string) (string, bool) {
	e.t.Helper()
	d, err := e.tc.DescribeWorkflowExecution(context.Background(), id, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return "", false
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return d.GetWorkflowExecutionInfo().GetExecution().GetRunId(), true
}

// What Temporal v1.32 drops of a re-sent SignalWithStart with the same
// request ID (sink/starter's, SignalRequestID of the delivery key), step by
// step on one entity workflow, through the starter the router uses:
//
//   - a re-send to the run the first one started: dropped (one signal);
//   - a re-send to a run the first one signalled: dropped;
//   - a re-send after the run continued as new: delivered again, to the new
//     run (the record of request IDs is per run);
//   - a re-send after the run closed: under allow_duplicate it starts a new
//     run with the signal again; under reject_duplicate it is refused, which
//     the starter takes as delivered when the closed run was started by that
//     very request ID, and as permanent otherwise.
func TestSignalWhatTemporalDedups(t *testing.T) {
	e := newEnv(t, 1)
	queue := "sig-" + e.namespace
	startEntityWorker(t, e, queue)
	st := starter.New(e.tc, starter.Config{Namespace: e.namespace, StartTimeout: 10 * time.Second})
	const entity = "ent-1"
	// check: the run's signals carry exactly these events, each with its
	// delivery's request ID.
	check := func(run string, events ...string) {
		t.Helper()
		got := e.settledSignals(entity, run)
		var want []signal
		for _, ev := range events {
			want = append(want, signal{ev, starter.SignalRequestID(decide.DeliveryKey("entities", ev))})
		}
		if !slices.Equal(got, want) {
			t.Fatalf("run %s has signals %v, want %v", run, got, want)
		}
	}
	deliver := func(event, typ string, policy decide.ReusePolicy) (processor.StartResult, error) {
		t.Helper()
		rts := decide.Routes{signalRoute(queue, policy)}
		if err := rts.Validate(); err != nil {
			t.Fatal(err)
		}
		rt := rts[0]
		ev := eventid.Event{ID: event, Rule: eventid.RuleField, Type: typ, Data: json.RawMessage(`{"entity":"1"}`)}
		req := decide.NewSignalRequest(&rt, &ev, entity)
		// Transient errors are retried, as the router does: a new run of
		// one ID within a second of the last one's start is refused for a
		// while (history.workflowIdReuseMinimalInterval).
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			res, err := st.Start(context.Background(), req)
			if err == nil || processor.IsPermanent(err) || time.Now().After(deadline) {
				return res, err
			}
		}
	}
	mustDeliver := func(event, typ string) processor.StartResult {
		t.Helper()
		res, err := deliver(event, typ, decide.ReuseAllowDuplicate)
		if err != nil {
			t.Fatalf("delivering %s: %v", event, err)
		}
		return res
	}
	waitStatus := func(runID string, want enumspb.WorkflowExecutionStatus) {
		t.Helper()
		if !eventually(time.Minute, func() bool { s, _ := e.runStatus(entity, runID); return s == want }) {
			s, _ := e.runStatus(entity, runID)
			t.Fatalf("run %s is %s, want %s", runID, s, want)
		}
	}

	// 1. The first delivery starts the entity; its re-send is dropped.
	first := mustDeliver("e1", entityEvent)
	if first.AlreadyStarted {
		t.Fatalf("first delivery: %+v, want a new run", first)
	}
	run1 := first.RunID
	if again := mustDeliver("e1", entityEvent); again.RunID != run1 || !again.AlreadyStarted {
		t.Errorf("e1 re-sent: %+v, want run %s, no new run", again, run1)
	}
	// 2. A delivery to the open run, and its re-send.
	for range 2 {
		if res := mustDeliver("e2", entityEvent); res.RunID != run1 || !res.AlreadyStarted {
			t.Errorf("e2: %+v, want run %s signalled", res, run1)
		}
	}
	check(run1, "e1", "e2") // once each

	// 3. Continue-as-new: the next run has no record of e2's request ID.
	mustDeliver("e3", entityRollover)
	waitStatus(run1, enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW)
	_, run2 := e.runStatus(entity, "")
	for range 2 {
		if res := mustDeliver("e2", entityEvent); res.RunID != run2 {
			t.Errorf("e2 after continue-as-new: %+v, want run %s", res, run2)
		}
	}
	// Re-sent across continue-as-new, e2 is delivered again (once per run).
	check(run2, "e2")
	t.Logf("e2's request ID: once in run %s, and again in run %s after continue-as-new", run1, run2)

	// 4. The entity closes; a re-send under allow_duplicate starts a new run.
	mustDeliver("e4", entityClose)
	waitStatus(run2, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED)
	res := mustDeliver("e4", entityClose)
	if res.AlreadyStarted || res.RunID == run2 {
		t.Fatalf("e4 re-sent after the entity closed (allow_duplicate): %+v, want a new run", res)
	}
	run3 := res.RunID
	check(run3, "e4")
	waitStatus(run3, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED)

	// 5. Under reject_duplicate: the closed run 3 was started by e4's
	// request ID, so its re-send is answered as delivered (no new run); a
	// new event cannot be delivered at all (permanent: dead-lettered).
	res, err := deliver("e4", entityClose, decide.ReuseRejectDuplicate)
	if err != nil || res.RunID != run3 || !res.AlreadyStarted {
		t.Errorf("e4 re-sent under reject_duplicate: %+v, %v; want run %s, delivered", res, err, run3)
	}
	if _, err := deliver("e5", entityEvent, decide.ReuseRejectDuplicate); !processor.IsPermanent(err) {
		t.Errorf("e5 to the closed entity under reject_duplicate: %v, want a permanent error", err)
	}
	if _, cur := e.runStatus(entity, ""); cur != run3 {
		t.Errorf("current run %s, want run 3 %s: no run after it", cur, run3)
	}
}

// N events for K entity workflows through the router, every record sent
// twice (on both partitions, so copies race): each entity's run received
// each of its events exactly once (its history's signals), every delivery
// is started in the ledger, and the router counted N deliveries, K of them
// starting an entity.
func TestSignalRouteEachEventOnce(t *testing.T) {
	e := newEnv(t, 2)
	queue := "sig-" + e.namespace
	startEntityWorker(t, e, queue)
	cfg := e.config()
	cfg.Routes = decide.Routes{signalRoute(queue, "")}
	const n, k = 60, 6
	var recs []*kgo.Record
	want := map[string][]string{} // entity -> its event IDs
	for i := range n {
		id, ent := fmt.Sprintf("sig-%d", i), fmt.Sprintf("%d", i%k)
		v, err := json.Marshal(map[string]any{"specversion": "1.0", "id": id, "type": entityEvent, "data": map[string]any{"entity": ent, "n": i}})
		if err != nil {
			t.Fatal(err)
		}
		for p := range int32(2) {
			recs = append(recs, &kgo.Record{Topic: e.topic, Partition: p, Value: v})
		}
		want["ent-"+ent] = append(want["ent-"+ent], id)
	}
	if err := e.kcl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r := e.startRouter(cfg)
	e.waitCommitted(2 * time.Minute)
	r.stop(t)

	for entity, ids := range want {
		slices.Sort(ids)
		status, run := e.runStatus(entity, "")
		if got := eventIDs(e.settledSignals(entity, run)); status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING || !slices.Equal(got, ids) {
			t.Errorf("%s (%s): %d signals %v, want each of its %d events once", entity, status, len(got), got, len(ids))
		}
		// What the workflow itself received (it keeps every signal).
		var seen []string
		if !eventually(30*time.Second, func() bool {
			v, err := e.tc.QueryWorkflow(context.Background(), entity, "", "events")
			seen = nil
			return err == nil && v.Get(&seen) == nil && len(seen) >= len(ids)
		}) {
			t.Errorf("%s: the workflow answered %v, want its %d events", entity, seen, len(ids))
			continue
		}
		slices.Sort(seen)
		if !slices.Equal(seen, ids) {
			t.Errorf("%s: the workflow received %v, want each of %v once", entity, seen, ids)
		}
	}
	counts, err := e.led.Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if counts.Started != n || counts.Pending != 0 {
		t.Errorf("ledger %+v, want %d started", counts, n)
	}
	if got, started := counter(r.reg, "dedup_signals_delivered_total", "", ""), counter(r.reg, "dedup_signals_delivered_total", "result", "started"); got != n || started != k {
		t.Errorf("dedup_signals_delivered_total %v (started %v), want %d (%d)", got, started, n, k)
	}
	if d := e.dlqReasons(); len(d) != 0 {
		t.Errorf("dead letters %v", d)
	}
}

// A router process killed right after a SignalWithStart was accepted and
// before its delivery was marked (DEDUP_FAILPOINT=after-signal) leaves rows
// pending whose signal the entity has. The restarted router re-drives them
// and sends SignalWithStart again with the same request ID: Temporal drops
// it (the run recorded it), so every entity still has each event once.
func TestSignalCrashBetweenSignalAndMark(t *testing.T) {
	e := newEnv(t, 2)
	queue := "sig-" + e.namespace
	startEntityWorker(t, e, queue)
	cfg := e.config()
	cfg.Routes = decide.Routes{signalRoute(queue, "")}
	cfg.Kafka.MaxPollRecords = 50
	cfg.Starts.MarkInterval = 200 * time.Millisecond // marks lag the signals: more of them are in the window
	cfg.Admin.Listen = "127.0.0.1:0"
	path := e.writeConfig(cfg)
	const n, k = 200, 8
	var recs []*kgo.Record
	want := map[string][]string{}
	for i := range n {
		id, ent := fmt.Sprintf("crash-%d", i), fmt.Sprintf("%d", i%k)
		v, err := json.Marshal(map[string]any{"specversion": "1.0", "id": id, "type": entityEvent, "data": map[string]any{"entity": ent}})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: e.topic, Partition: int32(i % 2), Value: v})
		want["ent-"+ent] = append(want["ent-"+ent], id)
	}
	if err := e.kcl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	crashed := e.process(path, "DEDUP_FAILPOINT=after-signal:40")
	err := waitExit(crashed, 2*time.Minute)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 137 {
		t.Fatalf("router did not crash at the failpoint: %v", err)
	}
	// The rows left pending whose signal the entity already has: the
	// window a re-drive re-sends into.
	signalled := map[string]bool{}
	for entity := range want {
		run, ok := e.currentRun(entity) // not every entity was reached before the crash
		if !ok {
			continue
		}
		for _, sg := range e.settledSignals(entity, run) {
			signalled[sg.EventID] = true
		}
	}
	rows, err := e.led.Pool().Query(context.Background(), `SELECT workflow_id FROM dedup_ledger WHERE state = 'pending'`)
	if err != nil {
		t.Fatal(err)
	}
	var window []string
	for rows.Next() {
		var key string
		if err := rows.Scan(&key); err != nil {
			t.Fatal(err)
		}
		if signalled[strings.TrimPrefix(key, "signal-entities:")] {
			window = append(window, key)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(window) == 0 {
		t.Fatal("no pending row whose signal was delivered: the failpoint did not fire between signal and mark")
	}
	t.Logf("after the crash: %d deliveries signalled and not marked", len(window))

	restarted := e.process(path)
	e.waitCommitted(3 * time.Minute)
	if err := restarted.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(restarted, time.Minute); err != nil {
		t.Fatalf("router did not stop cleanly on SIGTERM: %v", err)
	}
	// Each of those rows was claimed again (re-driven: SignalWithStart
	// re-sent) and is started now.
	for _, key := range window {
		var state string
		var attempts int
		if err := e.led.Pool().QueryRow(context.Background(), `SELECT state, attempts FROM dedup_ledger WHERE workflow_id = $1`, key).
			Scan(&state, &attempts); err != nil {
			t.Fatal(err)
		}
		if state != "started" || attempts < 2 {
			t.Errorf("%s: %s after %d claim(s), want started after a re-drive", key, state, attempts)
		}
	}
	for entity, ids := range want {
		slices.Sort(ids)
		_, run := e.runStatus(entity, "")
		if got := eventIDs(e.settledSignals(entity, run)); !slices.Equal(got, ids) {
			t.Errorf("%s: %d signals, want each of its %d events once", entity, len(got), len(ids))
		}
	}
}
