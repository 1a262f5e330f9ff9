package integration

import (
	"context"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/dedupio/dedup/processor"
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
	req := processor.StartRequest{WorkflowID: "activity-a:evt-1", WorkflowType: "RunActivityWorkflow", TaskQueue: "nobody",
		ReusePolicy: processor.ReuseRejectDuplicate, Input: schemas.WorkflowInput{EventID: "evt-1"}}
	ctx := context.Background()
	first, err := st.Start(ctx, req)
	if err != nil || first.AlreadyStarted || first.RunID == "" {
		t.Fatalf("first start: %+v %v", first, err)
	}
	for _, policy := range []processor.ReusePolicy{processor.ReuseRejectDuplicate, processor.ReuseAllowDuplicateFailedOnly, processor.ReuseAllowDuplicate} {
		req.ReusePolicy = policy
		again, err := st.Start(ctx, req)
		if err != nil || !again.AlreadyStarted || again.RunID != first.RunID {
			t.Fatalf("%s: second start of a running workflow: %+v %v, want already started with run %s", policy, again, err, first.RunID)
		}
	}
	// Closed by termination: a re-drive of the same claim (generation 1)
	// finds that run under every policy, even those that allow a closed ID
	// to start again; the next generation starts anew where the policy
	// allows it.
	if err := e.tc.TerminateWorkflow(ctx, req.WorkflowID, "", "test"); err != nil {
		t.Fatal(err)
	}
	for _, policy := range []processor.ReusePolicy{processor.ReuseRejectDuplicate, processor.ReuseAllowDuplicateFailedOnly, processor.ReuseAllowDuplicate} {
		req.ReusePolicy = policy
		if again, err := st.Start(ctx, req); err != nil || !again.AlreadyStarted || again.RunID != first.RunID {
			t.Fatalf("%s: re-drive after termination: %+v %v, want the first run", policy, again, err)
		}
	}
	req.ReusePolicy, req.Generation = processor.ReuseRejectDuplicate, 2
	if again, err := st.Start(ctx, req); err != nil || !again.AlreadyStarted {
		t.Fatalf("reject_duplicate, generation 2, after termination: %+v %v", again, err)
	}
	req.ReusePolicy = processor.ReuseAllowDuplicateFailedOnly
	second, err := st.Start(ctx, req)
	if err != nil || second.AlreadyStarted || second.RunID == first.RunID {
		t.Fatalf("allow_duplicate_failed_only, generation 2, after termination: %+v %v, want a new run", second, err)
	}
	if again, err := st.Start(ctx, req); err != nil || !again.AlreadyStarted || again.RunID != second.RunID {
		t.Fatalf("generation 2 again: %+v %v, want run %s", again, err, second.RunID)
	}
	if execs, _ := e.listExecutions(); execs[req.WorkflowID] != 2 {
		t.Fatalf("%d executions, want 2", execs[req.WorkflowID])
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
