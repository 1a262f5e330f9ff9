package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/worker"
	"github.com/dedupio/dedup/worker/idempotency"
)

// sink is a webhook receiver with one behaviour per path. Like Stripe, it
// applies each Idempotency-Key's effect once (on its first 2xx answer) and
// counts every request, so a test sees both what was sent and what was
// done.
type sink struct {
	mu       sync.Mutex
	requests map[string]int    // per path
	keys     map[string]string // key -> path
	sent     map[string]int    // requests per key
	effects  map[string]int    // effects applied per key
	status   map[string]*atomic.Int32
	srv      *httptest.Server
}

func newSink(t *testing.T) *sink {
	s := &sink{requests: map[string]int{}, keys: map[string]string{}, sent: map[string]int{}, effects: map[string]int{},
		status: map[string]*atomic.Int32{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		code := s.answer(r.URL.Path)
		s.mu.Lock()
		s.requests[r.URL.Path]++
		s.keys[key] = r.URL.Path
		s.sent[key]++
		if code/100 == 2 && s.effects[key] == 0 {
			s.effects[key] = 1
		}
		s.mu.Unlock()
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"key":%q}`, key)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// answer is the status a path answers now (200 unless set).
func (s *sink) answer(path string) int {
	s.mu.Lock()
	st := s.status[path]
	s.mu.Unlock()
	if st == nil || st.Load() == 0 {
		return http.StatusOK
	}
	return int(st.Load())
}

func (s *sink) set(path string, code int) {
	s.mu.Lock()
	if s.status[path] == nil {
		s.status[path] = &atomic.Int32{}
	}
	s.status[path].Store(int32(code))
	s.mu.Unlock()
}

func (s *sink) url(path string) string { return s.srv.URL + path }

// at returns the requests a path received and the keys they carried.
func (s *sink) at(path string) (requests int, keys []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, p := range s.keys {
		if p == path {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return s.requests[path], keys
}

// startWorker runs an in-process worker on queue with the env's database.
func (e *env) startWorker(queue string) *worker.Activities {
	e.t.Helper()
	pool := e.pool()
	keys, err := idempotency.New(pool, idempotency.DefaultOptions(), nil, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	acts := &worker.Activities{Pool: pool, Keys: keys, Client: e.tc}
	w := sdkworker.New(e.tc, queue, sdkworker.Options{})
	if err := worker.Register(w, acts); err != nil {
		e.t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(w.Stop)
	return acts
}

func (e *env) startRun(queue string, in schemas.WorkflowInput, policy enumspb.WorkflowIdReusePolicy) client.WorkflowRun {
	e.t.Helper()
	run, err := e.tc.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: in.WorkflowID, TaskQueue: queue,
		WorkflowIDReusePolicy: policy}, worker.RunActivityWorkflowName, in)
	if err != nil {
		e.t.Fatal(err)
	}
	return run
}

// taskExecutions counts the executions of task workflows (IDs task-...),
// waiting for visibility to settle at want or more.
func (e *env) taskExecutions(want int) (int, map[string]int) {
	e.t.Helper()
	var counts map[string]int
	total := 0
	eventually(30*time.Second, func() bool {
		all, _ := e.listExecutions()
		counts, total = map[string]int{}, 0
		for id, n := range all {
			if strings.HasPrefix(id, "task-") {
				counts[id] = n
				total += n
			}
		}
		return total >= want
	})
	time.Sleep(time.Second) // one more look: nothing beyond want
	all, _ := e.listExecutions()
	counts, total = map[string]int{}, 0
	for id, n := range all {
		if strings.HasPrefix(id, "task-") {
			counts[id] = n
			total += n
		}
	}
	return total, counts
}

func (e *env) activityRuns(workflowID string) int {
	e.t.Helper()
	var n int
	if err := e.pool().QueryRow(context.Background(), `SELECT count(*) FROM activity_runs WHERE workflow_id = $1`, workflowID).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// A run is terminated while its second task keeps failing; the event is
// delivered again and allow_duplicate_failed_only starts a second run of the
// same workflow ID. The first task's webhook, delivered by the first run, is
// not sent again; the second task is not started twice either (the second
// run adopts the task the first one left running), and there is one logical
// run.
func TestRerunAfterTerminateAdoptsTasks(t *testing.T) {
	e := newEnv(t, 1)
	const queue = "wk-rerun-terminate"
	e.startWorker(queue)
	s := newSink(t)
	s.set("/b", http.StatusServiceUnavailable)
	in := runInput("evt-rerun-terminate", schemas.ActivityDefinition{ActivityTimeoutSeconds: 5,
		Tasks: []schemas.TaskSpec{{Type: "webhook", URL: s.url("/a")}, {Type: "webhook", URL: s.url("/b")}}})
	policy := enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY
	run := e.startRun(queue, in, policy)
	if !eventually(time.Minute, func() bool { a, _ := s.at("/a"); b, _ := s.at("/b"); return a >= 1 && b >= 1 }) {
		t.Fatal("the first run never called both webhooks")
	}
	time.Sleep(500 * time.Millisecond) // let the first task's outcome be stored
	if err := e.tc.TerminateWorkflow(context.Background(), in.WorkflowID, run.GetRunID(), "test: the run is stuck"); err != nil {
		t.Fatal(err)
	}
	s.set("/b", http.StatusOK)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.startRun(queue, in, policy).Get(ctx, nil); err != nil {
		t.Fatalf("second run: %v", err)
	}
	if n, keys := s.at("/a"); n != 1 || len(keys) != 1 {
		t.Errorf("first task's webhook: %d requests under keys %v, want one (the second run must not send it again)", n, keys)
	}
	if _, keys := s.at("/b"); len(keys) != 1 {
		t.Errorf("second task's webhook under keys %v, want one key across both runs", keys)
	}
	if total, counts := e.taskExecutions(2); total != 2 {
		t.Errorf("%d task executions %v, want 2 (one per task)", total, counts)
	}
	if n := e.activityRuns(in.WorkflowID); n != 1 {
		t.Errorf("%d activity_runs rows for %s, want 1", n, in.WorkflowID)
	}
}

// Resetting a completed run, to an early event and to just after the run
// was logged, re-spawns no task and sends no webhook again; the run keeps
// its one activity_runs row.
func TestResetDoesNotRespawnTasks(t *testing.T) {
	e := newEnv(t, 1)
	const queue = "wk-reset"
	e.startWorker(queue)
	s := newSink(t)
	in := runInput("evt-reset", schemas.ActivityDefinition{ActivityTimeoutSeconds: 5,
		Tasks: []schemas.TaskSpec{{Type: "webhook", URL: s.url("/a")}, {Type: "webhook", URL: s.url("/b")}, {Type: "noop"}}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := e.startRun(queue, in, enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE)
	if err := run.Get(ctx, nil); err != nil {
		t.Fatal(err)
	}
	runID := run.GetRunID()
	for _, point := range []string{"early", "past the run log"} {
		events := e.history(in.WorkflowID, runID)
		var at int64
		sawActivity := false
		for _, ev := range events {
			switch ev.GetEventType() {
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
				sawActivity = true
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
				if at == 0 && (point == "early" || sawActivity) {
					at = ev.GetEventId()
				}
			}
		}
		if at == 0 {
			t.Fatalf("reset %s: no reset point in %d events", point, len(events))
		}
		resp, err := e.tc.ResetWorkflowExecution(ctx, &workflowservice.ResetWorkflowExecutionRequest{
			Namespace: e.namespace, WorkflowExecution: execution(in.WorkflowID, runID), Reason: "test: reset " + point,
			WorkflowTaskFinishEventId: at, RequestId: fmt.Sprintf("reset-%s-%d", runID, at)})
		if err != nil {
			t.Fatalf("reset %s to event %d: %v", point, at, err)
		}
		runID = resp.GetRunId()
		if err := e.tc.GetWorkflow(ctx, in.WorkflowID, runID).Get(ctx, nil); err != nil {
			t.Fatalf("run reset %s: %v", point, err)
		}
		for _, p := range []string{"/a", "/b"} {
			if n, keys := s.at(p); n != 1 {
				t.Errorf("after the reset %s, %s got %d requests under keys %v, want 1", point, p, n, keys)
			}
		}
		if total, counts := e.taskExecutions(3); total != 3 {
			t.Errorf("after the reset %s: %d task executions %v, want 3 (one per task)", point, total, counts)
		}
		if n := e.activityRuns(in.WorkflowID); n != 1 {
			t.Errorf("after the reset %s: %d activity_runs rows, want 1", point, n)
		}
	}
}

// A webhook answered 400 fails its task at once (a 4xx other than 408, 425
// and 429 is permanent): one request, the task and the run recorded
// failed with the error.
func TestWebhook400FailsTheRunOnce(t *testing.T) {
	e := newEnv(t, 1)
	const queue = "wk-400"
	e.startWorker(queue)
	s := newSink(t)
	s.set("/bad", http.StatusBadRequest)
	in := runInput("evt-400", schemas.ActivityDefinition{ActivityTimeoutSeconds: 5,
		Tasks: []schemas.TaskSpec{{Type: "webhook", URL: s.url("/bad")}}})
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	err := e.startRun(queue, in, enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE).Get(ctx, nil)
	if err == nil || ctx.Err() != nil {
		t.Fatalf("run: %v (context %v), want it failed before the deadline", err, ctx.Err())
	}
	if n, _ := s.at("/bad"); n != 1 {
		t.Errorf("the endpoint got %d requests, want 1", n)
	}
	pool := e.pool()
	var status, taskErr string
	if err := pool.QueryRow(ctx, `SELECT status, coalesce(error, '') FROM task_instances`).Scan(&status, &taskErr); err != nil {
		t.Fatal(err)
	}
	if status != "failed" || !strings.Contains(taskErr, "400") {
		t.Errorf("task instance %s (%q), want failed with the 400", status, taskErr)
	}
	var runStatus, runErr string
	if err := pool.QueryRow(ctx, `SELECT status, coalesce(error, '') FROM activity_runs WHERE workflow_id = $1`, in.WorkflowID).Scan(&runStatus, &runErr); err != nil {
		t.Fatal(err)
	}
	if runStatus != "failed" || !strings.Contains(runErr, "400") {
		t.Errorf("run %s (%q), want failed with the 400", runStatus, runErr)
	}
}

func execution(id, runID string) *commonpb.WorkflowExecution {
	return &commonpb.WorkflowExecution{WorkflowId: id, RunId: runID}
}

// history is a run's events.
func (e *env) history(id, runID string) []*historypb.HistoryEvent {
	e.t.Helper()
	it := e.tc.GetWorkflowHistory(context.Background(), id, runID, false, 0)
	var out []*historypb.HistoryEvent
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, ev)
	}
	return out
}
