package starter

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/dedupio/dedup/processor"
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
	bs.Free() // as gRPC does once it sent them
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

// A start request's bytes are written into a buffer of gRPC's pool, which
// gRPC puts back once it has sent them (its proto codec does so for every
// message over 1 KiB): no garbage per start. A request that outgrows the
// buffer taken for it is still the request, in append's own slice.
func TestStartRequestBytesAreInABufferOfGRPCsPool(t *testing.T) {
	r, err := New(nil, DefaultConfig()).startRequest(context.Background(), benchStart())
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // the buffers go back to the pool and come out again
		bs, err := startCodec{}.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if len(bs) != 1 {
			t.Fatalf("%d buffers, want 1", len(bs))
		}
		if _, own := bs[0].(mem.SliceBuffer); own {
			t.Errorf("a %d-byte start request is in a slice of its own, not a buffer of gRPC's pool", bs.Len())
		}
		bs.Free()
		onTheWire(t, r)
	}
	big := proto.Clone(r).(*workflowservice.StartWorkflowExecutionRequest)
	big.WorkflowType.Name = strings.Repeat("w", 8<<10) // beyond startRequestCap
	onTheWire(t, big)
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
		"an input metadata key and the identity not UTF-8": func(r *workflowservice.StartWorkflowExecutionRequest) {
			r.Input.Payloads[0].Metadata = map[string][]byte{"bad\xff": []byte("x")}
			r.Identity = "bad\xff"
		},
		"the memo's key and the request ID not UTF-8": func(r *workflowservice.StartWorkflowExecutionRequest) {
			r.Memo.Fields["bad\xff"] = &commonpb.Payload{}
			r.RequestId = "bad\xff"
		},
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

// A message other than the request (here the response) is marshalled as
// gRPC's proto codec marshals it, and the response is read back whole
// (startresponse_test.go holds every answer the server can send).
func TestStartCodecMarshalsEveryOtherMessageAsGRPCsProtoCodec(t *testing.T) {
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

// Every length the starter writes (a payload's data, a metadata value, a
// payload, a map entry, the input's and the maps' messages) on both sides
// of each varint boundary (1, 2, 3 and 4 bytes), empty keys and values,
// maps of thousands of entries, and the header the tracing propagator
// writes (trace context and baggage): the server reads the request.
func TestStartRequestOnTheWireAtEveryVarintBoundary(t *testing.T) {
	tc := New(nil, DefaultConfig())
	tc.prop = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	tid, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	sid, _ := trace.SpanIDFromHex("b7ad6b7169203331")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: 1}))
	m1, _ := baggage.NewMemberRaw("tenant", "ac me;\"\u00e9\u2028<&>")
	m2, _ := baggage.NewMemberRaw("empty", "")
	bag, _ := baggage.New(m1, m2)
	ctx = baggage.ContextWithBaggage(ctx, bag)
	var lengths []int
	for _, edge := range []int{0, 1 << 7, 1 << 14, 1 << 21} {
		for d := -48; d <= 4; d++ {
			if edge+d >= 0 && (edge > 0 || d >= 0) {
				lengths = append(lengths, edge+d)
			}
		}
	}
	for _, n := range lengths {
		req := benchStart()
		if n%2 == 0 {
			req.Input.Data = json.RawMessage(`"` + strings.Repeat("z", max(n-2, 0)) + `"`)
		} else {
			req.Input.Data, req.Input.DataBase64 = nil, []byte(strings.Repeat("\xff", n))
		}
		r, err := tc.startRequest(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if r.Header == nil {
			t.Fatal("no trace header")
		}
		if n < 1<<16 || n%7 == 0 {
			v := []byte(strings.Repeat("v", n))
			r.Memo.Fields[""] = &commonpb.Payload{Metadata: map[string][]byte{"": nil, "k": v}, Data: v}
			r.Memo.Fields["e"] = &commonpb.Payload{}
			r.SearchAttributes.IndexedFields[strings.Repeat("k", n%300)] = &commonpb.Payload{Metadata: map[string][]byte{"": {}}}
			r.Header.Fields["h"] = &commonpb.Payload{Data: v[:n/2]}
			r.Input.Payloads[0].Metadata = map[string][]byte{"encoding": []byte("json/plain"), strings.Repeat("m", n%200): v[:n/3]}
		}
		onTheWire(t, r)
	}
	r, err := tc.startRequest(ctx, benchStart())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5000 {
		k := strconv.Itoa(i)
		r.Memo.Fields[k] = &commonpb.Payload{Metadata: map[string][]byte{k: []byte(k)}, Data: []byte(k)}
		r.SearchAttributes.IndexedFields[k] = &commonpb.Payload{Metadata: metaKeyword, Data: []byte(k)}
		r.Header.Fields[k] = &commonpb.Payload{}
	}
	onTheWire(t, r)
}

