package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/sink/ledger"
	"github.com/dedupio/dedup/worker"
	"github.com/dedupio/dedup/worker/idempotency"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// lab is one test's database, key store and activity environment (the
// SDK's test environment runs the real activity code; PostgreSQL is real).
type lab struct {
	t    *testing.T
	pool *pgxpool.Pool
	reg  *prometheus.Registry
	acts *worker.Activities
	env  *testsuite.TestActivityEnvironment
}

func newLab(t *testing.T, tasks ...worker.TaskType) *lab {
	t.Helper()
	url := pgtest.NewDatabase(t)
	if err := ledger.Migrate(context.Background(), url); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	reg := prometheus.NewRegistry()
	keys, err := idempotency.New(pool, idempotency.DefaultOptions(), nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	l := &lab{t: t, pool: pool, reg: reg, acts: &worker.Activities{Pool: pool, Keys: keys, Tasks: tasks}}
	var s testsuite.WorkflowTestSuite
	l.env = s.NewTestActivityEnvironment()
	l.env.RegisterActivity(l.acts)
	return l
}

// runTask runs the RunTask activity once (one attempt) and decodes its
// result into out.
func (l *lab) runTask(in worker.TaskInput, out any) error {
	v, err := l.env.ExecuteActivity(l.acts.RunTask, in)
	if err != nil {
		return err
	}
	if out != nil {
		return v.Get(out)
	}
	return nil
}

func taskInput(taskType string, data string) worker.TaskInput {
	wf := "activity-signup:evt-1"
	run := worker.RunID(wf)
	return worker.TaskInput{ID: worker.TaskID(run, taskType, 0), RunID: run, Type: taskType,
		Event: schemas.WorkflowInput{WorkflowID: wf, ActivityID: "signup", EventID: "evt-1", Type: "user.signed_up", Data: json.RawMessage(data)}}
}

func metric(reg *prometheus.Registry, name string) float64 {
	mfs, _ := reg.Gather()
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return total
}

// nonRetryable reports whether err carries a non-retryable application
// error of the given type.
func nonRetryable(err error, typ string) bool {
	var app *temporal.ApplicationError
	return errors.As(err, &app) && app.NonRetryable() && app.Type() == typ
}

type signup struct {
	User  string `json:"user"`
	Email string `json:"email"`
}

type greeted struct {
	MessageID string `json:"message_id"`
	To        string `json:"to"`
}

// A user's task type: typed input (the event's data) and output; its step
// runs once under {task_id}:{step}, a retry of the same task gets the
// stored result without running the step again.
func TestTaskTypeRunsItsStepOnce(t *testing.T) {
	var sends atomic.Int32
	var keys []string
	greet := worker.NewTaskType("greet", func(ctx context.Context, in signup) (greeted, error) {
		info, _ := worker.TaskInfoFrom(ctx)
		if info.Event.EventID != "evt-1" {
			return greeted{}, fmt.Errorf("task info: %+v", info)
		}
		return worker.Step(ctx, "send", in, func(ctx context.Context, key string) (greeted, error) {
			sends.Add(1)
			keys = append(keys, key)
			return greeted{MessageID: "<" + key + ">", To: in.Email}, nil
		})
	})
	l := newLab(t, greet)
	in := taskInput("greet", `{"user":"u1","email":"u1@example.com"}`)
	var first, second greeted
	if err := l.runTask(in, &first); err != nil {
		t.Fatal(err)
	}
	if err := l.runTask(in, &second); err != nil {
		t.Fatal(err)
	}
	if first != second || first.To != "u1@example.com" {
		t.Fatalf("results %+v and %+v, want the same", first, second)
	}
	if sends.Load() != 1 || keys[0] != in.ID+":send" {
		t.Fatalf("step ran %d times under %v, want once under %s:send", sends.Load(), keys, in.ID)
	}
}

// A step that fails runs again on the next attempt (a retryable error);
// one that fails with Permanent is a non-retryable error, stored, and
// returned again without running.
func TestStepFailuresRetryableAndPermanent(t *testing.T) {
	var calls atomic.Int32
	flaky := worker.NewTaskType("flaky", func(ctx context.Context, in json.RawMessage) (string, error) {
		return worker.Step(ctx, "call", nil, func(ctx context.Context, key string) (string, error) {
			if calls.Add(1) == 1 {
				return "", errors.New("connection reset")
			}
			return "ok", nil
		})
	})
	var rejects atomic.Int32
	refused := worker.NewTaskType("refused", func(ctx context.Context, in json.RawMessage) (string, error) {
		return worker.Step(ctx, "call", nil, func(ctx context.Context, key string) (string, error) {
			rejects.Add(1)
			return "", worker.Permanent(errors.New("address rejected"))
		})
	})
	l := newLab(t, flaky, refused)
	err := l.runTask(taskInput("flaky", `{}`), nil)
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.NonRetryable() {
		t.Fatalf("first attempt: %v, want a retryable error", err)
	}
	var out string
	if err := l.runTask(taskInput("flaky", `{}`), &out); err != nil || out != "ok" || calls.Load() != 2 {
		t.Fatalf("second attempt: %q %v after %d calls, want ok after 2", out, err, calls.Load())
	}
	for i := 0; i < 2; i++ {
		if err := l.runTask(taskInput("refused", `{}`), nil); !nonRetryable(err, "Permanent") || !strings.Contains(err.Error(), "address rejected") {
			t.Fatalf("attempt %d: %v, want a non-retryable Permanent error", i, err)
		}
	}
	if rejects.Load() != 1 {
		t.Fatalf("the refused call ran %d times, want 1", rejects.Load())
	}
}

// Data that does not decode into the task's input, and a type the worker
// does not know, fail the task for good.
func TestBadInputAndUnknownTypeArePermanent(t *testing.T) {
	typed := worker.NewTaskType("typed", func(ctx context.Context, in signup) (string, error) { return in.User, nil })
	l := newLab(t, typed)
	if err := l.runTask(taskInput("typed", `{"user": 7}`), nil); !nonRetryable(err, "Permanent") {
		t.Fatalf("bad data: %v", err)
	}
	if err := l.runTask(taskInput("nope", `{}`), nil); !nonRetryable(err, "BadTask") {
		t.Fatalf("unknown type: %v", err)
	}
}

// A step whose lease is taken over while it runs: the attempt fails with a
// retryable LeaseLost error and the lost lease is counted; the next
// attempt reads the stored outcome (this holder's success, since the key
// had none) and does not run the step again.
func TestLeaseLostMidStep(t *testing.T) {
	var l *lab
	var calls atomic.Int32
	stolen := worker.NewTaskType("stolen", func(ctx context.Context, in json.RawMessage) (string, error) {
		return worker.Step(ctx, "call", nil, func(ctx context.Context, key string) (string, error) {
			calls.Add(1)
			if _, err := l.pool.Exec(ctx, `UPDATE idempotency_keys SET lease_token = 'another-worker' WHERE key = $1`, key); err != nil {
				return "", err
			}
			return "done", nil
		})
	})
	l = newLab(t, stolen)
	err := l.runTask(taskInput("stolen", `{}`), nil)
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.NonRetryable() || app.Type() != "LeaseLost" {
		t.Fatalf("got %v, want a retryable LeaseLost error", err)
	}
	if n := metric(l.reg, "dedup_idempotency_lost_leases_total"); n != 1 {
		t.Fatalf("lost leases %v, want 1", n)
	}
	var out string
	if err := l.runTask(taskInput("stolen", `{}`), &out); err != nil || out != "done" || calls.Load() != 1 {
		t.Fatalf("next attempt: %q %v, %d calls; want the stored result, 1 call", out, err, calls.Load())
	}
}

// The built-in webhook: the key {task_id}:post in the Idempotency-Key
// header; 2xx is the result; 4xx other than 408, 425, 429 is permanent and
// the endpoint is not called again; 5xx, 408, 425 and 429 are retried.
func TestWebhookClassifiesAnswers(t *testing.T) {
	var status atomic.Int32
	var hits atomic.Int32
	var gotKey atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		gotKey.Store(r.Header.Get("Idempotency-Key"))
		w.WriteHeader(int(status.Load()))
		_, _ = fmt.Fprint(w, `{"ok":true}`)
	}))
	defer srv.Close()
	l := newLab(t)
	for i, c := range []struct {
		code      int
		permanent bool
	}{{http.StatusBadRequest, true}, {http.StatusNotFound, true}, {http.StatusConflict, true},
		{http.StatusRequestTimeout, false}, {http.StatusTooEarly, false}, {http.StatusTooManyRequests, false}, {http.StatusBadGateway, false}} {
		status.Store(int32(c.code))
		in := taskInput("webhook", `{}`)
		in.ID = worker.TaskID(in.RunID, "webhook", i)
		in.URL = srv.URL
		before := hits.Load()
		err := l.runTask(in, nil)
		var app *temporal.ApplicationError
		if !errors.As(err, &app) || app.NonRetryable() != c.permanent {
			t.Errorf("%d: %v, want permanent=%v", c.code, err, c.permanent)
		}
		_ = l.runTask(in, nil) // the next attempt
		want := int32(1)
		if !c.permanent {
			want = 2
		}
		if n := hits.Load() - before; n != want {
			t.Errorf("%d: %d requests over two attempts, want %d", c.code, n, want)
		}
	}
	status.Store(http.StatusOK)
	in := taskInput("webhook", `{}`)
	in.ID = worker.TaskID(in.RunID, "webhook", 99)
	in.URL = srv.URL
	var out json.RawMessage
	if err := l.runTask(in, &out); err != nil || string(out) != `{"ok":true}` {
		t.Fatalf("200: %s %v", out, err)
	}
	if k := gotKey.Load(); k != in.ID+":post" {
		t.Fatalf("Idempotency-Key %v, want %s:post", k, in.ID)
	}
}

