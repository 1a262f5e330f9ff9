package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/dedupio/dedup/schemas"
)

// Workflow and activity names, as registered.
const (
	RunActivityWorkflowName  = "RunActivityWorkflow"
	TaskInstanceWorkflowName = "TaskInstanceWorkflow"
)

// changeRunIdentity is the workflow change that made the run's identity
// the workflow ID (version 1). Runs started before it replay the legacy
// code path (legacy.go).
const changeRunIdentity = "run-identity-by-workflow-id"

// changeCheckTaskTypes is the workflow change that checks the task types
// of the tasks a run is to start (CheckTaskTypes) before it starts any
// (version 1). Runs started before it replay without the check.
const changeCheckTaskTypes = "check-task-types"

// Defaults of a task's activity, when the definition leaves them 0.
const (
	DefaultActivityTimeout = 30 * time.Second // start to close, per attempt
	DefaultMaxAttempts     = 10
	DefaultScheduleToClose = time.Hour // all attempts, waiting included
)

// RunResult is what RunActivityWorkflow returns.
type RunResult struct {
	RunID   string       `json:"run_id"`
	Attempt int          `json:"attempt,omitempty"` // this execution's number among the run's executions
	Tasks   []TaskResult `json:"tasks"`
}

// TaskInput is a task instance's input.
type TaskInput struct {
	ID      string                `json:"id"` // task-{run_id}:{type}:{index}
	RunID   string                `json:"run_id"`
	Type    string                `json:"type"`
	Index   int                   `json:"index"`
	URL     string                `json:"url,omitempty"`
	Event   schemas.WorkflowInput `json:"event"`
	Timeout int                   `json:"activity_timeout_seconds"`
	// Retry bounds of the task's activity (0: the defaults).
	MaxAttempts            int `json:"max_attempts,omitempty"`
	ScheduleToCloseSeconds int `json:"schedule_to_close_seconds,omitempty"`
	// Generation is the run's (RunInput.Generation): its steps' keys are
	// held, and their failures owned, by it (worker/idempotency).
	Generation int `json:"generation,omitempty"`
}

// TaskResult is a task instance's outcome.
type TaskResult struct {
	ID     string          `json:"id"`
	Output json.RawMessage `json:"output,omitempty"`
	// Adopted: the task had completed in an earlier execution of the run;
	// this is its stored result, and it did not run again.
	Adopted bool `json:"adopted,omitempty"`
}

var a *Activities // method values name the activities; never called on nil

// bookkeeping is the activity options of the activities that only write
// dedup's own tables: retried until PostgreSQL answers.
func bookkeeping(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, BackoffCoefficient: 2,
			MaximumInterval: 10 * time.Second, NonRetryableErrorTypes: []string{"BadTask"}},
	})
}

// taskOptions is the activity options of a task's work: bounded by the
// definition's max_attempts and schedule_to_close_seconds.
func taskOptions(ctx workflow.Context, in TaskInput) workflow.Context {
	timeout, attempts, total := DefaultActivityTimeout, DefaultMaxAttempts, DefaultScheduleToClose
	if in.Timeout > 0 {
		timeout = time.Duration(in.Timeout) * time.Second
	}
	if in.MaxAttempts > 0 {
		attempts = in.MaxAttempts
	}
	if in.ScheduleToCloseSeconds > 0 {
		total = time.Duration(in.ScheduleToCloseSeconds) * time.Second
	}
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout:    timeout,
		ScheduleToCloseTimeout: total,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, BackoffCoefficient: 2,
			MaximumInterval: 10 * time.Second, MaximumAttempts: int32(attempts),
			NonRetryableErrorTypes: []string{"BadTask", "Permanent"}},
	})
}

// awaitOptions is the options of AwaitTask, which waits (heartbeating) for
// a task workflow that an earlier execution started.
func awaitOptions(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 24 * time.Hour,
		HeartbeatTimeout:    time.Minute,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2,
			MaximumInterval: 30 * time.Second},
	})
}

