package app

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dedupio/dedup/processor"
)

// The admin port (`dedup run`: admin.listen, `dedup worker`:
// worker.admin_listen) listens before anything else is tried, so that
// probes and scrapes get an answer while dedup waits for its
// dependencies:
//
//   - /livez (and its older name /healthz): 200 while the process runs. It
//     checks no dependency: restarting dedup does not bring PostgreSQL back.
//   - /readyz: one line per dependency and one for the process itself,
//     "name: word"; 200 when every word is up or running, 503 otherwise.
//     The words never carry error text (which can name hosts, users or
//     databases): the log has it, once per change of state.
//   - /metrics, and /debug/pprof when admin.pprof is set.

// status is one line of /readyz.
type status struct{ name, word string }

// The process's own words, after the dependencies' (up, down, unknown).
const (
	wordStarting = "starting" // waiting for its dependencies
	wordJoining  = "joining"  // the router is not in its consumer group yet
	wordPaused   = "paused"   // the router holds a dependency down: fetching is paused
	wordRunning  = "running"
)

func (s status) ok() bool { return s.word == wordUp || s.word == wordRunning }

// readyText is the body of /readyz and whether it is a 200.
func readyText(lines []status) (string, bool) {
	var b strings.Builder
	ok := true
	for _, l := range lines {
		fmt.Fprintf(&b, "%s: %s\n", l.name, l.word)
		ok = ok && l.ok()
	}
	return b.String(), ok
}

// routerStatus is /readyz of `dedup run`: the dependencies as the start-up
// waits and the probes found them, each also down while the router holds
// it down (its calls failed for retry.max), then the router (h is nil
// until the router exists).
func routerStatus(deps *dependencies, h *processor.Health) []status {
	var lines []status
	for _, n := range deps.names {
		w := deps.word(n)
		if h != nil && slices.ContainsFunc(h.Down, func(d processor.Dependency) bool { return d.String() == n }) {
			w = wordDown
		}
		lines = append(lines, status{n, w})
	}
	w := wordRunning
	switch {
	case h == nil:
		w = wordStarting
	case !h.InGroup:
		w = wordJoining
	case len(h.Down) > 0:
		w = wordPaused
	}
	return append(lines, status{"router", w})
}

// workerStatus is /readyz of `dedup worker`.
func workerStatus(deps *dependencies, running bool) []status {
	var lines []status
	for _, n := range deps.names {
		lines = append(lines, status{n, deps.word(n)})
	}
	w := wordStarting
	if running {
		w = wordRunning
	}
	return append(lines, status{"worker", w})
}

// registerProcessMetrics registers the runtime collectors,
// dedup_build_info, and readyName (1 when report is a 200): dedup_ready for
// the router, dedup_worker_ready for the worker (two names, so that
// DedupNoReplicaReady, no router ready, is not satisfied by a worker).
func registerProcessMetrics(reg *prometheus.Registry, readyName, readyHelp string, report func() []status) error {
	for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		var are prometheus.AlreadyRegisteredError
		if err := reg.Register(c); err != nil && !errors.As(err, &are) {
			return fmt.Errorf("registering runtime metrics: %w", err)
		}
	}
	ready := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: readyName, Help: readyHelp},
		func() float64 {
			if _, ok := readyText(report()); ok {
				return 1
			}
			return 0
		})
	if err := reg.Register(ready); err != nil {
		return fmt.Errorf("registering the ready gauge: %w", err)
	}
	return registerBuildInfo(reg)
}

// registerBuildInfo exports dedup_build_info (version.go).
func registerBuildInfo(reg prometheus.Registerer) error {
	if err := reg.Register(newBuildInfo()); err != nil {
		return fmt.Errorf("registering dedup_build_info: %w", err)
	}
	return nil
}

// serveAdmin listens on listen (setting names the config key, for the
// error) and serves the admin port; report says what /readyz answers.
func serveAdmin(setting, listen string, withPprof bool, reg *prometheus.Registry, log *slog.Logger, report func() []status) (*http.Server, string, error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, ErrorHandling: promhttp.ContinueOnError}))
	live := func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) }
	mux.HandleFunc("/livez", live)
	mux.HandleFunc("/healthz", live)
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		body, ok := readyText(report())
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = w.Write([]byte(body))
	})
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, "", fmt.Errorf("%s %s: %w", setting, listen, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin server stopped", "err", err)
		}
	}()
	return srv, l.Addr().String(), nil
}
