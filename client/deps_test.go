package client_test

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// forbidden are the packages package client must not link: the ledger's
// writer and its migrations (sink/, goose, pgx), the Temporal SDK and
// gRPC (client/temporalread holds them), HTTP handlers and profilers
// (promhttp, pprof), the worker, and dedup's internal packages (a public
// package may not use them). The standard library's own internal
// packages and those of the dependencies are not dedup's: Go 1.26's
// package runtime imports internal/runtime/pprof/label, so every program
// lists that one.
//
// Nor may it link what registers or reaches beyond the producer's
// write: expvar (its import registers GET /debug/vars, the command line
// and memory stats, on http.DefaultServeMux, which a producer serving
// http.ListenAndServe(addr, nil) would publish), Prometheus (which
// imports expvar), the router (package processor itself; its pure
// decision processor/decide, processor/eventid and processor/tenantsig
// are what the client uses), Kafka's admin client kadm, oauth2 (the
// routers' SASL OAUTHBEARER), or an OpenTelemetry SDK: the client injects
// the caller's trace context through the API's propagator, and which SDK
// (if any) exports spans is the producer's choice, not a library's.
var forbidden = regexp.MustCompile(`goose|grpc|go\.temporal\.io|jackc/pgx|promhttp|^net/http/pprof$|^runtime/pprof$|` +
	`^github\.com/dedupio/dedup/(internal|sink|worker)(/|$)|^github\.com/dedupio/dedup/client/temporalread$|` +
	`^expvar$|^github\.com/prometheus/client_golang(/|$)|^github\.com/dedupio/dedup/processor$|` +
	`^github\.com/twmb/franz-go/pkg/kadm$|^golang\.org/x/oauth2(/|$)|^go\.opentelemetry\.io/otel/sdk(/|$)`)

// maxDeps bounds how many packages client links (go list -deps, the
// standard library's included): 215 since the decision moved to
// processor/decide (290 when client linked the router), 246 since
// Config.Propagator (OpenTelemetry's trace and propagation API, which
// link net/http; 274 while the client also linked the SDK through
// connect/tracing). A new dependency that pulls a tree of its own fails
// here, to be looked at.
const maxDeps = 255

// Package client links Kafka's client and the routers' decision code and
// nothing of the above: a program that only enqueues pulls no database
// driver, no Temporal SDK, no gRPC. (make stranger checks the same from a
// module outside the tree.)
func TestClientDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/dedupio/dedup/client").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, p := range deps {
		if forbidden.MatchString(p) {
			t.Errorf("package client links %s", p)
		}
	}
	if len(deps) < 100 || !strings.Contains(string(out), "github.com/twmb/franz-go/pkg/kgo\n") {
		t.Fatalf("go list printed %d packages without franz-go's kgo: the check checks nothing", len(deps))
	}
	if len(deps) > maxDeps {
		t.Errorf("package client links %d packages, over %d", len(deps), maxDeps)
	}
	t.Logf("package client links %d packages", len(deps))
}
