package bench

import (
	"context"
	"sync"
	"testing"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/dedupio/dedup/sink/starter"
)

// The SDK stage's start asks Temporal for what the router's starter asks:
// the same workflow, task queue, input, memo, search attributes and
// policies, so the two CPU figures are the same work done two ways. Only
// the request ID (the SDK's is random), the identity and the header
// differ (and the SDK's zero timeouts, sent as empty durations). Both requests are caught before they leave the process.
func TestSDKStartAsksForWhatTheRoutersStarterAsks(t *testing.T) {
	var mu sync.Mutex
	var sent []*workflowservice.StartWorkflowExecutionRequest
	catch := func(_ context.Context, method string, req, reply any, _ *grpc.ClientConn, _ grpc.UnaryInvoker, _ ...grpc.CallOption) error {
		switch r := req.(type) {
		case *workflowservice.StartWorkflowExecutionRequest:
			mu.Lock()
			sent = append(sent, proto.Clone(r).(*workflowservice.StartWorkflowExecutionRequest))
			mu.Unlock()
			reply.(*workflowservice.StartWorkflowExecutionResponse).RunId = "run"
			return nil
		case *workflowservice.GetSystemInfoRequest:
			return nil
		}
		return status.Error(codes.Unimplemented, method)
	}
	tc, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1", Namespace: "default",
		ConnectionOptions: client.ConnectionOptions{DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(catch)}}})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	e := &Env{TC: tc, P: Params{Partitions: 4, DupRatios: []float64{0}, PayloadBytes: 256, Concurrency: 2}}
	reqs, err := e.uniqueRequests(20, "sdk")
	if err != nil {
		t.Fatal(err)
	}
	st := starter.New(tc, starter.Config{Namespace: "default", SearchAttributes: starter.SearchAttributesOn})
	ctx := context.Background()
	for _, req := range reqs {
		if _, err := st.Start(ctx, req); err != nil {
			t.Fatal(err)
		}
		if _, err := tc.ExecuteWorkflow(ctx, sdkStartOptions(req), req.WorkflowType, req.Input); err != nil {
			t.Fatal(err)
		}
	}
	if len(sent) != 2*len(reqs) {
		t.Fatalf("%d requests caught, want %d", len(sent), 2*len(reqs))
	}
	for i := 0; i < len(sent); i += 2 {
		router, sdk := sent[i], sent[i+1]
		if len(router.GetSearchAttributes().GetIndexedFields()) < 6 {
			t.Fatalf("%s: the router's start has %d search attributes, want the contract's 6", router.WorkflowId, len(router.GetSearchAttributes().GetIndexedFields()))
		}
		for _, r := range []*workflowservice.StartWorkflowExecutionRequest{router, sdk} {
			r.RequestId, r.Identity, r.Header = "", "", nil
		}
		// The SDK sends its zero timeouts as empty durations; the router
		// leaves them out. Temporal reads both as none.
		for _, d := range []interface{ GetSeconds() int64 }{sdk.WorkflowExecutionTimeout, sdk.WorkflowRunTimeout, sdk.WorkflowTaskTimeout} {
			if d != nil && d.GetSeconds() != 0 {
				t.Fatalf("the SDK's start has a timeout %v", d)
			}
		}
		sdk.WorkflowExecutionTimeout, sdk.WorkflowRunTimeout, sdk.WorkflowTaskTimeout = nil, nil, nil
		if !proto.Equal(router, sdk) {
			t.Fatalf("the SDK's start is not the router's:\nrouter %v\nsdk    %v", router, sdk)
		}
	}
}
