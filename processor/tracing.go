package processor

import (
	"context"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/dedupio/dedup/connect/tracing"
	"github.com/dedupio/dedup/connect/tracing/kafkaheaders"
	"github.com/dedupio/dedup/processor/decide"
)

// The spans' attribute keys. Never a payload: an event's data stays out
// of traces as it stays out of logs.
const (
	attrEventID    = attribute.Key("dedup.event_id")
	attrIDRule     = attribute.Key("dedup.id_rule")
	attrWorkflowID = attribute.Key("dedup.workflow_id")
	attrEntityID   = attribute.Key("dedup.entity_workflow_id")
	attrWorkflows  = attribute.Key("dedup.workflow_ids")
	attrRoute      = attribute.Key("dedup.route")
	attrVerdict    = attribute.Key("dedup.verdict")
	attrGeneration = attribute.Key("dedup.generation")
	attrOutcome    = attribute.Key("dedup.decision")
	attrReason     = attribute.Key("dedup.dead_letter_reason")
	attrBatch      = attribute.Key("dedup.claim.batch_size")
	attrRunID      = attribute.Key("temporal.run_id")
	attrAlready    = attribute.Key("dedup.already_started")
	attrCommitted  = attribute.Key("dedup.commit.offsets")
	attrTopic      = attribute.Key("messaging.destination.name")
	attrPartition  = attribute.Key("messaging.destination.partition.id")
	attrOffset     = attribute.Key("messaging.kafka.offset")
)

// routerTracer makes the router's spans. A nil *routerTracer is tracing
// off: every method returns at once, and no record carries a context
// (record.trace stays nil), so the poll loop allocates nothing for it.
//
// A record's trace continues the context of its Kafka headers
// (traceparent, tracestate, baggage; a new trace without them): its
// decide span is the child of the producer's span, and its claim, start
// or signal and dead letter spans are the decide span's children. The
// claim is one ledger call per batch, but its spans are per intent (each
// with the batch's start and end time and its size): the verdict is per
// workflow ID, and a record's trace, sampled or not by its producer, is
// then whole on its own: a batch span with links would be sampled apart
// from the traces it links and show no verdict in them. Commits cover many
// records' offsets: each commit is a span of its own (a root) naming the
// offsets it committed.
type routerTracer struct {
	t    trace.Tracer
	prop propagation.TextMapPropagator
}

func newRouterTracer(t *tracing.Tracing) *routerTracer {
	if t == nil {
		return nil
	}
	return &routerTracer{t: t.Provider.Tracer("github.com/dedupio/dedup/processor"), prop: t.Propagator}
}

func recordAttrs(kr *kgo.Record) []attribute.KeyValue {
	return []attribute.KeyValue{attrTopic.String(kr.Topic), attrPartition.Int(int(kr.Partition)), attrOffset.Int64(kr.Offset)}
}

// decide decides kr (d.Decide) in a span continuing the record's trace,
// and keeps the span's context on rec for the spans after it.
func (rt *routerTracer) decide(rec *record, kr *kgo.Record, d *decide.Decider) decide.Decision {
	parent := rt.prop.Extract(context.Background(), kafkaheaders.Carrier{R: kr})
	ctx, span := rt.t.Start(parent, "dedup.decide", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(recordAttrs(kr)...))
	dec := d.Decide(kr)
	rec.trace = ctx
	if !span.IsRecording() {
		span.End()
		return dec
	}
	outcome := "claim"
	switch {
	case dec.Tombstone:
		outcome = "tombstone"
	case dec.DeadLetter != "":
		outcome = "dead_letter"
		span.SetAttributes(attrReason.String(string(dec.DeadLetter)))
	case dec.Skipped():
		outcome = "skipped_no_route"
	}
	span.SetAttributes(attrOutcome.String(outcome))
	if dec.Event.ID != "" {
		span.SetAttributes(attrEventID.String(dec.Event.ID), attrIDRule.String(string(dec.Event.Rule)))
	}
	if len(dec.Intents) > 0 {
		ids := make([]string, len(dec.Intents))
		for i := range dec.Intents {
			ids[i] = dec.Intents[i].WorkflowID
		}
		span.SetAttributes(attrWorkflows.StringSlice(ids))
	}
	span.End()
	return dec
}