// Every map the starter writes by hand, fuzzed: the server reads the
// request, or protobuf-go's error is the call's.
func FuzzStartRequestOfEveryPayloadMapOnTheWire(f *testing.F) {
	f.Add("k", []byte("v"), "", []byte(nil), uint8(3), []byte(`{"a":1}`))
	f.Add("\xff", []byte{}, "\x00", []byte{0xff}, uint8(255), []byte(nil))
	f.Fuzz(func(t *testing.T, k1 string, v1 []byte, k2 string, v2 []byte, which uint8, data []byte) {
		req := benchStart()
		req.Input.Data, req.Input.DataBase64 = nil, data
		r, err := New(nil, DefaultConfig()).startRequest(context.Background(), req)
		if err != nil {
			return
		}
		p := &commonpb.Payload{Metadata: map[string][]byte{k1: v1, k2: v2}, Data: v2}
		if which&1 != 0 {
			r.Input.Payloads[0].Metadata = map[string][]byte{k2: v1}
		}
		if which&2 != 0 {
			r.Memo.Fields[k1], r.Memo.Fields[k2] = p, &commonpb.Payload{Data: v1}
		}
		if which&4 != 0 {
			r.SearchAttributes.IndexedFields[k2] = p
		}
		if which&8 != 0 {
			r.Header = &commonpb.Header{Fields: map[string]*commonpb.Payload{k1: p, k2: {}}}
		}
		if which&16 != 0 {
			r.Input.Payloads = append(r.Input.Payloads, p)
		}
		if which&32 != 0 {
			r.Input = nil
		}
		if which&64 != 0 {
			r.Memo = nil
		}
		if which&128 != 0 {
			r.Header = &commonpb.Header{}
		}
		_, want := proto.Marshal(r)
		if want != nil {
			before := proto.Clone(r)
			if _, err := (startCodec{}).Marshal(r); err == nil || err.Error() != want.Error() {
				t.Fatalf("error %v, want %v", err, want)
			}
			if !proto.Equal(r, before) {
				t.Fatalf("a refused request changed")
			}
			return
		}
		onTheWire(t, r)
	})
}

// A nil request is gRPC's proto codec's (an empty message), not a panic
// inside the call.
func TestStartCodecMarshalsANilRequestAsGRPCsProtoCodec(t *testing.T) {
	var r *workflowservice.StartWorkflowExecutionRequest
	want, wantErr := protoCodec.Marshal(r)
	var (
		got mem.BufferSlice
		err error
	)
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("marshalling a nil request panics: %v", p)
			}
		}()
		got, err = startCodec{}.Marshal(r)
	}()
	if (err == nil) != (wantErr == nil) || string(got.Materialize()) != string(want.Materialize()) {
		t.Fatalf("a nil request: %q (%v), want gRPC's %q (%v)", got.Materialize(), err, want.Materialize(), wantErr)
	}
}

// recordingFrontend is a gRPC server of Temporal's service that keeps
// every start request it reads, with its content type, and answers it.
type recordingFrontend struct {
	workflowservice.UnimplementedWorkflowServiceServer
	mu    sync.Mutex
	reqs  []*workflowservice.StartWorkflowExecutionRequest
	types []string
	// refuse: how many starts to answer as a server without gzip does
	// (the SDK sends the call again, uncompressed: a second marshal).
	refuse int
}

