package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/sink/ledger"
)

// Status is what became of one workflow of an event.
type Status struct {
	WorkflowID string `json:"workflow_id"`
	ActivityID string `json:"activity_id"`
	Namespace  string `json:"namespace"`
	// Ledger is the ledger row's state: pending (claimed, not started
	// yet), started or dead_lettered (Temporal refused the start for
	// good); "" when the ledger does not know the workflow ID: its record
	// waits in Kafka for a router (or was never written).
	Ledger  string `json:"ledger_state"`
	EventID string `json:"event_id,omitempty"`
	// Conflict (a handle's status only): the ledger holds the workflow ID
	// with another payload than this event's: this event never starts it.
	Conflict bool `json:"conflict,omitempty"`
	// Conflicts counts the conflicting copies the routers recorded for
	// the workflow ID (dedup_conflicts).
	Conflicts int64 `json:"conflicts"`
	// RunID is the latest run's ID (Temporal's, else the ledger's).
	RunID string `json:"run_id,omitempty"`
	// Temporal is the latest run's status: running, completed, failed,
	// canceled, terminated, continued_as_new, timed_out; "" when Temporal
	// has no run of the workflow ID (or no Temporal client was given).
	Temporal string `json:"temporal_status,omitempty"`
	Closed   bool   `json:"closed"`
	// Result is a completed run's result (JSON); Failure a failed run's
	// message.
	Result  json.RawMessage `json:"result,omitempty"`
	Failure string          `json:"failure,omitempty"`
}

// Status says what became of each of the handle's workflows, in order.
func (h *Handle) Status(ctx context.Context) ([]Status, error) {
	ids := h.WorkflowIDs()
	entries, err := h.c.lookup(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]Status, len(h.Workflows))
	for i, w := range h.Workflows {
		e, ok := entries[w.ID]
		st, err := h.c.status(ctx, w, e, ok)
		if err != nil {
			return nil, err
		}
		st.Conflict = claimVerdict(e, ok, &w.hash).Verdict == processor.VerdictConflict
		out[i] = st
	}
	return out, nil
}

// Result waits for the handle's workflow to close and decodes its result
// into out (as the Temporal SDK does). An event with several workflows
// (several routes) has no one result: use Client.Result per workflow ID.
// A failed, timed out, terminated or cancelled run is a *WorkflowError; a
// conflict a *ConflictError.
func (h *Handle) Result(ctx context.Context, out any) error {
	if len(h.Workflows) != 1 {
		return fmt.Errorf("event %s starts %d workflows: ask Client.Result for one of %v", h.EventID, len(h.Workflows), h.WorkflowIDs())
	}
	w := h.Workflows[0]
	return h.c.result(ctx, w, &w.hash, out)
}

// Status says what became of the workflow ID (any event's).
func (c *Client) Status(ctx context.Context, workflowID string) (Status, error) {
	w, err := c.workflow(workflowID)
	if err != nil {
		return Status{}, err
	}
	entries, err := c.lookup(ctx, []string{workflowID})
	if err != nil {
		return Status{}, err
	}
	e, ok := entries[workflowID]
	return c.status(ctx, w, e, ok)
}

// Result waits for the workflow to close and decodes its result into out.
func (c *Client) Result(ctx context.Context, workflowID string, out any) error {
	w, err := c.workflow(workflowID)
	if err != nil {
		return err
	}
	return c.result(ctx, w, nil, out)
}

func (c *Client) workflow(id string) (Workflow, error) {
	rt := c.cfg.Routes.RouteOf(id)
	if rt == nil {
		return Workflow{}, fmt.Errorf("%w: %q", ErrUnknownWorkflow, id)
	}
	return Workflow{ID: id, ActivityID: rt.ID, Namespace: c.namespace(rt)}, nil
}

// claimVerdict is the router's verdict (processor.ClaimVerdict) on a copy
// of the workflow ID with payload hash (nil: any payload, the entry's)
// against the ledger's entry as it stands (ok: the ledger has one; if
// not, the copy would claim the ID).
func claimVerdict(e ledger.Entry, ok bool, hash *[32]byte) processor.Claimed {
	v, _ := processor.ClaimVerdict(e.State, !ok || hash == nil || e.PayloadHash == *hash, !ok, e.Generation)
	return v
}

func (c *Client) lookup(ctx context.Context, ids []string) (map[string]ledger.Entry, error) {
	if c.led == nil {
		return map[string]ledger.Entry{}, nil
	}
	return c.led.Lookup(ctx, ids)
}

