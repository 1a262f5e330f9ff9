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
// execution; an unknown namespace is a permanent error.
func TestStarterAlreadyStartedIsSuccess(t *testing.T) {
	e := newEnv(t, 1)
	st := starter.New(e.tc, starter.Config{StartTimeout: 10 * time.Second})
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
	// Closed by termination: reject_duplicate still refuses, allow_duplicate_failed_only starts anew.
	if err := e.tc.TerminateWorkflow(ctx, req.WorkflowID, "", "test"); err != nil {
		t.Fatal(err)
	}
	req.ReusePolicy = processor.ReuseRejectDuplicate
	if again, err := st.Start(ctx, req); err != nil || !again.AlreadyStarted {
		t.Fatalf("reject_duplicate after termination: %+v %v", again, err)
	}
	req.ReusePolicy = processor.ReuseAllowDuplicateFailedOnly
	if again, err := st.Start(ctx, req); err != nil || again.AlreadyStarted || again.RunID == first.RunID {
		t.Fatalf("allow_duplicate_failed_only after termination: %+v %v, want a new run", again, err)
	}
	if execs, _ := e.listExecutions(); execs[req.WorkflowID] > 2 {
		t.Fatalf("%d executions", execs[req.WorkflowID])
	}

	bad, err := client.Dial(client.Options{HostPort: stack.Temporal.HostPort(), Namespace: "no-such-namespace", Logger: quietTemporalLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	_, err = starter.New(bad, starter.Config{StartTimeout: 5 * time.Second}).Start(ctx, req)
	if !processor.IsPermanent(err) {
		t.Fatalf("unknown namespace: %v, want a permanent error", err)
	}
}
