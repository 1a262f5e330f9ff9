package starter

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
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

// answerWith is the server's answer for run, its first run "first-"+run,
// and two fields of a newer API, one of extra bytes.
func answerWith(run string, extra int) []byte {
	a := serversAnswer()
	a.RunId = run
	a.FirstExecutionRunId = "first-" + run
	b, _ := proto.Marshal(a)
	b = protowire.AppendBytes(protowire.AppendTag(b, 98, protowire.BytesType), bytes.Repeat([]byte("n"), extra))
	b = protowire.AppendVarint(protowire.AppendTag(b, 99, protowire.VarintType), 7)
	return b
}

// answerSnap is what an answer holds, its bytes marshalled again included.
type answerSnap struct {
	run, first string
	started    bool
	status     int32
	unknown    string
	wire       string
}

func snapOf(r *workflowservice.StartWorkflowExecutionResponse) answerSnap {
	w, _ := proto.MarshalOptions{Deterministic: true}.Marshal(r)
	return answerSnap{r.GetRunId(), r.GetFirstExecutionRunId(), r.GetStarted(), int32(r.GetStatus()),
		string(r.ProtoReflect().GetUnknown()), string(w)}
}

// Strings and unknown bytes must not alias the buffers gRPC hands the
// codec (gRPC frees and reuses them once Unmarshal returns).
// (adversary 62)
func TestStartAnswerDoesNotAliasTheReceiveBuffer(t *testing.T) {
	for _, extra := range []int{0, 5, 40000} {
		for _, pieces := range []int{1, 2, 3, 7} {
			b := answerWith(fmt.Sprintf("run-%d-%d", extra, pieces), extra)
			want, err := readAnswer(append([]byte(nil), b...), false)
			if err != nil {
				t.Fatal(err)
			}
			wantSnap := snapOf(want)
			// Split into pieces, each its own copy, as gRPC's buffers.
			var data mem.BufferSlice
			var raw [][]byte
			step := (len(b) + pieces - 1) / pieces
			for i := 0; i < len(b); i += step {
				j := min(i+step, len(b))
				p := append([]byte(nil), b[i:j]...)
				raw = append(raw, p)
				data = append(data, mem.SliceBuffer(p))
			}
			var got workflowservice.StartWorkflowExecutionResponse
			if err := (startCodec{}).Unmarshal(data, &got); err != nil {
				t.Fatal(err)
			}
			for _, p := range raw {
				for i := range p {
					p[i] = 0xEE
				}
			}
			// Also churn the default pool, as gRPC would.
			for range 100 {
				buf := mem.DefaultBufferPool().Get(len(b))
				for i := range *buf {
					(*buf)[i] = 0xDD
				}
				mem.DefaultBufferPool().Put(buf)
			}
			if g := snapOf(&got); g != wantSnap {
				t.Fatalf("extra %d, %d pieces: after the buffers were overwritten the answer reads %+v, want %+v", extra, pieces, g, wantSnap)
			}
		}
	}
}

// A response reused across attempts (the SDK's retry interceptor passes
// the same reply to every attempt) holds only the last attempt's answer.
// (adversary 62)
func TestStartAnswerReusedAcrossAttemptsHoldsOnlyTheLast(t *testing.T) {
	first := answerWith("attempt-1", 100)
	lasts := map[string][]byte{
		"empty":    {},
		"run only": protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "attempt-2"),
		"server's": func() []byte { b, _ := proto.Marshal(serversAnswer()); return b }(),
		"fallback": protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 3), // protobuf-go's
		"broken":   {0x0a, 0x05, 'a'},                                                            // an error
	}
	for name, last := range lasts {
		for _, split := range []bool{false, true} {
			// with the codec
			var r workflowservice.StartWorkflowExecutionResponse
			d1 := mem.BufferSlice{mem.SliceBuffer(first)}
			if err := (startCodec{}).Unmarshal(d1, &r); err != nil {
				t.Fatal(err)
			}
			d2 := mem.BufferSlice{mem.SliceBuffer(last)}
			if split && len(last) > 1 {
				d2 = mem.BufferSlice{mem.SliceBuffer(last[:1]), mem.SliceBuffer(last[1:])}
			}
			err := (startCodec{}).Unmarshal(d2, &r)
			// gRPC's proto codec
			var w workflowservice.StartWorkflowExecutionResponse
			_ = protoCodec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(first)}, &w)
			werr := protoCodec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(last)}, &w)
			if fmt.Sprint(err) != fmt.Sprint(werr) {
				t.Errorf("%s: err %v, gRPC's %v", name, err, werr)
			}
			if r.GetRunId() != w.GetRunId() || r.GetStarted() != w.GetStarted() || r.GetStatus() != w.GetStatus() ||
				r.GetFirstExecutionRunId() != w.GetFirstExecutionRunId() {
				t.Errorf("%s: reused answer %v, gRPC's %v", name, &r, &w)
			}
			if err == nil {
				again, _ := proto.Marshal(&r)
				var whole workflowservice.StartWorkflowExecutionResponse
				if err := proto.Unmarshal(again, &whole); err != nil || !proto.Equal(&whole, &w) {
					t.Errorf("%s: reused answer marshalled again %v (%v), want %v", name, &whole, err, &w)
				}
			}
		}
	}
}