func TestRunIDIsTheNameBasedUUIDOfTheWorkflowID(t *testing.T) {
	id := worker.RunID("activity-welcome-email:evt_abc123")
	u, err := uuid.Parse(id)
	if err != nil || u.Version() != 5 {
		t.Fatalf("%s: %v, version %d; want a v5 UUID", id, err, u.Version())
	}
	ns := uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/dedupio/dedup/worker/activity_runs"))
	if want := uuid.NewSHA1(ns, []byte("activity-welcome-email:evt_abc123")).String(); id != want {
		t.Fatalf("%s, want %s", id, want)
	}
	if id != worker.RunID("activity-welcome-email:evt_abc123") || id == worker.RunID("activity-welcome-email:evt_abc124") {
		t.Fatal("RunID is not a function of the workflow ID alone")
	}
	if got := worker.TaskID(id, "webhook", 2); got != "task-"+id+":webhook:2" {
		t.Fatal(got)
	}
	if got := worker.StepKey("task-x:webhook:2", "post"); got != "task-x:webhook:2:post" {
		t.Fatal(got)
	}
}

func TestStepOutsideATask(t *testing.T) {
	if _, err := worker.Step(context.Background(), "s", nil, func(context.Context, string) (int, error) { return 1, nil }); !errors.Is(err, worker.ErrNoTask) {
		t.Fatal(err)
	}
}

