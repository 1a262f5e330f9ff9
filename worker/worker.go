package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/worker/idempotency"
)

// Workflow and activity names, as registered.
const (
	RunActivityWorkflowName  = "RunActivityWorkflow"
	TaskInstanceWorkflowName = "TaskInstanceWorkflow"
)

// RunResult is what RunActivityWorkflow returns.
type RunResult struct {
	RunID string       `json:"run_id"`
	Tasks []TaskResult `json:"tasks"`
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
}

// TaskResult is a task instance's outcome.
type TaskResult struct {
	ID     string          `json:"id"`
	Output json.RawMessage `json:"output,omitempty"`
}

// TaskID is the child workflow ID of a task: the seed contract's
// task-{run_id}:{task_type}:{index}.
func TaskID(runID, taskType string, index int) string {
	return fmt.Sprintf("task-%s:%s:%d", runID, taskType, index)
}

func activityOptions(ctx workflow.Context, timeoutSeconds int) workflow.Context {
	if timeoutSeconds <= 0 {
		timeoutSeconds = 30
	}
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Duration(timeoutSeconds) * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, BackoffCoefficient: 2,
			MaximumInterval: 10 * time.Second, NonRetryableErrorTypes: []string{"BadTask"}},
	})
}

var a *Activities // method values name the activities; never called on nil

