package kafkaheaders

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The record carrier reads and writes the W3C headers among the record's
// others, replacing rather than repeating a key.
func TestCarrierReplacesItsHeader(t *testing.T) {
	r := &kgo.Record{Headers: []kgo.RecordHeader{{Key: "ce_id", Value: []byte("1")}, {Key: "traceparent", Value: []byte("old")}}}
	c := Carrier{R: r}
	c.Set("traceparent", "new")
	c.Set("baggage", "k=v")
	if got := c.Get("traceparent"); got != "new" || len(r.Headers) != 3 || c.Get("baggage") != "k=v" || c.Get("ce_id") != "1" {
		t.Errorf("headers %v", r.Headers)
	}
	if keys := c.Keys(); strings.Join(keys, ",") != "ce_id,traceparent,baggage" {
		t.Errorf("keys %v", keys)
	}
}
