package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/worker/idempotency"
)

// Activities are the workflow's side effects. Each documents its
// idempotency guarantee.
type Activities struct {
	Pool   *pgxpool.Pool
	Keys   *idempotency.Store
	Client client.Client // for AwaitTask
	HTTP   *http.Client
	// WebhookURL is the default target of webhook tasks.
	WebhookURL string
	// Tasks are the users' task types, next to the built-in webhook and
	// noop (which they may not redefine).
	Tasks []TaskType
	// AfterWebhook, if set, runs after a webhook's outcome is stored and
	// before the activity returns (tests make it fail, as a crash there
	// would).
	AfterWebhook func(ctx context.Context) error
}

// RunInput identifies a run and its tasks.
type RunInput struct {
	RunID      string   `json:"run_id"`
	WorkflowID string   `json:"workflow_id"`
	ActivityID string   `json:"activity_id"`
	EventID    string   `json:"event_id"`
	TaskIDs    []string `json:"task_ids,omitempty"`
	// Generation is the router's generation of this execution's start
	// (its memo, dedup_generation); 0 when the start carried none.
	Generation int `json:"generation,omitempty"`
}

// RunStart is what StartRun found.
type RunStart struct {
	Attempt int `json:"attempt"`
	// Completed are the results of the run's tasks that completed in an
	// earlier execution, by task ID.
	Completed map[string]json.RawMessage `json:"completed,omitempty"`
	// SupersededBy, when set, is a newer generation than this execution's
	// that the ledger recorded or an earlier execution ran: this one is a
	// delayed start and runs nothing.
	SupersededBy int `json:"superseded_by,omitempty"`
}

// StartRun records the run (one row per workflow ID) and this execution as
// one of its attempts, marks any earlier attempt still 'running' as
// abandoned (only one execution of a workflow ID is ever open), and
// returns the tasks that already completed. Idempotent: upserts on run_id
// and on (run_id, Temporal run ID); a retry finds its attempt.
func (a *Activities) StartRun(ctx context.Context, in RunInput) (RunStart, error) {
	temporalRunID := activity.GetInfo(ctx).WorkflowExecution.RunID
	var st RunStart
	err := pgx.BeginFunc(ctx, a.Pool, func(tx pgx.Tx) error {
		if in.Generation > 0 {
			// The fence: the newest generation the router recorded for
			// the workflow ID, or that an execution of it ran. Under the
			// allow_* policies a start of generation g delayed (a zombie
			// router, a slow retry) until generation g+1's run has failed
			// creates a run Temporal cannot refuse; it must not run the
			// tasks again.
			var newest int
			if err := tx.QueryRow(ctx, `SELECT greatest(
	(SELECT max(l.generation) FROM dedup_ledger l WHERE `+schemas.LedgerRowIs("l", "$1::text", "$4::uuid")+`),
	(SELECT max(generation) FROM activity_run_attempts WHERE run_id = $2 AND temporal_run_id <> $3), 0)`,
				in.WorkflowID, in.RunID, temporalRunID, schemas.LedgerKey(in.WorkflowID)).Scan(&newest); err != nil {
				return err
			}
			if newest > in.Generation {
				st.SupersededBy = newest
				attempt, err := recordAttempt(ctx, tx, in.RunID, temporalRunID, in.Generation, "superseded",
					fmt.Sprintf("superseded by generation %d", newest))
				st.Attempt = attempt
				return err
			}
		}
		if _, err := tx.Exec(ctx, `
INSERT INTO activity_runs (run_id, workflow_id, activity_id, event_id) VALUES ($1, $2, $3, $4)
ON CONFLICT (run_id) DO UPDATE SET status = 'running', error = NULL, finished_at = NULL`,
			in.RunID, in.WorkflowID, in.ActivityID, in.EventID); err != nil {
			return err
		}
		attempt, err := recordAttempt(ctx, tx, in.RunID, temporalRunID, in.Generation, "running", "")
		if err != nil {
			return err
		}
		st.Attempt = attempt
		rows, err := tx.Query(ctx, `SELECT id, coalesce(result, 'null'::jsonb) FROM task_instances WHERE id = ANY($1) AND status = 'completed'`, in.TaskIDs)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var out []byte
			if err := rows.Scan(&id, &out); err != nil {
				return err
			}
			if st.Completed == nil {
				st.Completed = map[string]json.RawMessage{}
			}
			if string(out) == "null" {
				out = nil
			}
			st.Completed[id] = out
		}
		return rows.Err()
	})
	if err != nil {
		return RunStart{}, fmt.Errorf("starting run %s: %w", in.RunID, err)
	}
	return st, nil
}