// RunActivityWorkflow logs the run, runs the definition's tasks as child
// workflows (in parallel), and marks the run completed.
func RunActivityWorkflow(ctx workflow.Context, in schemas.WorkflowInput) (RunResult, error) {
	info := workflow.GetInfo(ctx)
	runID := info.WorkflowExecution.RunID
	var def schemas.ActivityDefinition
	if in.Definition != nil {
		def = *in.Definition
	}
	ctx = activityOptions(ctx, def.ActivityTimeoutSeconds)
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
			// A child outlives a parent that is terminated or reset, so
			// that the next run of the parent can adopt it.
			ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_ABANDON,
		})
		children[i] = child{id: id, f: workflow.ExecuteChildWorkflow(cctx, TaskInstanceWorkflowName, TaskInput{
			ID: id, RunID: runID, Type: t.Type, Index: i, URL: t.URL, Event: in, Timeout: def.ActivityTimeoutSeconds})}
	}
	res := RunResult{RunID: runID}
	for _, c := range children {
		var tr TaskResult
		err := c.f.Get(ctx, &tr)
		if temporal.IsWorkflowExecutionAlreadyStartedError(err) {
			// Started before (by an earlier attempt of this run): adopt it.
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

// TaskInstanceWorkflow records the task instance, runs its activity and
// records the outcome.
func TaskInstanceWorkflow(ctx workflow.Context, in TaskInput) (TaskResult, error) {
	ctx = activityOptions(ctx, in.Timeout)
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

// Activities are the workflow's side effects. Each documents its
// idempotency guarantee.
type Activities struct {
	Pool       *pgxpool.Pool
	Keys       *idempotency.Store
	Client     client.Client // for AwaitTask
	HTTP       *http.Client
	WebhookURL string // default for webhook tasks
	// AfterWebhook, if set, runs after a webhook's outcome is stored and
	// before the activity returns (tests make it fail, as a crash there
	// would).
	AfterWebhook func(ctx context.Context) error
}

// LogRunInput identifies a run.
type LogRunInput struct {
	RunID, WorkflowID, ActivityID, EventID string
}

// LogRun records the run. Idempotent: INSERT ... ON CONFLICT DO NOTHING on
// run_id, so a retry leaves one row.
func (a *Activities) LogRun(ctx context.Context, in LogRunInput) error {
	_, err := a.Pool.Exec(ctx, `INSERT INTO activity_runs (run_id, workflow_id, activity_id, event_id) VALUES ($1, $2, $3, $4)
		ON CONFLICT (run_id) DO NOTHING`, in.RunID, in.WorkflowID, in.ActivityID, in.EventID)
	if err != nil {
		return fmt.Errorf("logging run %s: %w", in.RunID, err)
	}
	return nil
}

// FinishRun sets the run's final status. Idempotent: a plain UPDATE to a
// fixed value.
func (a *Activities) FinishRun(ctx context.Context, runID, status string) error {
	_, err := a.Pool.Exec(ctx, `UPDATE activity_runs SET status = $2, finished_at = coalesce(finished_at, now()) WHERE run_id = $1`, runID, status)
	if err != nil {
		return fmt.Errorf("finishing run %s: %w", runID, err)
	}
	return nil
}

// LogTask records a task instance. Idempotent: upsert on its ID.
func (a *Activities) LogTask(ctx context.Context, in TaskInput) error {
	_, err := a.Pool.Exec(ctx, `INSERT INTO task_instances (id, run_id, task_type, task_index) VALUES ($1, $2, $3, $4)
		ON CONFLICT (id) DO NOTHING`, in.ID, in.RunID, in.Type, in.Index)
	if err != nil {
		return fmt.Errorf("logging task %s: %w", in.ID, err)
	}
	return nil
}

// FinishTask records a task's outcome. Idempotent: an UPDATE to fixed
// values.
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

// AwaitTask waits for an already-started task workflow's result (adoption).
// Idempotent: it only reads.
func (a *Activities) AwaitTask(ctx context.Context, id string) (TaskResult, error) {
	var tr TaskResult
	err := a.Client.GetWorkflow(ctx, id, "").Get(ctx, &tr)
	return tr, err
}

// WebhookInput is one webhook call.
type WebhookInput struct {
	URL   string                `json:"url,omitempty"`
	Event schemas.WorkflowInput `json:"event"`
}

// IdempotencyKey is the key of the running activity: stable across its
// retries, different for every activity of every workflow.
func IdempotencyKey(ctx context.Context) string {
	info := activity.GetInfo(ctx)
	return fmt.Sprintf("%s:%s:%s", info.WorkflowExecution.ID, info.ActivityType.Name, info.ActivityID)
}

// SendWebhook POSTs the event to the URL with an Idempotency-Key header.
// Idempotent: it runs under that key in the idempotency store, so a retry
// after a delivered webhook returns the stored response without sending it
// again; a retry after a crash mid-call sends the same key, for the
// endpoint to drop.
func (a *Activities) SendWebhook(ctx context.Context, in WebhookInput) (json.RawMessage, error) {
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
	key := IdempotencyKey(ctx)
	fp, err := idempotency.Fingerprint(struct {
		URL  string
		Body []byte
	}{url, body})
	if err != nil {
		return nil, err
	}
	out, err := a.Keys.Do(ctx, key, fp, func(ctx context.Context) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := a.httpClient().Do(req)
		if err != nil {
			return nil, fmt.Errorf("posting webhook: %w", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if resp.StatusCode/100 != 2 {
			return nil, fmt.Errorf("webhook answered %s", resp.Status)
		}
		if !json.Valid(b) {
			b, _ = json.Marshal(string(b))
		}
		return b, nil
	})
	var mm *idempotency.MismatchError
	if errors.As(err, &mm) {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), "BadTask", err)
	}
	if err != nil {
		return nil, err
	}
	if a.AfterWebhook != nil {
		if err := a.AfterWebhook(ctx); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (a *Activities) httpClient() *http.Client {
	if a.HTTP != nil {
		return a.HTTP
	}
	return &http.Client{Timeout: 20 * time.Second}
}

// Register registers the workflows and activities on w.
func Register(w worker.Registry, acts *Activities) {
	w.RegisterWorkflowWithOptions(RunActivityWorkflow, workflow.RegisterOptions{Name: RunActivityWorkflowName})
	w.RegisterWorkflowWithOptions(TaskInstanceWorkflow, workflow.RegisterOptions{Name: TaskInstanceWorkflowName})
	w.RegisterActivity(acts)
}
