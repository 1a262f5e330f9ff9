package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/worker"
	"github.com/dedupio/dedup/worker/idempotency"
)

// endpoint is a webhook receiver that, like Stripe, applies each
// Idempotency-Key's effect once and answers repeats with the first answer.
type endpoint struct {
	mu       sync.Mutex
	requests map[string]int // raw requests per key
	effects  map[string]int // effects applied per key
	delay    time.Duration
	seen     atomic.Int32
	srv      *httptest.Server
}

func newEndpoint(t *testing.T, delay time.Duration) *endpoint {
	ep := &endpoint{requests: map[string]int{}, effects: map[string]int{}, delay: delay}
	ep.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		ep.seen.Add(1)
		time.Sleep(ep.delay)
		ep.mu.Lock()
		ep.requests[key]++
		if ep.effects[key] == 0 {
			ep.effects[key] = 1
		}
		ep.mu.Unlock()
		_, _ = fmt.Fprintf(w, `{"accepted":%q}`, key)
	}))
	t.Cleanup(ep.srv.Close)
	return ep
}

func (e *env) pool() *pgxpool.Pool {
	p, err := pgxpool.New(context.Background(), e.dbURL)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(p.Close)
	return p
}

func runInput(id string, def schemas.ActivityDefinition) schemas.WorkflowInput {
	return schemas.WorkflowInput{WorkflowID: "activity-welcome-email:" + id, ActivityID: "welcome-email", EventID: id,
		IDRule: "field", Type: "user.signed_up", Data: json.RawMessage(`{"user":"u1"}`), Definition: &def}
}

// The audit's acceptance test: an activity that fails after its side
// effect is retried by Temporal; the effect happens once and the workflow
// gets the same result.
func TestWebhookRetriedAfterEffectHappensOnce(t *testing.T) {
	e := newEnv(t, 1)
	pool := e.pool()
	keys, err := idempotency.New(pool, idempotency.DefaultOptions(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ep := newEndpoint(t, 0)
	var attempts atomic.Int32
	acts := &worker.Activities{Pool: pool, Keys: keys, Client: e.tc, WebhookURL: ep.srv.URL,
		AfterWebhook: func(ctx context.Context) error {
			attempts.Add(1)
			if activity.GetInfo(ctx).Attempt == 1 {
				return fmt.Errorf("injected: crash after the webhook was delivered")
			}
			return nil
		}}
	w := sdkworker.New(e.tc, "wk-retry", sdkworker.Options{})
	if err := worker.Register(w, acts); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	in := runInput("evt-retry", schemas.ActivityDefinition{Tasks: []schemas.TaskSpec{{Type: "webhook"}, {Type: "noop"}}, ActivityTimeoutSeconds: 5})
	run, err := e.tc.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: in.WorkflowID, TaskQueue: "wk-retry"}, worker.RunActivityWorkflowName, in)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var res worker.RunResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	if attempts.Load() != 2 {
		t.Fatalf("the webhook activity ran %d attempts, want 2 (one failed after its effect)", attempts.Load())
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if len(ep.requests) != 1 {
		t.Fatalf("endpoint saw keys %v, want one", ep.requests)
	}
	for key, n := range ep.requests {
		if n != 1 {
			t.Fatalf("key %s was sent %d times, want once", key, n)
		}
		if want := fmt.Sprintf(`{"accepted":%q}`, key); len(res.Tasks) != 2 || string(res.Tasks[0].Output) != want {
			t.Fatalf("workflow result %+v, want the first response %s", res, want)
		}
	}
	var runs, tasks int
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM activity_runs WHERE run_id = $1 AND status = 'completed'`, res.RunID).Scan(&runs)
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM task_instances WHERE run_id = $1 AND status = 'completed'`, res.RunID).Scan(&tasks)
	if runs != 1 || tasks != 2 {
		t.Fatalf("activity_runs %d, task_instances %d; want 1 and 2", runs, tasks)
	}
}