// Unmarshal on many goroutines at once (run with -race).
// (adversary 62)
func TestStartAnswerReadConcurrently(t *testing.T) {
	var wg sync.WaitGroup
	var fails atomic.Int32
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				run := fmt.Sprintf("g%d-%d", g, i)
				b := answerWith(run, i%50)
				var data mem.BufferSlice
				if i%2 == 0 {
					data = mem.BufferSlice{mem.SliceBuffer(b)}
				} else {
					data = mem.BufferSlice{mem.SliceBuffer(b[:len(b)/2]), mem.SliceBuffer(b[len(b)/2:])}
				}
				var r workflowservice.StartWorkflowExecutionResponse
				if err := (startCodec{}).Unmarshal(data, &r); err != nil || r.GetRunId() != run || r.GetFirstExecutionRunId() != "first-"+run {
					fails.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := fails.Load(); n > 0 {
		t.Fatalf("%d concurrent reads went wrong", n)
	}
}

// rawMsg and rawCodec let a gRPC server send any bytes as its answer.
type rawMsg struct{ b []byte }

type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }
func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(append([]byte(nil), v.(*rawMsg).b...))}, nil
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	v.(*rawMsg).b = data.Materialize()
	return nil
}

// rawFrontend answers StartWorkflowExecution with the next of answers
// (an error after the message when fail says), everything else empty.
type rawFrontend struct {
	mu      sync.Mutex
	answers []rawAnswer
	n       int
}

type rawAnswer struct {
	b       []byte
	failing bool // send b, then fail with Unavailable
	noMsg   bool // fail with Unavailable, no message
}

func (f *rawFrontend) handle(_ any, st grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(st)
	var in rawMsg
	if err := st.RecvMsg(&in); err != nil {
		return err
	}
	if method != workflowservice.WorkflowService_StartWorkflowExecution_FullMethodName {
		return st.SendMsg(&rawMsg{})
	}
	f.mu.Lock()
	a := f.answers[f.n%len(f.answers)]
	f.n++
	f.mu.Unlock()
	if a.noMsg {
		return status.Error(codes.Unavailable, "try again")
	}
	if err := st.SendMsg(&rawMsg{a.b}); err != nil {
		return err
	}
	if a.failing {
		return status.Error(codes.Unavailable, "try again")
	}
	return nil
}

func serveRaw(t *testing.T, f *rawFrontend) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{}), grpc.UnknownServiceHandler(f.handle))
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return l.Addr().String()
}

