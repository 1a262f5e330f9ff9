package eventid

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/dedupio/dedup/processor/tenantsig"
)

// This file is one concern, over ~450 lines: the decoder (envelopes, the ID
// chain, the payload hash, the decode reasons), which every caller reaches
// through Decode. The JSON scanners it uses are fastjson.go.

// Rule names a way of obtaining an event ID. The value is stored in the
// ledger as the ID's provenance.
type Rule string

const (
	// RuleHeader takes the ID from the first present header of Config.Headers
	// (ce_id in CloudEvents binary mode).
	RuleHeader Rule = "header"
	// RuleField takes the ID from the envelope: the CloudEvents "id"
	// attribute, or Config.Fields.ID of a plain JSON object.
	RuleField Rule = "field"
	// RuleContent derives the ID from the content: SHA-256 over the RFC 8785
	// canonical JSON of {data, key, source, type}. The same event produced
	// twice gets the same ID wherever it lands, whatever its key order or
	// white space; two different events that only differ in fields outside
	// that set (a timestamp in a CloudEvents attribute, say) collide, which is
	// the point.
	RuleContent Rule = "content"
	// RuleCoordinates derives the ID from where the record is:
	// "topic/partition/offset". Stable for one record, but a re-send at
	// another offset is a new event: use it only for streams whose producers
	// never re-send.
	RuleCoordinates Rule = "coordinates"
)

// Reason says why a record was rejected. It goes into the dead-letter
// record's headers and into metric labels, so the set is small and fixed.
type Reason string

// The reasons a record is rejected (or, for ReasonTombstone, skipped).
const (
	ReasonUndecodable Reason = "undecodable"  // value is not JSON or not the expected shape
	ReasonMissingType Reason = "missing_type" // no event type, or not a non-empty string
	ReasonInvalidID   Reason = "invalid_id"   // an ID is present but unusable
	ReasonNoID        Reason = "no_id"        // no rule of the chain produced an ID
	// ReasonForgedTenant: the record carries the tenant header
	// (TenantHeader) without a signature the keyring verifies: only dedup
	// ingress may speak for a tenant.
	ReasonForgedTenant Reason = "forged_tenant"
	// ReasonTombstone is not a dead-letter reason: the record has a null
	// value (log compaction's delete marker) and no CloudEvents headers, so
	// it is no event at all. The router skips and counts it. (A binary-mode
	// CloudEvent with a null value is an event without data, not a
	// tombstone.)
	ReasonTombstone Reason = "tombstone"
)

// Error is a permanent decoding failure: retrying the same bytes gives the
// same error.
type Error struct {
	Reason Reason
	Err    error
}

