package starter

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/dedupio/dedup/processor/decide"
)

// onTheWire is what the server reads from the starter's bytes for r: it
// fails the test unless they parse back to a message proto.Equal to r,
// at proto.Size's length, and leave r as it was.
func onTheWire(t *testing.T, r *workflowservice.StartWorkflowExecutionRequest) {
	t.Helper()
	before := proto.Clone(r)
	bs, err := startCodec{}.Marshal(r)
	if err != nil {
		t.Fatalf("marshalling %v: %v", r, err)
	}
	b := bs.Materialize()
	if !proto.Equal(r, before) {
		t.Fatalf("marshalling changed the request:\n got %v\nwant %v", r, before)
	}
	if len(b) != proto.Size(r) {
		t.Errorf("%d bytes, proto.Size %d", len(b), proto.Size(r))
	}
	var got workflowservice.StartWorkflowExecutionRequest
	if err := proto.Unmarshal(b, &got); err != nil {
		t.Fatalf("the server cannot read the bytes of %v: %v", r, err)
	}
	if !proto.Equal(&got, r) {
		t.Errorf("the server reads another request:\n got %v\nwant %v", &got, r)
	}
}

// startRequests are requests as the starter builds them: strange event
// IDs, sources and data, every generation, record and reuse policy, a
// scheduled fire, a trace header.
func startRequests(t *testing.T) []*workflowservice.StartWorkflowExecutionRequest {
	t.Helper()
	tc := New(nil, DefaultConfig())
	var reqs []decide.StartRequest
	for i, s := range strangeStrings {
		req := benchStart()
		req.Input.EventID, req.Input.Source = s, strangeStrings[(i+5)%len(strangeStrings)]
		req.Input.Data = []json.RawMessage{nil, json.RawMessage(`{"a":1}`), json.RawMessage(" [1, 2] ")}[i%3]
		req.Generation = []int{0, 1, 2, 1 << 40, math.MaxInt}[i%5]
		req.Record = []*decide.RecordRef{nil, {Topic: s, Partition: 0, Offset: 0}, {Topic: "t", Offset: math.MaxInt64}}[i%3]
		req.ReusePolicy = []decide.ReusePolicy{"", decide.ReuseRejectDuplicate, decide.ReuseAllowDuplicate}[i%3]
		if i%4 == 0 {
			req.Input.DataBase64, req.Input.Data = []byte(strings.Repeat("\x00\xff", 100)), nil
		}
		reqs = append(reqs, req)
	}
	fire := benchStart()
	fire.Record, fire.Input.Schedule, fire.Input.ScheduledFor = nil, "daily", "2026-03-01T09:00:00+00:00"
	reqs = append(reqs, fire)
	big := benchStart()
	big.Input.Data = json.RawMessage(`"` + strings.Repeat("z", 300_000) + `"`) // a length of three varint bytes
	reqs = append(reqs, big)
	var out []*workflowservice.StartWorkflowExecutionRequest
	for _, req := range reqs {
		r, err := tc.startRequest(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	noAttrs := New(nil, Config{Namespace: "n", SearchAttributes: SearchAttributesOff})
	r, err := noAttrs.startRequest(context.Background(), benchStart())
	if err != nil {
		t.Fatal(err)
	}
	traced := proto.Clone(r).(*workflowservice.StartWorkflowExecutionRequest)
	traced.Header = &commonpb.Header{Fields: map[string]*commonpb.Payload{TraceHeaderKey: {Metadata: metaJSON, Data: []byte(`{"traceparent":"00-1-2-01"}`)}}}
	return append(out, r, traced)
}

func TestStartRequestOnTheWireIsTheRequest(t *testing.T) {
	for _, r := range startRequests(t) {
		onTheWire(t, r)
	}
}

// The fields written by hand holding what dedup never sets: protobuf-go
// writes the request, whole.
func TestStartRequestOnTheWireWithWhatDedupNeverSetsIsProtobufGos(t *testing.T) {
	base := func() *workflowservice.StartWorkflowExecutionRequest { return startRequests(t)[0] }
	withUnknown := func(m proto.Message) {
		m.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 999, protowire.VarintType), 7))
	}
	cases := map[string]func(r *workflowservice.StartWorkflowExecutionRequest){
		"external payloads": func(r *workflowservice.StartWorkflowExecutionRequest) {
			r.Input.Payloads[0].ExternalPayloads = []*commonpb.Payload_ExternalPayloadDetails{{SizeBytes: 5}}
		},
		"unknown fields in a payload":    func(r *workflowservice.StartWorkflowExecutionRequest) { withUnknown(r.Input.Payloads[0]) },
		"unknown fields in the payloads": func(r *workflowservice.StartWorkflowExecutionRequest) { withUnknown(r.Input) },
		"unknown fields in the memo":     func(r *workflowservice.StartWorkflowExecutionRequest) { withUnknown(r.Memo) },
		"unknown fields in the attrs":    func(r *workflowservice.StartWorkflowExecutionRequest) { withUnknown(r.SearchAttributes) },
		"unknown fields in the header": func(r *workflowservice.StartWorkflowExecutionRequest) {
			r.Header = &commonpb.Header{}
			withUnknown(r.Header)
		},
		"unknown fields in the request": func(r *workflowservice.StartWorkflowExecutionRequest) { withUnknown(r) },
		"empty metadata and data": func(r *workflowservice.StartWorkflowExecutionRequest) {
			r.Memo.Fields["empty"] = &commonpb.Payload{Metadata: map[string][]byte{"": nil}}
		},
		"another payload field": func(r *workflowservice.StartWorkflowExecutionRequest) {
			r.LastCompletionResult = &commonpb.Payloads{Payloads: []*commonpb.Payload{{Metadata: metaJSON, Data: []byte("1")}}}
		},
		"two input payloads": func(r *workflowservice.StartWorkflowExecutionRequest) {
			r.Input.Payloads = append(r.Input.Payloads, &commonpb.Payload{Metadata: metaKeyword, Data: []byte(`"x"`)})
		},
		"an empty input":  func(r *workflowservice.StartWorkflowExecutionRequest) { r.Input = &commonpb.Payloads{} },
		"an empty memo":   func(r *workflowservice.StartWorkflowExecutionRequest) { r.Memo = &commonpb.Memo{} },
		"no memo":         func(r *workflowservice.StartWorkflowExecutionRequest) { r.Memo = nil },
		"an empty header": func(r *workflowservice.StartWorkflowExecutionRequest) { r.Header = &commonpb.Header{} },
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			r := base()
			change(r)
			onTheWire(t, r)
		})
	}
}

