package integration

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.temporal.io/sdk/interceptor"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/dedupio/dedup/connect/tracing"
	"github.com/dedupio/dedup/internal/app"
	"github.com/dedupio/dedup/worker"
	"github.com/dedupio/dedup/worker/idempotency"
)

func init() { namespaces = append(namespaces, "tracing1") }

// One trace from the producer to the activity: an ingress POST with a
// traceparent header is written to Kafka with it, the router's spans
// continue it, the start carries it to Temporal, and the worker's
// interceptor (worker.TracingInterceptor) puts RunActivityWorkflow's
// workflow and activity spans into the same trace.
func TestOneTraceFromIngressPostToTheActivity(t *testing.T) {
	e := newEnvIn(t, 1, "tracing1")
	exp := tracetest.NewInMemoryExporter()
	tr := tracing.NewWith(tracing.Config{Exporter: tracing.ExporterOTLP}, "lab", sdktrace.WithSyncer(exp))

	pool := e.pool()
	keys, err := idempotency.New(pool, idempotency.DefaultOptions(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ep := newEndpoint(t, 0)
	ti, err := worker.TracingInterceptor(tr)
	if err != nil {
		t.Fatal(err)
	}
	w := sdkworker.New(e.tc, "e2e", sdkworker.Options{Interceptors: []interceptor.WorkerInterceptor{ti}})
	if err := worker.Register(w, &worker.Activities{Pool: pool, Keys: keys, Client: e.tc, WebhookURL: ep.srv.URL}); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	cfg := e.config()
	// On for the ingress (it propagates, exports nothing); the router
	// takes the in-memory exporter instead of this endpoint.
	cfg.Tracing = tracing.Config{Exporter: tracing.ExporterOTLP, OTLP: tracing.OTLP{Endpoint: "127.0.0.1:4317", Insecure: true}}
	ctx, cancel := context.WithCancel(context.Background())
	done, ready := make(chan error, 1), make(chan string, 1)
	go func() {
		done <- app.Run(ctx, cfg, app.Options{Registry: prometheus.NewRegistry(), Ready: ready, Tracing: tr,
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("router: %v", err)
		}
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("router exited at start: %v", err)
	}
	in := e.startIngress(cfg, nil)

	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		wid     = "activity-order-confirmation:order-tr1"
	)
	req, _ := http.NewRequest("POST", in.url+"/v1/events", strings.NewReader(`{"type":"order.created","total":5}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", `"order-tr1"`)
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("POST: HTTP %d", res.StatusCode)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
	defer rcancel()
	waitRun(t, in.url, wid)
	if err := e.tc.GetWorkflow(rctx, wid, "").Get(rctx, nil); err != nil {
		t.Fatalf("%s: %v", wid, err)
	}

	got := map[string]bool{}
	var all []string
	for _, s := range exp.GetSpans() {
		all = append(all, s.Name+"@"+s.SpanContext.TraceID().String()[:8])
		if s.SpanContext.TraceID().String() == traceID {
			got[s.Name] = true
		}
	}
	for _, name := range []string{"dedup.decide", "dedup.claim", "dedup.start",
		"RunWorkflow:RunActivityWorkflow"} {
		if !got[name] {
			t.Errorf("no %s span in the POST's trace %s", name, traceID)
		}
	}
	activity := false
	for name := range got {
		activity = activity || strings.HasPrefix(name, "RunActivity:")
	}
	if !activity {
		t.Errorf("no RunActivity span in the POST's trace %s", traceID)
	}
	if t.Failed() {
		t.Logf("spans (name@trace): %v", all)
	}
}