func dialWith(t *testing.T, addr, compression string) *Temporal {
	t.Helper()
	c, err := client.NewLazyClient(client.Options{HostPort: addr, Namespace: "default",
		Logger:            tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
		ConnectionOptions: client.ConnectionOptions{GrpcCompression: Compression(compression)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return New(c, Config{Namespace: "default", StartTimeout: 10 * time.Second})
}

// Over gRPC, through the SDK's interceptors (gzip: the answer arrives in
// several buffers): the starter's call returns what the call without the
// codec returns, and the answer it returned stays as it was while later
// calls reuse gRPC's buffers.
// (adversary 62)
func TestStartAnswerOverGRPCIsAsWithoutTheCodec(t *testing.T) {
	answers := map[string][]rawAnswer{
		"server's":           {{b: answerWith("a", 0)}},
		"big unknown":        {{b: answerWith("big", 300000)}},
		"fallback":           {{b: append(answerWith("fb", 10), protowire.AppendVarint(protowire.AppendTag(nil, 6, protowire.VarintType), 1)...)}},
		"retried after msg":  {{b: answerWith("one", 70000), failing: true}, {b: protowire.AppendVarint(protowire.AppendTag(nil, 5, protowire.VarintType), 2)}},
		"retried, no msg":    {{noMsg: true}, {b: answerWith("two", 5)}},
		"retried, fallback":  {{b: answerWith("three", 5), failing: true}, {b: []byte{0x08, 0x01, 0x18, 0x01}}},
		"not started":        {{b: protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "nope")}},
		"broken after retry": {{b: answerWith("four", 5), failing: true}, {b: []byte{0x0a, 0x09, 'x'}}},
	}
	for _, comp := range []string{"none", "gzip"} {
		for name, as := range answers {
			t.Run(comp+"/"+name, func(t *testing.T) {
				f := &rawFrontend{answers: as}
				addr := serveRaw(t, f)
				s := dialWith(t, addr, comp)
				req := benchStart()
				sreq, err := s.startRequest(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				f.mu.Lock()
				f.n = 0
				f.mu.Unlock()
				got, gerr := s.c.WorkflowService().StartWorkflowExecution(ctx, sreq, startCall)
				var gs answerSnap
				if got != nil {
					gs = snapOf(got)
				}
				f.mu.Lock()
				f.n = 0
				f.mu.Unlock()
				want, werr := s.c.WorkflowService().StartWorkflowExecution(ctx, sreq)
				if fmt.Sprint(gerr) != fmt.Sprint(werr) {
					t.Fatalf("error %v, without the codec %v", gerr, werr)
				}
				if gerr == nil && (got.GetRunId() != want.GetRunId() || got.GetStarted() != want.GetStarted() ||
					got.GetStatus() != want.GetStatus() || got.GetFirstExecutionRunId() != want.GetFirstExecutionRunId()) {
					t.Fatalf("answer %v, without the codec %v", got, want)
				}
				// Churn gRPC's buffers with more calls.
				for range 5 {
					f.mu.Lock()
					f.n = 0
					f.answers = []rawAnswer{{b: bytes.Repeat([]byte{0x92, 0x06, 0x02, 0xEE, 0xEE}, 20000)}}
					f.mu.Unlock()
					_, _ = s.c.WorkflowService().StartWorkflowExecution(ctx, sreq, startCall)
					f.mu.Lock()
					f.answers = as
					f.mu.Unlock()
				}
				if got != nil {
					if g := snapOf(got); g != gs {
						t.Fatalf("the answer changed after later calls: %+v, was %+v", g, gs)
					}
				}
			})
		}
	}
}

type countingCodec struct {
	startCodec
	pieces *atomic.Int32
}

func (c countingCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if _, ok := v.(*workflowservice.StartWorkflowExecutionResponse); ok {
		c.pieces.Store(int32(len(data)))
	}
	return c.startCodec.Unmarshal(data, v)
}

// The test above reaches the codec as it means to: with gzip the answer
// comes in several buffers, and a call that fails after its message is
// tried once (Start's call carries no retry configuration, without which
// the SDK's retry interceptor does not retry).
// (adversary 62)
func TestStartAnswerOverGRPCWithGzipReachesTheCodecInPieces(t *testing.T) {
	f := &rawFrontend{answers: []rawAnswer{{b: answerWith("one", 300000), failing: true}, {b: answerWith("two", 300000)}}}
	s := dialWith(t, serveRaw(t, f), "gzip")
	sreq, _ := s.startRequest(context.Background(), benchStart())
	var pieces atomic.Int32
	r, err := s.c.WorkflowService().StartWorkflowExecution(context.Background(), sreq, grpc.ForceCodecV2(countingCodec{pieces: &pieces}))
	t.Logf("run %q err %v, attempts %d, pieces %d", r.GetRunId(), err, f.n, pieces.Load())
	// Start's direct call carries no retry config (the SDK's retry
	// interceptor disables retries without one): one attempt.
	if err == nil || f.n != 1 || pieces.Load() < 2 {
		t.Fatal("not exercised")
	}
}

// Unknown groups nested around protobuf-go's recursion limit, at the top
// level (outside fields 2 and 4), and numbers past protobuf's inside a
// group, and reserved numbers: read as protobuf-go reads them.
// (adversary 62)
func TestStartAnswerDeepGroupsAndOddNumbersAreAsProtobufGo(t *testing.T) {
	nest := func(depth int) []byte {
		var b []byte
		for range depth {
			b = protowire.AppendTag(b, 95, protowire.StartGroupType)
		}
		for range depth {
			b = protowire.AppendTag(b, 95, protowire.EndGroupType)
		}
		return append(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "r"), b...)
	}
	cases := map[string][]byte{}
	for _, d := range []int{9998, 9999, 10000, 10001, 10002} {
		cases[fmt.Sprint("depth ", d)] = nest(d)
	}
	g := protowire.AppendTag(nil, 95, protowire.StartGroupType)
	g = protowire.AppendVarint(protowire.AppendTag(g, protowire.MaxValidNumber+1, protowire.VarintType), 1)
	g = protowire.AppendTag(g, 95, protowire.EndGroupType)
	cases["MessageSet number in a group"] = g
	cases["reserved number"] = protowire.AppendVarint(protowire.AppendTag(nil, 19500, protowire.VarintType), 1)
	cases["max number"] = protowire.AppendVarint(protowire.AppendTag(nil, protowire.MaxValidNumber, protowire.VarintType), 1)
	cases["group end at top"] = protowire.AppendTag(nil, 95, protowire.EndGroupType)
	cases["group number mismatch"] = protowire.AppendTag(protowire.AppendTag(nil, 95, protowire.StartGroupType), 94, protowire.EndGroupType)
	cases["wire type 6"] = []byte{0x0e}
	cases["link as group"] = protowire.AppendTag(protowire.AppendTag(nil, 4, protowire.StartGroupType), 4, protowire.EndGroupType)
	cases["eager as varint"] = protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 1)
	cases["overlong tag"] = []byte{0x8a, 0x80, 0x80, 0x00, 0x01, 'r', 0x98, 0x00, 0x01}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			for _, split := range []bool{false, true} {
				got, err := readAnswer(b, split)
				sameAnswer(t, b, got, err)
			}
		})
	}
}