func (f *recordingFrontend) GetSystemInfo(context.Context, *workflowservice.GetSystemInfoRequest) (*workflowservice.GetSystemInfoResponse, error) {
	return &workflowservice.GetSystemInfoResponse{}, nil
}

func (f *recordingFrontend) StartWorkflowExecution(ctx context.Context, r *workflowservice.StartWorkflowExecutionRequest) (*workflowservice.StartWorkflowExecutionResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs, f.types = append(f.reqs, r), append(f.types, strings.Join(md.Get("content-type"), ","))
	if f.refuse > 0 {
		f.refuse--
		return nil, status.Error(codes.Unimplemented, "grpc-encoding gzip is not supported here")
	}
	return &workflowservice.StartWorkflowExecutionResponse{RunId: "run-" + r.RequestId, Started: true}, nil
}

// Through the SDK's client and its interceptors, over gRPC to a real
// gRPC server: the server reads, as application/grpc+proto, the request
// startRequest builds (big data, a trace header), and the starter reads
// its answer.
func TestStartRequestArrivesOverGRPCAsTheRequest(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fe := &recordingFrontend{}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(64 << 20))
	workflowservice.RegisterWorkflowServiceServer(srv, fe)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	s := dial(t, l.Addr().String())
	s.prop = propagation.TraceContext{}
	tid, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	sid, _ := trace.SpanIDFromHex("b7ad6b7169203331")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: 1}))
	sizes := []int{0, 127, 128, 16384, 3 << 20}
	for _, n := range sizes {
		req := benchStart()
		req.ReusePolicy = decide.ReuseAllowDuplicate // a request ID that is the same on every build
		req.Input.Data = json.RawMessage(`"` + strings.Repeat("z", n) + `"`)
		res, err := s.Start(ctx, req)
		if err != nil {
			t.Fatalf("%d bytes of data: %v", n, err)
		}
		want, err := s.startRequest(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if res.RunID != "run-"+want.RequestId || res.AlreadyStarted {
			t.Errorf("%d bytes: result %+v, want run-%s started", n, res, want.RequestId)
		}
		fe.mu.Lock()
		got, ctype := fe.reqs[len(fe.reqs)-1], fe.types[len(fe.types)-1]
		fe.mu.Unlock()
		if !proto.Equal(got, want) {
			t.Errorf("%d bytes: the server read another request:\n got %v\nwant %v", n, got, want)
		}
		if ctype != "application/grpc+proto" {
			t.Errorf("%d bytes: content type %q", n, ctype)
		}
	}
	if len(fe.reqs) != len(sizes) {
		t.Errorf("%d requests read, want %d", len(fe.reqs), len(sizes))
	}
}

// A start over the server's gRPC receive limit is refused as it was
// without the codec: ResourceExhausted with gRPC's text, not permanent
// (errors.go), not a run limit (runlimits.go).
func TestStartOverTheServersMessageLimitIsRefusedAsWithoutTheCodec(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(4 << 10))
	workflowservice.RegisterWorkflowServiceServer(srv, &recordingFrontend{})
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	s := dial(t, l.Addr().String())
	req := benchStart()
	req.Input.Data = json.RawMessage(`"` + strings.Repeat("z", 8<<10) + `"`)
	_, err = s.Start(context.Background(), req)
	sreq, serr := s.startRequest(context.Background(), req)
	if serr != nil {
		t.Fatal(serr)
	}
	_, before := s.c.WorkflowService().StartWorkflowExecution(context.Background(), sreq) // gRPC's proto codec
	if err == nil || before == nil {
		t.Fatalf("an oversized start: %v; without the codec %v", err, before)
	}
	st, want := status.Convert(errors.Unwrap(err)), status.Convert(before)
	if st.Code() != codes.ResourceExhausted || st.Message() != want.Message() || !strings.Contains(st.Message(), "larger than max") {
		t.Errorf("an oversized start: %v, want gRPC's %v", err, before)
	}
	if processor.IsPermanent(err) || IsPermanent(before) || RunLimit(err) != "" {
		t.Errorf("an oversized start: permanent %v (without the codec %v), run limit %q", processor.IsPermanent(err), IsPermanent(before), RunLimit(err))
	}
}