// RunActivityWorkflow runs the definition's tasks as child workflows, all
// in parallel, as one logical run per workflow ID:
//
//   - StartRun records this execution as an attempt of the run
//     (RunID(workflow ID)) and returns the tasks an earlier execution
//     completed: those are adopted (their stored result), not started;
//   - every other task starts as the child workflow TaskID(run, type,
//     index), reuse policy allow-duplicate-failed-only: a child that
//     failed runs again, one that an earlier execution left running or
//     that completed meanwhile is found taken and awaited (AwaitTask);
//   - a task that fails does not stop its siblings: every task runs to its
//     end (so that what can complete is stored, and a re-run adopts it),
//     then the run fails with the first failed task's error (by index);
//   - EndRun records the run and the attempt completed, failed (with the
//     error) or cancelled (the workflow was cancelled; the children are
//     cancelled with it).
func RunActivityWorkflow(ctx workflow.Context, in schemas.WorkflowInput) (RunResult, error) {
	if workflow.GetVersion(ctx, changeRunIdentity, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return legacyRunActivityWorkflow(ctx, in)
	}
	info := workflow.GetInfo(ctx)
	runID := RunID(info.WorkflowExecution.ID)
	var def schemas.ActivityDefinition
	if in.Definition != nil {
		def = *in.Definition
	}
	run := RunInput{RunID: runID, WorkflowID: info.WorkflowExecution.ID, ActivityID: in.ActivityID, EventID: in.EventID,
		Generation: memoGeneration(info.Memo)}
	for i, t := range def.Tasks {
		run.TaskIDs = append(run.TaskIDs, TaskID(runID, t.Type, i))
	}
	bctx := bookkeeping(ctx)
	var st RunStart
	if err := workflow.ExecuteActivity(bctx, a.StartRun, run).Get(ctx, &st); err != nil {
		return RunResult{}, err
	}
	if st.SupersededBy > 0 {
		// A delayed start of an older generation (processor/model README,
		// gap 1): it runs nothing, and fails, as the run it lands behind
		// did, so that a redelivery may still re-run the event.
		return RunResult{RunID: runID, Attempt: st.Attempt}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("execution of generation %d superseded by generation %d: a delayed start, nothing run", run.Generation, st.SupersededBy),
			"Superseded", nil)
	}
	res := RunResult{RunID: runID, Attempt: st.Attempt, Tasks: make([]TaskResult, len(def.Tasks))}
	if err := checkTaskTypes(ctx, bctx, def, run, st); err != nil {
		return res, err
	}
	futures := make([]workflow.ChildWorkflowFuture, len(def.Tasks))
	for i, t := range def.Tasks {
		id := run.TaskIDs[i]
		if out, ok := st.Completed[id]; ok {
			res.Tasks[i] = TaskResult{ID: id, Output: out, Adopted: true}
			continue
		}
		cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
			WorkflowID: id,
			// A failed (or terminated, timed-out) task runs again; a
			// completed or running one is found taken and awaited.
			WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
			// A child outlives a parent that is terminated or reset, so
			// that the next execution can await it instead of starting
			// it again.
			ParentClosePolicy:   enumspb.PARENT_CLOSE_POLICY_ABANDON,
			WaitForCancellation: true,
		})
		futures[i] = workflow.ExecuteChildWorkflow(cctx, TaskInstanceWorkflowName, TaskInput{
			ID: id, RunID: runID, Type: t.Type, Index: i, URL: t.URL, Event: in, Timeout: def.ActivityTimeoutSeconds,
			MaxAttempts: def.MaxAttempts, ScheduleToCloseSeconds: def.ScheduleToCloseSeconds, Generation: run.Generation})
	}
	var failed error
	for i, f := range futures {
		if f == nil {
			continue
		}
		id := run.TaskIDs[i]
		var tr TaskResult
		err := f.Get(ctx, &tr)
		if temporal.IsWorkflowExecutionAlreadyStartedError(err) {
			err = workflow.ExecuteActivity(awaitOptions(ctx), a.AwaitTask, id).Get(ctx, &tr)
		}
		if err != nil && failed == nil {
			failed = fmt.Errorf("task %s: %s", id, ErrorText(err))
		}
		tr.ID = id
		res.Tasks[i] = tr
	}
	end := RunEnd{RunInput: run, Status: "completed"}
	switch {
	case ctx.Err() != nil:
		end.Status, end.Error = "cancelled", "the workflow was cancelled"
		dctx, cancel := workflow.NewDisconnectedContext(bctx)
		defer cancel()
		_ = workflow.ExecuteActivity(dctx, a.EndRun, end).Get(dctx, nil)
		return res, temporal.NewCanceledError()
	case failed != nil:
		end.Status, end.Error = "failed", failed.Error()
	}
	if err := workflow.ExecuteActivity(bctx, a.EndRun, end).Get(ctx, nil); err != nil {
		return res, err
	}
	if failed != nil {
		return res, temporal.NewNonRetryableApplicationError(failed.Error(), "TaskFailed", nil)
	}
	return res, nil
}

