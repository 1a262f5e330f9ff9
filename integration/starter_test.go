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
	// (Under the allow_* policies a start of the same claim is answered by
	// request ID, which Temporal reports as started: the run ID says it
	// is the first run.)
	for _, policy := range []processor.ReusePolicy{processor.ReuseRejectDuplicate, processor.ReuseAllowDuplicateFailedOnly, processor.ReuseAllowDuplicate} {
		req.ReusePolicy = policy
		again, err := st.Start(ctx, req)
		if err != nil || again.RunID != first.RunID || (policy == processor.ReuseRejectDuplicate && !again.AlreadyStarted) {
			t.Fatalf("%s: second start of a running workflow: %+v %v, want run %s", policy, again, err, first.RunID)
		}
	}
	// Closed by termination: reject_duplicate refuses any further run.
	if err := e.tc.TerminateWorkflow(ctx, req.WorkflowID, "", "test"); err != nil {
		t.Fatal(err)
	}
	req.ReusePolicy = processor.ReuseRejectDuplicate
	if again, err := st.Start(ctx, req); err != nil || !again.AlreadyStarted || again.RunID != first.RunID {
		t.Fatalf("reject_duplicate after termination: %+v %v, want the first run", again, err)
	}

	// Under allow_duplicate_failed_only, a re-drive of the same claim
	// (generation 1) finds its run even once it closed as failed; only the
	// next generation (a re-run the ledger handed out) starts anew, once.
	req.WorkflowID, req.ReusePolicy = "activity-b:evt-1", processor.ReuseAllowDuplicateFailedOnly
	gen1, err := st.Start(ctx, req)
	if err != nil || gen1.AlreadyStarted {
		t.Fatalf("allow_duplicate_failed_only, first start: %+v %v", gen1, err)
	}
	if err := e.tc.TerminateWorkflow(ctx, req.WorkflowID, "", "test"); err != nil {
		t.Fatal(err)
	}
	for _, policy := range []processor.ReusePolicy{processor.ReuseAllowDuplicateFailedOnly, processor.ReuseAllowDuplicate} {
		req.ReusePolicy = policy
		if again, err := st.Start(ctx, req); err != nil || again.RunID != gen1.RunID {
			t.Fatalf("%s: re-drive of generation 1 after termination: %+v %v, want run %s", policy, again, err, gen1.RunID)
		}
	}
	req.ReusePolicy, req.Generation = processor.ReuseAllowDuplicateFailedOnly, 2
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
