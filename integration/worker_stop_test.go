package integration

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/dedupio/dedup/internal/app"
	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/worker"
	"github.com/dedupio/dedup/worker/idempotency"
)

// String is the log so far (lockedBuffer: schedule_overlap_test.go).
func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// `dedup worker` stopped (SIGTERM: its context cancelled) while a task's
// webhook call is in flight: with the default worker.stop_timeout the
// call finishes and its completion reaches Temporal, instead of the SDK
// cancelling it ("Activity task postprocess error: context canceled") and
// a retry calling the endpoint again. The run, finished by another
// worker, adopts that one call.
func TestWorkerStopLetsActivitiesFinish(t *testing.T) {
	e := newEnv(t, 1)
	ep := newEndpoint(t, 3*time.Second)
	cfg := e.config()
	cfg.Worker.TaskQueue = "wk-stop"
	cfg.Worker.WebhookURL = ep.srv.URL
	cfg.Log.Level = "debug"
	cfg.Worker.KeyLease = 5 * time.Second // a call cut short is retried soon
	var logs lockedBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- app.RunWorker(ctx, cfg, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	}()

	in := runInput("evt-stop", schemas.ActivityDefinition{Tasks: []schemas.TaskSpec{{Type: "webhook"}}, ActivityTimeoutSeconds: 6})
	run, err := e.tc.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: in.WorkflowID, TaskQueue: "wk-stop"}, worker.RunActivityWorkflowName, in)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for ep.seen.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the webhook was not called within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopAt := time.Now()
	cancel() // as SIGTERM does in cmd/dedup
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("RunWorker: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("RunWorker did not return within a minute of its stop")
	}
	t.Logf("the worker stopped %s after SIGTERM, the call in flight taking 3s", time.Since(stopAt).Round(time.Millisecond))

	// Another worker finishes the run.
	pool := e.pool()
	keys, err := idempotency.New(pool, idempotency.DefaultOptions(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := sdkworker.New(e.tc, "wk-stop", sdkworker.Options{})
	if err := worker.Register(w, &worker.Activities{Pool: pool, Keys: keys, Client: e.tc, WebhookURL: ep.srv.URL}); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer rcancel()
	var res worker.RunResult
	if err := run.Get(rctx, &res); err != nil {
		t.Fatal(err)
	}
	ep.mu.Lock()
	requests := map[string]int{}
	for k, n := range ep.requests {
		requests[k] = n
	}
	ep.mu.Unlock()
	if len(requests) != 1 {
		t.Fatalf("keys %v, want one", requests)
	}
	for k, n := range requests {
		if n != 1 {
			t.Errorf("the webhook was called %d times under %s, want once: the stop cut the first call short", n, k)
		}
	}
	for _, bad := range []string{"postprocess error", "context canceled"} {
		if strings.Contains(logs.String(), bad) {
			t.Errorf("the worker logged %q on stop:\n%s", bad, logs.String())
		}
	}
}
