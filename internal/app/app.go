package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/dedupio/dedup/connect/tracing"
	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/internal/dial"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/sink/ledger"
	"github.com/dedupio/dedup/sink/starter"
)

// Options are what a caller injects into Run.
type Options struct {
	Logger   *slog.Logger
	Registry *prometheus.Registry
	// Ready, if set, is closed once the admin port listens and the router
	// is built (tests wait on it).
	Ready chan<- string
	// Tracing, if set, is the router's tracing instead of the tracing
	// section's exporter (the lab's in-memory exporter).
	Tracing *tracing.Tracing
}

// Run serves the admin port, waits for Kafka, PostgreSQL and Temporal
// (whichever is down), migrates the ledger and runs the router until ctx
// is cancelled. It returns early only for what waiting does not heal: a
// config error, or a dependency refusing dedup for good (refused.go).
//
// The router is built, and joins its consumer group, only once all three
// answered: a replica that cannot work yet takes no partitions from one
// that can, and nothing is fetched before PostgreSQL and Temporal answer.
func Run(ctx context.Context, cfg config.Config, o Options) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	rr := newRouterRun(cfg, o)
	closeAdmin, err := rr.serveAdmin()
	if err != nil {
		return err
	}
	defer closeAdmin()
	if err := rr.dialKafka(ctx); err != nil {
		return err
	}
	defer rr.kcl.Close()
	if rr.led, err = ledger.Open(ctx, rr.cfg.Postgres); err != nil {
		return err
	}
	defer rr.led.Close()
	if _, err := dial.TemporalOptions(rr.cfg, rr.log, nil); err != nil {
		return err
	}
	err = rr.waitDependencies(ctx)
	if rr.tc != nil {
		defer rr.tc.Close()
	}
	if err != nil {
		return err
	}
	if err := rr.checkAtStart(ctx); err != nil {
		return err
	}
	kafkaMetrics := kprom.NewMetrics("kafka", kprom.Registerer(rr.reg), kprom.Gatherer(rr.reg))
	rr.reg.Unregister(rr.deps)
	tr, flushSpans, err := startTracing(ctx, rr.cfg, "dedup-router", o.Tracing, rr.log)
	if err != nil {
		return err
	}
	defer flushSpans()
	r, err := rr.newRouter(kafkaMetrics, tr)
	if err != nil {
		return err
	}
	defer rr.startProbes(ctx)()
	if o.Ready != nil {
		o.Ready <- rr.addr
	}
	stopSchedules, err := startSchedules(ctx, rr.cfg, rr.led, starter.New(rr.tc, rr.cfg.Temporal), rr.reg, rr.log)
	if err != nil {
		return err
	}
	defer stopSchedules()
	rr.logTenants()
	rr.log.Info("router running", "group", rr.cfg.Kafka.Group, "topics", rr.cfg.Kafka.Topics, "admin", rr.addr)
	err = r.Run(ctx)
	rr.log.Info("router stopped", "err", err)
	return err
}

// routerRun is what Run's steps share: the config, what the caller
// injected, and the clients as each step opens them (Run closes them).
type routerRun struct {
	cfg    config.Config
	log    *slog.Logger
	reg    *prometheus.Registry
	deps   *dependencies
	router atomic.Pointer[processor.Router]
	addr   string // the admin port's address ("" without one)
	kopts  []kgo.Opt
	kcl    *kgo.Client
	led    *ledger.Postgres
	tc     client.Client
}

func newRouterRun(cfg config.Config, o Options) *routerRun {
	log := o.Logger
	if log == nil {
		log = config.NewLogger(cfg.Log)
	}
	reg := o.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	return &routerRun{cfg: cfg, log: log, reg: reg, deps: newDependencies(log, depKafka, depPostgres, depTemporal)}
}

// report is what /readyz and dedup_ready say: the start-up waits until the
// router is built, then the router's health.
func (rr *routerRun) report() []status {
	if r := rr.router.Load(); r != nil {
		h := r.Health()
		return routerStatus(rr.deps, &h)
	}
	return routerStatus(rr.deps, nil)
}

