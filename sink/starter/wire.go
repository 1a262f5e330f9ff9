package starter

// The start request on the wire: the protobuf bytes of the same message,
// with the maps of its payloads (each payload's metadata, the memo's and
// the search attributes' fields, the header's) written here rather than
// by protobuf-go, which walks a map through reflection, twice (size, then
// bytes), with an allocation per entry: a tenth of the router's CPU per
// start. The server reads the same message: wire_test.go holds every
// request the starter builds to proto.Unmarshal(these bytes) being
// proto.Equal to it, at proto.Size's length.
//
// Only the four fields below are written here, and only when they hold
// nothing but what dedup sets (metadata and data; no external payloads,
// no unknown fields, no nil entry, keys valid UTF-8): for anything else
// the bytes written are dropped and the request is protobuf-go's, whole,
// errors included.

import (
	"unicode/utf8"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// startCodec is the codec of the starter's StartWorkflowExecution calls
// (startCall): it marshals a StartWorkflowExecutionRequest with
// appendStartRequest, reads a StartWorkflowExecutionResponse with
// readStartResponse (startresponse.go), and everything else as gRPC's
// proto codec does. Its name is gRPC's proto codec's: the call's content type
// is application/grpc+proto, which every gRPC server reads as protobuf.
type startCodec struct{}

// protoCodec is gRPC's own proto codec.
var protoCodec = encoding.GetCodecV2("proto")

// startCall is the option every StartWorkflowExecution call carries. Its
// request must be the call's own: the codec takes fields out of it while
// it writes (appendStartRequest), so no other goroutine may read it then.
// Start builds one per call; gRPC and the SDK marshal it on the calling
// goroutine, and a retry sends the bytes again or marshals it again.
var startCall = grpc.ForceCodecV2(startCodec{})

func (startCodec) Name() string { return protoCodec.Name() }

func (startCodec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*workflowservice.StartWorkflowExecutionResponse)
	if !ok || r == nil {
		return protoCodec.Unmarshal(data, v)
	}
	var b []byte
	if len(data) == 1 {
		b = data[0].ReadOnlyData()
	} else {
		buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
		defer buf.Free()
		b = buf.ReadOnlyData()
	}
	if readStartResponse(b, r) {
		return nil
	}
	return protoCodec.Unmarshal(data, v)
}

