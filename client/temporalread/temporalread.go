// Package temporalread reads workflow runs from Temporal for the producer
// client (client.RunReader) through a Temporal SDK client, read-only: it
// calls DescribeWorkflowExecution and GetWorkflowExecutionHistory (the
// close event) and nothing else. Results are decoded with a Temporal data
// converter, the SDK's default unless told otherwise, as the SDK's own
// WorkflowRun.Get does.
//
// It is a package of its own so that package client imports neither the
// Temporal SDK nor gRPC: a program that only enqueues does not link them.
package temporalread

import (
	"context"
	"errors"
	"strings"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/dedupio/dedup/client"
)

var _ client.RunReader = (*Reader)(nil)

// Reader is a client.RunReader over a Temporal SDK client. Requests name
// the namespace of each workflow (its route's), whatever the SDK client's
// own namespace is.
type Reader struct {
	tc sdkclient.Client
	dc converter.DataConverter
}

// New reads through tc (the caller's: Reader never closes it; a client
// from sdkclient.NewLazyClient connects on the first read). dc decodes
// results; nil: converter.GetDefaultDataConverter(), which is right
// unless the workers encode results otherwise (encryption, a codec).
func New(tc sdkclient.Client, dc converter.DataConverter) *Reader {
	if dc == nil {
		dc = converter.GetDefaultDataConverter()
	}
	return &Reader{tc: tc, dc: dc}
}

// Describe implements client.RunReader.
func (r *Reader) Describe(ctx context.Context, namespace, workflowID string) (client.Run, bool, error) {
	resp, err := r.tc.WorkflowService().DescribeWorkflowExecution(ctx, &workflowservice.DescribeWorkflowExecutionRequest{
		Namespace: namespace, Execution: &commonpb.WorkflowExecution{WorkflowId: workflowID}})
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound):
		return client.Run{}, false, nil
	case err != nil:
		return client.Run{}, false, err
	}
	info := resp.GetWorkflowExecutionInfo()
	return client.Run{ID: info.GetExecution().GetRunId(), Status: statusName(info.GetStatus())}, true, nil
}

// Outcome implements client.RunReader: it reads the run's close event,
// long-polling for it with wait.
func (r *Reader) Outcome(ctx context.Context, namespace, workflowID, runID string, wait bool) (client.Outcome, bool, error) {
	var token []byte
	for {
		resp, err := r.tc.WorkflowService().GetWorkflowExecutionHistory(ctx, &workflowservice.GetWorkflowExecutionHistoryRequest{
			Namespace: namespace, Execution: &commonpb.WorkflowExecution{WorkflowId: workflowID, RunId: runID},
			WaitNewEvent: wait, HistoryEventFilterType: enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT,
			NextPageToken: token, SkipArchival: true})
		var notFound *serviceerror.NotFound
		switch {
		case errors.As(err, &notFound):
			return client.Outcome{}, false, nil
		case err != nil:
			return client.Outcome{}, false, err
		}
		if evs := resp.GetHistory().GetEvents(); len(evs) > 0 {
			return r.outcome(evs[len(evs)-1]), true, nil
		}
		token = resp.GetNextPageToken()
		if !wait && len(token) == 0 {
			return client.Outcome{}, false, nil
		}
		if err := ctx.Err(); err != nil {
			return client.Outcome{}, false, err
		}
	}
}

// outcome is a close event's status, failure and result.
func (r *Reader) outcome(ev *historypb.HistoryEvent) client.Outcome {
	o := client.Outcome{Status: closeNames[ev.GetEventType()]}
	if o.Status == "" {
		o.Status = strings.ToLower(ev.GetEventType().String())
	}
	switch ev.GetEventType() {
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
		if ps := ev.GetWorkflowExecutionCompletedEventAttributes().GetResult(); len(ps.GetPayloads()) > 0 {
			o.Decode = func(out any) error { return r.dc.FromPayloads(ps, out) }
		}
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
		o.Failure = ev.GetWorkflowExecutionFailedEventAttributes().GetFailure().GetMessage()
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT:
		o.Failure = "timed out"
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
		o.Failure = "terminated: " + ev.GetWorkflowExecutionTerminatedEventAttributes().GetReason()
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED:
		o.Failure = "canceled"
	}
	return o
}

// The names of client.Run.Status and client.Outcome.Status (the enums'
// String methods give CamelCase: ContinuedAsNew).
var (
	statusNames = map[enumspb.WorkflowExecutionStatus]string{
		enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:          "running",
		enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:        "completed",
		enumspb.WORKFLOW_EXECUTION_STATUS_FAILED:           "failed",
		enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:         "canceled",
		enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED:       "terminated",
		enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW: "continued_as_new",
		enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:        "timed_out",
	}
	closeNames = map[enumspb.EventType]string{
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:        "completed",
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:           "failed",
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED:         "canceled",
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:       "terminated",
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW: "continued_as_new",
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT:        "timed_out",
	}
)

// statusName is a run status's name; one Temporal adds later is its
// enum's name, lower-cased.
func statusName(s enumspb.WorkflowExecutionStatus) string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return strings.ToLower(s.String())
}
