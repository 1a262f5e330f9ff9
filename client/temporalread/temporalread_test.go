package temporalread_test

import (
	"context"
	"net"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/grpc"

	"github.com/dedupio/dedup/client"
	"github.com/dedupio/dedup/client/temporalread"
)

// frontend is a Temporal frontend that knows a few workflows of one
// namespace and serves the two calls the Reader may make; any other call
// is Unimplemented (the Reader makes none).
type frontend struct {
	workflowservice.UnimplementedWorkflowServiceServer
	runs map[string]frontendRun // by workflow ID, in namespace "orders"
}

type frontendRun struct {
	id     string
	status enumspb.WorkflowExecutionStatus
	close  *historypb.HistoryEvent // nil: open
}

func (f *frontend) DescribeWorkflowExecution(_ context.Context, req *workflowservice.DescribeWorkflowExecutionRequest) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	r, ok := f.runs[req.GetExecution().GetWorkflowId()]
	if !ok || req.GetNamespace() != "orders" {
		return nil, serviceerror.ToStatus(serviceerror.NewNotFound("workflow not found")).Err()
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		Execution: &commonpb.WorkflowExecution{WorkflowId: req.GetExecution().GetWorkflowId(), RunId: r.id}, Status: r.status}}, nil
}

func (f *frontend) GetWorkflowExecutionHistory(_ context.Context, req *workflowservice.GetWorkflowExecutionHistoryRequest) (*workflowservice.GetWorkflowExecutionHistoryResponse, error) {
	r, ok := f.runs[req.GetExecution().GetWorkflowId()]
	if !ok || req.GetNamespace() != "orders" {
		return nil, serviceerror.ToStatus(serviceerror.NewNotFound("workflow not found")).Err()
	}
	if req.GetHistoryEventFilterType() != enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT {
		return nil, serviceerror.ToStatus(serviceerror.NewInvalidArgument("the reader asks for the close event only")).Err()
	}
	if r.close == nil {
		return &workflowservice.GetWorkflowExecutionHistoryResponse{History: &historypb.History{}}, nil
	}
	return &workflowservice.GetWorkflowExecutionHistoryResponse{History: &historypb.History{Events: []*historypb.HistoryEvent{r.close}}}, nil
}

type receipt struct {
	OrderID string `json:"order_id"`
	Total   int    `json:"total"`
}

// The Reader describes runs, reads how they closed, and decodes a result
// with Temporal's data converter into the caller's type (and, through
// client.Status, into JSON); a workflow Temporal does not know is ok
// false, not an error.
func TestReader(t *testing.T) {
	payloads, err := converter.GetDefaultDataConverter().ToPayloads(receipt{OrderID: "o-1", Total: 12})
	if err != nil {
		t.Fatal(err)
	}
	f := &frontend{runs: map[string]frontendRun{
		"done": {id: "r1", status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, close: &historypb.HistoryEvent{
			EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
			Attributes: &historypb.HistoryEvent_WorkflowExecutionCompletedEventAttributes{
				WorkflowExecutionCompletedEventAttributes: &historypb.WorkflowExecutionCompletedEventAttributes{Result: payloads}}}},
		"failed": {id: "r2", status: enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, close: &historypb.HistoryEvent{
			EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
			Attributes: &historypb.HistoryEvent_WorkflowExecutionFailedEventAttributes{
				WorkflowExecutionFailedEventAttributes: &historypb.WorkflowExecutionFailedEventAttributes{Failure: &failurepb.Failure{Message: "card declined"}}}}},
		"open": {id: "r3", status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING},
		"expired": {id: "r4", status: enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT, close: &historypb.HistoryEvent{
			EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT}},
	}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	workflowservice.RegisterWorkflowServiceServer(s, f)
	go func() { _ = s.Serve(l) }()
	defer s.Stop()
	tc, err := sdkclient.NewLazyClient(sdkclient.Options{HostPort: l.Addr().String(), Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	r := temporalread.New(tc, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	if run, ok, err := r.Describe(ctx, "orders", "done"); err != nil || !ok || run != (client.Run{ID: "r1", Status: "completed"}) || !run.Closed() {
		t.Errorf("Describe done: %+v %v %v", run, ok, err)
	}
	if run, ok, err := r.Describe(ctx, "orders", "open"); err != nil || !ok || run.Status != "running" || run.Closed() {
		t.Errorf("Describe open: %+v %v %v", run, ok, err)
	}
	if _, ok, err := r.Describe(ctx, "orders", "unknown"); err != nil || ok {
		t.Errorf("Describe unknown: %v %v, want ok false", ok, err)
	}
	if _, ok, err := r.Describe(ctx, "default", "done"); err != nil || ok {
		t.Errorf("Describe in another namespace: %v %v, want ok false (the request names the route's namespace)", ok, err)
	}

	o, ok, err := r.Outcome(ctx, "orders", "done", "", true)
	if err != nil || !ok || o.Status != "completed" || o.Decode == nil {
		t.Fatalf("Outcome done: %+v %v %v", o, ok, err)
	}
	var got receipt
	if err := o.Decode(&got); err != nil || got != (receipt{OrderID: "o-1", Total: 12}) {
		t.Errorf("decoded %+v %v", got, err)
	}
	if o, ok, err := r.Outcome(ctx, "orders", "failed", "r2", false); err != nil || !ok || o.Status != "failed" || o.Failure != "card declined" || o.Decode != nil {
		t.Errorf("Outcome failed: %+v %v %v", o, ok, err)
	}
	// Two-word states by their documented names (timed_out, not the
	// enum's TimedOut lower-cased).
	if run, ok, err := r.Describe(ctx, "orders", "expired"); err != nil || !ok || run.Status != "timed_out" {
		t.Errorf("Describe expired: %+v %v %v, want timed_out", run, ok, err)
	}
	if o, ok, err := r.Outcome(ctx, "orders", "expired", "", true); err != nil || !ok || o.Status != "timed_out" || o.Failure != "timed out" {
		t.Errorf("Outcome expired: %+v %v %v, want timed_out", o, ok, err)
	}
	if _, ok, err := r.Outcome(ctx, "orders", "open", "", false); err != nil || ok {
		t.Errorf("Outcome of an open run without wait: %v %v, want ok false", ok, err)
	}
	if _, ok, err := r.Outcome(ctx, "orders", "unknown", "", true); err != nil || ok {
		t.Errorf("Outcome of an unknown workflow: %v %v, want ok false", ok, err)
	}
}
