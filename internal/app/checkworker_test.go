package app

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dedupio/dedup/internal/config"
)

// CheckWorker builds the tracing exporter only to read its files, and
// shuts it down before it returns: nothing it started outlives it, even
// when its caller's ctx is already done (a stranger's cancelled ctx, a
// validate interrupted by SIGINT). TracerProvider.Shutdown returns at once
// on a done ctx without stopping its span processor, so the shutdown must
// not take the caller's cancellation.
func TestCheckWorkerLeavesNothingRunningWhenItsContextIsDone(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	cfg := config.Default()
	cfg.Tracing.Exporter = "otlp"
	cfg.Tracing.OTLP.Endpoint = "127.0.0.1:4317"
	cfg.Tracing.OTLP.Insecure = true
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = CheckWorker(ctx, cfg) // an error is fine; goroutines left running are not
	time.Sleep(500 * time.Millisecond)
}

// CheckWorker is exported: called with a config that was not loaded
// (config.Config{}: no task queue, no log format, retry 0), it must not
// call it fit for dedup worker, which cannot run with it (an empty task
// queue, a wait with no backoff).
func TestCheckWorkerRefusesAConfigTheWorkerCannotRunWith(t *testing.T) {
	if err := CheckWorker(context.Background(), config.Config{}); err == nil {
		t.Errorf("CheckWorker(config.Config{}): nil, want an error naming what the worker lacks (worker.task_queue)")
	}
}
