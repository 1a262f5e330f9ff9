package starter

import (
	"bytes"
	"fmt"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// serversAnswer is a start's answer as Temporal 1.32's frontend writes
// it: the run, started, running, and the link to its started event.
func serversAnswer() *workflowservice.StartWorkflowExecutionResponse {
	const run = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
	return &workflowservice.StartWorkflowExecutionResponse{RunId: run, Started: true,
		Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
		Link: &commonpb.Link{Variant: &commonpb.Link_WorkflowEvent_{WorkflowEvent: &commonpb.Link_WorkflowEvent{
			Namespace: "default", WorkflowId: "activity-welcome:0190d7a4-6b1e-7c3a-9f00-0123456789ab", RunId: run,
			Reference: &commonpb.Link_WorkflowEvent_EventRef{EventRef: &commonpb.Link_WorkflowEvent_EventReference{
				EventId: 1, EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED}}}}}}
}

// readAnswer reads b as the starter's calls do (startCodec), in one
// buffer or split in two.
func readAnswer(b []byte, split bool) (*workflowservice.StartWorkflowExecutionResponse, error) {
	data := mem.BufferSlice{mem.SliceBuffer(b)}
	if split && len(b) > 1 {
		data = mem.BufferSlice{mem.SliceBuffer(b[:len(b)/2]), mem.SliceBuffer(b[len(b)/2:])}
	}
	var got workflowservice.StartWorkflowExecutionResponse
	err := startCodec{}.Unmarshal(data, &got)
	return &got, err
}

// fieldsOf is b's fields, as they came, but those drop says to; ok is
// false when b is not a sequence of fields.
func fieldsOf(b []byte, drop func(protowire.Number, protowire.Type) bool) (kept []byte, ok bool) {
	kept = []byte{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, false
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return nil, false
		}
		if !drop(num, typ) {
			kept = append(kept, b[:n+m]...)
		}
		b = b[n+m:]
	}
	return kept, true
}

// unreadMessages are the answer's fields that hold messages dedup never
// reads: the eager workflow task (2) and the link (4).
func unreadMessages(num protowire.Number, _ protowire.Type) bool { return num == 2 || num == 4 }

// readFields are the four fields the starter reads, each of its own wire
// type: protobuf-go keeps one of another type as an unknown field.
func readFields(num protowire.Number, typ protowire.Type) bool {
	switch num {
	case answerRunID, answerFirstRunID:
		return typ == protowire.BytesType
	case answerStarted, answerStatus:
		return typ == protowire.VarintType
	}
	return false
}

// sameAnswer fails unless got, read from b by the starter's codec, is what
// protobuf-go reads from b. Where the starter reads b itself
// (readStartResponse): the same four fields, every other field kept as it
// came (marshalled again, the same message), and no error, where
// protobuf-go's only error can be inside the two fields that hold
// messages dedup never reads (the eager workflow task, the link), which
// the starter keeps unread: without those fields protobuf-go reads b, and
// the same four fields. Where it leaves b to protobuf-go: protobuf-go's
// message, or its error.
func sameAnswer(t *testing.T, b []byte, got *workflowservice.StartWorkflowExecutionResponse, err error) {
	t.Helper()
	var want workflowservice.StartWorkflowExecutionResponse
	werr := proto.Unmarshal(b, &want)
	if !readStartResponse(b, new(workflowservice.StartWorkflowExecutionResponse)) {
		if fmt.Sprint(err) != fmt.Sprint(werr) || (werr == nil && !proto.Equal(got, &want)) {
			t.Fatalf("read %x as protobuf-go: %v, %v; protobuf-go read %v, %v", b, got, err, &want, werr)
		}
		return
	}
	if err != nil {
		t.Fatalf("read %x: %v", b, err)
	}
	unread := false
	if werr != nil {
		stripped, _ := fieldsOf(b, unreadMessages)
		want.Reset()
		if werr = proto.Unmarshal(stripped, &want); werr != nil {
			t.Fatalf("read %x: no error, protobuf-go's %v outside the fields dedup never reads", b, werr)
		}
		unread = true
	}
	if got.GetRunId() != want.GetRunId() || got.GetFirstExecutionRunId() != want.GetFirstExecutionRunId() ||
		got.GetStarted() != want.GetStarted() || got.GetStatus() != want.GetStatus() {
		t.Fatalf("read %x: run %q, first run %q, started %v, status %v; protobuf-go read %q, %q, %v, %v", b,
			got.GetRunId(), got.GetFirstExecutionRunId(), got.GetStarted(), got.GetStatus(),
			want.GetRunId(), want.GetFirstExecutionRunId(), want.GetStarted(), want.GetStatus())
	}
	if rest, _ := fieldsOf(b, readFields); !bytes.Equal(got.ProtoReflect().GetUnknown(), rest) {
		t.Fatalf("read %x: kept %x of the other fields, want them as they came, %x", b, got.ProtoReflect().GetUnknown(), rest)
	}
	if unread {
		return
	}
	again, err := proto.Marshal(got)
	if err != nil {
		t.Fatalf("read %x, marshalled again: %v", b, err)
	}
	var whole workflowservice.StartWorkflowExecutionResponse
	if err := proto.Unmarshal(again, &whole); err != nil || !proto.Equal(&whole, &want) {
		t.Fatalf("read %x, marshalled again and read by protobuf-go: %v, %v; want %v", b, &whole, err, &want)
	}
}

