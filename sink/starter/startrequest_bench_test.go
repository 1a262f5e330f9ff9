package starter

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"google.golang.org/grpc/encoding"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
)

// benchStart is a start as the benchmark's routes make it: a 256-byte
// payload, an allow_duplicate route (the name-based request ID), a record.
func benchStart() decide.StartRequest {
	data := json.RawMessage(`{"order_id":"o-0000000042","customer":"c-17","amount_cents":12345,"currency":"EUR",` +
		`"items":[{"sku":"sku-1","qty":1},{"sku":"sku-2","qty":3}],"note":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}`)
	return decide.StartRequest{WorkflowID: "activity-welcome:0190d7a4-6b1e-7c3a-9f00-0123456789ab", WorkflowType: "W",
		TaskQueue: "q", ReusePolicy: decide.ReuseAllowDuplicateFailedOnly, Generation: 1,
		Input: schemas.WorkflowInput{WorkflowID: "activity-welcome:0190d7a4-6b1e-7c3a-9f00-0123456789ab", ActivityID: "welcome",
			EventID: "0190d7a4-6b1e-7c3a-9f00-0123456789ab", IDRule: "header", Type: "order.created", Data: data},
		Record: &decide.RecordRef{Topic: "orders", Partition: 7, Offset: 123456789}}
}

// BenchmarkStartRequest builds one StartWorkflowExecutionRequest (input,
// memo, search attributes, request ID, header): the starter's CPU per
// start before the RPC.
func BenchmarkStartRequest(b *testing.B) {
	tc := New(nil, DefaultConfig())
	req := benchStart()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tc.startRequest(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStartRequestOnTheWire marshals one request as the starter's
// calls do (startCodec) and as gRPC's proto codec would.
func BenchmarkStartRequestOnTheWire(b *testing.B) {
	r, err := New(nil, DefaultConfig()).startRequest(context.Background(), benchStart())
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []encoding.CodecV2{startCodec{}, protoCodec} {
		b.Run(fmt.Sprintf("%T", c), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bs, err := c.Marshal(r)
				if err != nil {
					b.Fatal(err)
				}
				bs.Free()
			}
		})
	}
}
