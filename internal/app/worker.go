package app

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/internal/dial"
	"github.com/dedupio/dedup/sink/ledger"
	"github.com/dedupio/dedup/worker"
	"github.com/dedupio/dedup/worker/idempotency"
	"github.com/dedupio/dedup/worker/tenants"
)

// RunWorker runs RunActivityWorkflow and its activities on the configured
// task queue until ctx is cancelled, and reaps expired idempotency keys.
// Like Run, it serves its admin port (worker.admin_listen) first and waits
// for PostgreSQL and Temporal, whichever is down; it polls its task queue
// once both answer, and returns early only for what waiting does not heal.
func RunWorker(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	if log == nil {
		log = config.NewLogger(cfg.Log)
	}
	reg := prometheus.NewRegistry()
	deps := newDependencies(log, depPostgres, depTemporal)
	var running atomic.Bool
	report := func() []status { return workerStatus(deps, running.Load()) }
	if err := registerProcessMetrics(reg, "dedup_worker_ready", "1 while the worker polls its task queue and PostgreSQL and Temporal answer (what /readyz says).", report); err != nil {
		return err
	}
	if err := reg.Register(deps); err != nil {
		return fmt.Errorf("registering dedup_dependency_up: %w", err)
	}
	addr := ""
	if cfg.Worker.AdminListen != "" {
		srv, a, err := serveAdmin("worker.admin_listen", cfg.Worker.AdminListen, cfg.Admin.Pprof, reg, log, report)
		if err != nil {
			return err
		}
		defer func() { _ = srv.Close() }()
		addr = a
	}
	log.Info("worker starting: waiting for its dependencies", "admin", addr)

	pc, err := cfg.Postgres.PoolConfig() // postgres.pooler's rule, as the routers'
	if err != nil {
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc) // connects lazily
	if err != nil {
		return fmt.Errorf("postgres.url: %w", err)
	}
	defer pool.Close()
	if _, err := dial.TemporalOptions(cfg, log, nil); err != nil {
		return err
	}
	var tc client.Client
	err = waitAll(ctx,
		func(ctx context.Context) error {
			return deps.waitFor(ctx, depPostgres, cfg.Retry, refusedPostgres, func(ctx context.Context) error {
				if err := ping(ctx, pool); err != nil {
					return err
				}
				return ledger.MigrateAtStart(ctx, cfg.Postgres)
			})
		},
		func(ctx context.Context) (err error) {
			tc, err = waitTemporal(ctx, cfg, log, newTemporalMetrics(reg), deps)
			return err
		})
	if tc != nil {
		defer tc.Close()
	}
	if err != nil {
		return err
	}
	// The store's metrics: keys by state, takeovers, lost leases, reaped keys.
	keys, err := idempotency.New(pool, idempotency.Options{Lease: cfg.Worker.KeyLease, TTL: cfg.Worker.KeyTTL}, log, reg)
	if err != nil {
		return err
	}
	tasks, err := workerTasks(ctx, cfg.Worker, pool)
	if err != nil {
		return err
	}
	tr, flushSpans, err := startTracing(ctx, cfg, "dedup-worker", nil, log)
	if err != nil {
		return err
	}
	defer flushSpans()
	wo := workerOptions(cfg.Worker)
	if ti, err := worker.TracingInterceptor(tr); err != nil {
		return err
	} else if ti != nil {
		wo.Interceptors = append(wo.Interceptors, ti)
	}
	w := sdkworker.New(tc, cfg.Worker.TaskQueue, wo)
	if err := worker.Register(w, &worker.Activities{Pool: pool, Keys: keys, Client: tc, WebhookURL: cfg.Worker.WebhookURL, Tasks: tasks}); err != nil {
		return err
	}
	if err := w.Start(); err != nil {
		return fmt.Errorf("starting worker: %w", err)
	}
	defer w.Stop()
	running.Store(true)
	stopProbes := goProbe(ctx, deps, map[string]func(context.Context) error{
		depPostgres: func(ctx context.Context) error { return ping(ctx, pool) },
		depTemporal: func(ctx context.Context) error {
			_, err := tc.CheckHealth(ctx, &client.CheckHealthRequest{})
			return err
		},
	})
	defer stopProbes()
	log.Info("worker running", "task_queue", cfg.Worker.TaskQueue, "admin", addr)
	keys.Maintain(ctx, time.Hour, 10000) // reaps at start, then hourly
	log.Info("worker stopping: in-flight activities may finish", "stop_timeout", cfg.Worker.StopTimeout)
	return nil // w.Stop waits for them
}

// workerTasks are the task types the worker registers next to the
// built-in webhook and noop: the tenant task types when worker.tenants is
// enabled (their tenants table set up first, in the worker's database).
func workerTasks(ctx context.Context, c config.WorkerConfig, pool *pgxpool.Pool) ([]worker.TaskType, error) {
	if !c.Tenants.Enabled {
		return nil, nil
	}
	t, err := tenants.New(pool, c.Tenants, "worker.tenants")
	if err != nil {
		return nil, err
	}
	if err := tenants.Setup(ctx, pool); err != nil {
		return nil, fmt.Errorf("worker.tenants: %w (the worker's postgres user needs CREATE on its database for the tenant task types)", err)
	}
	return t.TaskTypes(), nil
}

// workerOptions are the SDK worker's options from the worker section.
func workerOptions(c config.WorkerConfig) sdkworker.Options {
	return sdkworker.Options{WorkerStopTimeout: c.StopTimeout}
}

// ping asks PostgreSQL to answer within probeTimeout.
func ping(ctx context.Context, pool *pgxpool.Pool) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	return pool.Ping(ctx)
}
