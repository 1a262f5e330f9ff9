package worker

import (
	"fmt"

	"github.com/google/uuid"
)

// runNamespace is the UUID namespace of run IDs: the name-based UUID (v5)
// of "https://github.com/dedupio/dedup/worker/activity_runs" in the URL
// namespace. Never change it: run IDs, task IDs and keys derive from it.
var runNamespace = uuid.MustParse("39355116-75eb-52b4-9344-7f3665737919")

// RunID is the logical run of a workflow ID: the name-based UUID (v5) of
// the workflow ID, the same for every Temporal execution of that ID (an
// activity retry, a replay, a reset, a re-run that the reuse policy
// allows). It is activity_runs' primary key (a uuid column, as run_id is
// in activity_run_attempts and task_instances). One database serves one
// Temporal namespace: workflow IDs are unique only within a namespace.
func RunID(workflowID string) string {
	return uuid.NewSHA1(runNamespace, []byte(workflowID)).String()
}

// TaskID is the ID (and the task workflow's ID) of a task: the seed
// contract's task-{run_id}:{task_type}:{index}.
func TaskID(runID, taskType string, index int) string {
	return fmt.Sprintf("task-%s:%s:%d", runID, taskType, index)
}

// StepKey is the idempotency key of a step of a task: {task_id}:{step}.
func StepKey(taskID, step string) string { return taskID + ":" + step }
