package processor

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/dedupio/dedup/connect/tracing"
	"github.com/dedupio/dedup/internal/demo/workload"
	"github.com/dedupio/dedup/processor/decide"
)

// spanStarter is the env's starter, remembering the span context each
// start was called with (what sink/starter puts into the request header).
type spanStarter struct {
	Starter
	mu  sync.Mutex
	got map[string]trace.SpanContext
}

func (s *spanStarter) Start(ctx context.Context, req decide.StartRequest) (StartResult, error) {
	s.mu.Lock()
	s.got[req.WorkflowID] = trace.SpanContextFromContext(ctx)
	s.mu.Unlock()
	return s.Starter.Start(ctx, req)
}

func (s *spanStarter) spanOf(wid string) (trace.SpanContext, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, ok := s.got[wid]
	return sc, ok
}

// startTraced runs a router with Options.Tracing tr (nil: off) whose
// starter remembers its calls' span contexts.
func (e *testEnv) startTraced(cfg Config, tr *tracing.Tracing) (*runner, *spanStarter) {
	e.t.Helper()
	st := &spanStarter{Starter: e.starter.as("traced"), got: map[string]trace.SpanContext{}}
	r, err := New(cfg, Options{Ledger: e.led, DeadLetterLog: e.dlq, Starter: st, Registerer: prometheus.NewRegistry(),
		Log: testLogger("traced"), KafkaOpts: []kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond)}, Tracing: tr})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rn := &runner{t: e.t, r: r, cancel: cancel, done: make(chan error, 1)}
	go func() { rn.done <- r.Run(ctx) }()
	e.t.Cleanup(func() { _ = rn.stop() })
	return rn, st
}

// produceTraced writes raw to partition 0 with a traceparent header.
func (e *testEnv) produceTraced(raw []byte, traceparent string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec := &kgo.Record{Topic: testTopic, Partition: 0, Value: raw,
		Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte(traceparent)}, {Key: "baggage", Value: []byte("tenant=acme")}}}
	if err := e.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

func attrOf(s tracetest.SpanStub, k attribute.Key) attribute.Value {
	for _, a := range s.Attributes {
		if a.Key == k {
			return a.Value
		}
	}
	return attribute.Value{}
}

// A record's spans (decide, claim with its verdict, start; decide and dead
// letter for one that never starts) continue the trace of its traceparent
// header, name the record and its IDs, and carry no payload; the starter
// is called with the start span, which it puts into Temporal's header.
func TestRouterSpansContinueTheRecordsTrace(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	exp := tracetest.NewInMemoryExporter()
	tr := tracing.NewWith(tracing.Config{Exporter: tracing.ExporterOTLP}, "test", sdktrace.WithSyncer(exp))
	const (
		okParent   = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		badParent  = "00-1bf7651916cd43dd8448eb211c80319c-c7ad6b7169203331-01"
		okTrace    = "0af7651916cd43dd8448eb211c80319c"
		badTrace   = "1bf7651916cd43dd8448eb211c80319c"
		secretData = "payload-must-not-be-traced"
	)
	e.produceTraced(value("e1", secretData), okParent)
	e.produceTraced([]byte("not json "+secretData), badParent)
	rn, st := e.startTraced(e.config(), tr)
	e.waitCommittedToEnd(15 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}

	byName := map[string][]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		byName[s.Name] = append(byName[s.Name], s)
		for _, a := range s.Attributes {
			if strings.Contains(a.Value.String(), secretData) {
				t.Errorf("span %s attribute %s carries the payload: %s", s.Name, a.Key, a.Value.String())
			}
		}
	}
	one := func(name, traceID string) tracetest.SpanStub {
		t.Helper()
		for _, s := range byName[name] {
			if s.SpanContext.TraceID().String() == traceID {
				return s
			}
		}
		names := make([]string, 0, len(byName))
		for n := range byName {
			names = append(names, n)
		}
		t.Fatalf("no %s span in trace %s (spans: %v)", name, traceID, names)
		return tracetest.SpanStub{}
	}
	decideSpan := one("dedup.decide", okTrace)
	if decideSpan.Parent.SpanID().String() != "b7ad6b7169203331" || !decideSpan.Parent.IsRemote() {
		t.Errorf("decide's parent %s, want the record's remote span b7ad6b7169203331", decideSpan.Parent.SpanID())
	}
	if got := attrOf(decideSpan, attrEventID).AsString(); got != "e1" {
		t.Errorf("decide's event ID %q, want e1", got)
	}
	if got := attrOf(decideSpan, attrOffset).AsInt64(); got != 0 || attrOf(decideSpan, attrTopic).AsString() != testTopic {
		t.Errorf("decide's record %s@%d, want %s@0", attrOf(decideSpan, attrTopic).AsString(), got, testTopic)
	}
	claim := one("dedup.claim", okTrace)
	if claim.Parent.SpanID() != decideSpan.SpanContext.SpanID() {
		t.Errorf("claim's parent %s, want decide %s", claim.Parent.SpanID(), decideSpan.SpanContext.SpanID())
	}
	if v, w := attrOf(claim, attrVerdict).AsString(), attrOf(claim, attrWorkflowID).AsString(); v != "new" || w != wid("e1") {
		t.Errorf("claim: verdict %q workflow %q, want new %q", v, w, wid("e1"))
	}
	start := one("dedup.start", okTrace)
	if start.Parent.SpanID() != decideSpan.SpanContext.SpanID() || attrOf(start, attrWorkflowID).AsString() != wid("e1") {
		t.Errorf("start: parent %s workflow %q, want decide %s and %q", start.Parent.SpanID(), attrOf(start, attrWorkflowID).AsString(),
			decideSpan.SpanContext.SpanID(), wid("e1"))
	}
	if sc, ok := st.spanOf(wid("e1")); !ok || sc.SpanID() != start.SpanContext.SpanID() {
		t.Errorf("the starter was called with span %s, want the start span %s", sc.SpanID(), start.SpanContext.SpanID())
	}
	dl := one("dedup.dead_letter", badTrace)
	if got := attrOf(dl, attrReason).AsString(); got != string(decide.ReasonUndecodable) {
		t.Errorf("dead letter's reason %q, want %s", got, decide.ReasonUndecodable)
	}
	if len(byName["dedup.commit"]) == 0 {
		t.Errorf("no commit span")
	}
}

