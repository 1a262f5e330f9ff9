package otlp

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/dedupio/dedup/connect/tracing"
)

// Off is no exporter at all; a headers file is read as "name: value"
// lines, and a bad one is refused naming the setting.
func TestNewReadsTheHeadersFile(t *testing.T) {
	if tr, err := New(context.Background(), tracing.Config{}, "x"); tr != nil || err != nil {
		t.Fatalf("off: %v, %v; want nil, nil", tr, err)
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("# vendor\nX-Api-Key: s3cret\n\nteam: core\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := readHeaders(good)
	if err != nil || h["x-api-key"] != "s3cret" || h["team"] != "core" || len(h) != 2 {
		t.Errorf("headers %v, %v", h, err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("no colon here\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := tracing.Config{Exporter: tracing.ExporterOTLP, OTLP: tracing.OTLP{Endpoint: "127.0.0.1:4317", Insecure: true, HeadersFile: bad}}
	if _, err := New(context.Background(), cfg, "x"); err == nil || !strings.Contains(err.Error(), "tracing.otlp.headers_file") {
		t.Errorf("a bad headers file: %v, want an error naming tracing.otlp.headers_file", err)
	}
	cfg.OTLP.HeadersFile = good
	tr, err := New(context.Background(), cfg, "x")
	if err != nil || tr == nil {
		t.Fatalf("on: %v, %v", tr, err)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Errorf("shutdown with nothing to flush: %v", err)
	}
}

// collector is a fake OTLP gRPC collector: it counts the spans exported to it.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	spans chan int
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	n := 0
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			n += len(ss.GetSpans())
		}
	}
	c.spans <- n
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// A gRPC "unix:" endpoint is one the exporter dials and exports to, and a
// socket path may hold an '@' (a systemd instance's runtime directory,
// otelcol@main): that '@' is no user info, and the endpoint is taken.
func TestNewTakesAUnixSocketEndpointWithAnAtSign(t *testing.T) {
	dir, err := os.MkdirTemp("", "otelcol@main")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	sock := filepath.Join(dir, "otlp.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	c := &collector{spans: make(chan int, 16)}
	coltracepb.RegisterTraceServiceServer(srv, c)
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()

	cfg := tracing.Config{Exporter: tracing.ExporterOTLP, OTLP: tracing.OTLP{Endpoint: "unix:" + sock, Insecure: true}}
	tr, err := New(context.Background(), cfg, "x")
	if err != nil || tr == nil {
		t.Fatalf("endpoint %q: %v, %v; want the exporter", cfg.OTLP.Endpoint, tr, err)
	}
	_, span := tr.Provider.Tracer("t").Start(context.Background(), "s")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatalf("flushing to %q: %v", cfg.OTLP.Endpoint, err)
	}
	select {
	case n := <-c.spans:
		if n != 1 {
			t.Errorf("the collector got %d spans, want 1", n)
		}
	default:
		t.Errorf("the collector at %q got nothing", cfg.OTLP.Endpoint)
	}
}

// An endpoint user:password@host:port (no scheme) passes Validate, and its
// start log hides it (tracing.ShownEndpoint), but New hands it to the
// exporter whole: gRPC's target error quotes it, password and all, in every
// failed export, which the SDK's error handler writes to dedup worker's
// and dedup run's stderr.
func TestNewKeepsTheEndpointsPasswordOutOfExportErrors(t *testing.T) {
	cfg := tracing.Config{Exporter: tracing.ExporterOTLP, OTLP: tracing.OTLP{Endpoint: "collector:s3cretpw@127.0.0.1:1", Insecure: true}}
	tr, err := New(context.Background(), cfg, "x")
	if err != nil {
		if strings.Contains(err.Error(), "s3cretpw") {
			t.Fatalf("New: %v: shows the endpoint's password", err)
		}
		return // refused without showing it: held
	}
	var (
		mu      sync.Mutex
		handled []string
	)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		mu.Lock()
		defer mu.Unlock()
		handled = append(handled, err.Error())
	}))
	defer otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {}))
	_, span := tr.Provider.Tracer("t").Start(context.Background(), "s")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := tr.Provider.(*sdktrace.TracerProvider).ForceFlush(ctx); err != nil && strings.Contains(err.Error(), "s3cretpw") {
		t.Errorf("a failed export: %v: shows the endpoint's password", err)
	}
	_ = tr.Shutdown(ctx)
	mu.Lock()
	defer mu.Unlock()
	for _, h := range handled {
		if strings.Contains(h, "s3cretpw") {
			t.Errorf("the SDK's error handler got %q: shows the endpoint's password", h)
		}
	}
}
