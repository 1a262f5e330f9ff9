package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/dedupio/dedup/internal/demo/workload"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
)

// The reuse policies with a real worker that completes some runs and fails
// others, as the README states them:
//   - reject_duplicate: one execution per workflow ID, whatever became of it;
//   - allow_duplicate_failed_only: each redelivery of an event whose run
//     failed starts exactly one new run; a completed run never runs again.
//
// Every event is delivered three times (the original, then two replays of
// the whole topic after the runs closed).
func TestReusePoliciesWithARealWorker(t *testing.T) {
	e := newEnv(t, 2)
	queue := "reuse-" + e.namespace
	w := sdkworker.New(e.tc, queue, sdkworker.Options{})
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context, in schemas.WorkflowInput) error {
		if strings.Contains(string(in.Data), `"fail":true`) {
			return errors.New("this event's work fails")
		}
		return nil
	}, workflow.RegisterOptions{Name: "Flaky"})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	cfg := e.config()
	cfg.Routes = decide.Routes{
		{ID: "once", Match: decide.Match{Type: workload.TypeOrder}, WorkflowType: "Flaky", TaskQueue: queue},
		{ID: "retry", Match: decide.Match{Type: workload.TypeOrder}, WorkflowType: "Flaky", TaskQueue: queue,
			IDReusePolicy: decide.ReuseAllowDuplicateFailedOnly},
	}
	const events = 40 // every fourth fails
	var recs []*kgo.Record
	for i := 0; i < events; i++ {
		v, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("reuse-%d", i), "type": workload.TypeOrder,
			"data": map[string]any{"n": i, "fail": i%4 == 0}})
		recs = append(recs, &kgo.Record{Partition: int32(i % 2), Value: v})
	}
	deliver := func(round int) {
		for _, r := range recs {
			r.Topic = e.topic
		}
		if err := e.kcl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		r := e.startRouter(cfg)
		e.waitCommitted(2 * time.Minute)
		r.stop(t)
		// Let every run close before the next delivery (the ledger knows
		// how many runs were started; visibility may lag behind).
		if !eventually(time.Minute, func() bool { return e.openRuns() == 0 && e.closedRuns() >= e.ledgerRuns() }) {
			t.Fatalf("round %d: runs still open after a minute", round)
		}
	}
	for round := 1; round <= 3; round++ {
		deliver(round)
		want := map[string]string{}
		for i := 0; i < events; i++ {
			id := fmt.Sprintf("reuse-%d", i)
			want["activity-once:"+id], want["activity-retry:"+id] = "completed", "completed"
			if i%4 == 0 {
				want["activity-once:"+id] = "failed"
				want["activity-retry:"+id] = strings.TrimSuffix(strings.Repeat("failed,", round), ",")
			}
		}
		// Visibility is eventually consistent: wait until it settles on
		// the expected runs, then compare (a mismatch that persists fails).
		var runs map[string]string
		eventually(30*time.Second, func() bool { runs = e.runsByStatus(); return fmt.Sprint(runs) == fmt.Sprint(want) })
		for id, w := range want {
			if runs[id] != w {
				t.Fatalf("round %d, %s: runs [%s], want [%s]", round, id, runs[id], w)
			}
		}
		if len(runs) != len(want) {
			t.Fatalf("round %d: runs of %d workflow IDs, want %d", round, len(runs), len(want))
		}
	}
	c, err := e.led.Count(context.Background())
	if err != nil || c.Pending != 0 || c.Started != 2*events {
		t.Fatalf("ledger %+v (%v), want %d started, none pending", c, err, 2*events)
	}
}

// runsByStatus lists every run of the env's namespace: workflow ID ->
// its runs' statuses, oldest first, comma-separated.
//
// Pages are listPageSize runs: the in-memory SQLite visibility store takes
// 5-10 s for a page of 1000 (with or without search attributes; the SDK's
// call times out at 10 s) and about 50 ms for a page of 100.
func (e *env) runsByStatus() map[string]string {
	e.t.Helper()
	// A run that closes while the pages are read moves down the list
	// (ordered by close time) and is listed again: each run is counted
	// once, with the status it was listed with last.
	type run struct{ wid, status string }
	var runs []run
	at := map[string]int{} // run ID -> index in runs
	var token []byte
	for {
		resp, err := e.tc.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
			PageSize: listPageSize, NextPageToken: token}) // the client's namespace
		if err != nil {
			e.t.Fatal(err)
		}
		for _, ex := range resp.Executions {
			st := strings.ToLower(strings.TrimPrefix(ex.GetStatus().String(), "WORKFLOW_EXECUTION_STATUS_"))
			if i, ok := at[ex.GetExecution().GetRunId()]; ok {
				runs[i].status = st
				continue
			}
			at[ex.GetExecution().GetRunId()] = len(runs)
			runs = append(runs, run{ex.GetExecution().GetWorkflowId(), st})
		}
		if token = resp.NextPageToken; len(token) == 0 {
			break
		}
	}
	out := map[string][]string{}
	for _, r := range runs {
		out[r.wid] = append([]string{r.status}, out[r.wid]...) // listed newest first
	}
	joined := map[string]string{}
	for id, sts := range out {
		joined[id] = strings.Join(sts, ",")
	}
	return joined
}

// listPageSize is the lab's page of ListWorkflow (runsByStatus).
const listPageSize = 100

// closedRuns counts the namespace's closed runs.
func (e *env) closedRuns() int {
	n := 0
	for _, sts := range e.runsByStatus() {
		n += strings.Count(sts, "completed") + strings.Count(sts, "failed")
	}
	return n
}

// ledgerRuns is how many runs the ledger asked for: the sum of the
// started rows' generations.
func (e *env) ledgerRuns() int {
	var n int
	if err := e.pool().QueryRow(context.Background(), `SELECT coalesce(sum(generation), 0) FROM dedup_ledger WHERE state = 'started'`).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// openRuns counts the namespace's running workflows.
func (e *env) openRuns() int {
	n := 0
	for _, sts := range e.runsByStatus() {
		n += strings.Count(sts, strings.ToLower(strings.TrimPrefix(enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING.String(), "WORKFLOW_EXECUTION_STATUS_")))
	}
	return n
}