// serveAdmin registers the readiness and dependency metrics and serves
// the admin port, if one is set; the returned func closes it.
func (rr *routerRun) serveAdmin() (closeAdmin func(), err error) {
	if err := registerProcessMetrics(rr.reg, "dedup_ready", "1 while the router is in its group and every dependency answers (what /readyz says).", rr.report); err != nil {
		return nil, err
	}
	// The router exports dedup_dependency_up once it runs (its retry view);
	// until then, the start-up waits do.
	if err := rr.reg.Register(rr.deps); err != nil {
		return nil, fmt.Errorf("registering dedup_dependency_up: %w", err)
	}
	closeAdmin = func() {}
	if rr.cfg.Admin.Listen != "" {
		srv, a, err := serveAdmin("admin.listen", rr.cfg.Admin.Listen, rr.cfg.Admin.Pprof, rr.reg, rr.log, rr.report)
		if err != nil {
			return nil, err
		}
		closeAdmin = func() { _ = srv.Close() }
		rr.addr = a
	}
	rr.log.Info("router starting: waiting for its dependencies", "admin", rr.addr)
	return closeAdmin, nil
}

// dialKafka builds the Kafka client, after the checks that end start-up
// at once.
func (rr *routerRun) dialKafka(ctx context.Context) error {
	// What fails here is the config, not a dependency: no client has
	// connected yet.
	kopts, err := rr.cfg.Kafka.ClientOpts()
	if err != nil {
		return err
	}
	rr.kopts = kopts
	// A refused login or TLS handshake ends start-up at once, naming the
	// broker and mechanism; a broker that does not answer is waited for.
	if err := dial.CheckKafka(ctx, rr.cfg, rr.log, kopts); err != nil {
		return err
	}
	if rr.kcl, err = kgo.NewClient(kopts...); err != nil {
		return fmt.Errorf("creating kafka client: %w", err)
	}
	return nil
}

// waitDependencies waits, all at once, until PostgreSQL answers (and the
// ledger is migrated), Temporal answers (rr.tc, set even when another wait
// fails, for Run to close) and Kafka answers.
func (rr *routerRun) waitDependencies(ctx context.Context) error {
	cfg, deps := rr.cfg, rr.deps
	mh := newTemporalMetrics(rr.reg)
	return waitAll(ctx,
		func(ctx context.Context) error {
			return deps.waitFor(ctx, depPostgres, cfg.Retry, refusedPostgres, func(ctx context.Context) error {
				if err := rr.led.Ready(ctx); err != nil {
					return err
				}
				return ledger.MigrateAtStart(ctx, cfg.Postgres)
			})
		},
		func(ctx context.Context) (err error) {
			rr.tc, err = waitTemporal(ctx, cfg, rr.log, mh, deps)
			return err
		},
		func(ctx context.Context) error {
			return deps.waitFor(ctx, depKafka, cfg.Retry, refusedKafka, func(ctx context.Context) error {
				return kafkaAnswers(ctx, rr.kcl, cfg.Kafka.Topics)
			})
		})
}

// checkAtStart refuses what the dependencies answer but dedup cannot run
// on, and starts the ledger's ops metrics and purge.
func (rr *routerRun) checkAtStart(ctx context.Context) error {
	var err error
	// Every namespace has dedup's search attributes, or start-up says
	// what to create (searchattrs.go).
	if rr.cfg.Temporal.SearchAttributes, err = resolveSearchAttributes(ctx, rr.cfg, rr.tc, rr.deps, rr.log); err != nil {
		return err
	}
	if err := registerOps(ctx, rr.reg, rr.led, rr.cfg.Postgres, rr.log); err != nil {
		return err
	}
	if err := dial.CheckHorizon(ctx, rr.cfg, rr.tc, rr.log, rr.kopts...); err != nil {
		return err
	}
	// A failover that can rewind the ledger, refused where only the
	// ledger guards (replication.go).
	return checkReplication(ctx, rr.cfg, rr.led, rr.tc, rr.deps, rr.log)
}

