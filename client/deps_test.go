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
var forbidden = regexp.MustCompile(`goose|grpc|go\.temporal\.io|jackc/pgx|promhttp|^net/http/pprof$|^runtime/pprof$|` +
	`^github\.com/dedupio/dedup/(internal|sink|worker)(/|$)|^github\.com/dedupio/dedup/client/temporalread$`)

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
	t.Logf("package client links %d packages", len(deps))
}