// claimed records b's claim, from start to now: a span per intent, with
// its verdict (or the claim's error).
func (rt *routerTracer) claimed(b *claimBatch, verdicts []decide.Claimed, err error, start time.Time) {
	if rt == nil {
		return
	}
	end := time.Now()
	for i := range b.intents {
		parent := b.owners[i].trace
		if parent == nil {
			continue
		}
		in := &b.intents[i]
		_, span := rt.t.Start(parent, "dedup.claim", trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(start))
		if span.IsRecording() {
			span.SetAttributes(attrWorkflowID.String(in.WorkflowID), attrEventID.String(in.EventID), attrRoute.String(in.ActivityID),
				attrBatch.Int(len(b.intents)), attrTopic.String(in.Topic), attrPartition.Int(int(in.Partition)), attrOffset.Int64(in.Offset))
			if err == nil && i < len(verdicts) {
				span.SetAttributes(attrVerdict.String(verdicts[i].Verdict.String()), attrGeneration.Int(verdicts[i].Generation))
			} else if err != nil {
				span.SetStatus(codes.Error, err.Error())
			}
		}
		span.End(trace.WithTimestamp(end))
	}
}

// starting opens the span of j's start (or signal) on ctx: the record's
// span is its parent, the record's baggage goes with it, and the starter
// puts both into the Temporal request's header. Off: ctx and a nil span.
func (rt *routerTracer) starting(ctx context.Context, j *job) (context.Context, trace.Span) {
	if rt == nil || j.rec.trace == nil {
		return ctx, nil
	}
	name, attrs := "dedup.start", []attribute.KeyValue{attrWorkflowID.String(j.req.WorkflowID), attrEventID.String(j.req.EventID()),
		attrGeneration.Int(max(j.req.Generation, 1))}
	if j.req.Signal != nil {
		name = "dedup.signal"
		attrs = append(attrs, attrEntityID.String(j.req.Signal.WorkflowID))
	}
	attrs = append(attrs, recordAttrs(j.rec.kr)...)
	_, span := rt.t.Start(j.rec.trace, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	ctx = trace.ContextWithSpan(ctx, span)
	if b := baggage.FromContext(j.rec.trace); b.Len() > 0 {
		ctx = baggage.ContextWithBaggage(ctx, b)
	}
	return ctx, span
}

// started ends a start's span (nil: off).
func (rt *routerTracer) started(span trace.Span, res StartResult, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	} else {
		span.SetAttributes(attrRunID.String(res.RunID), attrAlready.Bool(res.AlreadyStarted))
	}
	span.End()
}

// deadLettered records dls' dead letters, from start to now, each in its
// record's trace, with *errs and *err as putEach returns them.
func (rt *routerTracer) deadLettered(dls []deadLetter, start time.Time, errs *[]error, err *error) {
	if rt == nil {
		return
	}
	end := time.Now()
	for i, d := range dls {
		if d.rec.trace == nil {
			continue
		}
		_, span := rt.t.Start(d.rec.trace, "dedup.dead_letter", trace.WithSpanKind(trace.SpanKindProducer), trace.WithTimestamp(start),
			trace.WithAttributes(append(recordAttrs(d.rec.kr), attrReason.String(string(d.reason)), attrEventID.String(d.eventID))...))
		if d.workflow != "" {
			span.SetAttributes(attrWorkflowID.String(d.workflow))
		}
		if d.reason == decide.ReasonConflict {
			span.SetAttributes(attrVerdict.String(decide.VerdictConflict.String()))
		}
		switch {
		case *err != nil:
			span.SetStatus(codes.Error, (*err).Error())
		case i < len(*errs) && (*errs)[i] != nil:
			span.SetStatus(codes.Error, (*errs)[i].Error())
		}
		span.End(trace.WithTimestamp(end))
	}
}

// committed records one offset commit, from start to now: a root span
// naming each partition's committed offset (failed ones as errors).
func (rt *routerTracer) committed(start time.Time, want map[topicPartition]int64, failed map[topicPartition]error) {
	if rt == nil {
		return
	}
	_, span := rt.t.Start(context.Background(), "dedup.commit", trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(start))
	if span.IsRecording() {
		ok := make([]string, 0, len(want))
		for tp, off := range want {
			if e, bad := failed[tp]; bad {
				span.SetStatus(codes.Error, e.Error())
				continue
			}
			ok = append(ok, tp.topic+"/"+strconv.Itoa(int(tp.partition))+"@"+strconv.FormatInt(off, 10))
		}
		span.SetAttributes(attrCommitted.StringSlice(ok))
	}
	span.End()
}
