package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/worker/idempotency"
)

// The code path of workflows started before run identity by workflow ID
// (version DefaultVersion of changeRunIdentity). A workflow replays the
// commands of the code that started it: these functions are the old code,
// unchanged, so that runs open at the upgrade finish (their run_id stays the
// Temporal run ID). Delete this file once no such run can be open: the
// namespace's retention after the upgrade has passed.
// worker/testdata/run_activity_workflow_v0.json replays through it.

func legacyActivityOptions(ctx workflow.Context, timeoutSeconds int) workflow.Context {
	if timeoutSeconds <= 0 {
		timeoutSeconds = 30
	}
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Duration(timeoutSeconds) * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, BackoffCoefficient: 2,
			MaximumInterval: 10 * time.Second, NonRetryableErrorTypes: []string{"BadTask"}},
	})
}

func legacyRunActivityWorkflow(ctx workflow.Context, in schemas.WorkflowInput) (RunResult, error) {
	info := workflow.GetInfo(ctx)
	runID := info.WorkflowExecution.RunID
	var def schemas.ActivityDefinition
	if in.Definition != nil {
		def = *in.Definition
	}
	ctx = legacyActivityOptions(ctx, def.ActivityTimeoutSeconds)
	if err := workflow.ExecuteActivity(ctx, a.LogRun, LogRunInput{RunID: runID, WorkflowID: info.WorkflowExecution.ID,
		ActivityID: in.ActivityID, EventID: in.EventID}).Get(ctx, nil); err != nil {
		return RunResult{}, err
	}
	type child struct {
		id string
		f  workflow.ChildWorkflowFuture
	}
	children := make([]child, len(def.Tasks))
	for i, t := range def.Tasks {
		id := TaskID(runID, t.Type, i)
		cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
			WorkflowID:            id,
			WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
			ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_ABANDON,
		})
		children[i] = child{id: id, f: workflow.ExecuteChildWorkflow(cctx, TaskInstanceWorkflowName, TaskInput{
			ID: id, RunID: runID, Type: t.Type, Index: i, URL: t.URL, Event: in, Timeout: def.ActivityTimeoutSeconds})}
	}
	res := RunResult{RunID: runID}
	for _, c := range children {
		var tr TaskResult
		err := c.f.Get(ctx, &tr)
		if temporal.IsWorkflowExecutionAlreadyStartedError(err) {
			err = workflow.ExecuteActivity(ctx, a.AwaitTask, c.id).Get(ctx, &tr)
		}
		if err != nil {
			_ = workflow.ExecuteActivity(ctx, a.FinishRun, runID, "failed").Get(ctx, nil)
			return res, fmt.Errorf("task %s: %w", c.id, err)
		}
		res.Tasks = append(res.Tasks, tr)
	}
	if err := workflow.ExecuteActivity(ctx, a.FinishRun, runID, "completed").Get(ctx, nil); err != nil {
		return res, err
	}
	return res, nil
}

func legacyTaskInstanceWorkflow(ctx workflow.Context, in TaskInput) (TaskResult, error) {
	ctx = legacyActivityOptions(ctx, in.Timeout)
	if err := workflow.ExecuteActivity(ctx, a.LogTask, in).Get(ctx, nil); err != nil {
		return TaskResult{}, err
	}
	res := TaskResult{ID: in.ID}
	switch in.Type {
	case "webhook":
		if err := workflow.ExecuteActivity(ctx, a.SendWebhook, WebhookInput{URL: in.URL, Event: in.Event}).Get(ctx, &res.Output); err != nil {
			return res, err
		}
	case "noop":
	default:
		return res, temporal.NewNonRetryableApplicationError("unknown task type "+in.Type, "BadTask", nil)
	}
	if err := workflow.ExecuteActivity(ctx, a.FinishTask, in.ID, res.Output).Get(ctx, nil); err != nil {
		return res, err
	}
	return res, nil
}

// LogRunInput identifies a run (legacy path).
type LogRunInput struct {
	RunID, WorkflowID, ActivityID, EventID string
}

// LogRun records a legacy run (run_id = Temporal run ID). Idempotent:
// INSERT ... ON CONFLICT DO NOTHING.
func (a *Activities) LogRun(ctx context.Context, in LogRunInput) error {
	_, err := a.Pool.Exec(ctx, `INSERT INTO activity_runs (run_id, workflow_id, activity_id, event_id) VALUES ($1, $2, $3, $4)
		ON CONFLICT (run_id) DO NOTHING`, in.RunID, in.WorkflowID, in.ActivityID, in.EventID)
	if err != nil {
		return fmt.Errorf("logging run %s: %w", in.RunID, err)
	}
	return nil
}

// FinishRun sets a legacy run's final status. Idempotent: an update to a
// fixed value.
func (a *Activities) FinishRun(ctx context.Context, runID, status string) error {
	_, err := a.Pool.Exec(ctx, `UPDATE activity_runs SET status = $2, finished_at = coalesce(finished_at, now()) WHERE run_id = $1`, runID, status)
	if err != nil {
		return fmt.Errorf("finishing run %s: %w", runID, err)
	}
	return nil
}

// LogTask records a legacy task instance. Idempotent: upsert on its ID.
func (a *Activities) LogTask(ctx context.Context, in TaskInput) error {
	_, err := a.Pool.Exec(ctx, `INSERT INTO task_instances (id, run_id, task_type, task_index) VALUES ($1, $2, $3, $4)
		ON CONFLICT (id) DO NOTHING`, in.ID, in.RunID, in.Type, in.Index)
	if err != nil {
		return fmt.Errorf("logging task %s: %w", in.ID, err)
	}
	return nil
}

// FinishTask records a legacy task's success. Idempotent: an update to
// fixed values.
func (a *Activities) FinishTask(ctx context.Context, id string, output json.RawMessage) error {
	if len(output) == 0 {
		output = nil
	}
	_, err := a.Pool.Exec(ctx, `UPDATE task_instances SET status = 'completed', result = $2, finished_at = coalesce(finished_at, now()) WHERE id = $1`, id, []byte(output))
	if err != nil {
		return fmt.Errorf("finishing task %s: %w", id, err)
	}
	return nil
}

// WebhookInput is one legacy webhook call.
type WebhookInput struct {
	URL   string                `json:"url,omitempty"`
	Event schemas.WorkflowInput `json:"event"`
}

// SendWebhook is the legacy webhook activity: it runs under the key
// {workflow_id}:{activity_type}:{activity_id} (the task workflow's ID,
// stable across the activity's retries) and posts as the webhook task does
// (same Idempotency-Key header, same error classes).
func (a *Activities) SendWebhook(ctx context.Context, in WebhookInput) (json.RawMessage, error) {
	info := activity.GetInfo(ctx)
	key := fmt.Sprintf("%s:%s:%s", info.WorkflowExecution.ID, info.ActivityType.Name, info.ActivityID)
	url := in.URL
	if url == "" {
		url = a.WebhookURL
	}
	if url == "" {
		return nil, temporal.NewNonRetryableApplicationError("no webhook URL configured", "BadTask", nil)
	}
	body, err := json.Marshal(in.Event)
	if err != nil {
		return nil, err
	}
	fp, err := idempotency.Fingerprint(webhookParams{URL: url, Body: body})
	if err != nil {
		return nil, err
	}
	out, err := a.Keys.Do(ctx, key, fp, func(ctx context.Context) ([]byte, error) { return a.post(ctx, url, key, body) })
	var mm *idempotency.MismatchError
	if errors.As(err, &mm) {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), "BadTask", err)
	}
	if err != nil {
		return nil, taskError(err)
	}
	return out, nil
}
