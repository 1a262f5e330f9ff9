// Package recordcarrier carries a W3C trace context in a Kafka record's
// headers. It links only franz-go's kgo and OpenTelemetry's propagation
// API, never an SDK, so that package client (a producer's library) can
// inject the caller's context without linking a tracer provider.
package recordcarrier

import (
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
)

// RecordCarrier carries a trace context in a Kafka record's headers
// (traceparent, tracestate, baggage: the keys the W3C propagators use,
// as franz-go's kotel does). Set replaces a header of the same key.
type RecordCarrier struct{ R *kgo.Record }

var _ propagation.TextMapCarrier = RecordCarrier{}

// Get is the first header named key's value.
func (c RecordCarrier) Get(key string) string {
	for _, h := range c.R.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Set sets header key to value.
func (c RecordCarrier) Set(key, value string) {
	for i, h := range c.R.Headers {
		if h.Key == key {
			c.R.Headers[i].Value = []byte(value)
			return
		}
	}
	c.R.Headers = append(c.R.Headers, kgo.RecordHeader{Key: key, Value: []byte(value)})
}

// Keys are the record's header keys.
func (c RecordCarrier) Keys() []string {
	keys := make([]string, len(c.R.Headers))
	for i, h := range c.R.Headers {
		keys[i] = h.Key
	}
	return keys
}