// Off (no Options.Tracing), a record's traceparent is not read: the
// starter gets no span context, so no trace header goes to Temporal.
func TestRouterWithTracingOffPassesNoSpanToTheStarter(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	e.produceTraced(value("e1", "v"), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	rn, st := e.startTraced(e.config(), nil)
	e.waitCommittedToEnd(15 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	sc, ok := st.spanOf(wid("e1"))
	if !ok {
		t.Fatal("e1 was never started")
	}
	if sc.IsValid() {
		t.Errorf("tracing off: the starter got span context %s/%s", sc.TraceID(), sc.SpanID())
	}
}

// BenchmarkDecideTracing is the router's decide step per record as the
// poll loop runs it (prepare): off is Decide behind a nil check; on
// extracts the record's context and records a sampled decide span, then
// the per-intent claim span (claimed).
func BenchmarkDecideTracing(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Brokers, cfg.Group, cfg.Topics, cfg.ResetOffset = []string{"x:1"}, "g", []string{"t"}, "earliest"
	cfg.Routes = decide.Routes{{ID: "order-confirmation", Match: decide.Match{Type: workload.TypeOrder}, WorkflowType: "W", TaskQueue: "q"},
		{ID: "welcome-email", Match: decide.Match{Type: workload.TypeSignup}, WorkflowType: "W", TaskQueue: "q"}}
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	d, err := NewDecider(cfg)
	if err != nil {
		b.Fatal(err)
	}
	w := workload.Generate(workload.Spec{Topic: "t", Partitions: 8, Records: 1000, DupRatio: 0.3, Seed: 1, PayloadBytes: 256})
	for _, kr := range w.Records {
		kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")})
	}
	run := func(b *testing.B, rt *routerTracer) {
		recs := make([]record, len(w.Records))
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			k := i % len(w.Records)
			rec, kr := &recs[k], w.Records[k]
			if rt == nil { // prepare's path when off
				if dec := d.Decide(kr); dec.DeadLetter != "" {
					b.Fatal(dec.Err)
				}
				continue
			}
			dec := rt.decide(rec, kr, d)
			if dec.DeadLetter != "" {
				b.Fatal(dec.Err)
			}
			rt.claimed(&claimBatch{intents: dec.Intents, owners: []*record{rec, rec, rec}[:len(dec.Intents)]}, nil, nil, time.Time{})
		}
	}
	b.Run("off", func(b *testing.B) { run(b, nil) })
	b.Run("on", func(b *testing.B) {
		// Spans are recorded and dropped (no exporter): the SDK's cost,
		// not an exporter's.
		tp := sdktrace.NewTracerProvider()
		defer func() { _ = tp.Shutdown(context.Background()) }()
		run(b, newRouterTracer(&tracing.Tracing{Provider: tp, Propagator: tracing.Propagator()}))
	})
}
