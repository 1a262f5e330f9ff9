package starter

// The payloads of a start that dedup encodes itself: the input, the
// memo's generation, the search attributes and the request ID, each byte
// for byte as before (the SDK's default data converter's JSON payloads,
// uuid.NewSHA1), without the converter's per-value cost: its chain of
// converters, a metadata map per payload, a second compaction of the
// input's JSON, a map and a payload allocation per search attribute.
// payloads_test.go holds them to the SDK's bytes.
//
// The metadata maps below are shared by every payload of every request
// and never written after init: a request's payloads are only read (by
// its marshalling) once built.

import (
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/google/uuid"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
)

var (
	metaJSON    = map[string][]byte{converter.MetadataEncoding: []byte(converter.MetadataEncodingJSON)}
	metaKeyword = typedMeta(enumspb.INDEXED_VALUE_TYPE_KEYWORD)
	metaInt     = typedMeta(enumspb.INDEXED_VALUE_TYPE_INT)
)

// typedMeta is a search attribute's metadata: json/plain and its type.
func typedMeta(t enumspb.IndexedValueType) map[string][]byte {
	return map[string][]byte{converter.MetadataEncoding: []byte(converter.MetadataEncodingJSON), "type": []byte(t.String())}
}

// encodeInput is the default data converter's ToPayloads(in). Its JSON
// is in.MarshalJSON's: json.Marshal's second pass over a Marshaler's
// output (compact, escape HTML) leaves json.Marshal's own output as it
// is. An error is the converter's, with its text.
func encodeInput(dc converter.DataConverter, in *schemas.WorkflowInput) (*commonpb.Payloads, error) {
	data, ok := appendInput(make([]byte, 0, 256+len(in.Data)+len(in.DataBase64)*4/3), in)
	if !ok {
		var err error
		if data, err = in.MarshalJSON(); err != nil {
			return dc.ToPayloads(*in)
		}
	}
	return &commonpb.Payloads{Payloads: []*commonpb.Payload{{Metadata: metaJSON, Data: data}}}, nil
}

// appendInput appends in.MarshalJSON()'s bytes, written field by field
// in the struct's order: strings by appendJSONString, the data as it is
// when it is valid JSON that json.Marshal would not change (no
// whitespace to compact, nothing to escape), the definition by
// json.Marshal. Other data, and a definition json.Marshal refuses, are
// left to in.MarshalJSON (false).
func appendInput(b []byte, in *schemas.WorkflowInput) ([]byte, bool) {
	str := func(name, v string) {
		b = append(b, ',', '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		b = appendJSONString(b, v)
	}
	opt := func(name, v string) {
		if v != "" {
			str(name, v)
		}
	}
	b = append(b, `{"workflow_id":`...)
	b = appendJSONString(b, in.WorkflowID)
	str("activity_id", in.ActivityID)
	str("event_id", in.EventID)
	str("id_rule", in.IDRule)
	str("type", in.Type)
	opt("source", in.Source)
	opt("time", in.Time)
	b = append(b, `,"data":`...)
	switch {
	case in.Data == nil:
		b = append(b, "null"...)
	case compactJSON(in.Data):
		b = append(b, in.Data...)
	default:
		return b, false
	}
	if len(in.DataBase64) > 0 {
		b = append(b, `,"data_base64":"`...)
		b = base64.StdEncoding.AppendEncode(b, in.DataBase64)
		b = append(b, '"')
	}
	opt("datacontenttype", in.DataContentType)
	if in.Definition != nil {
		def, err := json.Marshal(in.Definition)
		if err != nil {
			return b, false
		}
		b = append(b, `,"definition":`...)
		b = append(b, def...)
	}
	opt("trigger_kind", in.TriggerKind)
	opt("scheduled_for", in.ScheduledFor)
	opt("schedule", in.Schedule)
	opt("fire", in.Fire)
	opt("window_start", in.WindowStart)
	opt("window_end", in.WindowEnd)
	if in.MissedCount != 0 || in.Schedule != "" {
		b = append(b, `,"missed_count":`...)
		b = strconv.AppendInt(b, in.MissedCount, 10)
	}
	return append(b, '}'), true
}

// compactJSON reports whether data is valid JSON that json.Marshal
// writes as it is: no whitespace between tokens (inside strings it is
// kept), no <, > or & and no U+2028 or U+2029 (json.Marshal escapes
// them).
func compactJSON(data []byte) bool {
	inString := false
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case c == '<' || c == '>' || c == '&':
			return false
		case c == 0xE2 && i+2 < len(data) && data[i+1] == 0x80 && data[i+2]&^1 == 0xA8:
			return false
		case inString && c == '\\':
			i++ // the escaped byte (a quote, a backslash, …) ends nothing
		case c == '"':
			inString = !inString
		case !inString && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return false
		}
	}
	return json.Valid(data)
}

// generationPayload is the default data converter's payload of the memo's
// generation (an int): its decimal digits, json/plain.
func generationPayload(generation int) *commonpb.Payload {
	return &commonpb.Payload{Metadata: metaJSON, Data: strconv.AppendInt(nil, int64(generation), 10)}
}

// appendJSONString appends json.Marshal(s): s in quotes when it is
// printable ASCII that json.Marshal does not escape (no quote, backslash,
// <, > or &), else json.Marshal's bytes.
func appendJSONString(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // a string always encodes
			return append(buf, b...)
		}
	}
	buf = append(buf, '"')
	buf = append(buf, s...)
	return append(buf, '"')
}