func (e *Error) Error() string { return string(e.Reason) + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func fail(r Reason, format string, args ...any) error {
	return &Error{Reason: r, Err: fmt.Errorf(format, args...)}
}

// ReasonOf returns the Reason of a decoding error, or "" if err is not one.
func ReasonOf(err error) Reason {
	if err == nil {
		return "" // and no allocation: the router asks of every record
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// Header is one Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

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

// Envelope names the format a record was read as.
type Envelope string

// The envelopes a record is read as.
const (
	EnvelopeBinary     Envelope = "cloudevents-binary"     // ce_* headers, the value is the data
	EnvelopeStructured Envelope = "cloudevents-structured" // a JSON object with specversion
	EnvelopePlain      Envelope = "plain"                  // a JSON object read through Fields
)

// OriginHeaders is Event.IDFrom when RuleCoordinates took a replayed
// record's first coordinates from its dedup-origin-* headers.
const OriginHeaders = "dedup-origin-*"

// Format selects how values are read.
type Format string

// The formats a decoder reads values in.
const (
	FormatAuto        Format = "auto"        // CloudEvents binary if ce_specversion/ce_type headers, structured if "specversion", else plain
	FormatCloudEvents Format = "cloudevents" // binary or structured CloudEvents only
	FormatPlain       Format = "plain"       // a JSON object read through Fields
)

// Fields are dotted paths into a plain JSON object ("meta.event_id").
type Fields struct {
	ID     string `yaml:"id"`
	Type   string `yaml:"type"`
	Source string `yaml:"source"`
	Time   string `yaml:"time"`
	// Data is the payload; empty means the whole object.
	Data string `yaml:"data"`
}

// Config is the decoder's configuration. The zero value is not valid; start
// from DefaultConfig.
type Config struct {
	Format Format `yaml:"format"`
	// Chain is tried in order; the first rule that yields an ID wins. A
	// header or field that is present but unusable (empty, too long, an
	// object) is an error, not a fall-through: silently deriving an ID for
	// an event that carried a broken one would hide a producer bug.
	Chain []Rule `yaml:"chain"`
	// Headers read by RuleHeader, first present wins.
	Headers []string `yaml:"headers"`
	// Fields of plain JSON objects.
	Fields Fields `yaml:"fields"`
	// MaxIDLength bounds IDs taken from headers or fields, in bytes; the
	// workflow ID adds the activity ID to it, and Temporal caps workflow IDs
	// at 1,000 bytes by default.
	MaxIDLength int `yaml:"max_id_length"`
}

// DefaultConfig reads CloudEvents or plain JSON, takes the ID from ce_id or
// an Idempotency-Key header, then the envelope's id field, then derives it
// from content.
func DefaultConfig() Config {
	return Config{
		Format:      FormatAuto,
		Chain:       []Rule{RuleHeader, RuleField, RuleContent},
		Headers:     []string{"ce_id", "idempotency-key"},
		Fields:      Fields{ID: "id", Type: "type", Source: "source", Time: "time"},
		MaxIDLength: 256,
	}
}

// Validate names the first invalid field.
func (c Config) Validate() error {
	switch c.Format {
	case FormatAuto, FormatCloudEvents, FormatPlain:
	default:
		return fmt.Errorf("event_id.format: %q is not auto, cloudevents or plain", c.Format)
	}
	if len(c.Chain) == 0 {
		return errors.New("event_id.chain: empty")
	}
	seen := map[Rule]bool{}
	for i, r := range c.Chain {
		switch r {
		case RuleHeader, RuleField, RuleContent, RuleCoordinates:
		default:
			return fmt.Errorf("event_id.chain[%d]: unknown rule %q (header, field, content, coordinates)", i, r)
		}
		if seen[r] {
			return fmt.Errorf("event_id.chain[%d]: rule %q repeated", i, r)
		}
		seen[r] = true
	}
	if seen[RuleHeader] && len(c.Headers) == 0 {
		return errors.New("event_id.headers: empty while the chain has the header rule")
	}
	if c.Format != FormatCloudEvents && c.Fields.Type == "" {
		return errors.New("event_id.fields.type: empty")
	}
	if seen[RuleField] && c.Format != FormatCloudEvents && c.Fields.ID == "" {
		return errors.New("event_id.fields.id: empty while the chain has the field rule")
	}
	if c.MaxIDLength <= 0 || c.MaxIDLength > 900 {
		return fmt.Errorf("event_id.max_id_length: %d is not in 1..900", c.MaxIDLength)
	}
	return nil
}

// Decoder decodes records under one Config. It is safe for concurrent use.
type Decoder struct {
	cfg  Config
	keys *tenantsig.Keyring // nil: no record is a tenant's
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
	return &Decoder{cfg: cfg}, nil
}

// envelope is what the three formats have in common before the ID chain.
type envelope struct {
	kind              Envelope
	typ, source, time string
	subject           string
	// data is what identity hashes: the JSON data, or for binary data
	// (bytes) the base64 text as a JSON string.
	data        json.RawMessage
	bytes       []byte
	contentType string
	id          json.RawMessage // the id field, nil if absent
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
	env, err := d.envelope(r)
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
	s := scratchPool.Get().(*scratch)
	defer s.release()
	canonData, err := s.c.canonical(env.data)
	if err != nil {
		return Event{}, fail(ReasonUndecodable, "canonicalising data: %v", err)
	}
	s.buf = appendAssembled(s.buf[:0], canonData, env.source, env.typ, nil)
	ev.PayloadHash = sha256.Sum256(s.buf)
	for _, rule := range d.cfg.Chain {
		id, from, ok, err := d.apply(rule, r, env, canonData, s)
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

// apply tries one rule: the ID, where it came from (Event.IDFrom), and
// whether the rule yielded one.
func (d *Decoder) apply(rule Rule, r Record, env envelope, canonData []byte, s *scratch) (string, string, bool, error) {
	switch rule {
	case RuleHeader:
		for _, name := range d.cfg.Headers {
			if v, ok := header(r.Headers, name); ok {
				id, err := d.checkID(string(v), "header "+name)
				return id, name, err == nil, err
			}
		}
	case RuleField:
		if env.id == nil {
			return "", "", false, nil
		}
		var s string
		switch env.id[0] {
		case '"':
			var err error
			if s, err = unquote(env.id); err != nil {
				return "", "", false, fail(ReasonInvalidID, "id field: %v", err)
			}
		case 'n': // null counts as absent
			return "", "", false, nil
		default:
			// A number is an ID too; its literal text is kept as is, so 7
			// and 7.0 are two IDs, as the producer wrote them.
			if _, err := strconv.ParseFloat(string(env.id), 64); err != nil {
				return "", "", false, fail(ReasonInvalidID, "id field is %s, not a string or number", kind(env.id))
			}
			s = string(env.id)
		}
		id, err := d.checkID(s, "id field")
		return id, d.idField(env), err == nil, err
	case RuleContent:
		key := r.Key
		if key == nil {
			key = []byte{} // a record without a key still has the "key" member
		}
		s.buf = appendAssembled(s.buf[:0], canonData, env.source, env.typ, key)
		sum := sha256.Sum256(s.buf)
		return "sha256-" + hex.EncodeToString(sum[:]), "", true, nil
	case RuleCoordinates:
		// A record replayed from the dead-letter topic carries where it was
		// first read (dedup-origin-*): it keeps that ID.
		t, okT := header(r.Headers, "dedup-origin-topic")
		p, okP := header(r.Headers, "dedup-origin-partition")
		o, okO := header(r.Headers, "dedup-origin-offset")
		if okT && okP && okO {
			if _, err := strconv.ParseInt(string(p), 10, 32); err == nil {
				if _, err := strconv.ParseInt(string(o), 10, 64); err == nil && utf8.Valid(t) {
					return fmt.Sprintf("%s/%s/%s", t, p, o), OriginHeaders, true, nil
				}
			}
		}
		return fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset), "", true, nil
	}
	return "", "", false, nil
}

// idField is the path of the ID field of env's format.
func (d *Decoder) idField(env envelope) string {
	if env.kind == EnvelopePlain {
		return d.cfg.Fields.ID
	}
	return "id"
}

func (d *Decoder) checkID(s, where string) (string, error) {
	switch {
	case s == "":
		return "", fail(ReasonInvalidID, "%s is empty", where)
	case len(s) > d.cfg.MaxIDLength:
		return "", fail(ReasonInvalidID, "%s is %d bytes, over %d", where, len(s), d.cfg.MaxIDLength)
	case !utf8.ValidString(s):
		return "", fail(ReasonInvalidID, "%s is not UTF-8", where)
	case strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0:
		return "", fail(ReasonInvalidID, "%s has a control character", where)
	}
	return s, nil
}

// binary reports whether r is a CloudEvents binary-mode record: a
// ce_specversion or ce_type header, unless the format is plain.
func (d *Decoder) binary(r Record) bool {
	if d.cfg.Format == FormatPlain {
		return false
	}
	_, spec := header(r.Headers, "ce_specversion")
	_, typ := header(r.Headers, "ce_type")
	return spec || typ
}

func (d *Decoder) envelope(r Record) (envelope, error) {
	if d.binary(r) {
		return binaryEnvelope(r)
	}
	obj, err := object(r.Value)
	if err != nil {
		return envelope{}, err
	}
	_, structured := obj.get("specversion")
	switch {
	case structured && d.cfg.Format != FormatPlain:
		return structuredEnvelope(obj)
	case d.cfg.Format == FormatCloudEvents:
		return envelope{}, fail(ReasonUndecodable, "not a CloudEvent: no ce_specversion header and no specversion attribute")
	}
	return d.plainEnvelope(obj, r.Value)
}

func binaryEnvelope(r Record) (envelope, error) {
	env := envelope{kind: EnvelopeBinary}
	typ, _ := header(r.Headers, "ce_type")
	if len(typ) == 0 {
		return env, fail(ReasonMissingType, "ce_type header is missing or empty")
	}
	env.typ = string(typ)
	if !utf8.Valid(typ) {
		return env, fail(ReasonMissingType, "ce_type header is not UTF-8")
	}
	if src, ok := header(r.Headers, "ce_source"); ok {
		if !utf8.Valid(src) {
			return env, fail(ReasonUndecodable, "ce_source header is not UTF-8")
		}
		env.source = string(src)
	}
	if sub, ok := header(r.Headers, "ce_subject"); ok && utf8.Valid(sub) {
		env.subject = string(sub) // informative only: never a reason to refuse the event
	}
	if t, ok := header(r.Headers, "ce_time"); ok {
		if !utf8.Valid(t) {
			return env, fail(ReasonUndecodable, "ce_time header is not UTF-8")
		}
		env.time = string(t)
	}
	ct, ok := header(r.Headers, "content-type")
	if !ok {
		ct, _ = header(r.Headers, "ce_datacontenttype")
	}
	if !utf8.Valid(ct) {
		return env, fail(ReasonUndecodable, "content type header is not UTF-8")
	}
	env.contentType = string(ct)
	if len(r.Value) == 0 {
		env.data = json.RawMessage("null") // no data
		return env, nil
	}
	declared := env.contentType != ""
	if declared && !JSONContentType(env.contentType) && r.Decoded == nil {
		env.setBytes(r.Value)
		return env, nil
	}
	v := bytes.TrimSpace(r.Value)
	switch {
	case len(v) == 0: // white space only: no data
		env.data = json.RawMessage("null")
	case json.Valid(v):
		env.data = rawJSON(v)
	case declared:
		return env, fail(ReasonUndecodable, "value is not JSON, although its content type %q says it is", env.contentType)
	default: // no content type, and not JSON: bytes
		env.setBytes(r.Value)
	}
	return env, nil
}

// setBytes makes v the binary data: identity hashes its base64 text, as a
// JSON string (what structured mode's data_base64 holds).
func (env *envelope) setBytes(v []byte) {
	env.bytes = v[:len(v):len(v)]
	b := make([]byte, 0, base64.StdEncoding.EncodedLen(len(v))+2)
	b = append(b, '"')
	b = base64.StdEncoding.AppendEncode(b, v)
	env.data = append(b, '"')
}

// JSONContentType reports whether a media type is JSON: application/json,
// text/json or a +json suffix (parameters such as charset are ignored).
// Binary-mode data of any other declared type is bytes.
func JSONContentType(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	return mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json")
}

func structuredEnvelope(obj members) (envelope, error) {
	env := envelope{kind: EnvelopeStructured}
	var err error
	if env.typ, err = stringAttr(obj, "type", true); err != nil {
		return env, err
	}
	if env.source, err = stringAttr(obj, "source", false); err != nil {
		return env, err
	}
	if env.time, err = stringAttr(obj, "time", false); err != nil {
		return env, err
	}
	if sub, _ := obj.get("subject"); len(sub) > 0 && sub[0] == '"' {
		env.subject, _ = unquote(sub) // informative only, as datacontenttype
	}
	if ct, _ := obj.get("datacontenttype"); len(ct) > 0 && ct[0] == '"' {
		env.contentType, _ = unquote(ct) // informative only: a malformed one is left out, as before it was read
	}
	env.id, _ = obj.get("id")
	data, _ := obj.get("data")
	b64, _ := obj.get("data_base64")
	switch {
	case data != nil:
		env.data = rawJSON(data)
	case b64 != nil:
		// Binary data: the base64 text itself is the payload identity.
		env.data = rawJSON(b64)
	default:
		env.data = json.RawMessage("null")
	}
	return env, nil
}

func (d *Decoder) plainEnvelope(obj members, value []byte) (envelope, error) {
	env := envelope{kind: EnvelopePlain}
	f := d.cfg.Fields
	typ, err := lookup(obj, f.Type)
	if err != nil {
		return env, err
	}
	if env.typ, err = asString(typ, f.Type, ReasonMissingType, true); err != nil {
		return env, err
	}
	if f.Source != "" {
		src, err := lookup(obj, f.Source)
		if err != nil {
			return env, err
		}
		if env.source, err = asString(src, f.Source, ReasonUndecodable, false); err != nil {
			return env, err
		}
	}
	if f.Time != "" {
		t, err := lookup(obj, f.Time)
		if err != nil {
			return env, err
		}
		if env.time, err = asString(t, f.Time, ReasonUndecodable, false); err != nil {
			return env, err
		}
	}
	if f.ID != "" {
		if env.id, err = lookup(obj, f.ID); err != nil {
			return env, err
		}
	}
	if f.Data == "" {
		env.data = rawJSON(value)
	} else {
		data, err := lookup(obj, f.Data)
		if err != nil {
			return env, err
		}
		if data == nil {
			data = json.RawMessage("null")
		}
		env.data = rawJSON(data)
	}
	return env, nil
}

// assemble returns the RFC 8785 form of {data, key, source, type} from
// the already canonical data; key is left out when nil. RFC 8785 is
// compositional, so the object is the canonical members in sorted order
// (data < key < source < type): one parse of the payload, not two.
func assemble(canonData []byte, source, typ string, key []byte) []byte {
	return appendAssembled(nil, canonData, source, typ, key)
}

// appendAssembled appends assemble's bytes to b.
func appendAssembled(b []byte, canonData []byte, source, typ string, key []byte) []byte {
	b = slices.Grow(b, len(canonData)+len(source)+len(typ)+len(key)*4/3+48)
	b = append(b, `{"data":`...)
	b = append(b, canonData...)
	if key != nil {
		b = append(b, `,"key":"`...)
		b = base64.StdEncoding.AppendEncode(b, key)
		b = append(b, '"')
	}
	b = append(b, `,"source":`...)
	b = appendJCSString(b, source)
	b = append(b, `,"type":`...)
	b = appendJCSString(b, typ)
	return append(b, '}')
}

// scratch is one Decode's reusable buffers: the canonical writer (whose
// output is the canonical data) and the bytes a hash is taken of. Nothing
// of it outlives the Decode: IDs and hashes are copied out.
type scratch struct {
	c   canonWriter
	buf []byte
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// release returns s to the pool; buffers grown by an unusually large
// record are dropped rather than kept.
func (s *scratch) release() {
	if cap(s.c.out) > 64<<10 || cap(s.buf) > 64<<10 {
		return
	}
	s.c.reset()
	scratchPool.Put(s)
}

// appendJCSString writes s as RFC 8785 (ECMAScript JSON.stringify) does:
// only '"', '\' and control characters are escaped, the short forms where
// they exist, otherwise \u00xx in lower case. s is valid UTF-8 here.
func appendJCSString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\t':
			b = append(b, '\\', 't')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

func header(hs []Header, name string) ([]byte, bool) {
	for _, h := range hs {
		if h.Key == name {
			return h.Value, true
		}
	}
	return nil, false
}

func object(v []byte) (members, error) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 || v[0] != '{' {
		return nil, fail(ReasonUndecodable, "value is not a JSON object")
	}
	obj, err := scanObject(v)
	if err != nil {
		return nil, fail(ReasonUndecodable, "value is not a JSON object: %v", err)
	}
	return obj, nil
}

// lookup follows a dotted path; a missing member gives nil, a path through
// a non-object is an error.
func lookup(obj members, path string) (json.RawMessage, error) {
	cur, rest, done := obj, path, 0 // done: the length of path walked
	for {
		p, more, deeper := strings.Cut(rest, ".")
		v, ok := cur.get(p)
		if !ok {
			return nil, nil
		}
		if !deeper {
			return v, nil
		}
		done += len(p)
		if len(v) == 0 || v[0] != '{' {
			return nil, fail(ReasonUndecodable, "%s is %s, not an object", path[:done], kind(v))
		}
		var err error
		if cur, err = scanObject(v); err != nil {
			return nil, fail(ReasonUndecodable, "%s: %v", path[:done], err)
		}
		done++ // the dot
		rest = more
	}
}

func stringAttr(obj members, name string, required bool) (string, error) {
	r := ReasonUndecodable
	if name == "type" {
		r = ReasonMissingType
	}
	v, _ := obj.get(name)
	return asString(v, name, r, required)
}

func asString(v json.RawMessage, name string, r Reason, required bool) (string, error) {
	if v == nil || string(v) == "null" {
		if required {
			return "", fail(r, "%s is missing", name)
		}
		return "", nil
	}
	if v[0] != '"' {
		return "", fail(r, "%s is %s, not a string", name, kind(v))
	}
	s, err := unquote(v)
	if err != nil {
		return "", fail(r, "%s is %s, not a string", name, kind(v))
	}
	if required && s == "" {
		return "", fail(r, "%s is empty", name)
	}
	return s, nil
}

func kind(v json.RawMessage) string {
	if len(v) == 0 {
		return "empty"
	}
	switch v[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}
