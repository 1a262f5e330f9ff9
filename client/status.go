package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/dedupio/dedup/processor/decide"
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
	// has no run of the workflow ID (or the Client has no Config.Runs).
	Temporal string `json:"temporal_status,omitempty"`
	Closed   bool   `json:"closed"`
	// Result is a completed run's result (JSON); Failure a failed run's
	// message.
	Result  json.RawMessage `json:"result,omitempty"`
	Failure string          `json:"failure,omitempty"`
}

// Status says what became of each of the handle's workflows, in order,
// from the ledger (Config.Ledger) and Temporal (Config.Runs); a part whose
// reader is not configured is left empty. With neither: ErrNoLedger and
// ErrNoRuns (errors.Is holds for both).
func (h *Handle) Status(ctx context.Context) ([]Status, error) {
	if err := h.c.canStatus(); err != nil {
		return nil, err
	}
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
		st.Conflict = claimVerdict(e, ok, &w.hash).Verdict == decide.VerdictConflict
		out[i] = st
	}
	return out, nil
}

// Result waits for the handle's workflow to close and decodes its result
// into out (with the RunReader's decoder: the Temporal SDK's data
// converter for client/temporalread). It waits while the event's record
// waits for a router, then for the run, following re-runs and
// continue-as-new; give ctx a deadline to bound it. Errors: ErrNoRuns
// without Config.Runs; ErrSeveralWorkflows for an event several routes give
// a workflow (use Client.Result per workflow ID); a *ConflictError when
// the ledger holds the workflow with another payload; ErrNotStarted when
// Temporal refused its start; a *WorkflowError for a run that failed,
// timed out, was terminated or cancelled.
func (h *Handle) Result(ctx context.Context, out any) error {
	if h.c == nil {
		return ErrDetachedHandle
	}
	if len(h.Workflows) != 1 {
		return fmt.Errorf("event %s: %w: ask Client.Result for one of %v", h.EventID, ErrSeveralWorkflows, h.WorkflowIDs())
	}
	w := h.Workflows[0]
	if rt := h.c.cfg.Routes.RouteOf(w.ID); rt != nil && rt.Mode == decide.ModeSignal {
		return fmt.Errorf("%w: %s", ErrSignalDelivery, w.ID)
	}
	return h.c.result(ctx, w, &w.hash, out)
}