// attr is one search attribute being encoded: its data is buf[from:to].
type attr struct {
	name     string
	meta     map[string][]byte
	from, to int
}

// EncodeSearchAttributes is req's search attributes, encoded as the SDK
// encodes typed search attributes: the default data converter's payload
// (for strings, integers and times, its JSON converter's: json/plain),
// with the attribute's type in the "type" metadata. Keywords and integers
// are written here (appendJSONString, strconv.AppendInt) into one buffer,
// their payloads in one slice, with the shared metadata above; a
// scheduled slot (Datetime) is the JSON converter's. A value no
// visibility store takes is left out, never refused: a Keyword over
// maxKeywordBytes, a slot outside [minSlot, maxSlot].
func EncodeSearchAttributes(req decide.StartRequest) (*commonpb.SearchAttributes, error) {
	var (
		list [6]attr
		n    int
		buf  = make([]byte, 0, 128)
	)
	keyword := func(name, v string) {
		if KeywordFits(v) {
			from := len(buf)
			buf = appendJSONString(buf, v)
			list[n], n = attr{name, metaKeyword, from, len(buf)}, n+1
		}
	}
	integer := func(name string, v int64) {
		from := len(buf)
		buf = strconv.AppendInt(buf, v, 10)
		list[n], n = attr{name, metaInt, from, len(buf)}, n+1
	}
	var slot *commonpb.Payload
	if req.Signal != nil {
		keyword(AttrRoute, req.Signal.Input.ActivityID)
	} else {
		in := &req.Input
		keyword(AttrEventID, in.EventID)
		keyword(AttrRoute, in.ActivityID)
		keyword(AttrIDRule, in.IDRule)
		if r := req.Record; r != nil {
			keyword(AttrKafkaTopic, r.Topic)
			integer(AttrKafkaPartition, int64(r.Partition))
			integer(AttrKafkaOffset, r.Offset)
		}
		if in.ScheduledFor != "" {
			var err error
			if slot, err = scheduledForPayload(req); err != nil {
				return nil, err
			}
		}
	}
	out := &commonpb.SearchAttributes{IndexedFields: make(map[string]*commonpb.Payload, n+1)}
	payloads := make([]commonpb.Payload, n)
	for i, a := range list[:n] {
		p := &payloads[i]
		p.Metadata, p.Data = a.meta, buf[a.from:a.to:a.to]
		out.IndexedFields[a.name] = p
	}
	if slot != nil {
		out.IndexedFields[AttrScheduledFor] = slot
	}
	return out, nil
}

// Datetime values every visibility store indexes: Elasticsearch's
// refuses the start of any other (go.temporal.io/server v1.32.1,
// visibility/store/elasticsearch: validateDatetime, the range of a
// time.Time in int64 nanoseconds since 1970).
var (
	minSlot = time.Unix(0, 0).UTC()
	maxSlot = time.Unix(0, math.MaxInt64).UTC()
)

// scheduledForPayload is DedupScheduledFor's payload: the slot, UTC, as
// the JSON converter encodes a time.Time; nil for a slot outside
// [minSlot, maxSlot] (a route keyed by scheduled_for takes it from the
// record): left out, as a long event ID is, so that the record starts its
// run instead of being refused for the attribute. The workflow ID still
// holds the slot.
func scheduledForPayload(req decide.StartRequest) (*commonpb.Payload, error) {
	t, err := time.Parse(time.RFC3339, req.Input.ScheduledFor)
	if err != nil {
		return nil, fmt.Errorf("parsing scheduled_for %q of workflow %s: %w", req.Input.ScheduledFor, req.WorkflowID, err)
	}
	if t.Before(minSlot) || t.After(maxSlot) {
		return nil, nil
	}
	p, err := converter.NewJSONPayloadConverter().ToPayload(t.UTC())
	if err != nil {
		return nil, fmt.Errorf("encoding search attribute %s of workflow %s: %w", AttrScheduledFor, req.WorkflowID, err)
	}
	p.Metadata["type"] = []byte(enumspb.INDEXED_VALUE_TYPE_DATETIME.String())
	return p, nil
}

// RequestID is the start's request ID: the same for every start of one
// claim of a workflow ID (generation 1 is the first run; a run the reuse
// policy allows again gets the next). Temporal answers a start whose
// request ID is the current run's with that run, running or closed,
// instead of creating one: so a re-driven claim (a crash between start
// and mark, two routers re-driving one pending row, a start whose outcome
// was unknown) never creates a second execution, whatever the reuse
// policy.
//
// It is uuid.NewSHA1(requestIDSpace, workflowID+"#"+generation), hashed
// in one buffer.
func RequestID(workflowID string, generation int) string {
	if generation < 1 {
		generation = 1
	}
	var stack [128]byte
	b := append(stack[:0], requestIDSpace[:]...)
	b = append(b, workflowID...)
	b = append(b, '#')
	b = strconv.AppendInt(b, int64(generation), 10)
	s := sha1.Sum(b)
	var id uuid.UUID
	copy(id[:], s[:])
	id[6] = (id[6] & 0x0f) | 5<<4 // version 5 (SHA-1)
	id[8] = (id[8] & 0x3f) | 0x80 // RFC 4122 variant
	return id.String()
}