// The SDK sends a call again when the server refuses gzip (its downgrade
// interceptor): the codec marshals the same request a second time, and
// the server reads the request both times.
func TestStartRequestSentAgainBySDKIsTheRequest(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fe := &recordingFrontend{refuse: 1}
	srv := grpc.NewServer()
	workflowservice.RegisterWorkflowServiceServer(srv, fe)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	s := dial(t, l.Addr().String())
	req := benchStart()
	req.ReusePolicy = decide.ReuseAllowDuplicate
	if _, err := s.Start(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	want, err := s.startRequest(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(fe.reqs) != 2 {
		t.Fatalf("%d starts read, want 2 (refused, then sent again)", len(fe.reqs))
	}
	for i, got := range fe.reqs {
		if !proto.Equal(got, want) {
			t.Errorf("attempt %d: the server read another request:\n got %v\nwant %v", i+1, got, want)
		}
	}
}

// poolStart is a start of n bytes of random data (seeded: each start its
// own bytes) and, when long, a workflow type of that many bytes (the
// request outgrows startRequestCap's estimate).
func poolStart(id string, seed int64, n, long int) decide.StartRequest {
	req := benchStart()
	req.WorkflowID, req.Input.WorkflowID = id, id
	req.ReusePolicy = decide.ReuseAllowDuplicate // a request ID that is the same on every build
	rnd := rand.New(rand.NewPCG(uint64(seed), 22))
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(rnd.Uint32())
	}
	req.Input.Data, req.Input.DataBase64 = nil, data
	if long > 0 {
		w := make([]byte, long)
		for i := range w {
			w[i] = 'a' + byte(rnd.IntN(26))
		}
		req.WorkflowType = string(w)
	}
	return req
}

// poolSizes are data lengths around the pool's tiers (4, 16, 32 KiB,
// 1 MiB) and startRequestCap's estimate of them, and an outgrowing
// workflow type for some.
var poolSizes = []struct{ data, long int }{
	{0, 0}, {100, 0}, {900, 0}, {2000, 0}, {2800, 0}, {2950, 0}, {3000, 0}, {3050, 0}, {3100, 0},
	{3500, 0}, {4000, 0}, {4100, 0}, {11000, 0}, {11800, 0}, {12000, 0}, {12200, 0}, {23800, 0},
	{24000, 0}, {24500, 0}, {0, 5000}, {100, 3000}, {2900, 200}, {11500, 700}, {3000, 40000},
}

// Requests marshalled at once, on many goroutines, each kept while the
// others are marshalled and freed: every one still holds its own bytes
// (no buffer is handed out twice, nor put back while it is in use), and
// they are the request's.
func TestConcurrentStartRequestsEachKeepTheirOwnBytes(t *testing.T) {
	tc := New(nil, DefaultConfig())
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 60 {
				sz := poolSizes[(g*7+i)%len(poolSizes)]
				r, err := tc.startRequest(context.Background(), poolStart("wf-"+strconv.Itoa(g)+"-"+strconv.Itoa(i), int64(g*1000+i), sz.data, sz.long))
				if err != nil {
					t.Error(err)
					return
				}
				kept, err := startCodec{}.Marshal(r)
				if err != nil {
					t.Error(err)
					return
				}
				first := kept.Materialize()
				for j := range 5 { // others' marshals, freed, while this one is held
					o, err := startCodec{}.Marshal(poolRequest(t, tc, g, i, j))
					if err != nil {
						t.Error(err)
						return
					}
					o.Free()
				}
				again := kept.Materialize()
				kept.Free()
				var got workflowservice.StartWorkflowExecutionRequest
				if string(first) != string(again) {
					t.Errorf("the bytes of %s (%d) changed while held", r.WorkflowId, len(first))
					return
				} else if err := proto.Unmarshal(again, &got); err != nil || !proto.Equal(&got, r) {
					t.Errorf("the bytes of %s (%d) are another request (%v)", r.WorkflowId, len(first), err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func poolRequest(t *testing.T, tc *Temporal, g, i, j int) *workflowservice.StartWorkflowExecutionRequest {
	sz := poolSizes[(g+i+j)%len(poolSizes)]
	r, err := tc.startRequest(context.Background(), poolStart("other", int64(-g*1000-i*10-j), sz.data, sz.long))
	if err != nil {
		t.Error(err)
	}
	return r
}

// attemptsFrontend keeps every start it reads by workflow ID. refuse: the
// first attempt of each is answered Unavailable (gRPC's retry policy
// sends the buffered bytes again, after SendMsg has freed its own
// reference); slow: each answer waits.
type attemptsFrontend struct {
	workflowservice.UnimplementedWorkflowServiceServer
	refuse bool
	slow   time.Duration
	mu     sync.Mutex
	got    map[string][]*workflowservice.StartWorkflowExecutionRequest
	// gzipped: how many messages arrived compressed (a stats handler).
	gzipped atomic.Int64
}

func (f *attemptsFrontend) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return ctx
}
func (f *attemptsFrontend) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (f *attemptsFrontend) HandleConn(context.Context, stats.ConnStats) {}
func (f *attemptsFrontend) HandleRPC(_ context.Context, s stats.RPCStats) {
	if in, ok := s.(*stats.InPayload); ok && in.CompressedLength != in.Length {
		f.gzipped.Add(1)
	}
}

func (f *attemptsFrontend) GetSystemInfo(context.Context, *workflowservice.GetSystemInfoRequest) (*workflowservice.GetSystemInfoResponse, error) {
	return &workflowservice.GetSystemInfoResponse{}, nil
}

func (f *attemptsFrontend) StartWorkflowExecution(ctx context.Context, r *workflowservice.StartWorkflowExecutionRequest) (*workflowservice.StartWorkflowExecutionResponse, error) {
	f.mu.Lock()
	n := len(f.got[r.WorkflowId])
	f.got[r.WorkflowId] = append(f.got[r.WorkflowId], r)
	f.mu.Unlock()
	if f.refuse && n == 0 {
		return nil, status.Error(codes.Unavailable, "try again")
	}
	time.Sleep(f.slow)
	return &workflowservice.StartWorkflowExecutionResponse{RunId: "run-" + r.RequestId, Started: true}, nil
}

const startMethod = `"name":[{"service":"temporal.api.workflowservice.v1.WorkflowService","method":"StartWorkflowExecution"}]`

// Starts made at once from many goroutines, through the SDK's client
// over gRPC to a real server, of sizes around the pool's tiers and
// startRequestCap's estimate, beyond it and near gRPC's 4 MiB limit,
// each with its own trace header:
// the server reads, at every attempt, each start's own request. With
// gzip; with gRPC's retry policy resending the buffered bytes after a
// refusal (the buffer's reference SendMsg held is freed by then, and
// the pool serves the other goroutines' starts meanwhile).
func TestConcurrentStartsEachArriveAsTheirOwnRequest(t *testing.T) {
	retry := `{"loadBalancingConfig":[{"round_robin":{}}],"methodConfig":[{` + startMethod +
		`,"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.001s","maxBackoff":"0.01s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`
	for _, tc := range []struct {
		name, compression, config string
		refuse                    bool
		slow                      time.Duration
		attempts                  int // at least
	}{
		{"plain", "none", "", false, 0, 1},
		{"gzip", "gzip", "", false, 0, 1},
		{"retried", "none", retry, true, 0, 2},
		{"retried gzip", "gzip", retry, true, 0, 2},
		{"retried slowly", "none", retry, true, 5 * time.Millisecond, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			fe := &attemptsFrontend{refuse: tc.refuse, slow: tc.slow,
				got: map[string][]*workflowservice.StartWorkflowExecutionRequest{}}
			srv := grpc.NewServer(grpc.StatsHandler(fe))
			workflowservice.RegisterWorkflowServiceServer(srv, fe)
			go func() { _ = srv.Serve(l) }()
			t.Cleanup(srv.Stop)
			opts := []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxRetryRPCBufferSize(64 << 20))}
			if tc.config != "" {
				opts = append(opts, grpc.WithDefaultServiceConfig(tc.config))
			}
			c, err := client.NewLazyClient(client.Options{HostPort: l.Addr().String(), Namespace: "default",
				Logger:            tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
				ConnectionOptions: client.ConnectionOptions{GrpcCompression: Compression(tc.compression), DialOptions: opts}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			s := New(c, Config{Namespace: "default", StartTimeout: 30 * time.Second})
			s.prop = propagation.TraceContext{} // a trace header, each start its own
			sizes := append(slices.Clone(poolSizes), struct{ data, long int }{1<<20 - 3000, 0},
				struct{ data, long int }{(4<<20 - 8<<10) * 3 / 4, 0}) // base64 in the JSON input: just under 4 MiB
			want := map[string]*workflowservice.StartWorkflowExecutionRequest{}
			var mu sync.Mutex
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					for i := range 12 {
						sz := sizes[(g*5+i)%len(sizes)]
						if sz.data > 1<<20 && g%4 != 0 {
							sz = sizes[i%len(poolSizes)]
						}
						id := "wf-" + strconv.Itoa(g) + "-" + strconv.Itoa(i)
						req := poolStart(id, int64(g*100+i), sz.data, sz.long)
						var tid trace.TraceID
						var sid trace.SpanID
						tid[0], tid[1], sid[0], sid[1] = byte(g+1), byte(i+1), byte(i+1), byte(g+1)
						ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: 1}))
						w, err := s.startRequest(ctx, req)
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						want[id] = w
						mu.Unlock()
						if w.Header == nil {
							t.Errorf("%s: no trace header", id)
						}
						res, err := s.Start(ctx, req)
						if err != nil {
							t.Errorf("%s (%d bytes of data, type of %d): %v", id, sz.data, sz.long, err)
							continue
						}
						if res.RunID != "run-"+w.RequestId {
							t.Errorf("%s: run %s, want run-%s", id, res.RunID, w.RequestId)
						}
					}
				})
			}
			wg.Wait()
			fe.mu.Lock()
			defer fe.mu.Unlock()
			for id, w := range want {
				got := fe.got[id]
				if len(got) < tc.attempts {
					t.Errorf("%s: %d attempts read, want at least %d", id, len(got), tc.attempts)
				}
				for i, r := range got {
					if !proto.Equal(r, w) {
						t.Errorf("%s, attempt %d: the server read another request (%d bytes, want %d)", id, i+1, proto.Size(r), proto.Size(w))
					}
				}
			}
			if len(fe.got) != len(want) {
				t.Errorf("%d workflows read, want %d", len(fe.got), len(want))
			}
			attempts := 0
			for _, got := range fe.got {
				attempts += len(got)
			}
			if gz := fe.gzipped.Load(); (tc.compression == "gzip") != (gz > 0) {
				t.Errorf("%d messages read gzipped, compression %s", gz, tc.compression)
			}
			t.Logf("%d starts, %d attempts read, %d gzipped", len(want), attempts, fe.gzipped.Load())
		})
	}
}

