package eventid

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// Envelopes: CloudEvents binary mode (ce_* headers, the value is the
// data), structured mode (a JSON object with specversion) and plain JSON
// read through Config.Fields; and the readers of their members.

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
	// canon, when not nil, is data's canonical form, already written
	// (binaryEnvelope's JSON check is the canonical pass); it lives in the
	// Decode's scratch.
	canon []byte
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

func (d *Decoder) envelope(r Record, s *scratch) (envelope, error) {
	if d.binary(r) {
		return d.binaryEnvelope(r, s)
	}
	obj, err := scanRecordObject(r.Value, s)
	if err != nil {
		return envelope{}, err
	}
	_, structured := obj.get("specversion")
	switch {
	case structured && d.cfg.Format != FormatPlain:
		return d.structuredEnvelope(obj)
	case d.cfg.Format == FormatCloudEvents:
		return envelope{}, fail(ReasonUndecodable, "not a CloudEvent: no ce_specversion header and no specversion attribute")
	}
	return d.plainEnvelope(obj, r.Value, s)
}

func (d *Decoder) binaryEnvelope(r Record, s *scratch) (envelope, error) {
	env := envelope{kind: EnvelopeBinary}
	typ, _ := header(r.Headers, "ce_type")
	if len(typ) == 0 {
		return env, fail(ReasonMissingType, "ce_type header is missing or empty")
	}
	if !utf8.Valid(typ) {
		env.typ = string(typ)
		return env, fail(ReasonMissingType, "ce_type header is not UTF-8")
	}
	env.typ = d.names.intern(typ)
	if src, ok := header(r.Headers, "ce_source"); ok {
		if !utf8.Valid(src) {
			return env, fail(ReasonUndecodable, "ce_source header is not UTF-8")
		}
		env.source = d.names.intern(src)
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
	if len(v) == 0 { // white space only: no data
		env.data = json.RawMessage("null")
		return env, nil
	}
	if canon, ok := s.c.fast(v); ok { // JSON, and canonicalised in the same pass
		env.data, env.canon = rawJSON(v), canon
		return env, nil
	}
	switch {
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

func (d *Decoder) structuredEnvelope(obj members) (envelope, error) {
	env := envelope{kind: EnvelopeStructured}
	typ, _ := obj.get("type")
	src, _ := obj.get("source")
	tm, _ := obj.get("time")
	var ok bool
	if env.typ, env.source, env.time, ok = d.names.plainAttrs(typ, src, tm); !ok {
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
		env.data, env.canon = rawJSON(data), obj.canonOf("data")
	case b64 != nil:
		// Binary data: the base64 text itself is the payload identity.
		env.data, env.canon = rawJSON(b64), obj.canonOf("data_base64")
	default:
		env.data = json.RawMessage("null")
	}
	return env, nil
}

func (d *Decoder) plainEnvelope(obj members, value []byte, s *scratch) (envelope, error) {
	env := envelope{kind: EnvelopePlain}
	f := d.cfg.Fields
	var ok bool
	if env.typ, env.source, env.time, ok = d.plainEnvelopeAttrs(obj); !ok {
		if err := d.plainEnvelopeStrings(obj, &env); err != nil {
			return env, err
		}
	}
	var err error
	if f.ID != "" {
		if env.id, err = lookup(obj, f.ID); err != nil {
			return env, err
		}
	}
	if f.Data == "" {
		env.data = rawJSON(value)
		if s.once {
			env.canon, _ = s.c.wholeObject() // nil for a repeated key: Decode's canonical says why
		}
	} else {
		data, err := lookup(obj, f.Data)
		if err != nil {
			return env, err
		}
		if data == nil {
			data = json.RawMessage("null")
		} else if !strings.Contains(f.Data, ".") {
			env.canon = obj.canonOf(f.Data)
		}
		env.data = rawJSON(data)
	}
	return env, nil
}

// plainEnvelopeStrings reads the plain format's type, source and time one
// by one, with their errors (plainEnvelopeAttrs reads the usual ones).
func (d *Decoder) plainEnvelopeStrings(obj members, env *envelope) error {
	f := d.cfg.Fields
	typ, err := lookup(obj, f.Type)
	if err != nil {
		return err
	}
	if env.typ, err = asString(typ, f.Type, ReasonMissingType, true); err != nil {
		return err
	}
	if f.Source != "" {
		src, err := lookup(obj, f.Source)
		if err != nil {
			return err
		}
		if env.source, err = asString(src, f.Source, ReasonUndecodable, false); err != nil {
			return err
		}
	}
	if f.Time != "" {
		t, err := lookup(obj, f.Time)
		if err != nil {
			return err
		}
		if env.time, err = asString(t, f.Time, ReasonUndecodable, false); err != nil {
			return err
		}
	}
	return nil
}

func header(hs []Header, name string) ([]byte, bool) {
	for _, h := range hs {
		if h.Key == name {
			return h.Value, true
		}
	}
	return nil, false
}

// scanRecordObject is the record value's members, read into s's buffer.
func scanRecordObject(value []byte, s *scratch) (members, error) {
	v := bytes.TrimSpace(value)
	if len(v) == 0 || v[0] != '{' {
		return nil, fail(ReasonUndecodable, "value is not a JSON object")
	}
	// The one pass reads the value as written, not trimmed: its whole
	// canonical form is the data's when Fields.Data is empty, and white
	// space JSON does not allow (\v, U+00A0, which TrimSpace drops) makes
	// that data undecodable.
	if ms, ok := s.c.objectOnce(s.ms[:0], value); ok {
		s.ms, s.once = ms, true
		return ms, nil
	}
	// A failed scan may have written members past s.ms's length: they
	// point into this record, and release clears only up to the length.
	clear(s.ms[:cap(s.ms)])
	s.once = false
	if ms, ok := appendMembers(s.ms[:0], v); ok {
		s.ms = ms
		return ms, nil
	}
	clear(s.ms[:cap(s.ms)])
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
