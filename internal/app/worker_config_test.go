package app

import (
	"strings"
	"testing"
	"time"
)

const workerBase = `
kafka: {brokers: [b:9092], group: g, topics: [t], reset_offset: earliest}
routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]
postgres: {url: "postgres://u@h/d?sslmode=verify-full"}
`

// worker.stop_timeout: how long a stopping worker lets its in-flight
// activities finish (the SDK's WorkerStopTimeout); 30s by default, under
// the worker pod's 45s grace period; 0 cancels them at once.
func TestWorkerStopTimeout(t *testing.T) {
	cfg, err := ParseConfig([]byte(workerBase))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Worker.StopTimeout != 30*time.Second || workerOptions(cfg.Worker).WorkerStopTimeout != 30*time.Second {
		t.Fatalf("default stop_timeout %s (SDK option %s), want 30s", cfg.Worker.StopTimeout, workerOptions(cfg.Worker).WorkerStopTimeout)
	}
	cfg, err = ParseConfig([]byte(workerBase + "worker: {stop_timeout: 2m}\n"))
	if err != nil || workerOptions(cfg.Worker).WorkerStopTimeout != 2*time.Minute {
		t.Fatalf("stop_timeout 2m: %v, %v", workerOptions(cfg.Worker).WorkerStopTimeout, err)
	}
	if _, err := ParseConfig([]byte(workerBase + "worker: {stop_timeout: -1s}\n")); err == nil || !strings.Contains(err.Error(), "worker.stop_timeout") {
		t.Fatalf("a negative stop_timeout: %v, want an error naming worker.stop_timeout", err)
	}
}
