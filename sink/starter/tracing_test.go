package starter

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/baggage"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/activity"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/dedupio/dedup/connect/tracing"
)

func tracedWorkflow(ctx workflow.Context) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	var tenant string
	err := workflow.ExecuteActivity(ctx, tracedActivity).Get(ctx, &tenant)
	return tenant, err
}

// tracedActivity answers the baggage the start's header carried.
func tracedActivity(ctx context.Context) (string, error) {
	return baggage.FromContext(ctx).Member("tenant").Value(), nil
}

// The header TraceHeader writes is the one Temporal's OpenTelemetry
// interceptor reads: a workflow started with it, run by a worker with the
// interceptor (as worker.TracingInterceptor sets it up), has its workflow
// and activity spans in the start's trace, under the start span, and its
// activity sees the start's baggage.
func TestTraceHeaderIsReadByTemporalsInterceptor(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr := tracing.NewWith(tracing.Config{Exporter: tracing.ExporterOTLP}, "test", sdktrace.WithSyncer(exp))
	member, _ := baggage.NewMember("tenant", "acme")
	bag, _ := baggage.New(member)
	ctx, start := tr.Provider.Tracer("test").Start(baggage.ContextWithBaggage(context.Background(), bag), "dedup.start")
	h, err := TraceHeader(ctx, tr.Propagator)
	start.End()
	if err != nil || h == nil || h.Fields[TraceHeaderKey] == nil {
		t.Fatalf("TraceHeader: %v, %v: want a %s field", h, err, TraceHeaderKey)
	}

	ti, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{Tracer: tr.Provider.Tracer("temporal"), TextMapPropagator: tr.Propagator})
	if err != nil {
		t.Fatal(err)
	}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{ti}})
	env.RegisterWorkflow(tracedWorkflow)
	env.RegisterActivityWithOptions(tracedActivity, activity.RegisterOptions{Name: "tracedActivity"})
	env.SetHeader(h)
	env.ExecuteWorkflow(tracedWorkflow)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var tenant string
	if err := env.GetWorkflowResult(&tenant); err != nil || tenant != "acme" {
		t.Errorf("the activity's baggage tenant %q (%v), want acme", tenant, err)
	}

	want := start.SpanContext()
	var run, act bool
	for _, sp := range exp.GetSpans() {
		switch sp.Name {
		case "RunWorkflow:tracedWorkflow":
			run = true
			if sp.Parent.SpanID() != want.SpanID() || sp.SpanContext.TraceID() != want.TraceID() {
				t.Errorf("workflow span: trace %s parent %s, want trace %s parent %s", sp.SpanContext.TraceID(), sp.Parent.SpanID(),
					want.TraceID(), want.SpanID())
			}
		case "RunActivity:tracedActivity":
			act = true
			if sp.SpanContext.TraceID() != want.TraceID() {
				t.Errorf("activity span in trace %s, want %s", sp.SpanContext.TraceID(), want.TraceID())
			}
		}
	}
	if !run || !act {
		names := []string{}
		for _, sp := range exp.GetSpans() {
			names = append(names, sp.Name)
		}
		t.Errorf("spans %v: want RunWorkflow:tracedWorkflow and RunActivity:tracedActivity", names)
	}
}

// Off (no WithTracing) no header is built, whatever the context; on, a
// context without a span builds none either.
func TestTraceHeaderOnlyWithTracingAndASpan(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ctx, span := tp.Tracer("test").Start(context.Background(), "s")
	defer span.End()
	if h := traceHeader(ctx, nil); h != nil {
		t.Errorf("tracing off: header %v", h)
	}
	if h := traceHeader(context.Background(), tracing.Propagator()); h != nil {
		t.Errorf("no span: header %v", h)
	}
	if h := traceHeader(trace.ContextWithSpanContext(context.Background(), span.SpanContext()), tracing.Propagator()); h == nil {
		t.Errorf("a span: no header")
	}
	if (&Temporal{}).WithTracing(nil).prop != nil {
		t.Errorf("WithTracing(nil) turned tracing on")
	}
}