// A client New is given may carry gRPC interceptors of its own (dial
// options). One that reads the start's answer finds its four fields, and
// the link to the started event (which the server sends with every start) among
// its unknown fields, unread but whole: read from them, the link is the
// one the call without the codec gives. (adversary 62)
func TestStartAnswerSeenByTheClientsOwnInterceptorKeepsTheLinkAsItsBytes(t *testing.T) {
	b, _ := proto.Marshal(serversAnswer())
	addr := serveRaw(t, &rawFrontend{answers: []rawAnswer{{b: b}}})
	var seen []*workflowservice.StartWorkflowExecutionResponse
	var mu sync.Mutex
	watch := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if r, ok := reply.(*workflowservice.StartWorkflowExecutionResponse); ok {
			mu.Lock()
			seen = append(seen, r)
			mu.Unlock()
		}
		return err
	}
	c, err := client.NewLazyClient(client.Options{HostPort: addr, Namespace: "default",
		Logger:            tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
		ConnectionOptions: client.ConnectionOptions{DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(watch)}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	s := New(c, Config{Namespace: "default", StartTimeout: 10 * time.Second})
	if _, err := s.Start(context.Background(), benchStart()); err != nil {
		t.Fatal(err)
	}
	sreq, _ := s.startRequest(context.Background(), benchStart())
	if _, err := c.WorkflowService().StartWorkflowExecution(context.Background(), sreq); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 {
		t.Fatalf("the interceptor saw %d answers, want 2", len(seen))
	}
	got, without := seen[0], seen[1]
	if got.GetRunId() != without.GetRunId() || got.GetStarted() != without.GetStarted() || got.GetStatus() != without.GetStatus() {
		t.Fatalf("through Start the interceptor saw %v, without the codec %v", got, without)
	}
	var kept workflowservice.StartWorkflowExecutionResponse
	if err := proto.Unmarshal(got.ProtoReflect().GetUnknown(), &kept); err != nil || !proto.Equal(kept.GetLink(), without.GetLink()) {
		t.Fatalf("the link read from the answer's unknown bytes: %v (%v), without the codec %v", kept.GetLink(), err, without.GetLink())
	}
}
