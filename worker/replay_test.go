package worker_test

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/worker"
)

// Recorded histories of real RunActivityWorkflow runs (four webhook tasks
// and a noop, with the worker killed midway: see
// integration.TestWorkerKilledMidWorkflow, which rewrites the current one
// when DEDUP_RECORD_HISTORY names the file) must replay against the
// current code. A change that breaks determinism (reordered activities, a
// child started conditionally) fails here, before it reaches running
// workflows.
//
//   - run_activity_workflow.json: the current code path (run identity by
//     workflow ID, version 1 of run-identity-by-workflow-id), recorded
//     with the change that introduced it;
//   - run_activity_workflow_v0.json: a run started before that change (run
//     ID = Temporal run ID, no version marker), which must still finish on
//     an upgraded worker: it replays through the legacy code path;
//   - run_activity_workflow_v2.json: with version 1 of check-task-types
//     too (CheckTaskTypes before the tasks start), recorded with that
//     change; run_activity_workflow.json, without its marker, replays
//     without the check.
func TestReplayRunActivityWorkflow(t *testing.T) {
	for _, c := range []struct {
		file   string
		marker bool
	}{{"testdata/run_activity_workflow.json", true}, {"testdata/run_activity_workflow_v0.json", false}, {"testdata/run_activity_workflow_v2.json", true}} {
		b, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(b), `"markerName": "Version"`); got != c.marker {
			t.Fatalf("%s: version marker present %v, want %v (the file is not the history it should be)", c.file, got, c.marker)
		}
		h, err := client.HistoryFromJSON(bytes.NewReader(b), client.HistoryJSONOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The run's identity (task IDs) derives from the workflow ID, so
		// the replay needs the recorded one, not the replayer's default;
		// it is in the input.
		var in schemas.WorkflowInput
		if err := json.Unmarshal(h.Events[0].GetWorkflowExecutionStartedEventAttributes().GetInput().GetPayloads()[0].GetData(), &in); err != nil || in.WorkflowID == "" {
			t.Fatalf("%s: no workflow ID in the input (%v)", c.file, err)
		}
		r := sdkworker.NewWorkflowReplayer()
		r.RegisterWorkflowWithOptions(worker.RunActivityWorkflow, workflow.RegisterOptions{Name: worker.RunActivityWorkflowName})
		r.RegisterWorkflowWithOptions(worker.TaskInstanceWorkflow, workflow.RegisterOptions{Name: worker.TaskInstanceWorkflowName})
		if err := r.ReplayWorkflowHistoryWithOptions(nil, h, sdkworker.ReplayWorkflowHistoryOptions{
			OriginalExecution: workflow.Execution{ID: in.WorkflowID}}); err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
	}
}
