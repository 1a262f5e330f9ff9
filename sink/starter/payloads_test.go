package starter

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
)

// The payloads.go encodings against the SDK's: every value below is
// encoded both ways and compared as bytes (deterministic proto).

// sdkSearchAttributes is EncodeSearchAttributes as it was: each value
// through the SDK's default data converter, its type added.
func sdkSearchAttributes(req decide.StartRequest) (*commonpb.SearchAttributes, error) {
	vals := map[string]any{}
	keyword := func(name, v string) {
		if KeywordFits(v) {
			vals[name] = v
		}
	}
	if req.Signal != nil {
		keyword(AttrRoute, req.Signal.Input.ActivityID)
	} else {
		in := req.Input
		keyword(AttrEventID, in.EventID)
		keyword(AttrRoute, in.ActivityID)
		keyword(AttrIDRule, in.IDRule)
		if r := req.Record; r != nil {
			keyword(AttrKafkaTopic, r.Topic)
			vals[AttrKafkaPartition] = int64(r.Partition)
			vals[AttrKafkaOffset] = r.Offset
		}
		if in.ScheduledFor != "" {
			t, err := time.Parse(time.RFC3339, in.ScheduledFor)
			if err != nil {
				return nil, fmt.Errorf("parsing scheduled_for %q of workflow %s: %w", in.ScheduledFor, req.WorkflowID, err)
			}
			vals[AttrScheduledFor] = t.UTC()
		}
	}
	out := &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{}}
	for name, v := range vals {
		p, err := converter.GetDefaultDataConverter().ToPayload(v)
		if err != nil {
			return nil, err
		}
		p.Metadata["type"] = []byte(typeOf(name).String())
		out.IndexedFields[name] = p
	}
	return out, nil
}

// sdkStartRequest is startRequest as it was: input and generation through
// the default data converter, the request ID through uuid.NewSHA1.
func sdkStartRequest(t *testing.T, tc *Temporal, req decide.StartRequest) *workflowservice.StartWorkflowExecutionRequest {
	t.Helper()
	dc := converter.GetDefaultDataConverter()
	input, err := dc.ToPayloads(req.Input)
	if err != nil {
		t.Fatal(err)
	}
	gen, err := dc.ToPayload(max(req.Generation, 1))
	if err != nil {
		t.Fatal(err)
	}
	attrs, err := sdkSearchAttributes(req)
	if err != nil {
		t.Fatal(err)
	}
	return &workflowservice.StartWorkflowExecutionRequest{Namespace: tc.ns(req.Namespace), WorkflowId: req.WorkflowID,
		WorkflowType: &commonpb.WorkflowType{Name: req.WorkflowType},
		TaskQueue:    &taskqueuepb.TaskQueue{Name: req.TaskQueue, Kind: enumspb.TASK_QUEUE_KIND_NORMAL},
		Input:        input, Memo: &commonpb.Memo{Fields: map[string]*commonpb.Payload{schemas.MemoGeneration: gen}},
		SearchAttributes: attrs, Identity: tc.identity,
		RequestId:                sdkRequestID(req.WorkflowID, req.Generation),
		WorkflowIdReusePolicy:    ReusePolicy(req.ReusePolicy),
		WorkflowIdConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL}
}

func sdkRequestID(workflowID string, generation int) string {
	return uuid.NewSHA1(requestIDSpace, []byte(workflowID+"#"+strconv.Itoa(max(generation, 1)))).String()
}