func (startCodec) Marshal(v any) (mem.BufferSlice, error) {
	r, ok := v.(*workflowservice.StartWorkflowExecutionRequest)
	if !ok || r == nil {
		return protoCodec.Marshal(v) // a nil request too: an empty message, as before
	}
	// The bytes go in a buffer of gRPC's pool, which gRPC returns to it
	// once they are sent (its proto codec does the same for every message
	// over 1 KiB): a start request, about 1.5 KiB, is not garbage per call.
	pool := mem.DefaultBufferPool()
	buf := pool.Get(startRequestCap(r))
	b, err := appendStartRequest((*buf)[:0], r)
	switch {
	case err != nil:
		pool.Put(buf)
		return nil, err
	case cap(b) != cap(*buf) || &b[:1][0] != &(*buf)[:1][0]:
		// Outgrown: the bytes are in a slice of append's, not the pool's.
		pool.Put(buf)
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	*buf = b
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// startRequestCap is the room appendStartRequest's bytes of r usually
// fit in: the input's payloads and 1 KiB for the rest.
func startRequestCap(r *workflowservice.StartWorkflowExecutionRequest) int {
	n := 1024
	if in := r.Input; in != nil {
		for _, p := range in.Payloads {
			if p != nil {
				n += len(p.Data)
			}
		}
	}
	return n
}

// The field numbers written here, from the request's descriptor.
var (
	startFields  = (&workflowservice.StartWorkflowExecutionRequest{}).ProtoReflect().Descriptor().Fields()
	fieldInput   = startFields.ByName("input").Number()
	fieldMemo    = startFields.ByName("memo").Number()
	fieldAttrs   = startFields.ByName("search_attributes").Number()
	fieldHeader  = startFields.ByName("header").Number()
	payloadField = (&commonpb.Payload{}).ProtoReflect().Descriptor().Fields()
	fieldMeta    = payloadField.ByName("metadata").Number()
	fieldData    = payloadField.ByName("data").Number()
)

// appendStartRequest appends r's protobuf bytes: protobuf-go's for every
// field but the input, memo, search attributes and header, which it
// writes after them (a parser takes fields in any order). r is the
// caller's own request (startRequest built it for this call): the four
// fields are taken out for protobuf-go's part and put back before it
// returns. A request whose four fields hold anything else is
// protobuf-go's alone.
func appendStartRequest(b []byte, r *workflowservice.StartWorkflowExecutionRequest) ([]byte, error) {
	in, memo, attrs, hdr := r.Input, r.Memo, r.SearchAttributes, r.Header
	if !plain(in) || !plain(memo) || !plain(attrs) || !plain(hdr) {
		return proto.MarshalOptions{}.MarshalAppend(b, r)
	}
	if b == nil {
		b = make([]byte, 0, startRequestCap(r))
	}
	r.Input, r.Memo, r.SearchAttributes, r.Header = nil, nil, nil, nil
	out, err := proto.MarshalOptions{}.MarshalAppend(b, r)
	r.Input, r.Memo, r.SearchAttributes, r.Header = in, memo, attrs, hdr
	if err != nil {
		return nil, err
	}
	ok := true
	if in != nil {
		ps := make([]payloadSize, len(in.Payloads))
		size := 0
		for i, p := range in.Payloads {
			ps[i] = sizeOf(p)
			ok = ok && ps[i].ok
			size += sizeBytesField(ps[i].n)
		}
		out = protowire.AppendTag(out, fieldInput, protowire.BytesType)
		out = protowire.AppendVarint(out, uint64(size))
		for i, p := range in.Payloads {
			out = appendPayload(out, 1, p, ps[i].n)
		}
	}
	if memo != nil {
		out, ok = appendPayloadMap(out, fieldMemo, memo.Fields, ok)
	}
	if attrs != nil {
		out, ok = appendPayloadMap(out, fieldAttrs, attrs.IndexedFields, ok)
	}
	if hdr != nil {
		out, ok = appendPayloadMap(out, fieldHeader, hdr.Fields, ok)
	}
	if !ok {
		return proto.MarshalOptions{}.MarshalAppend(b, r)
	}
	return out, nil
}

// plain reports whether m carries no unknown fields.
func plain(m protoreflect.ProtoMessage) bool {
	return len(m.ProtoReflect().GetUnknown()) == 0
}

// sizeBytesField is the size of a length-delimited field of n bytes
// whose number is below 16 (a one-byte tag).
func sizeBytesField(n int) int { return 1 + protowire.SizeVarint(uint64(n)) + n }

// payloadSize is a payload's message size, and whether it is plain:
// metadata and data only, keys valid UTF-8 (else protobuf-go writes the
// request).
type payloadSize struct {
	n  int
	ok bool
}

// sizeOf sizes p. Map entries carry their key and value even when
// empty, as protobuf-go writes them.
func sizeOf(p *commonpb.Payload) payloadSize {
	if p == nil || len(p.ExternalPayloads) > 0 || !plain(p) {
		return payloadSize{}
	}
	n, ok := 0, true
	for k, v := range p.Metadata {
		ok = ok && utf8.ValidString(k)
		n += sizeBytesField(sizeBytesField(len(k)) + sizeBytesField(len(v)))
	}
	if len(p.Data) > 0 {
		n += sizeBytesField(len(p.Data))
	}
	return payloadSize{n, ok}
}

// appendPayload appends p, of size n, as field num.
func appendPayload(b []byte, num protowire.Number, p *commonpb.Payload, n int) []byte {
	if p == nil {
		return b // not plain: the request is protobuf-go's
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	for k, v := range p.Metadata {
		b = protowire.AppendTag(b, fieldMeta, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizeBytesField(len(k))+sizeBytesField(len(v))))
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, k)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, v)
	}
	if len(p.Data) > 0 {
		b = protowire.AppendTag(b, fieldData, protowire.BytesType)
		b = protowire.AppendBytes(b, p.Data)
	}
	return b
}

// mapEntry is one entry of a payload map being written.
type mapEntry struct {
	key string
	p   *commonpb.Payload
	payloadSize
}

// appendPayloadMap appends a message whose field 1 is map<string,
// Payload> m (the memo, the search attributes, the header) as field num;
// ok turns false if an entry is not plain.
func appendPayloadMap(b []byte, num protowire.Number, m map[string]*commonpb.Payload, ok bool) ([]byte, bool) {
	var stack [8]mapEntry
	entries, size := stack[:0], 0
	for k, p := range m {
		e := mapEntry{k, p, sizeOf(p)}
		ok = ok && e.ok && utf8.ValidString(k)
		size += sizeBytesField(sizeBytesField(len(k)) + sizeBytesField(e.n))
		entries = append(entries, e)
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(size))
	for _, e := range entries {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizeBytesField(len(e.key))+sizeBytesField(e.n)))
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, e.key)
		b = appendPayload(b, 2, e.p, e.n)
	}
	return b, ok
}