// status is one workflow's status from its ledger entry (ok: present) and
// Temporal.
func (c *Client) status(ctx context.Context, w Workflow, e ledger.Entry, ok bool) (Status, error) {
	st := Status{WorkflowID: w.ID, ActivityID: w.ActivityID, Namespace: w.Namespace}
	if ok {
		st.Ledger, st.EventID, st.RunID, st.Conflicts = string(e.State), e.EventID, e.RunID, e.Conflicts
	}
	if c.tc == nil {
		return st, nil
	}
	resp, err := c.tc.WorkflowService().DescribeWorkflowExecution(ctx, &workflowservice.DescribeWorkflowExecutionRequest{
		Namespace: w.Namespace, Execution: &commonpb.WorkflowExecution{WorkflowId: w.ID}})
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound):
		return st, nil
	case err != nil:
		return st, fmt.Errorf("describing workflow %s: %w", w.ID, err)
	}
	info := resp.GetWorkflowExecutionInfo()
	st.RunID = info.GetExecution().GetRunId()
	st.Temporal = statusName(info.GetStatus())
	st.Closed = info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	if st.Closed {
		ev, err := c.closeEvent(ctx, w, st.RunID, false)
		if err != nil {
			return st, err
		}
		if ev != nil {
			st.Result, st.Failure = closeOutcome(ev)
		}
	}
	return st, nil
}

func statusName(s enumspb.WorkflowExecutionStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "WORKFLOW_EXECUTION_STATUS_"))
}

// closeEvent is the run's close event; with wait, it long-polls until the
// run closes. nil: none (without wait, the run is open).
func (c *Client) closeEvent(ctx context.Context, w Workflow, runID string, wait bool) (*historypb.HistoryEvent, error) {
	var token []byte
	for {
		resp, err := c.tc.WorkflowService().GetWorkflowExecutionHistory(ctx, &workflowservice.GetWorkflowExecutionHistoryRequest{
			Namespace: w.Namespace, Execution: &commonpb.WorkflowExecution{WorkflowId: w.ID, RunId: runID},
			WaitNewEvent: wait, HistoryEventFilterType: enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT,
			NextPageToken: token, SkipArchival: true})
		if err != nil {
			return nil, fmt.Errorf("reading the close of workflow %s: %w", w.ID, err)
		}
		if evs := resp.GetHistory().GetEvents(); len(evs) > 0 {
			return evs[len(evs)-1], nil
		}
		token = resp.GetNextPageToken()
		if !wait && len(token) == 0 {
			return nil, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// closeOutcome is a close event's result (JSON) or failure message.
func closeOutcome(ev *historypb.HistoryEvent) (json.RawMessage, string) {
	switch ev.GetEventType() {
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
		ps := ev.GetWorkflowExecutionCompletedEventAttributes().GetResult()
		if len(ps.GetPayloads()) == 0 {
			return nil, ""
		}
		var v any
		if err := converter.GetDefaultDataConverter().FromPayloads(ps, &v); err != nil {
			return nil, ""
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, ""
		}
		return b, ""
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
		return nil, ev.GetWorkflowExecutionFailedEventAttributes().GetFailure().GetMessage()
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT:
		return nil, "timed out"
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
		return nil, "terminated: " + ev.GetWorkflowExecutionTerminatedEventAttributes().GetReason()
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED:
		return nil, "canceled"
	}
	return nil, ""
}

// result waits until the workflow has a run (its record may still wait in
// Kafka), then until the run closes, following re-runs and
// continue-as-new, and decodes the result into out. hash, when given, is
// the event's payload hash: a ledger row with another is a conflict.
func (c *Client) result(ctx context.Context, w Workflow, hash *[32]byte, out any) error {
	if c.tc == nil {
		return errors.New("client: no Temporal client: Result needs one")
	}
	wait := 50 * time.Millisecond
	for {
		entries, err := c.lookup(ctx, []string{w.ID})
		if err != nil {
			return err
		}
		e, ok := entries[w.ID]
		switch {
		case claimVerdict(e, ok, hash).Verdict == processor.VerdictConflict:
			return &ConflictError{EventID: e.EventID, WorkflowIDs: []string{w.ID}}
		case ok && e.State == ledger.StateDeadLettered:
			return fmt.Errorf("%s: %w", w.ID, ErrNotStarted)
		}
		if ok && e.State == ledger.StateStarted || c.led == nil {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
	for {
		// RunId empty: the current run, whichever generation or
		// continuation it is when it closes.
		ev, err := c.closeEvent(ctx, w, "", true)
		if err != nil {
			return err
		}
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
			if out == nil {
				return nil
			}
			ps := ev.GetWorkflowExecutionCompletedEventAttributes().GetResult()
			if len(ps.GetPayloads()) == 0 {
				return nil
			}
			return converter.GetDefaultDataConverter().FromPayloads(ps, out)
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
			continue
		}
		_, msg := closeOutcome(ev)
		st, _ := c.Status(ctx, w.ID)
		return &WorkflowError{WorkflowID: w.ID, RunID: st.RunID, Status: strings.ToLower(strings.TrimPrefix(ev.GetEventType().String(), "EVENT_TYPE_WORKFLOW_EXECUTION_")), Message: msg}
	}
}
