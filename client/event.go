package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor/eventid"
)

// Event is one event to enqueue, as CloudEvents attributes.
type Event struct {
	// Type is the event type (ce_type), which routes match: required.
	Type string
	// Source is ce_source (routes may match it). CloudEvents requires
	// one; dedup does not.
	Source string
	// IdempotencyKey is the event's ID (ce_id) and its Kafka record key:
	// required. Enqueue refuses a key the routers' event_id config would
	// not take as the ID (a chain without the header rule, headers
	// without ce_id).
	IdempotencyKey string
	// Data is encoded as JSON (a json.RawMessage as it is); a []byte is
	// binary data of ContentType, written as it is. nil: no data.
	Data any
	// ContentType is the data's media type; default application/json, or
	// application/octet-stream for []byte.
	ContentType string
	// Time, Subject and Extensions (more ce_ attributes, lower-case
	// names) travel in headers; they are not part of the event's
	// identity.
	Time       time.Time
	Subject    string
	Extensions map[string]string
}

// Record is the CloudEvents binary-mode Kafka record of ev (the Kafka
// protocol binding: ce_ headers, content-type, the data as the value).
func (ev Event) Record() (*kgo.Record, error) {
	if ev.Type == "" {
		return nil, &InvalidEventError{Reason: string(eventid.ReasonMissingType), Err: errors.New("event type is empty")}
	}
	if ev.IdempotencyKey == "" {
		return nil, ErrNoKey
	}
	h := func(k, v string) kgo.RecordHeader { return kgo.RecordHeader{Key: k, Value: []byte(v)} }
	r := &kgo.Record{Key: []byte(ev.IdempotencyKey), Value: []byte{}, Headers: []kgo.RecordHeader{
		h("ce_specversion", "1.0"), h("ce_id", ev.IdempotencyKey), h("ce_type", ev.Type)}}
	if ev.Source != "" {
		r.Headers = append(r.Headers, h("ce_source", ev.Source))
	}
	if !ev.Time.IsZero() {
		r.Headers = append(r.Headers, h("ce_time", ev.Time.UTC().Format(time.RFC3339Nano)))
	}
	if ev.Subject != "" {
		r.Headers = append(r.Headers, h("ce_subject", ev.Subject))
	}
	for _, k := range slices.Sorted(maps.Keys(ev.Extensions)) {
		if err := extensionName(k); err != nil {
			return nil, &InvalidEventError{Reason: string(eventid.ReasonUndecodable), Err: err}
		}
		r.Headers = append(r.Headers, h("ce_"+k, ev.Extensions[k]))
	}
	ct := ev.ContentType
	switch d := ev.Data.(type) {
	case nil:
		return r, nil
	case []byte:
		r.Value = d
		if ct == "" {
			ct = "application/octet-stream"
		}
	case json.RawMessage:
		r.Value = d
	default:
		b, err := json.Marshal(d)
		if err != nil {
			return nil, &InvalidEventError{Reason: string(eventid.ReasonUndecodable), Err: fmt.Errorf("encoding data: %w", err)}
		}
		r.Value = b
	}
	if ct == "" {
		ct = "application/json"
	}
	r.Headers = append(r.Headers, h("content-type", ct))
	return r, nil
}

// contextAttributes are CloudEvents' own attributes: no extension may be
// named after one (it would set the attribute, and with it the event's
// identity).
var contextAttributes = []string{"id", "source", "specversion", "type", "datacontenttype", "dataschema", "subject", "time", "data", "data_base64"}

// extensionName says why name is not a CloudEvents extension name: a-z
// and 0-9 only (the spec's rule), and not a context attribute.
func extensionName(name string) error {
	if name == "" || strings.IndexFunc(name, func(r rune) bool { return (r < 'a' || r > 'z') && (r < '0' || r > '9') }) >= 0 {
		return fmt.Errorf("extension %q: a CloudEvents extension name is a-z and 0-9 only", name)
	}
	if slices.Contains(contextAttributes, name) {
		return fmt.Errorf("extension %q is a CloudEvents context attribute: set it with the Event's own field", name)
	}
	return nil
}
