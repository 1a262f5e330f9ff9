// Package kafkaheaders carries a trace context in a Kafka record's
// headers. It is apart from connect/tracing so that a producer (the
// client) links the carrier and the propagator only, not the tracing SDK.
package kafkaheaders

import (
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
)

// Carrier carries a trace context in a Kafka record's headers
// (traceparent, tracestate, baggage: the keys the W3C propagators use,
// as franz-go's kotel does). Set replaces a header of the same key.
type Carrier struct{ R *kgo.Record }

var _ propagation.TextMapCarrier = Carrier{}

// Get is the first header named key's value.
func (c Carrier) Get(key string) string {
	for _, h := range c.R.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Set sets header key to value.
func (c Carrier) Set(key, value string) {
	for i, h := range c.R.Headers {
		if h.Key == key {
			c.R.Headers[i].Value = []byte(value)
			return
		}
	}
	c.R.Headers = append(c.R.Headers, kgo.RecordHeader{Key: key, Value: []byte(value)})
}

// Keys are the record's header keys.
func (c Carrier) Keys() []string {
	keys := make([]string, len(c.R.Headers))
	for i, h := range c.R.Headers {
		keys[i] = h.Key
	}
	return keys
}