// What protobuf-go refuses, it still refuses, with its error: a nil
// payload in a map or list, a key that is not UTF-8.
func TestStartRequestOnTheWireRefusesWhatProtobufGoRefuses(t *testing.T) {
	cases := map[string]func(r *workflowservice.StartWorkflowExecutionRequest){
		"a key not UTF-8 in the memo": func(r *workflowservice.StartWorkflowExecutionRequest) {
			r.Memo.Fields["bad\xff"] = &commonpb.Payload{Metadata: metaJSON, Data: []byte("1")}
		},
		"a metadata key not UTF-8": func(r *workflowservice.StartWorkflowExecutionRequest) {
			r.Input.Payloads[0].Metadata = map[string][]byte{"bad\xff": []byte("x")}
		},
		"a workflow ID not UTF-8": func(r *workflowservice.StartWorkflowExecutionRequest) { r.WorkflowId = "bad\xff" },
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			r := startRequests(t)[0]
			change(r)
			_, want := proto.Marshal(r)
			_, err := startCodec{}.Marshal(r)
			if want == nil || err == nil || err.Error() != want.Error() {
				t.Fatalf("error %v, want protobuf-go's %v", err, want)
			}
		})
	}
	r := startRequests(t)[0]
	r.Memo.Fields["nil"] = nil
	onTheWire(t, r) // protobuf-go writes a nil entry as an empty payload
}

// Every other message of the call (the response) is gRPC's proto codec's.
func TestStartCodecIsGRPCsProtoCodecForTheResponse(t *testing.T) {
	resp := &workflowservice.StartWorkflowExecutionResponse{RunId: "r", Started: true}
	b, err := startCodec{}.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	var got workflowservice.StartWorkflowExecutionResponse
	if err := (startCodec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(b.Materialize())}, &got); err != nil || !proto.Equal(&got, resp) {
		t.Fatalf("response %v, %v: want %v", &got, err, resp)
	}
	if startCodec.Name(startCodec{}) != "proto" {
		t.Errorf("codec name %q, want gRPC's proto", startCodec{}.Name())
	}
}

func FuzzStartRequestOnTheWire(f *testing.F) {
	f.Add("activity-a:e", "e", []byte(`{"a":1}`), "k", []byte("v"), int64(1))
	f.Fuzz(func(t *testing.T, wid, event string, data []byte, key string, val []byte, offset int64) {
		req := benchStart()
		req.WorkflowID, req.Input.EventID, req.Input.DataBase64, req.Input.Data = wid, event, data, nil
		req.Record.Offset = offset
		r, err := New(nil, DefaultConfig()).startRequest(context.Background(), req)
		if err != nil {
			return
		}
		r.Memo.Fields[key] = &commonpb.Payload{Metadata: map[string][]byte{key: val}, Data: val}
		_, want := proto.Marshal(r)
		if want != nil {
			if _, err := (startCodec{}).Marshal(r); err == nil || err.Error() != want.Error() {
				t.Fatalf("error %v, want %v", err, want)
			}
			return
		}
		onTheWire(t, r)
	})
}
