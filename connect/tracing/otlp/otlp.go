// Package otlp starts the `tracing:` section's OTLP exporter (gRPC). Apart
// from connect/tracing so that the packages that only carry a trace
// context (processor, client) do not link gRPC.
package otlp

import (
	"bufio"
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/dedupio/dedup/connect/tracing"
)

// New starts cfg's exporter, or returns nil when tracing is off
// (exporter: none). service is the service.name unless cfg names one.
func New(ctx context.Context, cfg tracing.Config, service string) (*tracing.Tracing, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Enabled() {
		return nil, nil
	}
	opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(hostPort(cfg.OTLP.Endpoint))}
	if cfg.OTLP.Insecure {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	if cfg.OTLP.HeadersFile != "" {
		h, err := readHeaders(cfg.OTLP.HeadersFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, otlptracegrpc.WithHeaders(h))
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("creating the tracing.otlp exporter: %w", err)
	}
	return tracing.NewWith(cfg, service, sdktrace.WithBatcher(exp)), nil
}

// hostPort strips a scheme the endpoint was written with.
func hostPort(endpoint string) string {
	if u, err := url.Parse(endpoint); err == nil && u.Host != "" {
		return u.Host
	}
	return endpoint
}

// readHeaders reads "name: value" lines (blank lines and # comments skipped).
func readHeaders(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading tracing.otlp.headers_file: %w", err)
	}
	defer func() { _ = f.Close() }()
	h := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("tracing.otlp.headers_file: %s line %d: want \"name: value\"", path, n)
		}
		h[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading tracing.otlp.headers_file %s: %w", path, err)
	}
	return h, nil
}
