package worker_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/worker"
)

// A run whose definition names a task type this worker has not
// registered fails at once, before any task starts: a non-retryable
// UnknownTaskType failure that names the type and the types the worker
// has, recorded on the run. Its siblings do not run (a known task's side
// effect would be spent on a run that cannot complete), and no task
// instance is recorded; the run fails as a whole, so that a re-run on a
// worker that registers the type runs everything.
func TestUnknownTaskTypeFailsTheRunClearly(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	l := newLab(t)
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	if err := worker.Register(env, l.acts); err != nil {
		t.Fatal(err)
	}
	wf := "activity-onboarding:evt-1"
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: wf})
	env.ExecuteWorkflow(worker.RunActivityWorkflowName, schemas.WorkflowInput{WorkflowID: wf, ActivityID: "onboarding", EventID: "evt-1",
		Definition: &schemas.ActivityDefinition{Tasks: []schemas.TaskSpec{
			{Type: "webhook", URL: srv.URL}, {Type: "create_tenant_schema"}, {Type: "noop"}, {Type: "send_welcome_email"}}}})
	if !env.IsWorkflowCompleted() {
		t.Fatal("the run did not end")
	}
	err := env.GetWorkflowError()
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || !app.NonRetryable() || app.Type() != "UnknownTaskType" {
		t.Fatalf("run error %v, want a non-retryable UnknownTaskType", err)
	}
	for _, want := range []string{`"create_tenant_schema"`, `"send_welcome_email"`, "webhook, noop"} {
		if !strings.Contains(app.Error(), want) {
			t.Errorf("run error %q does not name %s", app.Error(), want)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the webhook sibling was called %d times, want 0", n)
	}
	var status, text string
	var tasks int
	if err := l.pool.QueryRow(context.Background(), `SELECT status, coalesce(error, ''), (SELECT count(*) FROM task_instances) FROM activity_runs WHERE run_id = $1`,
		worker.RunID(wf)).Scan(&status, &text, &tasks); err != nil {
		t.Fatal(err)
	}
	if status != "failed" || !strings.Contains(text, "create_tenant_schema") || tasks != 0 {
		t.Fatalf("run %s (%q), %d task instances; want failed naming the type, none", status, text, tasks)
	}
}

// The check lets a definition of known types run: every task runs and
// the run completes.
func TestKnownTaskTypesRun(t *testing.T) {
	greet := worker.NewTaskType("greet", func(ctx context.Context, in signup) (string, error) { return "hi " + in.User, nil })
	l := newLab(t, greet)
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	if err := worker.Register(env, l.acts); err != nil {
		t.Fatal(err)
	}
	wf := "activity-signup:evt-2"
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: wf})
	env.ExecuteWorkflow(worker.RunActivityWorkflowName, schemas.WorkflowInput{WorkflowID: wf, ActivityID: "signup", EventID: "evt-2",
		Data:       []byte(`{"user":"u2"}`),
		Definition: &schemas.ActivityDefinition{Tasks: []schemas.TaskSpec{{Type: "greet"}, {Type: "noop"}}}})
	var res worker.RunResult
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if err := env.GetWorkflowResult(&res); err != nil || len(res.Tasks) != 2 || string(res.Tasks[0].Output) != `"hi u2"` {
		t.Fatalf("result %+v, %v", res, err)
	}
}
