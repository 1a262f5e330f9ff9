package app

import (
	"context"
	"fmt"
	"net"
	"strings"
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
// net.Listen takes: host:port, the host empty, an IP literal or a DNS
// name, the port a number or a service name. Whether the name resolves,
// or the address is this host's, is the worker's host's to say.
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
	ip, _, _ := strings.Cut(host, "%") // an IPv6 zone
	if host == "" || net.ParseIP(ip) != nil || dnsName(host) {
		return nil
	}
	return fmt.Errorf("host %q is neither an IP address nor a DNS name", host)
}

// dnsName is whether s is a DNS host name: dot-separated labels of
// letters, digits and hyphens, 1 to 63 bytes, no hyphen at either end,
// 253 bytes at most (a final dot allowed).
func dnsName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range []byte(label) {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}