// The requests protobuf-go writes whole (what dedup never sets: unknown
// fields, external payloads, a nil entry), and the ones refused, in the
// pool's buffer or outgrowing it: every map of one entry, so protobuf-go
// writes one order, the codec's bytes are exactly proto.Marshal's. (The
// request's own unknown fields are not among them: the codec writes the
// four fields after them, the same message in another order.)
func TestStartRequestProtobufGoWritesIsProtobufGosBytesInThePoolsBuffer(t *testing.T) {
	s := New(nil, Config{Namespace: "n", SearchAttributes: SearchAttributesOff})
	withUnknown := func(m proto.Message) {
		m.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 999, protowire.VarintType), 7))
	}
	cases := map[string]func(r *workflowservice.StartWorkflowExecutionRequest){
		"unknown fields in the memo": func(r *workflowservice.StartWorkflowExecutionRequest) { withUnknown(r.Memo) },
		"external payloads (written, then dropped)": func(r *workflowservice.StartWorkflowExecutionRequest) {
			r.Input.Payloads[0].ExternalPayloads = []*commonpb.Payload_ExternalPayloadDetails{{SizeBytes: 5}}
		},
		"unknown fields in a memo payload (written, then dropped)": func(r *workflowservice.StartWorkflowExecutionRequest) {
			withUnknown(r.Memo.Fields[schemasMemoKey(r)])
		},
		"a nil header entry (written, then dropped)": func(r *workflowservice.StartWorkflowExecutionRequest) {
			r.Header = &commonpb.Header{Fields: map[string]*commonpb.Payload{"h": nil}}
		},
	}
	for name, change := range cases {
		for _, sz := range []struct{ data, long int }{{0, 0}, {2000, 0}, {24000, 0}, {0, 5000}, {3000, 40000}, {1 << 20, 0}} {
			r, err := s.startRequest(context.Background(), poolStart("wf", int64(sz.data), sz.data, sz.long))
			if err != nil {
				t.Fatal(err)
			}
			change(r)
			want, wantErr := proto.Marshal(r)
			for range 3 { // buffers put back and taken again
				before := proto.Clone(r)
				bs, err := startCodec{}.Marshal(r)
				if err != nil || wantErr != nil {
					t.Fatalf("%s, %d bytes: %v, protobuf-go %v", name, sz.data, err, wantErr)
				}
				if got := bs.Materialize(); string(got) != string(want) {
					t.Errorf("%s, %d bytes of data, type of %d: %d bytes, not protobuf-go's %d", name, sz.data, sz.long, len(got), len(want))
				}
				bs.Free()
				if !proto.Equal(r, before) {
					t.Fatalf("%s: the request changed", name)
				}
			}
		}
	}
}

