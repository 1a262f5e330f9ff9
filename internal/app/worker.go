package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/dedupio/dedup/worker"
	"github.com/dedupio/dedup/worker/idempotency"
)

// RunWorker runs RunActivityWorkflow and its activities on the configured
// task queue until ctx is cancelled, and reaps expired idempotency keys.
func RunWorker(ctx context.Context, cfg Config, log *slog.Logger) error {
	if log == nil {
		log = NewLogger(cfg.Log)
	}
	if err := migrateWithRetry(ctx, cfg.Postgres.URL, log); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, cfg.Postgres.URL)
	if err != nil {
		return fmt.Errorf("connecting to postgres: %w", err)
	}
	defer pool.Close()
	// The store's metrics (keys by state, takeovers, lost leases, reaped
	// keys) go to the worker's registry once it has one (nil: not exposed).
	keys, err := idempotency.New(pool, idempotency.Options{Lease: cfg.Worker.KeyLease, TTL: cfg.Worker.KeyTTL}, log, nil)
	if err != nil {
		return err
	}
	tc, err := dialTemporal(ctx, cfg, log, nil)
	if err != nil {
		return err
	}
	defer tc.Close()
	w := sdkworker.New(tc, cfg.Worker.TaskQueue, sdkworker.Options{})
	if err := worker.Register(w, &worker.Activities{Pool: pool, Keys: keys, Client: tc, WebhookURL: cfg.Worker.WebhookURL}); err != nil {
		return err
	}
	if err := w.Start(); err != nil {
		return fmt.Errorf("starting worker: %w", err)
	}
	defer w.Stop()
	log.Info("worker running", "task_queue", cfg.Worker.TaskQueue)
	keys.Maintain(ctx, time.Hour, 10000) // reaps at start, then hourly
	return nil
}
