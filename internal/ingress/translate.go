package ingress

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor/eventid"
)

// mode is how a request carries its event.
type mode string

const (
	modeBinary     mode = "binary"     // CloudEvents HTTP binary mode: ce-* headers, the body is the data
	modeStructured mode = "structured" // application/cloudevents+json: the body is the event
	modePlain      mode = "plain"      // a JSON object, read through event_id.fields
)

// errMediaType: a content type the ingress cannot read (415).
var errMediaType = errors.New("unsupported content type")

// keyError is an Idempotency-Key header that is not one (400
// invalid_id); its message is parseIdempotencyKey's.
type keyError struct{ err error }

func (e *keyError) Error() string { return e.err.Error() }
func (e *keyError) Unwrap() error { return e.err }

// acceptPost lists what POST /v1/events reads (RFC 9110's Accept-Post).
const acceptPost = "application/cloudevents+json, application/json, */* (with ce-specversion and ce-type headers)"

// toRecord translates a request into the Kafka binding of the same event
// (the CloudEvents Kafka protocol binding for CloudEvents), so that a
// router decodes it as it decodes a record from any producer. key is the
// Idempotency-Key, "" if none: for a plain object it becomes the
// idempotency-key header; a CloudEvent carries its own ID, which the key
// must equal.
func toRecord(h http.Header, body []byte) (rec *kgo.Record, m mode, key string, err error) {
	ct := h.Get("Content-Type")
	mt := ""
	if ct != "" {
		if mt, _, err = mime.ParseMediaType(ct); err != nil {
			return nil, "", "", fmt.Errorf("%w: %q: %v", errMediaType, ct, err)
		}
	}
	if v := h.Values("Idempotency-Key"); len(v) > 0 {
		// One RFC 8941 sf-string (the draft's §2.1), parsed strictly
		// (sfv.go); its errors name the rule.
		if key, err = parseIdempotencyKey(v); err != nil {
			return nil, "", "", &keyError{err}
		}
	}
	rec = &kgo.Record{Value: body}
	if body == nil {
		rec.Value = []byte{}
	}
	switch {
	case mt == "application/cloudevents-batch+json":
		return nil, "", "", fmt.Errorf("%w: batches (%s) are not supported: send one event per request", errMediaType, mt)
	case mt == "application/cloudevents+json":
		m = modeStructured
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "content-type", Value: []byte(ct)})
	case h.Get("Ce-Specversion") != "" || h.Get("Ce-Type") != "":
		m = modeBinary
		var names []string
		for name := range h {
			if len(name) > 3 && strings.EqualFold(name[:3], "ce-") {
				names = append(names, name)
			}
		}
		slices.Sort(names)
		for _, name := range names {
			// The HTTP binding percent-encodes what a header cannot carry;
			// the Kafka binding carries the attribute's value as it is.
			v, err := url.PathUnescape(h.Get(name))
			if err != nil {
				return nil, "", "", fmt.Errorf("header %s: %v", name, err)
			}
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "ce_" + strings.ToLower(name[3:]), Value: []byte(v)})
		}
		if ct != "" {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "content-type", Value: []byte(ct)})
		}
	case mt != "" && eventid.JSONContentType(mt):
		m = modePlain
	case mt == "":
		return nil, "", "", fmt.Errorf("%w: no Content-Type (and no ce-specversion or ce-type header)", errMediaType)
	default:
		return nil, "", "", fmt.Errorf("%w: %s is not JSON, and the request has no ce-specversion or ce-type header (CloudEvents binary mode carries any content type)", errMediaType, mt)
	}
	if key != "" && m == modePlain {
		// A CloudEvent has its ID (id, ce-id): the key must be it (the
		// caller checks). A plain object gets the key as a header, which
		// event_id.headers reads by default.
		rec.Key = []byte(key)
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "idempotency-key", Value: []byte(key)})
	}
	return rec, m, key, nil
}