func wireBytes(t *testing.T, m proto.Message) string {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// strangeStrings are keyword values json.Marshal escapes or passes as
// they are, around the Keyword limit.
var strangeStrings = []string{"", "e-1", "0190d7a4-6b1e-7c3a-9f00-0123456789ab", strings.Repeat("x", maxKeywordBytes),
	strings.Repeat("y", maxKeywordBytes+1), strings.Repeat("é", 200), "événement-🎉", "<a&b>", `q"uote\back`,
	"ctl\n\t\x00\x1f\x7f", "line\u2028sep\u2029", "bad\xff\xfeutf8", " spaced ", "schedule/daily/2026-03-01T09:00:00+00:00"}

func TestSearchAttributesAreTheSDKsBytes(t *testing.T) {
	records := []*decide.RecordRef{nil, {Topic: "orders"}, {Topic: "t", Partition: math.MaxInt32, Offset: math.MaxInt64},
		{Topic: "t", Partition: 3, Offset: -1}, {Topic: "t", Offset: math.MinInt64}}
	var reqs []decide.StartRequest
	for i, s := range strangeStrings {
		other := strangeStrings[(i+5)%len(strangeStrings)]
		for _, r := range records {
			if r != nil && i%2 == 1 {
				r = &decide.RecordRef{Topic: other, Partition: r.Partition, Offset: r.Offset}
			}
			reqs = append(reqs, decide.StartRequest{WorkflowID: "w", Record: r,
				Input: schemas.WorkflowInput{EventID: s, ActivityID: other, IDRule: s}})
		}
		reqs = append(reqs, decide.StartRequest{WorkflowID: "w", Record: records[2],
			Signal: &decide.SignalRequest{WorkflowID: "e", Input: schemas.SignalEvent{EventID: s, ActivityID: s}}})
	}
	reqs = append(reqs, decide.StartRequest{WorkflowID: "w", Input: schemas.WorkflowInput{EventID: "schedule/d/x", ActivityID: "r",
		IDRule: "schedule", TriggerKind: schemas.TriggerCron, ScheduledFor: "2026-03-01T09:00:00+02:00"}})
	for _, req := range reqs {
		got, err := EncodeSearchAttributes(req)
		if err != nil {
			t.Fatal(err)
		}
		want, err := sdkSearchAttributes(req)
		if err != nil {
			t.Fatal(err)
		}
		if wireBytes(t, got) != wireBytes(t, want) {
			t.Errorf("%+v:\n got %v\nwant %v", req, got, want)
		}
	}
	bad := decide.StartRequest{WorkflowID: "w", Input: schemas.WorkflowInput{ScheduledFor: "yesterday"}}
	_, got := EncodeSearchAttributes(bad)
	_, want := sdkSearchAttributes(bad)
	if got == nil || want == nil || got.Error() != want.Error() {
		t.Fatalf("a bad scheduled_for: %v, want %v", got, want)
	}
}

func TestStartRequestIsTheSDKsBytes(t *testing.T) {
	tc := New(nil, DefaultConfig())
	datas := []json.RawMessage{nil, json.RawMessage(`{"a":1}`), json.RawMessage(" { \"a\" : [1, 2.50, -0, 1e3] ,\n\"b\":null } "),
		json.RawMessage(`{"h":"<b>&amp;</b>"}`), json.RawMessage("{\"u\":\"\u2028\u2029 é 🎉\"}"), json.RawMessage("{\"bad\":\"\xff\"}"),
		json.RawMessage(`"just a string"`), json.RawMessage(`[]`), json.RawMessage(`{"note":"a b  c","q":"\" x \\"}`),
		json.RawMessage(`{"a":"x y", "b":1}`), json.RawMessage(`{"a":"\"<"}`), json.RawMessage(`{"a":"\\\\" }`), json.RawMessage("{\"a\":\"\xe2\x80\xa7 \xe2\x80\"}"), json.RawMessage("\n1\n")}
	var reqs []decide.StartRequest
	for i, s := range strangeStrings {
		req := benchStart()
		req.Input.EventID, req.Input.Source, req.Input.Data = s, strangeStrings[(i+3)%len(strangeStrings)], datas[i%len(datas)]
		req.Generation = []int{0, 1, 2, 1 << 40, math.MaxInt}[i%5]
		req.Record = []*decide.RecordRef{nil, {Topic: s, Partition: 0, Offset: 0}, {Topic: "t", Offset: math.MaxInt64}}[i%3]
		if i%4 == 0 {
			req.Input.DataBase64, req.Input.Data = []byte{0, 1, 0xff}, nil
		}
		if i%3 == 0 {
			req.Input.Definition = &schemas.ActivityDefinition{Tasks: []schemas.TaskSpec{{Type: "webhook", URL: "http://x/?a=1&b=<2>"}}}
		}
		reqs = append(reqs, req)
	}
	for _, data := range datas {
		req := benchStart()
		req.Input.Data = data
		reqs = append(reqs, req)
	}
	fire := benchStart()
	fire.Record, fire.Input.Schedule, fire.Input.ScheduledFor = nil, "daily", "2026-03-01T09:00:00+00:00"
	reqs = append(reqs, fire)
	for _, req := range reqs {
		got, err := tc.startRequest(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if want := sdkStartRequest(t, tc, req); wireBytes(t, got) != wireBytes(t, want) {
			t.Errorf("event %q data %s:\n got %v\nwant %v", req.Input.EventID, req.Input.Data, got, want)
		}
	}
	for _, data := range []json.RawMessage{json.RawMessage(`{bad`), json.RawMessage(``), json.RawMessage(`{"a":"unterminated}`), json.RawMessage(`{"a":1}}`)} {
		bad := benchStart()
		bad.Input.Data = data
		_, err := tc.startRequest(context.Background(), bad)
		_, sdkErr := converter.GetDefaultDataConverter().ToPayloads(bad.Input)
		if err == nil || sdkErr == nil || err.Error() != fmt.Sprintf("encoding input of workflow %s: %v", bad.WorkflowID, sdkErr) {
			t.Fatalf("invalid data %q: %v, want the converter's %v", data, err, sdkErr)
		}
	}
}

func TestRequestIDIsTheNameBasedUUIDOfTheWorkflowIDAndGeneration(t *testing.T) {
	for _, wid := range append(strangeStrings, strings.Repeat("w", 900)) {
		for _, gen := range []int{-5, 0, 1, 2, 10, math.MaxInt} {
			if got, want := RequestID(wid, gen), sdkRequestID(wid, gen); got != want {
				t.Errorf("RequestID(%q, %d) = %s, want %s", wid, gen, got, want)
			}
		}
	}
}

// appendInput's bytes are in.MarshalJSON's whenever it writes them.
func FuzzInputIsMarshalJSONs(f *testing.F) {
	f.Add("e-1", "src", []byte(`{"a":"b c","d":[1,2]}`), []byte{}, "", int64(0))
	f.Add("<&>", "", []byte(" 1"), []byte{0, 1}, "daily", int64(3))
	f.Add("e", "s", []byte("{\"a\":\"\\u2028\xe2\x80\xa8\"}"), []byte(nil), "", int64(-1))
	f.Fuzz(func(t *testing.T, event, source string, data, b64 []byte, schedule string, missed int64) {
		in := benchStart().Input
		in.EventID, in.Source, in.Data, in.DataBase64, in.Schedule, in.MissedCount = event, source, data, b64, schedule, missed
		if len(data) == 0 {
			in.Data = nil
		}
		want, werr := in.MarshalJSON()
		got, ok := appendInput(nil, &in)
		if !ok {
			return
		}
		if werr != nil || string(got) != string(want) {
			t.Fatalf("appendInput %s\nMarshalJSON %s (%v)", got, want, werr)
		}
	})
}

// inputCases are data json.Marshal keeps or rewrites by a byte: escapes
// written as escapes or raw, whitespace inside and outside strings,
// numbers it keeps as written, invalid UTF-8, a lone or cut U+2028 lead
// byte, unterminated and trailing input.
var inputCases = []string{
	`{"a":"\""}`, `{"a":"\\"}`, `{"a":"\\\""}`, `"\\"`, `"\"\\"`, `{"a":"\u2028"}`, "{\"a\":\"\xe2\x80\xa8\"}",
	"{\"a\":\"\xe2\x80\xa9\"}", "{\"a\":\"\xe2\x80\"}", "\"\xe2\"", "\"\xe2\x80\"", "\"x\xe2\"", "\"\xe2\x80\xa8", "\"\xff\xfe\"",
	`{"a":"\u003c"}`, `{"a":"<"}`, `{"a":"\u0026"}`, `1.0`, `1E5`, `-0`, `1e-0`, `0.000`, `-0.0E+00`, `[1.0,1E5,-0]`,
	`{"a" :1}`, `{"a":1 }`, "{\"a\":1}\n", "\t1", `{"a":" x "}`, "{\"a\":\"\t\"}", `{"a":"\t"}`, `{"a":"\/"}`,
	`{"a":"\ud800"}`, `{"a":"\uDEAD"}`, `"unterminated`, `{"a":1`, `{"a":1}}`, `{}{}`, `1 2`, `nul`, `null`, `true`,
	`false`, `[]`, `[[[[]]]]`, `{"":""}`, `{"a":"b","a":"c"}`, `"\u0000"`, "\"\x00\"", "\"\x7f\"", `{"a":"\b\f\n\r\t"}`,
	`0123`, `+1`, `.5`, `1.`, `01`, `"\x"`, `"\u12"`, "\"\\\xe2\x80\xa8\"", "[\"\\\\\",\"\xe2\x80\xa8\"]",
}

// appendInput writes MarshalJSON's bytes whenever it writes any, for
// every data above and every omitempty field set or empty.
func TestInputIsMarshalJSONsForEscapesNumbersAndEveryOptionalField(t *testing.T) {
	defs := []*schemas.ActivityDefinition{nil, {}, {Tasks: []schemas.TaskSpec{{Type: "webhook", URL: "http://x/?a=1&b=<2>\u2028"}},
		ActivityTimeoutSeconds: 1, MaxAttempts: -1, ScheduleToCloseSeconds: 3, DedupeKeyStrategy: "catchup"}}
	for i, data := range append(inputCases, "") {
		for j := 0; j < 64; j++ {
			in := benchStart().Input
			in.Data = json.RawMessage(data)
			if data == "" && j%2 == 0 {
				in.Data = nil
			}
			set := func(bit int, v string) string {
				if j&(1<<bit) != 0 {
					return v
				}
				return ""
			}
			in.Source, in.Time, in.DataContentType = set(0, "s<"), set(1, "2026-01-01T00:00:00Z"), set(2, "application/json")
			in.TriggerKind, in.ScheduledFor, in.Schedule = set(3, "cron"), set(3, "2026-03-01T09:00:00+00:00"), set(4, "daily")
			in.Fire, in.WindowStart, in.WindowEnd = set(5, "on_time"), set(5, "a"), set(4, "b")
			in.MissedCount = int64([]int{0, 0, 1, -1}[(i+j)%4])
			in.Definition = defs[(i+j)%len(defs)]
			in.DataBase64 = [][]byte{nil, {}, {0}, {0xff, 0xfe, 0xfd, 0xfc}}[(i+j)%4]
			want, werr := in.MarshalJSON()
			got, ok := appendInput(nil, &in)
			if ok && (werr != nil || string(got) != string(want)) {
				t.Errorf("data %q, fields %b:\nappendInput %s\nMarshalJSON %s (%v)", data, j, got, want, werr)
			}
			enc, err := encodeInput(converter.GetDefaultDataConverter(), &in)
			sdk, sdkErr := converter.GetDefaultDataConverter().ToPayloads(in)
			if (err == nil) != (sdkErr == nil) || (err == nil && wireBytes(t, enc) != wireBytes(t, sdk)) {
				t.Errorf("data %q, fields %b: encodeInput %v (%v), the converter's %v (%v)", data, j, enc, err, sdk, sdkErr)
			}
		}
	}
}

// appendInput's bytes are MarshalJSON's, every field fuzzed.
func FuzzInputOfEveryFieldIsMarshalJSONs(f *testing.F) {
	for _, c := range inputCases {
		f.Add(c, "e", "s<", []byte{1}, "daily", int64(0), "u&", true)
	}
	f.Fuzz(func(t *testing.T, data, event, source string, b64 []byte, schedule string, missed int64, url string, def bool) {
		in := schemas.WorkflowInput{WorkflowID: event + source, ActivityID: source, EventID: event, IDRule: url, Type: schedule,
			Source: source, Time: event, Data: json.RawMessage(data), DataBase64: b64, DataContentType: url, TriggerKind: source,
			ScheduledFor: event, Schedule: schedule, Fire: url, WindowStart: source, WindowEnd: event, MissedCount: missed}
		if def {
			in.Definition = &schemas.ActivityDefinition{Tasks: []schemas.TaskSpec{{Type: event, URL: url}}, MaxAttempts: int(missed)}
		}
		if data == "" {
			in.Data = nil
		}
		want, werr := in.MarshalJSON()
		if got, ok := appendInput(nil, &in); ok && (werr != nil || string(got) != string(want)) {
			t.Fatalf("appendInput %s\nMarshalJSON %s (%v)", got, want, werr)
		}
		enc, err := encodeInput(converter.GetDefaultDataConverter(), &in)
		sdk, sdkErr := converter.GetDefaultDataConverter().ToPayloads(in)
		if (err == nil) != (sdkErr == nil) || (err == nil && wireBytes(t, enc) != wireBytes(t, sdk)) {
			t.Fatalf("encodeInput %v (%v), the converter's %v (%v)", enc, err, sdk, sdkErr)
		}
	})
}