// The answers a start can get (run, started or not, status, first run,
// the server's link by event or by request ID, an eager workflow task,
// fields of a newer API, a field sent twice, none at all): the starter
// reads what protobuf-go reads, and keeps the rest whole.
func TestStartAnswerIsReadAsProtobufGoReadsItAndKeptWhole(t *testing.T) {
	byRequest := serversAnswer()
	byRequest.Started = false
	byRequest.Link.GetWorkflowEvent().Reference = &commonpb.Link_WorkflowEvent_RequestIdRef{RequestIdRef: &commonpb.Link_WorkflowEvent_RequestIdReference{
		RequestId: "5d1f3c0e-8f7a-4a55-9b0e-6c2d7e9a41b3", EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_OPTIONS_UPDATED}}
	eager := serversAnswer()
	eager.EagerWorkflowTask = &workflowservice.PollWorkflowTaskQueueResponse{TaskToken: []byte("token"), Attempt: 1,
		WorkflowType: &commonpb.WorkflowType{Name: "W"}}
	first := serversAnswer()
	first.FirstExecutionRunId = "0199a1b2-0000-7e5f-8a9b-0c1d2e3f4a5b"
	answers := map[string]*workflowservice.StartWorkflowExecutionResponse{
		"the server's":       serversAnswer(),
		"by request ID":      byRequest,
		"eager task":         eager,
		"first run":          first,
		"run only":           {RunId: "r"},
		"empty":              {},
		"status out of enum": {RunId: "r", Status: enumspb.WorkflowExecutionStatus(99)},
	}
	for name, a := range answers {
		b, err := proto.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		for _, split := range []bool{false, true} {
			got, err := readAnswer(b, split)
			sameAnswer(t, b, got, err)
			if !proto.Equal(got, a) && a.Link == nil && a.EagerWorkflowTask == nil {
				t.Errorf("%s: read %v, want %v", name, got, a)
			}
		}
	}
	b, _ := proto.Marshal(serversAnswer())
	// A field of a newer API (number 99, each wire type), and the run sent
	// twice (the last one counts), a started field of 2.
	b = protowire.AppendVarint(protowire.AppendTag(b, 99, protowire.VarintType), 7)
	b = protowire.AppendBytes(protowire.AppendTag(b, 98, protowire.BytesType), []byte("newer"))
	b = protowire.AppendFixed32(protowire.AppendTag(b, 97, protowire.Fixed32Type), 1)
	b = protowire.AppendFixed64(protowire.AppendTag(b, 96, protowire.Fixed64Type), 1)
	b = protowire.AppendTag(protowire.AppendVarint(protowire.AppendTag(protowire.AppendTag(b, 95, protowire.StartGroupType), 1, protowire.VarintType), 5), 95, protowire.EndGroupType)
	b = protowire.AppendString(protowire.AppendTag(b, answerRunID, protowire.BytesType), "the-last-run")
	b = protowire.AppendVarint(protowire.AppendTag(b, answerStarted, protowire.VarintType), 2)
	got, err := readAnswer(b, false)
	sameAnswer(t, b, got, err)
	if got.GetRunId() != "the-last-run" || !got.GetStarted() {
		t.Errorf("run %q, started %v: want the last run sent, started", got.GetRunId(), got.GetStarted())
	}
}