// Status says what became of the workflow ID (any event's); see
// Handle.Status. A workflow ID no route makes is ErrUnknownWorkflow.
func (c *Client) Status(ctx context.Context, workflowID string) (Status, error) {
	if err := c.canStatus(); err != nil {
		return Status{}, err
	}
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

// Result waits for the workflow to close and decodes its result into out;
// see Handle.Result (without the conflict check: any event's payload).
func (c *Client) Result(ctx context.Context, workflowID string, out any) error {
	w, err := c.workflow(workflowID)
	if err != nil {
		return err
	}
	if rt := c.cfg.Routes.RouteOf(workflowID); rt != nil && rt.Mode == decide.ModeSignal {
		return fmt.Errorf("%w: %s", ErrSignalDelivery, workflowID)
	}
	return c.result(ctx, w, nil, out)
}

// ErrSignalDelivery is returned by Result for a signal route's delivery
// key (signal-{route}:{event_id}): the event went into an entity workflow
// as a signal, and has no run or result of its own; ask the entity
// workflow (its ID is the route's template of the event's data).
var ErrSignalDelivery = errors.New("client: a signal route's delivery has no result of its own (the event was signalled into its entity workflow)")

func (c *Client) workflow(id string) (Workflow, error) {
	rt := c.cfg.Routes.RouteOf(id)
	if rt == nil {
		return Workflow{}, fmt.Errorf("%w: %q", ErrUnknownWorkflow, id)
	}
	return Workflow{ID: id, ActivityID: rt.ID, Namespace: c.namespace(rt)}, nil
}

// ErrDetachedHandle is returned by a Handle's Status and Result when the
// handle was not made by a Client (rebuilt from its fields, say): ask
// Client.Status and Client.Result with its workflow IDs.
var ErrDetachedHandle = errors.New("client: the handle has no Client: use Client.Status or Client.Result with its workflow IDs")

func (c *Client) canStatus() error {
	if c == nil {
		return ErrDetachedHandle
	}
	if c.led == nil && c.runs == nil {
		return fmt.Errorf("%w and %w: Status would know nothing", ErrNoLedger, ErrNoRuns)
	}
	return nil
}

// claimVerdict is the router's verdict (decide.ClaimVerdict) on a copy
// of the workflow ID with payload hash (nil: any payload, the entry's)
// against the ledger's entry as it stands (ok: the ledger has one; if
// not, the copy would claim the ID).
func claimVerdict(e LedgerEntry, ok bool, hash *[32]byte) decide.Claimed {
	v, _ := decide.ClaimVerdict(e.State, !ok || hash == nil || e.PayloadHash == *hash, !ok, e.Generation)
	return v
}

func (c *Client) lookup(ctx context.Context, ids []string) (map[string]LedgerEntry, error) {
	if c.led == nil {
		return map[string]LedgerEntry{}, nil
	}
	return c.led.Lookup(ctx, ids)
}

// status is one workflow's status from its ledger entry (ok: present) and
// Temporal.
func (c *Client) status(ctx context.Context, w Workflow, e LedgerEntry, ok bool) (Status, error) {
	st := Status{WorkflowID: w.ID, ActivityID: w.ActivityID, Namespace: w.Namespace}
	if ok {
		st.Ledger, st.EventID, st.RunID, st.Conflicts = string(e.State), e.EventID, e.RunID, e.Conflicts
	}
	if c.runs == nil {
		return st, nil
	}
	run, found, err := c.runs.Describe(ctx, w.Namespace, w.ID)
	switch {
	case err != nil:
		return st, fmt.Errorf("describing workflow %s: %w", w.ID, err)
	case !found:
		return st, nil
	}
	st.RunID, st.Temporal, st.Closed = run.ID, run.Status, run.Closed()
	if st.Closed {
		o, closed, err := c.runs.Outcome(ctx, w.Namespace, w.ID, run.ID, false)
		if err != nil {
			return st, fmt.Errorf("reading the close of workflow %s: %w", w.ID, err)
		}
		if closed {
			st.Result, st.Failure = resultJSON(o), o.Failure
		}
	}
	return st, nil
}

// resultJSON is a completed run's result as JSON; nil when there is none
// or it does not decode into a JSON value.
func resultJSON(o Outcome) json.RawMessage {
	if o.Decode == nil {
		return nil
	}
	var v any
	if err := o.Decode(&v); err != nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return b
}

// result waits until the workflow has a run (its record may still wait in
// Kafka), then until the run closes, following re-runs and
// continue-as-new, and decodes the result into out. hash, when given, is
// the event's payload hash: a ledger row with another is a conflict.
func (c *Client) result(ctx context.Context, w Workflow, hash *[32]byte, out any) error {
	if c.runs == nil {
		return fmt.Errorf("result of workflow %s: %w", w.ID, ErrNoRuns)
	}
	wait := 50 * time.Millisecond
	backOff := func() error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
		return nil
	}
	// The ledger first, when there is one: it says when the run exists,
	// and whether it never will (a conflict, a refused start).
	for c.led != nil {
		entries, err := c.led.Lookup(ctx, []string{w.ID})
		if err != nil {
			return err
		}
		e, ok := entries[w.ID]
		switch {
		case claimVerdict(e, ok, hash).Verdict == decide.VerdictConflict:
			return &ConflictError{EventID: e.EventID, WorkflowIDs: []string{w.ID}}
		case ok && e.State == decide.LedgerDeadLettered:
			return fmt.Errorf("%s: %w", w.ID, ErrNotStarted)
		}
		if ok && e.State == decide.LedgerStarted {
			break
		}
		if err := backOff(); err != nil {
			return err
		}
	}
	for {
		// RunID empty: the current run, whichever generation or
		// continuation it is when it closes.
		o, found, err := c.runs.Outcome(ctx, w.Namespace, w.ID, "", true)
		switch {
		case err != nil:
			return fmt.Errorf("waiting for workflow %s: %w", w.ID, err)
		case !found:
			// No run yet (without a ledger, the record may still wait
			// for a router).
			if err := backOff(); err != nil {
				return err
			}
			continue
		}
		switch o.Status {
		case "completed":
			if out == nil || o.Decode == nil {
				return nil
			}
			return o.Decode(out)
		case "continued_as_new":
			continue
		}
		run, _, _ := c.runs.Describe(ctx, w.Namespace, w.ID)
		return &WorkflowError{WorkflowID: w.ID, RunID: run.ID, Status: o.Status, Message: o.Failure}
	}
}
