package tracing

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// Tracing is a running tracer provider and the propagator dedup uses at
// every seam (W3C TraceContext and Baggage). A nil *Tracing is off.
type Tracing struct {
	Provider   trace.TracerProvider
	Propagator propagation.TextMapPropagator
	shutdown   func(context.Context) error
}

// Propagator is W3C TraceContext and Baggage, the propagator of every
// seam; it is also the default of Temporal's OpenTelemetry interceptor.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// NewWith is a Tracing whose spans go to processor (the OTLP exporter's
// batcher, connect/tracing/otlp; in tests an in-memory exporter through
// sdktrace.WithSyncer), sampled as cfg says, named service unless cfg
// names one.
func NewWith(cfg Config, service string, processor sdktrace.TracerProviderOption) *Tracing {
	if cfg.ServiceName != "" {
		service = cfg.ServiceName
	}
	tp := sdktrace.NewTracerProvider(processor,
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.ratio()))),
		sdktrace.WithResource(resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(service))))
	return &Tracing{Provider: tp, Propagator: Propagator(), shutdown: tp.Shutdown}
}

// Shutdown flushes the spans not exported yet; nil-safe.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.shutdown == nil {
		return nil
	}
	if err := t.shutdown(ctx); err != nil {
		return fmt.Errorf("flushing spans: %w", err)
	}
	return nil
}