// A `dedup worker` process is killed mid-workflow; a new one finishes the
// run: one activity_runs row, each task instance once, each webhook key's
// effect once.
func TestWorkerKilledMidWorkflow(t *testing.T) {
	e := newEnv(t, 1)
	ep := newEndpoint(t, 600*time.Millisecond)
	cfg := e.config()
	cfg.Worker.TaskQueue = "wk-kill"
	cfg.Worker.WebhookURL = ep.srv.URL
	// A lease far longer than an attempt (3s), and only 3 attempts: the
	// killed worker's keys stay held for up to 10s after the kill, and the
	// retries must wait for them (InProgress asks Temporal to come back
	// when the lease runs out) instead of spending their attempts.
	cfg.Worker.KeyLease = 10 * time.Second
	path := e.writeConfig(cfg)
	spawnWorker := func() *proc {
		p := &proc{name: "worker", done: make(chan struct{})}
		p.cmd = exec.Command(dedupBin, "worker", "--config", path)
		p.cmd.Stdout, p.cmd.Stderr = io.Discard, os.Stderr
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { p.err = p.cmd.Wait(); close(p.done) }()
		t.Cleanup(func() {
			if p.running() {
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		})
		return p
	}
	w1 := spawnWorker()
	const webhooks = 4
	def := schemas.ActivityDefinition{ActivityTimeoutSeconds: 3, MaxAttempts: 3}
	for i := 0; i < webhooks; i++ {
		def.Tasks = append(def.Tasks, schemas.TaskSpec{Type: "webhook"})
	}
	def.Tasks = append(def.Tasks, schemas.TaskSpec{Type: "noop"})
	in := runInput("evt-kill", def)
	run, err := e.tc.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: in.WorkflowID, TaskQueue: "wk-kill"}, worker.RunActivityWorkflowName, in)
	if err != nil {
		t.Fatal(err)
	}
	if !eventually(time.Minute, func() bool { return ep.seen.Load() >= 1 }) {
		t.Fatal("the first worker never called the webhook")
	}
	w1.signal(t, syscall.SIGKILL)
	w1.wait(t, 10*time.Second)
	t.Logf("killed the worker after %d webhook requests had arrived", ep.seen.Load())
	w2 := spawnWorker()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var res worker.RunResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	w2.signal(t, syscall.SIGTERM)
	w2.wait(t, 30*time.Second)

	pool := e.pool()
	if res.RunID != worker.RunID(in.WorkflowID) {
		t.Errorf("run ID %s, want RunID(workflow ID) %s", res.RunID, worker.RunID(in.WorkflowID))
	}
	var runs int
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM activity_runs WHERE workflow_id = $1 AND status = 'completed'`, in.WorkflowID).Scan(&runs)
	if runs != 1 {
		t.Errorf("%d completed activity_runs rows, want 1", runs)
	}
	if got := e.attempts(in.WorkflowID); got != "completed" {
		t.Errorf("attempts %q, want one (a worker crash is not a new execution)", got)
	}
	var reruns int
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM task_instances WHERE run_id = $1 AND (executions <> 1 OR status <> 'completed')`, res.RunID).Scan(&reruns)
	if reruns != 0 {
		t.Errorf("%d task instances not completed in one execution", reruns)
	}
	rows, err := pool.Query(ctx, `SELECT id FROM task_instances WHERE run_id = $1 ORDER BY task_index`, res.RunID)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for rows.Next() {
		var id string
		_ = rows.Scan(&id)
		ids = append(ids, id)
	}
	rows.Close()
	var want []string
	for i, tk := range def.Tasks {
		want = append(want, worker.TaskID(res.RunID, tk.Type, i))
	}
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Errorf("task instances %v, want %v", ids, want)
	}
	execs, _ := e.listExecutions()
	for _, id := range append(want, in.WorkflowID) {
		if execs[id] != 1 {
			t.Errorf("%s has %d executions, want 1", id, execs[id])
		}
	}
	ep.mu.Lock()
	if len(ep.effects) != webhooks {
		t.Errorf("webhook effects for %d keys, want %d", len(ep.effects), webhooks)
	}
	repeats := 0
	for i := 0; i < webhooks; i++ {
		key := worker.StepKey(worker.TaskID(res.RunID, "webhook", i), "post")
		if ep.effects[key] != 1 {
			t.Errorf("key %s applied %d times, want once", key, ep.effects[key])
		}
		repeats += ep.requests[key] - 1
	}
	// A repeat is a call the kill cut short after it reached the endpoint
	// and before its outcome was stored: the new worker sent it again
	// under the same key, and the endpoint dropped it. At most one per
	// webhook in flight at the kill, so at most one per webhook.
	if repeats > webhooks {
		t.Errorf("%d repeated requests, more than the %d webhooks that can be in flight at the kill", repeats, webhooks)
	}
	t.Logf("deliveries: %d keys applied once each; %d repeated requests dropped by the endpoint (requests per key %v)", len(ep.effects), repeats, ep.requests)
	ep.mu.Unlock()

	if path := os.Getenv("DEDUP_RECORD_HISTORY"); path != "" {
		saveHistory(t, e.tc, in.WorkflowID, run.GetRunID(), path) // the Temporal run, not the logical run ID
	}
}

// saveHistory writes a run's history as JSON, for worker's replay test.
func saveHistory(t *testing.T, tc client.Client, id, runID, path string) {
	it := tc.GetWorkflowHistory(context.Background(), id, runID, false, 0)
	h := &history.History{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		h.Events = append(h.Events, ev)
	}
	b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("saved %d history events to %s", len(h.Events), path)
}