// newRouter builds the router on the clients and hands /readyz to it.
func (rr *routerRun) newRouter(kafkaMetrics *kprom.Metrics, tr *tracing.Tracing) (*processor.Router, error) {
	r, err := processor.New(rr.cfg.Kafka, processor.Options{Ledger: rr.led, DeadLetterLog: rr.led, Starter: starter.New(rr.tc, rr.cfg.Temporal).WithTracing(tr),
		Registerer: rr.reg, Log: rr.log, KafkaOpts: []kgo.Opt{kgo.WithHooks(kafkaMetrics)}, Tracing: tr})
	if err != nil {
		return nil, err
	}
	rr.router.Store(r)
	return r, nil
}

// startProbes probes the three dependencies in the background; the
// returned func stops the probes.
func (rr *routerRun) startProbes(ctx context.Context) (stop func()) {
	return goProbe(ctx, rr.deps, map[string]func(context.Context) error{
		depKafka:    rr.kcl.Ping,
		depPostgres: rr.led.Ready,
		depTemporal: func(ctx context.Context) error {
			_, err := rr.tc.CheckHealth(ctx, &client.CheckHealthRequest{})
			return err
		},
	})
}

// logTenants says how records carrying a tenant are taken.
func (rr *routerRun) logTenants() {
	if rr.cfg.Kafka.TenantKeysFile == "" {
		rr.log.Info("kafka.tenant_keys_file is not set: a record carrying the dedup-tenant header is dead-lettered (forged_tenant); " +
			"set it, the file dedup ingress signs with, if an ingress with ingress.tokens_file writes to these topics")
	} else {
		rr.log.Info("tenants' records are taken only signed by dedup ingress", "tenant_keys_file", rr.cfg.Kafka.TenantKeysFile)
	}
}

// waitTemporal dials Temporal and describes the namespace until both
// answer (a client whose dial succeeded is kept: it reconnects by itself).
func waitTemporal(ctx context.Context, cfg config.Config, log *slog.Logger, mh client.MetricsHandler, deps *dependencies) (client.Client, error) {
	var tc client.Client
	err := deps.waitFor(ctx, depTemporal, cfg.Retry, refusedTemporal(cfg), func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if tc == nil {
			c, err := dial.DialTemporal(ctx, cfg, log, mh)
			if err != nil {
				return err
			}
			tc = c
		}
		if _, err := tc.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: cfg.Temporal.Namespace}); err != nil {
			return fmt.Errorf("describing namespace %s: %w", cfg.Temporal.Namespace, err)
		}
		return nil
	})
	if err != nil && tc != nil {
		tc.Close()
		tc = nil
	}
	return tc, err
}

// kafkaAnswers asks the brokers for the topics' metadata: an answer (even
// one saying a topic does not exist yet) means Kafka is up; a topic the
// user may not describe is a refusal (refusedKafka).
func kafkaAnswers(ctx context.Context, cl *kgo.Client, topics []string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	md, err := kadm.NewClient(cl).Metadata(ctx, topics...)
	if err != nil {
		return err
	}
	for _, t := range md.Topics {
		if errors.Is(t.Err, kerr.TopicAuthorizationFailed) {
			return fmt.Errorf("topic %s: %w", t.Topic, t.Err)
		}
	}
	return nil
}

// goProbe runs deps.probe in the background; the returned func stops it
// and waits until it has (before the clients it calls are closed).
func goProbe(ctx context.Context, deps *dependencies, probes map[string]func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); deps.probe(ctx, probes) }()
	return func() { cancel(); <-done }
}

// registerOps exports the ledger's size and what its memory of started
// rows answered, and runs the ledger purge when a retention is set.
func registerOps(ctx context.Context, reg *prometheus.Registry, led *ledger.Postgres, cfg ledger.Config, log *slog.Logger) error {
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
	remembered := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "dedup_ledger_started_cache_hits_total",
		Help: "Workflow IDs a claim answered duplicate from this replica's memory of started rows (postgres.started_cache), with no statement."},
		func() float64 { return float64(led.StartedCacheHits()) })
	for _, c := range []prometheus.Collector{size, purged, pending, remembered} {
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
