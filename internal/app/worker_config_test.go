package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/internal/testsupport/pgtest"
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
	cfg, err := config.Parse([]byte(workerBase))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Worker.StopTimeout != 30*time.Second || workerOptions(cfg.Worker).WorkerStopTimeout != 30*time.Second {
		t.Fatalf("default stop_timeout %s (SDK option %s), want 30s", cfg.Worker.StopTimeout, workerOptions(cfg.Worker).WorkerStopTimeout)
	}
	cfg, err = config.Parse([]byte(workerBase + "worker: {stop_timeout: 2m}\n"))
	if err != nil || workerOptions(cfg.Worker).WorkerStopTimeout != 2*time.Minute {
		t.Fatalf("stop_timeout 2m: %v, %v", workerOptions(cfg.Worker).WorkerStopTimeout, err)
	}
	if _, err := config.Parse([]byte(workerBase + "worker: {stop_timeout: -1s}\n")); err == nil || !strings.Contains(err.Error(), "worker.stop_timeout") {
		t.Fatalf("a negative stop_timeout: %v, want an error naming worker.stop_timeout", err)
	}
}

// worker.tenants: off by default; when enabled, its SMTP settings are
// checked at load, naming the field, and the worker's task types are the
// built-ins and the five tenant task types of the audit seed, with the
// tenants table set up in the worker's database.
func TestWorkerTenantsSection(t *testing.T) {
	cfg, err := config.Parse([]byte(workerBase))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Worker.Tenants.Enabled || cfg.Worker.Tenants.SMTP.Port != 587 {
		t.Fatalf("default tenants section %+v, want off, port 587", cfg.Worker.Tenants)
	}
	if _, err := config.Parse([]byte(workerBase + "worker: {tenants: {enabled: true, smtp: {from: hello@example.com}}}\n")); err == nil ||
		!strings.Contains(err.Error(), "worker.tenants.smtp.host") {
		t.Fatalf("enabled without a host: %v, want an error naming worker.tenants.smtp.host", err)
	}
	t.Setenv("SMTP_HOST", "127.0.0.1")
	cfg, err = config.Parse([]byte(workerBase + `worker:
  tenants:
    enabled: true
    smtp: {host: "${SMTP_HOST}", port: 2525, from: hello@example.com}
`))
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.Worker.Tenants.SMTP; s.Host != "127.0.0.1" || s.Port != 2525 {
		t.Fatalf("smtp %+v", s)
	}
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	tasks, err := workerTasks(ctx, cfg.Worker, pool)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tt := range tasks {
		names = append(names, tt.Name())
	}
	if got := strings.Join(names, " "); got != "create_tenant_schema run_migrations send_welcome_email drop_tenant_schema soft_delete_tenant" {
		t.Fatalf("task types %s", got)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM tenants`).Scan(&n); err != nil {
		t.Fatalf("the tenants table: %v", err)
	}
	cfg.Worker.Tenants.Enabled = false
	if tasks, err := workerTasks(ctx, cfg.Worker, pool); err != nil || len(tasks) != 0 {
		t.Fatalf("tenants off: %d task types, %v; want none", len(tasks), err)
	}
}
