package ingress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dedupio/dedup/client"
	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/internal/dial"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/tenantsig"
)

// RunOptions are what a caller injects into Run.
type RunOptions struct {
	Logger   *slog.Logger
	Registry *prometheus.Registry
	// Ready, if set, receives the API's address once it listens.
	Ready chan<- string
	// Locked is Options.Locked (tests).
	Locked func(eventID string)
}

// Run serves the ingress (cfg.Ingress) until ctx is cancelled, then
// answers the requests in flight (each waits for its acknowledgement) and
// returns.
func Run(ctx context.Context, cfg config.Config, o RunOptions) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := o.Logger
	if log == nil {
		log = config.NewLogger(cfg.Log)
	}
	reg := o.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		var are prometheus.AlreadyRegisteredError
		if err := reg.Register(c); err != nil && !errors.As(err, &are) {
			return fmt.Errorf("registering runtime metrics: %w", err)
		}
	}
	ic := cfg.Ingress
	tokens, err := CheckConfig(cfg, log)
	if err != nil {
		return err
	}
	if tokens == nil {
		log.Warn("ingress.tokens_file is not set: anyone who reaches ingress.listen can enqueue events, as one anonymous tenant", "listen", ic.Listen,
			"allow_unauthenticated", ic.AllowUnauthenticated)
	}
	var tlsCfg *tls.Config
	if ic.TLS.CertFile != "" {
		kp := &keyPair{cert: ic.TLS.CertFile, key: ic.TLS.KeyFile}
		if _, err := kp.get(nil); err != nil {
			return err
		}
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: kp.get}
	}
	// The admin port first, as dedup run's and dedup worker's: /livez
	// answers while the dependencies are still being reached, /readyz
	// says "starting" until they answered.
	var opened atomic.Pointer[client.Client]
	if ic.AdminListen != "" {
		admin, err := serveAdmin(ic.AdminListen, reg, log, &opened)
		if err != nil {
			return err
		}
		defer func() { _ = admin.Close() }()
	}
	c, err := dial.OpenClient(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer c.Close()
	opened.Store(c)
	locks, err := NewPooledLocks(cfg.Postgres, log, nil)
	if err != nil {
		return err
	}
	defer locks.Close()
	srv, err := NewServer(c, Options{MaxBodyBytes: cfg.IngressMaxBody(), Tokens: tokens, PublicURL: ic.PublicURL,
		ProduceTimeout: ic.ProduceTimeout, Locks: locks, Propagator: dial.PropagatorOf(cfg), Registry: reg, Logger: log, Locked: o.Locked,
		Limits: Limits{Rate: ic.Limits.Rate, Burst: ic.Limits.Burst, MaxConcurrent: ic.Limits.MaxConcurrent,
			MaxConcurrentPerTenant: ic.Limits.MaxConcurrentPerTenant},
		AllowNoKey: !ic.RequireKey, LookupTimeout: ic.LookupTimeout, KeyRetention: cfg.Postgres.Retention})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", ic.Listen)
	if err != nil {
		return fmt.Errorf("ingress.listen %s: %w", ic.Listen, err)
	}
	addr := l.Addr().String()
	if tlsCfg != nil {
		l = tls.NewListener(l, tlsCfg)
	}
	// Every phase of a request is bounded: its headers (size and time),
	// its body (ReadTimeout, max_body_bytes), the answer (WriteTimeout:
	// past the produce timeout and the lookup's, with room to write).
	api := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute,
		WriteTimeout: writeTimeout(ic.ProduceTimeout, ic.LookupTimeout), MaxHeaderBytes: MaxHeaderBytes,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- api.Serve(l) }()
	log.Info("ingress running", "listen", addr, "tls", tlsCfg != nil, "topic", c.Topic(), "admin", ic.AdminListen)
	if o.Ready != nil {
		o.Ready <- addr
	}
	select {
	case err := <-served:
		return fmt.Errorf("ingress server: %w", err)
	case <-ctx.Done():
	}
	// In-flight requests finish: each is answered after its
	// acknowledgement (or its produce timeout).
	sctx, cancel := context.WithTimeout(context.Background(), ic.ProduceTimeout+5*time.Second)
	defer cancel()
	if err := api.Shutdown(sctx); err != nil {
		log.Warn("ingress shutdown", "err", err)
	}
	log.Info("ingress stopped")
	return nil
}