// What protobuf-go refuses the starter refuses, and what it reads in a
// way of its own (one of the four fields with another wire type: kept as
// an unknown field) it reads: truncated answers at every length, a run ID
// that is not UTF-8, a tag of field 0, a group never ended.
func TestStartAnswerProtobufGoRefusesOrReadsOtherwiseIsProtobufGos(t *testing.T) {
	b, _ := proto.Marshal(serversAnswer())
	for n := range len(b) {
		got, err := readAnswer(b[:n], false)
		sameAnswer(t, b[:n], got, err)
	}
	odd := map[string][]byte{
		"run ID not UTF-8":    protowire.AppendBytes(protowire.AppendTag(nil, answerRunID, protowire.BytesType), []byte{0xff, 'r'}),
		"first run not UTF-8": protowire.AppendBytes(protowire.AppendTag(nil, answerFirstRunID, protowire.BytesType), []byte{0xc3}),
		"field 0":             protowire.AppendVarint(protowire.AppendTag(nil, 0, protowire.VarintType), 1),
		"group never ended":   protowire.AppendTag(nil, 95, protowire.StartGroupType),
		"run ID as a varint":  protowire.AppendVarint(protowire.AppendTag(nil, answerRunID, protowire.VarintType), 1),
		"started as bytes":    protowire.AppendBytes(protowire.AppendTag(nil, answerStarted, protowire.BytesType), []byte{1}),
		"status as fixed32":   protowire.AppendFixed32(protowire.AppendTag(nil, answerStatus, protowire.Fixed32Type), 1),
		"varint too long":     append(protowire.AppendTag(nil, answerStarted, protowire.VarintType), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01),
	}
	for name, b := range odd {
		got, err := readAnswer(b, false)
		t.Run(name, func(t *testing.T) { sameAnswer(t, b, got, err) })
	}
}

// A call's other messages are gRPC's proto codec's.
func TestStartCodecReadsEveryOtherMessageAsGRPCsProtoCodec(t *testing.T) {
	want := &workflowservice.SignalWithStartWorkflowExecutionResponse{RunId: "r", Started: true}
	b, _ := proto.Marshal(want)
	var got workflowservice.SignalWithStartWorkflowExecutionResponse
	if err := (startCodec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &got); err != nil || !proto.Equal(&got, want) {
		t.Fatalf("read %v, %v: want %v", &got, err, want)
	}
}

func FuzzStartAnswer(f *testing.F) {
	b, _ := proto.Marshal(serversAnswer())
	f.Add(b)
	f.Add([]byte{})
	// What the fuzzer found: a link protobuf-go cannot read (kept unread),
	// a field number past protobuf's (a MessageSet's, which protowire
	// takes), a link before a first run ID of another wire type (for
	// protobuf-go, whole).
	f.Add([]byte("\"20000000000000000000000100000000000000000020000000080"))
	f.Add([]byte("\xb0\xa3\xb0\xa30\x990"))
	f.Add([]byte("\"\x0000"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := readAnswer(b, len(b)%2 == 1)
		sameAnswer(t, b, got, err)
	})
}

// BenchmarkStartAnswerOffTheWire reads the server's answer to a start as
// the starter's calls do (startCodec) and as gRPC's proto codec would.
func BenchmarkStartAnswerOffTheWire(b *testing.B) {
	bs, err := proto.Marshal(serversAnswer())
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []interface {
		Unmarshal(mem.BufferSlice, any) error
	}{startCodec{}, protoCodec} {
		b.Run(fmt.Sprintf("%T", c), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var r workflowservice.StartWorkflowExecutionResponse
				if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(bs)}, &r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