// checkTaskTypes asks a worker (CheckTaskTypes) whether it has the types
// of the tasks the run is to start (those not adopted). If it lacks any,
// the run starts none of them: it records itself failed (EndRun) and
// fails with a non-retryable UnknownTaskType error that names the types
// missing and the types the worker has. A definition that names a type
// no worker registered is a configuration error: no task of the run can
// be allowed to spend its side effect on a run that cannot complete, and
// a re-run once the type is registered runs the whole definition.
func checkTaskTypes(ctx, bctx workflow.Context, def schemas.ActivityDefinition, run RunInput, st RunStart) error {
	var types []string
	for i, t := range def.Tasks {
		if _, adopted := st.Completed[run.TaskIDs[i]]; !adopted {
			types = append(types, t.Type)
		}
	}
	if len(types) == 0 || workflow.GetVersion(ctx, changeCheckTaskTypes, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return nil
	}
	var check TaskTypeCheck
	if err := workflow.ExecuteActivity(bctx, a.CheckTaskTypes, types).Get(ctx, &check); err != nil {
		return err
	}
	if len(check.Unknown) == 0 {
		return nil
	}
	msg := check.Message()
	if err := workflow.ExecuteActivity(bctx, a.EndRun, RunEnd{RunInput: run, Status: "failed", Error: msg}).Get(ctx, nil); err != nil {
		return err
	}
	return temporal.NewNonRetryableApplicationError(msg, "UnknownTaskType", nil)
}

// TaskInstanceWorkflow records the task instance (StartTask: a task that
// completed before returns its stored result and does not run), runs its
// work (RunTask, bounded retries), and records the outcome: completed with
// the result, failed with the error, or cancelled.
func TaskInstanceWorkflow(ctx workflow.Context, in TaskInput) (TaskResult, error) {
	if workflow.GetVersion(ctx, changeRunIdentity, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return legacyTaskInstanceWorkflow(ctx, in)
	}
	bctx := bookkeeping(ctx)
	var st TaskStart
	if err := workflow.ExecuteActivity(bctx, a.StartTask, in).Get(ctx, &st); err != nil {
		return TaskResult{ID: in.ID}, err
	}
	if st.Completed {
		return TaskResult{ID: in.ID, Output: st.Result, Adopted: true}, nil
	}
	var out json.RawMessage
	err := workflow.ExecuteActivity(taskOptions(ctx, in), a.RunTask, in).Get(ctx, &out)
	if err != nil {
		end := TaskEnd{ID: in.ID, Status: "failed", Error: ErrorText(err)}
		ectx := bctx
		if ctx.Err() != nil {
			end.Status = "cancelled"
			dctx, cancel := workflow.NewDisconnectedContext(bctx)
			defer cancel()
			ectx = dctx
		}
		if eerr := workflow.ExecuteActivity(ectx, a.EndTask, end).Get(ectx, nil); eerr != nil {
			return TaskResult{ID: in.ID}, errors.Join(err, eerr)
		}
		return TaskResult{ID: in.ID}, err
	}
	if err := workflow.ExecuteActivity(bctx, a.EndTask, TaskEnd{ID: in.ID, Status: "completed", Output: out}).Get(ctx, nil); err != nil {
		return TaskResult{ID: in.ID}, err
	}
	return TaskResult{ID: in.ID, Output: out}, nil
}

// ErrorText is the message of a Temporal error chain's cause (an
// application error's message, a timeout's kind), without the wrapping
// that names activities and workflows.
func ErrorText(err error) string {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return app.Message()
	}
	var to *temporal.TimeoutError
	if errors.As(err, &to) {
		return to.Error()
	}
	var ce *temporal.CanceledError
	if errors.As(err, &ce) {
		return "cancelled"
	}
	return err.Error()
}

// memoGeneration is the generation the router started this execution for
// (schemas.MemoGeneration), 0 when the start carried none.
func memoGeneration(m *commonpb.Memo) int {
	var g int
	if p := m.GetFields()[schemas.MemoGeneration]; p != nil {
		if err := converter.GetDefaultDataConverter().FromPayload(p, &g); err != nil {
			return 0
		}
	}
	return g
}