// recordAttempt upserts the execution's attempt row (numbered on first
// sight) with status, marks other attempts still running abandoned, and
// returns the attempt's number.
func recordAttempt(ctx context.Context, tx pgx.Tx, runID, temporalRunID string, generation int, status, errText string) (int, error) {
	if _, err := tx.Exec(ctx, `
UPDATE activity_run_attempts SET status = 'abandoned', finished_at = now(),
	error = 'closed without recording an end (terminated, timed out or reset)'
WHERE run_id = $1 AND temporal_run_id <> $2 AND status = 'running'`, runID, temporalRunID); err != nil {
		return 0, err
	}
	var attempt int
	err := tx.QueryRow(ctx, `
INSERT INTO activity_run_attempts AS t (run_id, temporal_run_id, attempt, status, error, finished_at, generation)
SELECT $1, $2, coalesce(max(attempt), 0) + 1, $3, NULLIF($4, ''), CASE WHEN $3 = 'running' THEN NULL ELSE now() END, $5
FROM activity_run_attempts WHERE run_id = $1
ON CONFLICT (run_id, temporal_run_id) DO UPDATE SET
	status = CASE WHEN EXCLUDED.status = 'running' THEN t.status ELSE EXCLUDED.status END,
	error = CASE WHEN EXCLUDED.status = 'running' THEN t.error ELSE EXCLUDED.error END,
	finished_at = CASE WHEN EXCLUDED.status = 'running' THEN t.finished_at ELSE coalesce(t.finished_at, now()) END
RETURNING attempt`, runID, temporalRunID, status, errText, generation).Scan(&attempt)
	return attempt, err
}

// RunEnd is how an execution of a run ended.
type RunEnd struct {
	RunInput
	Status string `json:"status"` // completed, failed, cancelled
	Error  string `json:"error,omitempty"`
}

// EndRun records how this execution ended, on its attempt and, unless a
// later execution has begun, on the run. Idempotent: upserts to fixed
// values (the run's row is created if an execution never ran StartRun, as
// after a reset past it).
func (a *Activities) EndRun(ctx context.Context, in RunEnd) error {
	temporalRunID := activity.GetInfo(ctx).WorkflowExecution.RunID
	err := pgx.BeginFunc(ctx, a.Pool, func(tx pgx.Tx) error {
		attempt, err := recordAttempt(ctx, tx, in.RunID, temporalRunID, in.Generation, in.Status, in.Error)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `
INSERT INTO activity_runs AS r (run_id, workflow_id, activity_id, event_id, status, error, finished_at)
SELECT $1, $2, $3, $4, $5, NULLIF($6, ''), now()
WHERE NOT EXISTS (SELECT 1 FROM activity_run_attempts WHERE run_id = $1 AND attempt > $7)
ON CONFLICT (run_id) DO UPDATE SET status = EXCLUDED.status, error = EXCLUDED.error,
	finished_at = (SELECT finished_at FROM activity_run_attempts WHERE run_id = $1 AND attempt = $7)`,
			in.RunID, in.WorkflowID, in.ActivityID, in.EventID, in.Status, in.Error, attempt)
		return err
	})
	if err != nil {
		return fmt.Errorf("ending run %s: %w", in.RunID, err)
	}
	return nil
}

// TaskStart is what StartTask found.
type TaskStart struct {
	Completed bool            `json:"completed,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
}

// StartTask records the task instance as running (counting a new
// execution of its workflow once), unless it completed before: then it
// returns the stored result. Idempotent: an upsert on the task ID that a
// retry of the same execution leaves as it was.
func (a *Activities) StartTask(ctx context.Context, in TaskInput) (TaskStart, error) {
	temporalRunID := activity.GetInfo(ctx).WorkflowExecution.RunID
	var (
		status string
		result []byte
	)
	err := a.Pool.QueryRow(ctx, `
INSERT INTO task_instances AS t (id, run_id, task_type, task_index, temporal_run_id) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (id) DO UPDATE SET
	executions = t.executions + (t.temporal_run_id IS DISTINCT FROM EXCLUDED.temporal_run_id)::int,
	temporal_run_id = EXCLUDED.temporal_run_id,
	status = CASE WHEN t.status = 'completed' THEN t.status ELSE 'running' END,
	error = CASE WHEN t.status = 'completed' THEN t.error ELSE NULL END,
	finished_at = CASE WHEN t.status = 'completed' THEN t.finished_at ELSE NULL END
RETURNING status, result`, in.ID, in.RunID, in.Type, in.Index, temporalRunID).Scan(&status, &result)
	if err != nil {
		return TaskStart{}, fmt.Errorf("starting task %s: %w", in.ID, err)
	}
	if status == "completed" {
		return TaskStart{Completed: true, Result: result}, nil
	}
	return TaskStart{}, nil
}

// TaskEnd is how a task instance ended.
type TaskEnd struct {
	ID     string          `json:"id"`
	Status string          `json:"status"` // completed, failed, cancelled
	Output json.RawMessage `json:"output,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// EndTask records a task's outcome. Idempotent: an update to fixed values;
// a completed task stays completed.
func (a *Activities) EndTask(ctx context.Context, in TaskEnd) error {
	out := []byte(in.Output)
	if len(out) == 0 {
		out = nil
	}
	_, err := a.Pool.Exec(ctx, `
UPDATE task_instances SET status = $2, result = $3, error = NULLIF($4, ''), finished_at = coalesce(finished_at, now())
WHERE id = $1 AND status <> 'completed'`, in.ID, in.Status, out, in.Error)
	if err != nil {
		return fmt.Errorf("ending task %s: %w", in.ID, err)
	}
	return nil
}

// RunTask runs the task's type (a user's, or the built-in webhook or noop)
// with the event's data. Its guarantee is the task type's: work done in
// steps is not repeated by a retry (see Step). Errors: Permanent and
// unknown task types fail the task at once; a lost lease is retried (the
// next attempt reads the stored outcome); a step in progress elsewhere is
// retried when that holder's lease runs out; everything else is retried
// within the definition's bounds.
func (a *Activities) RunTask(ctx context.Context, in TaskInput) (json.RawMessage, error) {
	tt, ok := a.taskType(in.Type)
	if !ok {
		return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("unknown task type %q (this worker has %v)", in.Type, a.taskNames()), "BadTask", nil)
	}
	info := activity.GetInfo(ctx)
	ctx = withTask(ctx, &running{keys: a.Keys, info: TaskInfo{ID: in.ID, RunID: in.RunID, WorkflowID: in.Event.WorkflowID,
		Type: in.Type, Index: in.Index, URL: in.URL, Event: in.Event, Attempt: info.Attempt, Generation: in.Generation}})
	out, err := tt.run(ctx, in.Event.Data)
	if err != nil {
		return nil, taskError(err)
	}
	return out, nil
}

