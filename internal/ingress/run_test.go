package ingress

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/processor/decide"
)

// The admin port answers before the dependencies do, as dedup run's and
// dedup worker's: /livez is up while Kafka cannot be reached, and /readyz
// says the ingress is not ready: still starting, or (once dial.OpenClient
// returned: it waits for neither PostgreSQL nor Temporal) Kafka
// unreachable.
func TestAdminPortBeforeDependencies(t *testing.T) {
	free := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = l.Close() }()
		return l.Addr().String()
	}
	cfg := config.Default()
	cfg.Kafka.Brokers = []string{free()} // nothing listens there
	cfg.Kafka.Group = "dedup"
	cfg.Kafka.ResetOffset = "earliest"
	cfg.Kafka.Topics = []string{"events"}
	cfg.Routes = decide.Routes{{ID: "r", Match: decide.Match{Type: "t"}, WorkflowType: "W", TaskQueue: "q"}}
	cfg.Postgres.URL = "postgres://dedup@127.0.0.1:1/dedup?sslmode=disable"
	cfg.Ingress.Listen = free()
	cfg.Ingress.AdminListen = free()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, RunOptions{Logger: slog.New(slog.DiscardHandler)}) }()

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + cfg.Ingress.AdminListen + path)
		if err != nil {
			return 0, err.Error()
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if code, _ := get("/livez"); code == http.StatusOK {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Run returned while Kafka was unreachable: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("/livez did not answer 200 while Kafka was unreachable")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "starting") && !strings.Contains(body, "kafka") {
		t.Errorf("/readyz while starting: %d %q, want 503 saying starting or naming kafka", code, body)
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics while starting: %d", code)
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned while Kafka was unreachable: %v", err)
	default:
	}
	cancel()
	select {
	case err := <-done:
		t.Logf("Run after its context ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}