// CheckConfig is dedup ingress's start-up check of a validated config,
// which dedup validate runs too: the exposure rule (CheckExposure), the
// tokens file (LoadTokens, every route it names exists) and the tenant
// keyring (kafka.tenant_keys_file). It returns the tokens (nil without
// tokens_file); log, if set, hears of a later change that breaks the file.
func CheckConfig(cfg config.Config, log *slog.Logger) (*Tokens, error) {
	ic := cfg.Ingress
	if err := ic.CheckExposure(); err != nil {
		return nil, err
	}
	if cfg.Kafka.TenantKeysFile != "" {
		if _, err := tenantsig.Load("kafka.tenant_keys_file", cfg.Kafka.TenantKeysFile); err != nil {
			return nil, err
		}
	}
	if ic.TokensFile == "" {
		return nil, nil
	}
	tokens, err := LoadTokens("ingress.tokens_file", ic.TokensFile)
	if err != nil {
		return nil, err
	}
	known := func(id string) bool {
		return slices.ContainsFunc(cfg.Routes, func(r decide.Route) bool { return r.ID == id })
	}
	if err := tokens.Check(known, log); err != nil {
		return nil, err
	}
	return tokens, nil
}

// MaxHeaderBytes bounds a request's header block (Go's default is 1 MiB):
// CloudEvents binary mode carries attributes in headers, which 64 KiB
// holds with room to spare.
const MaxHeaderBytes = 64 << 10

// writeTimeout is the ingress's WriteTimeout: from the end of the
// request's headers to the end of its answer, which waits for at most a
// lookup and Kafka's acknowledgement (produce_timeout), plus the minute
// a body may take to arrive (ReadTimeout) and 10 s to write the answer.
func writeTimeout(produce, lookup time.Duration) time.Duration {
	return time.Minute + lookup + produce + 10*time.Second
}

// serveAdmin serves /metrics, /livez (and /healthz) and /readyz (Kafka
// answers; "starting" until the client is opened).
func serveAdmin(listen string, reg *prometheus.Registry, log *slog.Logger, opened *atomic.Pointer[client.Client]) (*http.Server, error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, ErrorHandling: promhttp.ContinueOnError}))
	live := func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) }
	mux.HandleFunc("/livez", live)
	mux.HandleFunc("/healthz", live) // as dedup run's admin port: an alias of /livez
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		c := opened.Load()
		if c == nil {
			http.Error(w, "not ready: starting (reaching kafka)", http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		if err := c.Ready(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("ingress.admin_listen %s: %w", listen, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("ingress admin server stopped", "err", err)
		}
	}()
	return srv, nil
}

// keyPair is the server certificate, loaded again when its files change.
type keyPair struct {
	cert, key string

	mu        sync.Mutex
	certT, kT time.Time
	loaded    *tls.Certificate
}

func (k *keyPair) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	cs, err1 := os.Stat(k.cert)
	ks, err2 := os.Stat(k.key)
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := errors.Join(err1, err2); err != nil {
		if k.loaded != nil {
			return k.loaded, nil // a file mid-rotation: keep serving the last good one
		}
		return nil, fmt.Errorf("ingress.tls: %w", err)
	}
	if k.loaded != nil && cs.ModTime().Equal(k.certT) && ks.ModTime().Equal(k.kT) {
		return k.loaded, nil
	}
	c, err := tls.LoadX509KeyPair(k.cert, k.key)
	if err != nil {
		if k.loaded != nil {
			return k.loaded, nil
		}
		return nil, fmt.Errorf("ingress.tls: loading %s and %s: %w", k.cert, k.key, err)
	}
	k.loaded, k.certT, k.kT = &c, cs.ModTime(), ks.ModTime()
	return k.loaded, nil
}
