package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
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
	if err := cfg.ValidateWorker(); err != nil {
		return err
	}
	if err := listenForm(cfg.Worker.AdminListen); err != nil {
		return fmt.Errorf("worker.admin_listen %s: %w", cfg.Worker.AdminListen, err)
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
	// Built to read its files, never used: nothing to flush. Shut down
	// even when ctx is done (a done context would leave its exporter
	// running).
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = tr.Shutdown(sctx)
	return nil
}

// listenForm is whether addr ("" for none) has the form of an address
// net.Listen takes: host:port, the port a number or a service name, the
// host empty, an IP literal (a zone on IPv6 only), or a name. The host is
// read by Go's own resolver, net.Listen's, with its DNS cut off: a form it
// refuses before asking DNS is refused; a name it would ask DNS for passes,
// since whether it resolves is the worker's host's to say.
func listenForm(addr string) error {
	if addr == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return err
	}
	if host == "" {
		return nil
	}
	var asked atomic.Bool
	r := &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		asked.Store(true)
		return nil, errors.New("DNS is not asked")
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := r.LookupNetIP(ctx, "ip", host); err != nil && !asked.Load() {
		return err
	}
	return nil
}
