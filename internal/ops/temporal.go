package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/dedupio/dedup/schemas"
)

// Execution is Temporal's view of a workflow ID: its latest run.
type Execution struct {
	// Found is false when Temporal has no execution of the ID (never
	// started, or closed and past the namespace's retention).
	Found bool `json:"found"`
	// Namespace is where it was looked for: the route's namespace.
	Namespace    string     `json:"namespace,omitempty"`
	RunID        string     `json:"run_id,omitempty"`
	Status       string     `json:"status,omitempty"` // Running, Completed, Failed, Canceled, Terminated, ContinuedAsNew, TimedOut
	WorkflowType string     `json:"workflow_type,omitempty"`
	TaskQueue    string     `json:"task_queue,omitempty"`
	StartTime    *time.Time `json:"start_time,omitempty"`
	CloseTime    *time.Time `json:"close_time,omitempty"`
	// Generation is the generation dedup started the run for (its memo,
	// dedup_generation); 0 for a run that does not say (started outside
	// dedup, or before dedup recorded it).
	Generation int `json:"generation"`
	// Runs lists every run of the ID that visibility knows, newest first
	// (it lags the executions by a moment); nil when visibility was not
	// asked or did not answer.
	Runs []Run `json:"runs,omitempty"`
}

// Run is one run of a workflow ID, as visibility lists it.
type Run struct {
	RunID     string     `json:"run_id"`
	Status    string     `json:"status"`
	StartTime *time.Time `json:"start_time,omitempty"`
	CloseTime *time.Time `json:"close_time,omitempty"`
}

// status names a workflow execution status the way Temporal's UI does.
func status(s enumspb.WorkflowExecutionStatus) string {
	name := strings.TrimPrefix(s.String(), "WORKFLOW_EXECUTION_STATUS_")
	parts := strings.Split(strings.ToLower(name), "_")
	for i, p := range parts {
		if p != "" {
			parts[i] = strings.ToUpper(p[:1]) + p[1:]
		}
	}
	return strings.Join(parts, "")
}

// describe asks Temporal for workflowID's latest run (and, with runs, for
// every run visibility lists).
func (t *Tool) describe(ctx context.Context, workflowID string, runs bool) (*Execution, error) {
	return t.describeIn(ctx, t.namespace(workflowID), workflowID, runs)
}

// describeIn is describe in namespace ns (a signal route's entity
// workflow, whose ID names no route).
func (t *Tool) describeIn(ctx context.Context, ns, workflowID string, runs bool) (*Execution, error) {
	tc, err := t.temporal(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := tc.WorkflowService().DescribeWorkflowExecution(ctx, &workflowservice.DescribeWorkflowExecutionRequest{
		Namespace: ns, Execution: &commonpb.WorkflowExecution{WorkflowId: workflowID}})
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return &Execution{Namespace: ns}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("describing workflow %s in namespace %s: %w", workflowID, ns, err)
	}
	info := resp.GetWorkflowExecutionInfo()
	ex := &Execution{Found: true, Namespace: ns, RunID: info.GetExecution().GetRunId(), Status: status(info.GetStatus()),
		WorkflowType: info.GetType().GetName(), TaskQueue: info.GetTaskQueue()}
	if ts := info.GetStartTime(); ts != nil {
		v := ts.AsTime()
		ex.StartTime = &v
	}
	if ts := info.GetCloseTime(); ts != nil {
		v := ts.AsTime()
		ex.CloseTime = &v
	}
	if p := info.GetMemo().GetFields()[schemas.MemoGeneration]; p != nil {
		_ = converter.GetDefaultDataConverter().FromPayload(p, &ex.Generation)
	}
	if runs {
		ex.Runs, _ = t.listRuns(ctx, workflowID) // visibility is a courtesy: describe is the authority
	}
	return ex, nil
}

// listRuns lists the runs of workflowID that visibility knows.
func (t *Tool) listRuns(ctx context.Context, workflowID string) ([]Run, error) {
	tc, err := t.temporal(ctx)
	if err != nil {
		return nil, err
	}
	q := fmt.Sprintf("WorkflowId = '%s'", strings.ReplaceAll(workflowID, "'", "\\'"))
	var out []Run
	var token []byte
	for {
		resp, err := tc.WorkflowService().ListWorkflowExecutions(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: t.namespace(workflowID), Query: q, NextPageToken: token})
		if err != nil {
			return nil, err
		}
		for _, e := range resp.GetExecutions() {
			r := Run{RunID: e.GetExecution().GetRunId(), Status: status(e.GetStatus())}
			if ts := e.GetStartTime(); ts != nil {
				v := ts.AsTime()
				r.StartTime = &v
			}
			if ts := e.GetCloseTime(); ts != nil {
				v := ts.AsTime()
				r.CloseTime = &v
			}
			out = append(out, r)
		}
		if token = resp.GetNextPageToken(); len(token) == 0 || len(out) > 1000 {
			return out, nil
		}
	}
}
