package starter

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"

	"github.com/dedupio/dedup/connect/tracing"
)

// WithTracing makes every start and signal-with-start carry its caller's
// span context and baggage (the router's start or signal span) in the
// request's header, in the format of Temporal's OpenTelemetry interceptor
// (TraceHeader), so that a worker with the interceptor
// (worker.TracingInterceptor) makes its workflow and activity spans
// children of it. Without it (tracing off) no header is sent; the request
// ID, memo and error classification are the same either way.
func (t *Temporal) WithTracing(tr *tracing.Tracing) *Temporal {
	if tr != nil {
		t.prop = tr.Propagator
	}
	return t
}

// TraceHeaderKey is the Temporal header field of the span context: the key
// Temporal's OpenTelemetry interceptor reads (the one every SDK uses,
// go.temporal.io/sdk/contrib/opentelemetry's default).
const TraceHeaderKey = "_tracer-data"

// TraceHeader is ctx's span context and baggage as a Temporal request
// header, exactly as the interceptor writes it: the propagator's fields
// (traceparent, tracestate, baggage) in a map[string]string, encoded by
// the default data converter (json/plain) under TraceHeaderKey. Nil when
// ctx carries no valid span context.
func TraceHeader(ctx context.Context, prop propagation.TextMapPropagator) (*commonpb.Header, error) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil, nil
	}
	m := propagation.MapCarrier{}
	prop.Inject(ctx, m)
	p, err := converter.GetDefaultDataConverter().ToPayload(map[string]string(m))
	if err != nil {
		return nil, fmt.Errorf("encoding the trace context header: %w", err)
	}
	return &commonpb.Header{Fields: map[string]*commonpb.Payload{TraceHeaderKey: p}}, nil
}

// traceHeader is TraceHeader, nil when tracing is off. A context that
// cannot be encoded is dropped rather than failing the start: a trace
// never stops a workflow.
func traceHeader(ctx context.Context, prop propagation.TextMapPropagator) *commonpb.Header {
	if prop == nil {
		return nil
	}
	h, err := TraceHeader(ctx, prop)
	if err != nil {
		return nil
	}
	return h
}