// taskError classifies a task's error for Temporal: the one place that
// decides which task errors are retried.
func taskError(err error) error {
	var (
		mm   *idempotency.MismatchError
		sup  *idempotency.SupersededError
		lost *idempotency.LeaseLostError
		busy *idempotency.InProgressError
		app  *temporal.ApplicationError
	)
	switch {
	case IsPermanent(err):
		return temporal.NewNonRetryableApplicationError(err.Error(), "Permanent", err)
	case errors.As(err, &mm):
		return temporal.NewNonRetryableApplicationError(err.Error(), "BadTask", err)
	case errors.As(err, &sup):
		// A stale execution: a newer generation of the run holds the step.
		return temporal.NewNonRetryableApplicationError(err.Error(), "Superseded", err)
	case errors.As(err, &lost):
		return temporal.NewApplicationError(err.Error(), "LeaseLost", err)
	case errors.As(err, &busy):
		// Another attempt holds the step (it outlived its timeout, or its
		// worker died and its lease has yet to expire): come back when the
		// lease runs out, not at the retry policy's pace, which could spend
		// every attempt before a dead holder's lease expires.
		return temporal.NewApplicationErrorWithOptions(err.Error(), "InProgress", temporal.ApplicationErrorOptions{
			Cause: err, NextRetryDelay: busy.Remaining + 250*time.Millisecond})
	case errors.As(err, &app):
		return err // the task chose its Temporal error
	}
	return temporal.NewApplicationError(err.Error(), "TaskError", err)
}

func (a *Activities) taskType(name string) (TaskType, bool) {
	switch name {
	case "webhook":
		return NewTaskType("webhook", a.webhook), true
	case "noop":
		return NewTaskType("noop", func(context.Context, json.RawMessage) (json.RawMessage, error) { return nil, nil }), true
	}
	for _, t := range a.Tasks {
		if t.name == name {
			return t, true
		}
	}
	return TaskType{}, false
}

func (a *Activities) taskNames() []string {
	names := []string{"webhook", "noop"}
	for _, t := range a.Tasks {
		names = append(names, t.name)
	}
	return names
}

// AwaitTask waits for a task workflow that is already started (by an
// earlier execution of the run, or completed meanwhile) and returns its
// result: the run adopts it instead of starting it again. It polls and
// heartbeats, so a long task does not time it out. The task's own failure
// is final here (the task recorded it); only failures to ask are retried.
// Idempotent: it only reads.
func (a *Activities) AwaitTask(ctx context.Context, id string) (TaskResult, error) {
	for {
		pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		var tr TaskResult
		err := a.Client.GetWorkflow(pctx, id, "").Get(pctx, &tr)
		timedOut := pctx.Err() != nil
		cancel()
		switch {
		case err == nil:
			return tr, nil
		case ctx.Err() != nil:
			return tr, ctx.Err()
		case timedOut:
			activity.RecordHeartbeat(ctx)
			continue
		}
		var we *temporal.WorkflowExecutionError
		if errors.As(err, &we) {
			return tr, temporal.NewNonRetryableApplicationError(ErrorText(err), "TaskFailed", nil)
		}
		return tr, err
	}
}
