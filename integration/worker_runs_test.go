package integration

import (
	"context"
	"errors"
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
	"go.temporal.io/sdk/temporal"
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
	delay    map[string]time.Duration
	arrived  map[string]int // requests per path, counted on arrival (before any delay)
	srv      *httptest.Server
}

func newSink(t *testing.T) *sink {
	s := &sink{requests: map[string]int{}, keys: map[string]string{}, sent: map[string]int{}, effects: map[string]int{},
		status: map[string]*atomic.Int32{}, delay: map[string]time.Duration{}, arrived: map[string]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		s.mu.Lock()
		d := s.delay[r.URL.Path]
		s.arrived[r.URL.Path]++
		s.mu.Unlock()
		time.Sleep(d)
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
		_, _ = fmt.Fprintf(w, `{"key":%q}`, key)
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

func (s *sink) slow(path string, d time.Duration) {
	s.mu.Lock()
	s.delay[path] = d
	s.mu.Unlock()
}

func (s *sink) url(path string) string { return s.srv.URL + path }

// effectsAt is how many keys had their effect applied at path.
func (s *sink) effectsAt(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, p := range s.keys {
		if p == path {
			n += s.effects[k]
		}
	}
	return n
}

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
	// The terminated execution never recorded its end: the next one
	// notes it abandoned.
	if got := e.attempts(in.WorkflowID); got != "abandoned,completed" {
		t.Errorf("attempts %q, want abandoned,completed", got)
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
	first := run.GetRunID()
	for _, point := range []string{"early", "past the run log"} {
		// Both resets start from the first execution: its StartRun found
		// no task completed.
		runID := first
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
		var res worker.RunResult
		if err := e.tc.GetWorkflow(ctx, in.WorkflowID, runID).Get(ctx, &res); err != nil {
			t.Fatalf("run reset %s: %v", point, err)
		}
		// Reset early, StartRun runs again and finds every task completed:
		// all adopted. Reset past it, its recorded answer (no task
		// completed yet) replays: the children's starts find their IDs
		// taken by the completed tasks, and await their results.
		for i, tr := range res.Tasks {
			if (point == "early") != tr.Adopted || tr.ID != worker.TaskID(worker.RunID(in.WorkflowID), in.Definition.Tasks[i].Type, i) {
				t.Errorf("after the reset %s, task %d: %+v", point, i, tr)
			}
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
		if status, _ := e.runRow(in.WorkflowID); status != "completed" {
			t.Errorf("after the reset %s: run %s, want completed", point, status)
		}
	}
	// The original execution, the reset-early one, the reset-past-StartRun
	// one (recorded when it ended: it never ran StartRun).
	if got := e.attempts(in.WorkflowID); got != "completed,completed,completed" {
		t.Errorf("attempts %q, want three completed", got)
	}
}

// A webhook answered 400 fails its task at once (a 4xx other than 408, 425
// and 429 is permanent): one request, the task and the run recorded failed
// with the error. Its siblings are not stopped (the decided policy): a slow
// webhook and a noop run to completion, and their results are recorded, for
// a re-run to adopt.
func TestWebhook400FailsTheRunOnce(t *testing.T) {
	e := newEnv(t, 1)
	const queue = "wk-400"
	e.startWorker(queue)
	s := newSink(t)
	s.set("/bad", http.StatusBadRequest)
	s.slow("/slow", 2*time.Second)
	in := runInput("evt-400", schemas.ActivityDefinition{ActivityTimeoutSeconds: 5,
		Tasks: []schemas.TaskSpec{{Type: "webhook", URL: s.url("/bad")}, {Type: "webhook", URL: s.url("/slow")}, {Type: "noop"}}})
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	err := e.startRun(queue, in, enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE).Get(ctx, nil)
	if err == nil || ctx.Err() != nil {
		t.Fatalf("run: %v (context %v), want it failed before the deadline", err, ctx.Err())
	}
	if n, _ := s.at("/bad"); n != 1 {
		t.Errorf("the endpoint got %d requests, want 1", n)
	}
	run := worker.RunID(in.WorkflowID)
	bad := e.taskRow(worker.TaskID(run, "webhook", 0))
	if bad.status != "failed" || !strings.Contains(bad.err, "400") {
		t.Errorf("task instance %+v, want failed with the 400", bad)
	}
	for i, tk := range in.Definition.Tasks[1:] {
		if r := e.taskRow(worker.TaskID(run, tk.Type, i+1)); r.status != "completed" {
			t.Errorf("sibling %d: %+v, want completed (a failed task does not stop its siblings)", i+1, r)
		}
	}
	if n := s.effectsAt("/slow"); n != 1 {
		t.Errorf("the slow sibling's effect applied %d times, want 1", n)
	}
	status, runErr := e.runRow(in.WorkflowID)
	if status != "failed" || !strings.Contains(runErr, "400") || !strings.Contains(runErr, worker.TaskID(run, "webhook", 0)) {
		t.Errorf("run %s (%q), want failed with the task and its 400", status, runErr)
	}
	if got := e.attempts(in.WorkflowID); got != "failed" {
		t.Errorf("attempts %q, want one, failed", got)
	}
}

// A run whose second task fails (its endpoint answers 503, max_attempts 2)
// fails; the event is delivered again and allow_duplicate_failed_only
// starts a second execution: the first task's webhook is adopted, not sent
// again; the second runs again under the same key and succeeds; one
// activity_runs row, with two attempts. A third execution under
// allow_duplicate (the router's rare extra start) adopts everything and
// sends nothing.
func TestRerunAfterAFailedTask(t *testing.T) {
	e := newEnv(t, 1)
	const queue = "wk-rerun-failed"
	e.startWorker(queue)
	s := newSink(t)
	s.set("/b", http.StatusServiceUnavailable)
	in := runInput("evt-rerun-failed", schemas.ActivityDefinition{ActivityTimeoutSeconds: 5, MaxAttempts: 2,
		Tasks: []schemas.TaskSpec{{Type: "webhook", URL: s.url("/a")}, {Type: "webhook", URL: s.url("/b")}}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	failedOnly := enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY
	if err := e.startRun(queue, in, failedOnly).Get(ctx, nil); err == nil {
		t.Fatal("the first run completed; want it failed on its second task")
	}
	run := worker.RunID(in.WorkflowID)
	taskB := worker.TaskID(run, "webhook", 1)
	if r := e.taskRow(taskB); r.status != "failed" || !strings.Contains(r.err, "503") {
		t.Fatalf("second task after the first run: %+v, want failed with the 503", r)
	}
	if n, _ := s.at("/b"); n != 2 {
		t.Errorf("second task's endpoint got %d requests in the first run, want 2 (max_attempts)", n)
	}

	s.set("/b", http.StatusOK)
	var res worker.RunResult
	if err := e.startRun(queue, in, failedOnly).Get(ctx, &res); err != nil {
		t.Fatalf("re-run: %v", err)
	}
	if res.Attempt != 2 || !res.Tasks[0].Adopted || res.Tasks[1].Adopted {
		t.Errorf("re-run result %+v, want attempt 2, the first task adopted, the second run", res)
	}
	if n, keys := s.at("/a"); n != 1 || len(keys) != 1 {
		t.Errorf("first task's webhook: %d requests under %v, want 1 (not sent again)", n, keys)
	}
	if n, keys := s.at("/b"); n != 3 || len(keys) != 1 || s.effectsAt("/b") != 1 {
		t.Errorf("second task's webhook: %d requests under %v, %d effects; want 3 requests (2 failed, 1 ok) under one key, 1 effect", n, keys, s.effectsAt("/b"))
	}
	if r := e.taskRow(taskB); r.status != "completed" || r.executions != 2 || r.err != "" {
		t.Errorf("second task: %+v, want completed after 2 executions", r)
	}
	if n := e.activityRuns(in.WorkflowID); n != 1 {
		t.Errorf("%d activity_runs rows, want 1", n)
	}
	if status, _ := e.runRow(in.WorkflowID); status != "completed" {
		t.Errorf("run %s, want completed", status)
	}
	if got := e.attempts(in.WorkflowID); got != "failed,completed" {
		t.Errorf("attempts %q, want failed,completed", got)
	}

	// An extra execution of a completed workflow ID.
	var extra worker.RunResult
	if err := e.startRun(queue, in, enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE).Get(ctx, &extra); err != nil {
		t.Fatalf("extra execution: %v", err)
	}
	if extra.Attempt != 3 || !extra.Tasks[0].Adopted || !extra.Tasks[1].Adopted || string(extra.Tasks[1].Output) != string(res.Tasks[1].Output) {
		t.Errorf("extra execution %+v, want attempt 3 with both tasks adopted (the same results)", extra)
	}
	if a, _ := s.at("/a"); a != 1 {
		t.Errorf("after the extra execution /a got %d requests, want 1", a)
	}
	if b, _ := s.at("/b"); b != 3 {
		t.Errorf("after the extra execution /b got %d requests, want 3", b)
	}
	if total, counts := e.taskExecutions(3); total != 3 {
		t.Errorf("%d task executions %v, want 3 (the second task twice)", total, counts)
	}
}

// Cancelling a run cancels its running task: the run, its attempt and the
// task are recorded cancelled; a task that had completed stays completed.
func TestCancelledRunIsRecorded(t *testing.T) {
	e := newEnv(t, 1)
	const queue = "wk-cancel"
	e.startWorker(queue)
	s := newSink(t)
	s.slow("/slow", 4*time.Second)
	in := runInput("evt-cancel", schemas.ActivityDefinition{ActivityTimeoutSeconds: 10,
		Tasks: []schemas.TaskSpec{{Type: "webhook", URL: s.url("/slow")}, {Type: "noop"}}})
	run := e.startRun(queue, in, enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE)
	rid := worker.RunID(in.WorkflowID)
	// The noop completes at once; the slow webhook is in its call.
	if !eventually(time.Minute, func() bool {
		s.mu.Lock()
		n := s.arrived["/slow"]
		s.mu.Unlock()
		return n == 1 && e.taskRow(worker.TaskID(rid, "noop", 1)).status == "completed"
	}) {
		t.Fatal("the noop task never completed, or the webhook was never called")
	}
	if err := e.tc.CancelWorkflow(context.Background(), in.WorkflowID, run.GetRunID()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ce *temporal.CanceledError
	if err := run.Get(ctx, nil); !errors.As(err, &ce) {
		t.Fatalf("run: %v, want cancelled", err)
	}
	if r := e.taskRow(worker.TaskID(rid, "webhook", 0)); r.status != "cancelled" {
		t.Errorf("the running task: %+v, want cancelled", r)
	}
	if r := e.taskRow(worker.TaskID(rid, "noop", 1)); r.status != "completed" {
		t.Errorf("the completed task: %+v, want completed", r)
	}
	if status, _ := e.runRow(in.WorkflowID); status != "cancelled" {
		t.Errorf("run %s, want cancelled", status)
	}
	if got := e.attempts(in.WorkflowID); got != "cancelled" {
		t.Errorf("attempts %q, want cancelled", got)
	}
}

type taskRow struct {
	status, err string
	executions  int
}

func (e *env) taskRow(id string) taskRow {
	e.t.Helper()
	var r taskRow
	err := e.pool().QueryRow(context.Background(), `SELECT status, coalesce(error, ''), executions FROM task_instances WHERE id = $1`, id).
		Scan(&r.status, &r.err, &r.executions)
	if err != nil {
		return taskRow{status: "absent: " + err.Error()}
	}
	return r
}

func (e *env) runRow(workflowID string) (status, errText string) {
	e.t.Helper()
	if err := e.pool().QueryRow(context.Background(), `SELECT status, coalesce(error, '') FROM activity_runs WHERE workflow_id = $1`, workflowID).
		Scan(&status, &errText); err != nil {
		return "absent: " + err.Error(), ""
	}
	return status, errText
}

// attempts lists the run's attempts' statuses in order, comma-separated.
func (e *env) attempts(workflowID string) string {
	e.t.Helper()
	var s string
	if err := e.pool().QueryRow(context.Background(), `SELECT coalesce(string_agg(status, ',' ORDER BY attempt), '') FROM activity_run_attempts WHERE run_id = $1`,
		worker.RunID(workflowID)).Scan(&s); err != nil {
		e.t.Fatal(err)
	}
	return s
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

// A delayed start of an older generation (the protocol model's gap 1: a
// zombie router's start of generation 1 that lands after generation 2's
// run has failed too, which Temporal's reuse policy cannot refuse) runs
// nothing: the worker fences it by the generation each run carries in its
// memo, and it fails, as the run it lands behind did, so that a later
// redelivery still re-runs the event (generation 3 runs the task again).
func TestDelayedOlderGenerationRunsNothing(t *testing.T) {
	e := newEnv(t, 1)
	const queue = "wk-superseded"
	e.startWorker(queue)
	s := newSink(t)
	s.set("/a", http.StatusServiceUnavailable) // one attempt per run: each run's task fails once
	in := runInput("evt-superseded", schemas.ActivityDefinition{ActivityTimeoutSeconds: 5, MaxAttempts: 1,
		Tasks: []schemas.TaskSpec{{Type: "webhook", URL: s.url("/a")}}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := func(gen int) error {
		t.Helper()
		run, err := e.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: in.WorkflowID, TaskQueue: queue,
			WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
			Memo:                  map[string]any{schemas.MemoGeneration: gen}}, worker.RunActivityWorkflowName, in)
		if err != nil {
			t.Fatalf("starting generation %d: %v", gen, err)
		}
		return run.Get(ctx, nil)
	}
	for gen := 1; gen <= 2; gen++ {
		if err := start(gen); err == nil {
			t.Fatalf("generation %d completed; want it failed on the 503", gen)
		}
	}
	if n, _ := s.at("/a"); n != 2 {
		t.Fatalf("after two failed runs /a got %d requests, want 2", n)
	}

	err := start(1) // the delayed start
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != "Superseded" {
		t.Fatalf("delayed start of generation 1: %v, want it failed as Superseded", err)
	}
	if n, _ := s.at("/a"); n != 2 {
		t.Errorf("the delayed start sent the webhook: /a got %d requests, want 2", n)
	}
	if got := e.attempts(in.WorkflowID); got != "failed,failed,superseded" {
		t.Errorf("attempts %q, want failed,failed,superseded", got)
	}
	if status, _ := e.runRow(in.WorkflowID); status != "failed" {
		t.Errorf("run %s after the delayed start, want failed (left as generation 2 ended it)", status)
	}

	s.set("/a", http.StatusOK)
	if err := start(3); err != nil {
		t.Fatalf("generation 3: %v", err)
	}
	if n, _ := s.at("/a"); n != 3 || s.effectsAt("/a") != 1 {
		t.Errorf("after generation 3 /a got %d requests and %d effects, want 3 and 1", n, s.effectsAt("/a"))
	}
	if got := e.attempts(in.WorkflowID); got != "failed,failed,superseded,completed" {
		t.Errorf("attempts %q, want failed,failed,superseded,completed", got)
	}
}
