package eventid

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor/tenantsig"
)

// This file is the decoder: its records and events, and Decode, which
// runs an envelope (envelope.go), the payload hash (content.go) and the ID
// chain (chain.go) under a Config (config.go); a refusal carries its
// reason (reasons.go). The JSON scanners it uses are fastjson.go.

// Header is one Kafka record header: franz-go's own, so that a record's
// headers can be read where they are (ReadKafka copies none).
type Header = kgo.RecordHeader

// Record is the part of a Kafka record the decoder reads.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []Header
	// Decoded, when not nil, is the logical value of a Schema Registry
	// value as JSON (processor/srdecode): it is read instead of Value, as
	// JSON whatever content type the record declares. Value stays the
	// bytes as written (the tenant signature covers them).
	Decoded []byte
}

// Event is a decoded record with its stable ID.
type Event struct {
	ID     string
	Rule   Rule // which rule produced ID
	Type   string
	Source string
	// Subject is the CloudEvents subject, when the event has a string one
	// (ce_subject, subject); informative, not part of the identity.
	Subject string
	Time    string // as the producer wrote it; may be empty
	// Data is the payload as received (its bytes in the record: encoding
	// it into a workflow input compacts it; not canonicalised), so
	// that workflows see what the producer sent. It is null when the data
	// is binary (Bytes).
	Data json.RawMessage
	// Bytes is the data of a binary-mode record that is not JSON: its
	// content type says it is something else (text/plain, Protobuf, Avro:
	// anything but application/json, text/json and */*+json), or it names
	// none and the value does not parse as JSON. It is the value as it
	// was, never re-encoded; nil for JSON data. Its identity (the content
	// rule, the payload hash) is the base64 text of the bytes, as
	// structured mode's data_base64 has it, so one event sent in either
	// mode has one ID.
	Bytes []byte
	// ContentType is the data's media type as the producer declared it:
	// the content-type header (the CloudEvents Kafka binding), else
	// ce_datacontenttype, in binary mode; the datacontenttype attribute in
	// structured mode. Empty when none was declared. It is not part of the
	// identity.
	ContentType string
	// PayloadHash is SHA-256 over the canonical JSON of {data, source,
	// type}: two records with one ID and different hashes are a conflict.
	PayloadHash [32]byte
	// Envelope is the format the record was read as, and IDFrom where Rule
	// found the ID: the header's name (RuleHeader), the field's path
	// (RuleField), OriginHeaders when RuleCoordinates used the
	// dedup-origin-* headers of a replayed dead letter, else empty. Both
	// explain a decision to an operator (dedup explain); neither is part of
	// the ID or the hash.
	Envelope Envelope
	IDFrom   string
	// Tenant is the TenantHeader's value, "" without one: ID is then
	// ScopedID(Tenant, the chain's ID).
	Tenant string
}

// Decoder decodes records under one Config. It is safe for concurrent use.
type Decoder struct {
	cfg  Config
	keys *tenantsig.Keyring // nil: no record is a tenant's
	// names are the types and sources this Decoder has read (names.go),
	// shared with the copies WithTenantKeys makes.
	names *names
}

// WithTenantKeys is d verifying tenants' signatures with keys (and, for
// dedup ingress, making them: SignTenant). Without a keyring a record
// that carries the tenant header is refused (forged_tenant).
func (d *Decoder) WithTenantKeys(keys *tenantsig.Keyring) *Decoder {
	c := *d
	c.keys = keys
	return &c
}

// NewDecoder validates cfg.
func NewDecoder(cfg Config) (*Decoder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Decoder{cfg: cfg, names: new(names)}, nil
}

// Decode turns a record into an Event, or returns an *Error.
func (d *Decoder) Decode(r Record) (Event, error) {
	raw := r // as written
	if r.Decoded != nil {
		r.Value = r.Decoded
	}
	if r.Value == nil && !d.binary(r) {
		return Event{}, fail(ReasonTombstone, "null value without CloudEvents headers: a tombstone, not an event")
	}
	s := scratchPool.Get().(*scratch)
	defer s.release()
	env, err := d.envelope(r, s)
	if err != nil {
		return Event{}, err
	}
	ev := Event{Type: env.typ, Source: env.source, Subject: env.subject, Time: env.time, Data: env.data, Envelope: env.kind, Bytes: env.bytes, ContentType: env.contentType}
	if env.bytes != nil {
		ev.Data = json.RawMessage("null")
	}
	if !utf8.ValidString(env.source) || !utf8.ValidString(env.typ) {
		return Event{}, fail(ReasonUndecodable, "type or source is not UTF-8")
	}
	if ev.Tenant, err = d.tenantOf(raw); err != nil {
		return Event{}, err
	}
	canonData := env.canon
	if canonData == nil {
		if canonData, err = s.c.canonical(env.data); err != nil {
			return Event{}, fail(ReasonUndecodable, "canonicalising data: %v", err)
		}
	}
	s.hashData(canonData)
	ev.PayloadHash = s.sumAssembled(env.source, env.typ, nil)
	for _, rule := range d.cfg.Chain {
		id, from, ok, err := d.apply(rule, r, env, s)
		if err != nil {
			return Event{}, err
		}
		if ok {
			if ev.Tenant == "" {
				if err := unscoped(id, "the event ID"); err != nil {
					return Event{}, err
				}
			}
			ev.ID, ev.Rule, ev.IDFrom = ScopedID(ev.Tenant, id), rule, from
			return ev, nil
		}
	}
	return Event{}, fail(ReasonNoID, "no rule of %v produced an ID", d.cfg.Chain)
}