// schemasMemoKey is the key of the request's only memo entry.
func schemasMemoKey(r *workflowservice.StartWorkflowExecutionRequest) string {
	for k := range r.Memo.Fields {
		return k
	}
	return ""
}

// The buffer a start request is marshalled into goes back to gRPC's pool
// whichever way Marshal ends: written and freed by gRPC, outgrown (put
// back at once), refused by protobuf-go (put back at once, protobuf-go's
// error returned). Seen as the pool handing the same buffer out again
// (sync.Pool keeps it on this P; tried many times, since the race
// detector's pool drops some, and a goroutine may move).
func TestStartRequestBufferGoesBackToThePoolWhicheverWayMarshalEnds(t *testing.T) {
	tc := New(nil, DefaultConfig())
	pool := mem.DefaultBufferPool()
	cases := map[string]func(r *workflowservice.StartWorkflowExecutionRequest) error{
		"written and freed": func(*workflowservice.StartWorkflowExecutionRequest) error { return nil },
		"outgrown": func(r *workflowservice.StartWorkflowExecutionRequest) error {
			r.WorkflowType.Name = strings.Repeat("w", 40<<10)
			return nil
		},
		"refused": func(r *workflowservice.StartWorkflowExecutionRequest) error {
			r.Identity = "bad\xff"
			_, err := proto.Marshal(r)
			return err
		},
		"refused after the fields written here": func(r *workflowservice.StartWorkflowExecutionRequest) error {
			r.Memo.Fields["bad\xff"] = &commonpb.Payload{}
			_, err := proto.Marshal(r)
			return err
		},
	}
	for name, change := range cases {
		r, err := tc.startRequest(context.Background(), benchStart())
		if err != nil {
			t.Fatal(err)
		}
		wantErr := change(r)
		n := startRequestCap(r)
		back := 0
		for range 200 {
			p := pool.Get(n)
			pool.Put(p)
			bs, err := startCodec{}.Marshal(r)
			if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
				t.Fatalf("%s: error %v, want %v", name, err, wantErr)
			}
			bs.Free()
			q := pool.Get(n)
			if q == p {
				back++
			}
			pool.Put(q)
		}
		if back == 0 {
			t.Errorf("%s: the buffer never came back to the pool in 200 marshals", name)
		}
		t.Logf("%s: back %d times in 200", name, back)
	}
}
