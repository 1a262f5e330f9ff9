package worker_test

import (
	"testing"

	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/dedupio/dedup/worker"
)

// The recorded history of a real RunActivityWorkflow run (four webhook
// tasks and a noop, with its worker killed midway: see
// integration.TestWorkerKilledMidWorkflow, which rewrites it when
// DEDUP_RECORD_HISTORY names the file) must replay against the current
// code. A change that breaks determinism (reordered activities, a child
// started conditionally) fails here, before it reaches running workflows.
func TestReplayRunActivityWorkflow(t *testing.T) {
	r := sdkworker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(worker.RunActivityWorkflow, workflow.RegisterOptions{Name: worker.RunActivityWorkflowName})
	r.RegisterWorkflowWithOptions(worker.TaskInstanceWorkflow, workflow.RegisterOptions{Name: worker.TaskInstanceWorkflowName})
	if err := r.ReplayWorkflowHistoryFromJSONFile(nil, "testdata/run_activity_workflow.json"); err != nil {
		t.Fatal(err)
	}
}

func TestTaskID(t *testing.T) {
	if got := worker.TaskID("0b5c-run", "webhook", 2); got != "task-0b5c-run:webhook:2" {
		t.Fatal(got)
	}
}
