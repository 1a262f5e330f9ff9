package dial

import (
	"go.opentelemetry.io/otel/propagation"

	"github.com/dedupio/dedup/connect/tracing"
	"github.com/dedupio/dedup/internal/config"
)

// PropagatorOf is the trace context propagator of the producer's side
// (dedup ingress and the client it opens): W3C TraceContext and Baggage
// when tracing is on, else nil (no header read or written).
func PropagatorOf(cfg config.Config) propagation.TextMapPropagator {
	if !cfg.Tracing.Enabled() {
		return nil
	}
	return tracing.Propagator()
}
