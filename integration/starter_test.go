package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/sink/starter"
)

// The starter against a real Temporal server: a second start of one
// workflow ID is success with the first run's ID, never a second
// execution, under every reuse policy and whether the run is open or
// closed (a re-driven claim); only the next generation (a re-run the
// policy allows) may start a new run; an unknown namespace is a permanent
// error.
func TestStarterAlreadyStartedIsSuccess(t *testing.T) {
	e := newEnv(t, 1)
	st := starter.New(e.tc, starter.Config{Namespace: e.namespace, StartTimeout: 10 * time.Second})
	req := decide.StartRequest{WorkflowID: "activity-a:evt-1", WorkflowType: "RunActivityWorkflow", TaskQueue: "nobody",
		ReusePolicy: decide.ReuseRejectDuplicate, Input: schemas.WorkflowInput{EventID: "evt-1"}}
	ctx := context.Background()
	first, err := st.Start(ctx, req)
	if err != nil || first.AlreadyStarted || first.RunID == "" {
		t.Fatalf("first start: %+v %v", first, err)
	}
	// (Under the allow_* policies a start of the same claim is answered by
	// request ID, which Temporal reports as started: the run ID says it
	// is the first run.)
	for _, policy := range []decide.ReusePolicy{decide.ReuseRejectDuplicate, decide.ReuseAllowDuplicateFailedOnly, decide.ReuseAllowDuplicate} {
		req.ReusePolicy = policy
		again, err := st.Start(ctx, req)
		if err != nil || again.RunID != first.RunID || (policy == decide.ReuseRejectDuplicate && !again.AlreadyStarted) {
			t.Fatalf("%s: second start of a running workflow: %+v %v, want run %s", policy, again, err, first.RunID)
		}
	}
	// Closed by termination: reject_duplicate refuses any further run.
	if err := e.tc.TerminateWorkflow(ctx, req.WorkflowID, "", "test"); err != nil {
		t.Fatal(err)
	}
	req.ReusePolicy = decide.ReuseRejectDuplicate
	if again, err := st.Start(ctx, req); err != nil || !again.AlreadyStarted || again.RunID != first.RunID {
		t.Fatalf("reject_duplicate after termination: %+v %v, want the first run", again, err)
	}

	// Under allow_duplicate_failed_only, a re-drive of the same claim
	// (generation 1) finds its run even once it closed as failed; only the
	// next generation (a re-run the ledger handed out) starts anew, once.
	req.WorkflowID, req.ReusePolicy = "activity-b:evt-1", decide.ReuseAllowDuplicateFailedOnly
	gen1, err := st.Start(ctx, req)
	if err != nil || gen1.AlreadyStarted {
		t.Fatalf("allow_duplicate_failed_only, first start: %+v %v", gen1, err)
	}
	if err := e.tc.TerminateWorkflow(ctx, req.WorkflowID, "", "test"); err != nil {
		t.Fatal(err)
	}
	for _, policy := range []decide.ReusePolicy{decide.ReuseAllowDuplicateFailedOnly, decide.ReuseAllowDuplicate} {
		req.ReusePolicy = policy
		if again, err := st.Start(ctx, req); err != nil || again.RunID != gen1.RunID {
			t.Fatalf("%s: re-drive of generation 1 after termination: %+v %v, want run %s", policy, again, err, gen1.RunID)
		}
	}
	req.ReusePolicy, req.Generation = decide.ReuseAllowDuplicateFailedOnly, 2
	gen2, err := st.Start(ctx, req)
	if err != nil || gen2.AlreadyStarted || gen2.RunID == gen1.RunID {
		t.Fatalf("generation 2 after a failed run: %+v %v, want a new run", gen2, err)
	}
	if again, err := st.Start(ctx, req); err != nil || again.RunID != gen2.RunID {
		t.Fatalf("generation 2 again: %+v %v, want run %s", again, err, gen2.RunID)
	}
	// Each run carries its generation: a re-run starts after the newest.
	if last, err := st.LastRun(ctx, "", req.WorkflowID); err != nil || last.ID != gen2.RunID || last.Generation != 2 || last.Closed {
		t.Fatalf("LastRun after generation 2: %+v %v, want run %s, generation 2, open", last, err, gen2.RunID)
	}
	// Visibility is eventually consistent: wait for it, then check.
	var execs map[string]int
	eventually(30*time.Second, func() bool {
		execs, _ = e.listExecutions()
		return execs["activity-a:evt-1"] == 1 && execs[req.WorkflowID] == 2
	})
	if execs["activity-a:evt-1"] != 1 || execs[req.WorkflowID] != 2 {
		t.Fatalf("executions %v, want 1 and 2", execs)
	}

	bad, err := client.Dial(client.Options{HostPort: stack.Temporal.HostPort(), Namespace: "no-such-namespace", Logger: quietTemporalLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	_, err = starter.New(bad, starter.Config{Namespace: "no-such-namespace", StartTimeout: 5 * time.Second}).Start(ctx, req)
	if !processor.IsPermanent(err) {
		t.Fatalf("unknown namespace: %v, want a permanent error", err)
	}
}

// A run's own limits refuse a delivery with InvalidArgument (Temporal
// v1.32.1: history.maximumSignalsPerExecution before it reads the request
// ID; limit.historyCount.error after it force-terminated the run), which
// is not a verdict on the event: the starter reports both as transient,
// and the same delivery goes through once the run that refused it is
// gone. A signal whose payload exceeds limit.blobSize.error never fits:
// permanent. Through the SDK, against the real server, with the limits
// made small per namespace (limitsDynamic).
func TestStarterRunLimitsAreTransientOversizeIsPermanent(t *testing.T) {
	ctx := context.Background()
	rts := decide.Routes{signalRoute("nobody", decide.ReuseAllowDuplicate)}
	if err := rts.Validate(); err != nil {
		t.Fatal(err)
	}
	delivery := func(entity, event string, data []byte) decide.StartRequest {
		ev := eventid.Event{ID: event, Rule: eventid.RuleField, Type: entityEvent, Data: data}
		return decide.NewSignalRequest(&rts[0], &ev, entity)
	}
	small := json.RawMessage(`{"n":1}`)

	e := newEnvIn(t, 1, nsSignalLimit)
	st := starter.New(e.tc, starter.Config{Namespace: e.namespace, StartTimeout: 10 * time.Second})
	var run string
	for i := range signalLimit {
		res, err := st.Start(ctx, delivery("entity-s", fmt.Sprintf("e%d", i), small))
		if err != nil {
			t.Fatalf("delivery %d of %d: %v", i+1, signalLimit, err)
		}
		run = res.RunID
	}
	over := delivery("entity-s", "over", small)
	_, err := st.Start(ctx, over)
	if err == nil || processor.IsPermanent(err) {
		t.Fatalf("delivery into a run at its signal limit: %v, want a transient error", err)
	}
	// What heals it: the run goes (continue-as-new, or here its end); the
	// same delivery then starts the next run.
	if err := e.tc.TerminateWorkflow(ctx, "entity-s", run, "test: the run is full"); err != nil {
		t.Fatal(err)
	}
	if res, err := retryTransient(func() (processor.StartResult, error) { return st.Start(ctx, over) }); err != nil || res.RunID == run {
		t.Fatalf("the refused delivery after its run closed: %+v %v, want a new run", res, err)
	}
	if _, err := st.Start(ctx, delivery("entity-b", "big", json.RawMessage(`"`+strings.Repeat("x", 100*1024)+`"`))); !processor.IsPermanent(err) {
		t.Fatalf("a signal over limit.blobSize.error: %v, want a permanent error", err)
	}
	// A start (not a signal) meets the same payload limit, and no run's
	// limit: it makes a new run (or finds the one it made).
	bigStart := decide.StartRequest{WorkflowID: "activity-big:evt-1", WorkflowType: "RunActivityWorkflow", TaskQueue: "nobody",
		ReusePolicy: decide.ReuseAllowDuplicate, Generation: 1,
		Input: schemas.WorkflowInput{EventID: "evt-1", Data: json.RawMessage(`"` + strings.Repeat("x", 100*1024) + `"`)}}
	if _, err := st.Start(ctx, bigStart); !processor.IsPermanent(err) || starter.RunLimit(err) != "" {
		t.Fatalf("a start over limit.blobSize.error: %v, want a permanent error, no run limit", err)
	}

	// Another env (its own database) in the namespace of the history limit.
	t.Run("history count", func(t *testing.T) {
		h := newEnvIn(t, 1, nsHistoryLimit)
		st = starter.New(h.tc, starter.Config{Namespace: h.namespace, StartTimeout: 10 * time.Second})
		var refused decide.StartRequest
		first := ""
		for i := 0; refused.Signal == nil; i++ {
			if i > 20 {
				t.Fatalf("20 deliveries into a run of at most 12 events, none refused")
			}
			req := delivery("entity-h", fmt.Sprintf("h%d", i), small)
			res, err := st.Start(ctx, req)
			switch {
			case err == nil && first == "":
				first = res.RunID
			case err != nil && processor.IsPermanent(err):
				t.Fatalf("delivery into a run over limit.historyCount.error: %v, want a transient error", err)
			case err != nil:
				refused = req
			}
		}
		if res, err := retryTransient(func() (processor.StartResult, error) { return st.Start(ctx, refused) }); err != nil || res.RunID == first {
			t.Fatalf("the refused delivery again, after the server ended the full run: %+v %v, want a new run", res, err)
		}
	})
}

// retryTransient calls fn until it succeeds or fails for good, as the
// router does (a new run within a second of the last one's start is
// refused for a while: history.workflowIdReuseMinimalInterval), for at
// most 30 s.
func retryTransient(fn func() (processor.StartResult, error)) (processor.StartResult, error) {
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		res, err := fn()
		if err == nil || processor.IsPermanent(err) || time.Now().After(deadline) {
			return res, err
		}
	}
}

// The real server reads the start request the starter writes by hand
// (startCodec, application/grpc+proto) as the request: the started run's
// input is the default data converter's payload of the input, byte for
// byte, its memo the generation, its search attributes the starter's,
// for data whose lengths sit on both sides of each varint boundary,
// escapes, binary data and a scheduled fire.
func TestStartedRunCarriesTheStartRequestsPayloads(t *testing.T) {
	e := newEnv(t, 1)
	st := starter.New(e.tc, starter.Config{Namespace: e.namespace, StartTimeout: 10 * time.Second})
	ctx := context.Background()
	var reqs []decide.StartRequest
	for i, n := range []int{0, 1, 125, 126, 127, 128, 16381, 16382, 16383, 16384, 200_000} {
		req := decide.StartRequest{WorkflowID: fmt.Sprintf("activity-wire:evt-%d", i), WorkflowType: "RunActivityWorkflow",
			TaskQueue: "nobody", ReusePolicy: decide.ReuseAllowDuplicate, Generation: 1 + i%3,
			Record: &decide.RecordRef{Topic: "t\u00e9<", Partition: int32(i), Offset: int64(n)},
			Input: schemas.WorkflowInput{EventID: fmt.Sprintf("evt-%d", i), ActivityID: "wire", IDRule: "field",
				Type: "x<&>\u2028", Data: json.RawMessage(`"` + strings.Repeat("z", n) + `"`)}}
		if i%2 == 1 {
			req.Input.Data, req.Input.DataBase64 = nil, []byte(strings.Repeat("\xff", n))
		}
		reqs = append(reqs, req)
	}
	fire := reqs[0]
	fire.WorkflowID, fire.Input.EventID, fire.Input.Schedule, fire.Input.ScheduledFor = "activity-wire:fire", "fire", "daily", "2026-03-01T09:00:00+00:00"
	fire.Input.Data = json.RawMessage(`{"a":"\\\"","b":[1.0,1E5,-0]}`)
	reqs = append(reqs, fire)
	dc := converter.GetDefaultDataConverter()
	for _, req := range reqs {
		res, err := st.Start(ctx, req)
		if err != nil || res.AlreadyStarted {
			t.Fatalf("%s: %+v %v", req.WorkflowID, res, err)
		}
		it := e.tc.GetWorkflowHistory(ctx, req.WorkflowID, res.RunID, false, 0)
		ev, err := it.Next()
		if err != nil {
			t.Fatalf("%s: reading history: %v", req.WorkflowID, err)
		}
		got := ev.GetWorkflowExecutionStartedEventAttributes()
		input, err := dc.ToPayloads(req.Input)
		if err != nil {
			t.Fatal(err)
		}
		gen, err := dc.ToPayload(req.Generation)
		if err != nil {
			t.Fatal(err)
		}
		attrs, err := starter.EncodeSearchAttributes(req)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got.GetInput(), input) {
			t.Errorf("%s: the run's input %.200v, want %.200v", req.WorkflowID, got.GetInput(), input)
		}
		if !proto.Equal(got.GetMemo(), &commonpb.Memo{Fields: map[string]*commonpb.Payload{schemas.MemoGeneration: gen}}) {
			t.Errorf("%s: the run's memo %v, want generation %d", req.WorkflowID, got.GetMemo(), req.Generation)
		}
		for k, want := range attrs.GetIndexedFields() {
			if p := got.GetSearchAttributes().GetIndexedFields()[k]; string(p.GetData()) != string(want.GetData()) {
				t.Errorf("%s: search attribute %s %s, want %s", req.WorkflowID, k, p.GetData(), want.GetData())
			}
		}
	}
}
