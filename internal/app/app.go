package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
	"go.temporal.io/sdk/client"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/sink/ledger"
	"github.com/dedupio/dedup/sink/starter"
)

// NewLogger builds the process logger from the config.
func NewLogger(c LogConfig) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: lvl}
	if c.Format == "text" {
		return slog.New(slog.NewTextHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, opts))
}

// Options are what a caller injects into Run.
type Options struct {
	Logger   *slog.Logger
	Registry *prometheus.Registry
	Hooks    processor.Hooks
	// Ready, if set, is closed once the admin port listens and the router
	// is built (tests wait on it).
	Ready chan<- string
}

// Run migrates the ledger, connects to PostgreSQL and Temporal, serves the
// admin port and runs the router until ctx is cancelled.
func Run(ctx context.Context, cfg Config, o Options) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := o.Logger
	if log == nil {
		log = NewLogger(cfg.Log)
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
	if err := migrateWithRetry(ctx, cfg.Postgres.URL, log); err != nil {
		return err
	}
	led, err := ledger.Open(ctx, cfg.Postgres)
	if err != nil {
		return err
	}
	defer led.Close()
	if err := registerOps(ctx, reg, led, cfg.Postgres, log); err != nil {
		return err
	}
	tc, err := dialTemporal(ctx, cfg, log, newTemporalMetrics(reg))
	if err != nil {
		return err
	}
	defer tc.Close()
	kopts, err := kafkaOpts(cfg)
	if err != nil {
		return err
	}
	if err := checkHorizon(ctx, cfg, tc, log, kopts...); err != nil {
		return err
	}
	kafkaMetrics := kprom.NewMetrics("kafka", kprom.Registerer(reg), kprom.Gatherer(reg))
	r, err := processor.New(cfg.Kafka, led, led, starter.New(tc, cfg.Temporal), reg, log, o.Hooks, append(kopts, kgo.WithHooks(kafkaMetrics))...)
	if err != nil {
		return err
	}
	ready := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "dedup_ready", Help: "1 while the router is in the group and no dependency fails (what /readyz says without its live probes)."},
		func() float64 {
			if r.Ready() != nil {
				return 0
			}
			return 1
		})
	if err := reg.Register(ready); err != nil {
		return fmt.Errorf("registering dedup_ready: %w", err)
	}
	addr := ""
	if cfg.Admin.Listen != "" {
		srv, a, err := serveAdmin(cfg.Admin, reg, log, func(ctx context.Context) error {
			if err := r.Ready(); err != nil {
				return err
			}
			if err := led.Ready(ctx); err != nil {
				return fmt.Errorf("postgres: %w", err)
			}
			if _, err := tc.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
				return fmt.Errorf("temporal: %w", err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		defer srv.Close()
		addr = a
	}
	if o.Ready != nil {
		o.Ready <- addr
	}
	stopSchedules, err := startSchedules(ctx, cfg, led, starter.New(tc, cfg.Temporal), reg, log)
	if err != nil {
		return err
	}
	defer stopSchedules()
	log.Info("router running", "group", cfg.Kafka.Group, "topics", cfg.Kafka.Topics, "admin", addr)
	err = r.Run(ctx)
	log.Info("router stopped", "err", err)
	return err
}

// registerOps exports build info and the ledger's size, and runs the
// ledger purge when a retention is set.
func registerOps(ctx context.Context, reg *prometheus.Registry, led *ledger.Postgres, cfg ledger.Config, log *slog.Logger) error {
	version, revision := "devel", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				revision = s.Value
			}
		}
	}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "dedup_build_info", Help: "Always 1; labels say which build runs."},
		[]string{"version", "revision", "goversion"})
	build.WithLabelValues(version, revision, runtime.Version()).Set(1)
	size := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "dedup_ledger_rows_estimate", Help: "Ledger rows, as PostgreSQL's planner estimates them."},
		func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			n, err := led.RowsEstimate(ctx)
			if err != nil {
				return -1
			}
			return n
		})
	pending := &pendingCollector{led: led, staleAfter: cfg.PendingAlertAfter,
		oldest: prometheus.NewDesc("dedup_ledger_pending_oldest_seconds", "Age of the oldest pending ledger row since it was last claimed: a claim not yet started.", nil, nil),
		stale:  prometheus.NewDesc("dedup_ledger_pending_stale", "Pending ledger rows older than postgres.pending_alert_after: claims no live router is starting.", nil, nil)}
	purged := prometheus.NewCounter(prometheus.CounterOpts{Name: "dedup_ledger_rows_purged_total", Help: "Started ledger rows deleted by the retention purge."})
	for _, c := range []prometheus.Collector{build, size, purged, pending} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("registering ops metrics: %w", err)
		}
	}
	if cfg.Retention > 0 {
		go every(ctx, cfg.PurgeInterval, func() {
			n, err := led.Purge(ctx, cfg.Retention, cfg.PurgeBatch)
			purged.Add(float64(n))
			if err != nil && ctx.Err() == nil {
				log.Warn("ledger purge failed; next interval retries", "err", err)
			} else if n > 0 {
				log.Info("ledger purged", "rows", n, "older_than", cfg.Retention)
			}
		})
	}
	return nil
}

// pendingCollector reads the pending rows' ages once per scrape.
type pendingCollector struct {
	led           *ledger.Postgres
	staleAfter    time.Duration
	oldest, stale *prometheus.Desc
}

func (c *pendingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.oldest; ch <- c.stale }

func (c *pendingCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := c.led.PendingStats(ctx, c.staleAfter)
	if err != nil {
		return // PostgreSQL does not answer: dedup_dependency_up says so; /metrics must still answer
	}
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, st.Oldest.Seconds())
	ch <- prometheus.MustNewConstMetric(c.stale, prometheus.GaugeValue, float64(st.Stale))
}

// every runs fn every d until ctx ends.
func every(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// migrateWithRetry runs the migrations, waiting for PostgreSQL to come up
// (replicas often start before the database in compose and Kubernetes).
func migrateWithRetry(ctx context.Context, url string, log *slog.Logger) error {
	wait := 200 * time.Millisecond
	for {
		err := ledger.Migrate(ctx, url)
		if err == nil || !ledger.Transient(err) {
			return err
		}
		log.Warn("waiting for postgres to migrate the ledger", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, 5*time.Second)
	}
}

func serveAdmin(cfg AdminConfig, reg *prometheus.Registry, log *slog.Logger, ready func(context.Context) error) (*http.Server, string, error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), 3*time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	if cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	l, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, "", fmt.Errorf("admin.listen %s: %w", cfg.Listen, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin server stopped", "err", err)
		}
	}()
	return srv, l.Addr().String(), nil
}