func TestRegisterRefusesBadTaskTypes(t *testing.T) {
	noop := func(context.Context, json.RawMessage) (int, error) { return 0, nil }
	for _, tasks := range [][]worker.TaskType{
		{worker.NewTaskType("a:b", noop)},
		{worker.NewTaskType("", noop)},
		{worker.NewTaskType("webhook", noop)},
		{worker.NewTaskType("x", noop), worker.NewTaskType("x", noop)},
		{{}},
	} {
		var s testsuite.WorkflowTestSuite
		if err := worker.Register(s.NewTestWorkflowEnvironment(), &worker.Activities{Tasks: tasks}); err == nil {
			t.Errorf("%v: registered", tasks)
		}
	}
}

// A step whose key a crashed worker still holds: the attempt fails
// retryably, asking Temporal to come back when that lease runs out (not at
// the retry policy's pace, which could spend every attempt first).
func TestStepHeldByACrashedWorkerRetriesAfterItsLease(t *testing.T) {
	var calls atomic.Int32
	held := worker.NewTaskType("held", func(ctx context.Context, in json.RawMessage) (string, error) {
		return worker.Step(ctx, "call", nil, func(ctx context.Context, key string) (string, error) { calls.Add(1); return "ok", nil })
	})
	l := newLab(t, held)
	in := taskInput("held", `{}`)
	fp, _ := idempotency.Fingerprint(nil)
	if _, err := l.pool.Exec(context.Background(), `INSERT INTO idempotency_keys (key, fingerprint, status, lease_token, lease_until, expires_at)
		VALUES ($1, $2, 'in_progress', 'crashed', now() + interval '30 seconds', now() + interval '1 day')`, worker.StepKey(in.ID, "call"), fp); err != nil {
		t.Fatal(err)
	}
	err := l.runTask(in, nil)
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.NonRetryable() || app.Type() != "InProgress" {
		t.Fatalf("got %v, want a retryable InProgress error", err)
	}
	if d := app.NextRetryDelay(); d < 25*time.Second || d > 31*time.Second {
		t.Fatalf("next retry in %s, want when the 30s lease runs out", d)
	}
	if calls.Load() != 0 {
		t.Fatal("the step ran under another holder's lease")
	}
}
