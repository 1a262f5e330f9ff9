package app

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/dedupio/dedup/connect/tracing/otlp"
	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/internal/dial"
	"github.com/dedupio/dedup/worker/tenants"
)

// CheckWorker is what `dedup worker` checks of a loaded config
// (config.LoadWorker) at its start, short of listening and dialling: its
// admin address, the pool's configuration (postgres.pooler's rule), the
// Temporal client's options (its TLS and API key files), the tenants'
// mail server (its password and CA files, when worker.tenants is enabled)
// and the tracing exporter (its headers file). `dedup validate --worker`
// runs it; each error names its setting.
func CheckWorker(ctx context.Context, cfg config.Config) error {
	if a := cfg.Worker.AdminListen; a != "" {
		_, port, err := net.SplitHostPort(a)
		if err == nil {
			_, err = net.LookupPort("tcp", port)
		}
		if err != nil {
			return fmt.Errorf("worker.admin_listen %s: %w", a, err)
		}
	}
	if _, err := cfg.Postgres.PoolConfig(); err != nil {
		return err
	}
	if _, err := dial.TemporalOptions(cfg, nil, nil); err != nil {
		return err
	}
	if cfg.Worker.Tenants.Enabled {
		if _, err := tenants.NewMailer(cfg.Worker.Tenants.SMTP, "worker.tenants.smtp"); err != nil {
			return err
		}
	}
	tr, err := otlp.New(ctx, cfg.Tracing, "dedup-worker")
	if err != nil || tr == nil {
		return err
	}
	// Built to read its files, never used: nothing to flush.
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_ = tr.Shutdown(ctx)
	return nil
}
