package app

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupio/dedup/processor"
)

// Dependency names, as /readyz and dedup_dependency_up{dependency} show
// them (the router's processor.Dependency names, one vocabulary).
var (
	depKafka    = processor.DepKafka.String()
	depPostgres = processor.DepPostgres.String()
	depTemporal = processor.DepTemporal.String()
)

// dependencies is what the process knows of its dependencies: for each,
// whether it answered the last time it was asked (the start-up waits and
// the probes of the running process ask). It logs each change of state
// once, with the error that made a dependency down (never per attempt,
// and never to the callers of /readyz), and exports dedup_dependency_up
// while it is registered (start-up, and the whole life of `dedup worker`;
// a running router exports its own: see Run).
type dependencies struct {
	log   *slog.Logger
	names []string // in the order /readyz lists them
	desc  *prometheus.Desc

	mu     sync.Mutex
	states map[string]*depState
}

type depState struct {
	known bool // asked at least once with an answer
	up    bool
	since time.Time // of the current state
}

// Status words of a dependency on /readyz.
const (
	wordUp      = "up"
	wordDown    = "down"
	wordUnknown = "unknown" // not answered yet: the first attempt is in flight
)

// dependencyUpHelp is the router's help text of dedup_dependency_up
// (processor/metrics.go), word for word: Run hands the series over to the
// router, and a registry refuses a name that comes back with another help
// text (TestDependencyGaugeHandOver).
const dependencyUpHelp = "1 while the dependency answers, 0 while the router retries it."

func newDependencies(log *slog.Logger, names ...string) *dependencies {
	d := &dependencies{log: log, names: names, states: map[string]*depState{},
		desc: prometheus.NewDesc("dedup_dependency_up", dependencyUpHelp, []string{"dependency"}, nil)}
	for _, n := range names {
		d.states[n] = &depState{since: time.Now()}
	}
	return d
}

// set records the outcome of one attempt to reach dependency name (nil:
// it answered), and logs when that changes its state.
func (d *dependencies) set(name string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.states[name]
	up := err == nil
	if s.known && s.up == up {
		return
	}
	was, wasKnown, downFor := s.up, s.known, time.Since(s.since)
	s.known, s.up, s.since = true, up, time.Now()
	switch {
	case !up:
		d.log.Warn("dependency down", "dependency", name, "err", err)
	case wasKnown && !was:
		d.log.Info("dependency answers again", "dependency", name, "down_for", downFor.Round(time.Millisecond).String())
	default:
		d.log.Info("dependency answers", "dependency", name)
	}
}

// word is dependency name's status word.
func (d *dependencies) word(name string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch s := d.states[name]; {
	case !s.known:
		return wordUnknown
	case s.up:
		return wordUp
	}
	return wordDown
}

// Describe and Collect export dedup_dependency_up: 1 when the dependency
// answered the last attempt, 0 when it did not or has not answered yet.
func (d *dependencies) Describe(ch chan<- *prometheus.Desc) { ch <- d.desc }

func (d *dependencies) Collect(ch chan<- prometheus.Metric) {
	for _, n := range d.names {
		v := 0.0
		if d.word(n) == wordUp {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(d.desc, prometheus.GaugeValue, v, n)
	}
}

// waitFor calls try until it succeeds, fails in a way waiting does not
// heal (refused returns the error to end the process with), or ctx ends;
// between attempts it backs off exponentially, with jitter, from
// retry.Initial up to retry.Max: a dependency's return is noticed within
// retry.max. Each attempt's outcome is recorded under name.
func (d *dependencies) waitFor(ctx context.Context, name string, retry processor.RetryConfig, refused func(error) error, try func(context.Context) error) error {
	wait := retry.Initial
	for {
		err := try(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil {
			d.set(name, nil)
			return nil
		}
		if fatal := refused(err); fatal != nil {
			return fatal // the process ends with it: no "down" line before
		}
		d.set(name, err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait/2 + rand.N(wait/2+1)):
		}
		wait = min(wait*2, retry.Max)
	}
}

// probeInterval is how often a running process asks its dependencies
// whether they answer (for /readyz and, in `dedup worker`,
// dedup_dependency_up). Each probe is one cheap call (a PostgreSQL ping,
// Temporal's health check, a Kafka ApiVersions) bounded by probeTimeout.
const (
	probeInterval = 3 * time.Second
	probeTimeout  = 2 * time.Second
)

// probe asks every dependency of probes every probeInterval until ctx
// ends.
func (d *dependencies) probe(ctx context.Context, probes map[string]func(context.Context) error) {
	once := func() {
		var wg sync.WaitGroup
		for name, p := range probes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				pctx, cancel := context.WithTimeout(ctx, probeTimeout)
				defer cancel()
				err := p(pctx)
				if ctx.Err() == nil {
					d.set(name, err)
				}
			}()
		}
		wg.Wait()
	}
	every(ctx, probeInterval, once)
}

// waitAll runs the waits concurrently and returns the first error; that
// error cancels the others (a dependency that refuses dedup for good ends
// the start-up at once, whatever the others are doing).
func waitAll(ctx context.Context, waits ...func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(waits))
	for _, w := range waits {
		go func() { errs <- w(ctx) }()
	}
	var first error
	for range waits {
		if err := <-errs; err != nil && first == nil {
			first = err
			cancel()
		}
	}
	return first
}
