package worker_test

import (
	"os/exec"
	"strings"
	"testing"
)

// Package worker is registered by users in their own Temporal workers
// (docs/worker.md): importing it must register nothing on
// http.DefaultServeMux (STYLE 17), which a worker serving its health
// check with http.ListenAndServe(addr, nil) would publish. expvar does:
// its import registers GET /debug/vars, the process's command line (a
// password given as a flag included) and memory stats. Neither the
// Temporal SDK nor pgx links it; Prometheus's client does, and
// worker/idempotency takes a prometheus.Registerer.
func TestImportingWorkerRegistersNothingOnTheDefaultMux(t *testing.T) {
	t.Skip("finding: package worker links expvar through prometheus/client_golang (worker/idempotency.New takes a prometheus.Registerer), " +
		"so importing it registers GET /debug/vars on http.DefaultServeMux (not fixed: an API change, the Registerer becomes an interface of worker's own or an OpenTelemetry meter)")
	for _, pkg := range []string{"github.com/dedupio/dedup/worker", "github.com/dedupio/dedup/worker/idempotency", "github.com/dedupio/dedup/worker/tenants"} {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 100 || !strings.Contains(string(out), "\n"+pkg+"\n") {
			t.Fatalf("go list printed %d packages for %s, without it: the check checks nothing", len(deps), pkg)
		}
		for _, p := range deps {
			if p == "expvar" || p == "net/http/pprof" {
				t.Errorf("package %s links %s: importing it registers handlers on http.DefaultServeMux", pkg, p)
			}
		}
	}
}
