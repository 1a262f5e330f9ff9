package ingress

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
)

// traceContext is r's context with the trace context of r's headers
// (traceparent, tracestate, baggage), which the client writes into the
// Kafka record (client.Config.Propagator). prop nil (tracing off): r's
// context as it is.
func traceContext(r *http.Request, prop propagation.TextMapPropagator) context.Context {
	if prop == nil {
		return r.Context()
	}
	return prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
}
