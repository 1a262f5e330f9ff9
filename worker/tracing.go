package worker

import (
	"fmt"

	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"

	"github.com/dedupio/dedup/connect/tracing"
)

// TracingInterceptor is Temporal's OpenTelemetry interceptor on t's
// provider and propagator: set it in the SDK worker's options
// (worker.Options.Interceptors) next to Register, and RunActivityWorkflow's
// workflow and activity spans join the trace dedup's router put into the
// start (the "_tracer-data" header: sink/starter.TraceHeader). Nil t
// (tracing off): nil, no interceptor to add.
func TracingInterceptor(t *tracing.Tracing) (interceptor.WorkerInterceptor, error) {
	if t == nil {
		return nil, nil
	}
	i, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{
		Tracer:            t.Provider.Tracer("go.temporal.io/sdk"),
		TextMapPropagator: t.Propagator,
	})
	if err != nil {
		return nil, fmt.Errorf("creating the tracing interceptor: %w", err)
	}
	return i, nil
}
