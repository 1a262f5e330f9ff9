package client

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/dedupio/dedup/connect/tracing/recordcarrier"
	"github.com/dedupio/dedup/processor/eventid"
)

// traced writes ctx's trace context (traceparent, tracestate, baggage)
// into rec's headers when Config.Propagator is set and ctx carries a
// span, so that the routers' spans of the record continue the caller's
// trace. rec is Send's copy: its headers are copied before they change.
// A tenant's record is signed again (the signature covers every header):
// should that fail, the record goes as Prepare signed it, untraced.
func (c *Client) traced(ctx context.Context, rec *kgo.Record) {
	if c.cfg.Propagator == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	orig := rec.Headers
	rec.Headers = slices.Clip(slices.Clone(rec.Headers))
	c.cfg.Propagator.Inject(ctx, recordcarrier.RecordCarrier{R: rec})
	if c.cfg.TenantKeys != nil && slices.ContainsFunc(rec.Headers, func(h kgo.RecordHeader) bool { return h.Key == eventid.TenantHeader }) {
		if err := c.dec.SignTenant(rec); err != nil {
			rec.Headers = orig
		}
	}
}
