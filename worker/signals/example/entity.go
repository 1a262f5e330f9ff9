// Package example is an entity workflow for a signal route: one workflow
// per order (a route's workflow ID template such as
// entity-{activity_id}:{data.order_id}) that folds the order's events into
// running totals, each event once, and lives as a chain of runs, each
// continuing as new with its totals and the Receiver's State.
//
// The events' data is an order event, {"order_id": "o-1",
// "amount_cents": 1250}; an event with other data is counted rejected and
// adds nothing. Copy it as a starting point: the parts that matter are the
// receive loop, the continue-as-new with r.State(), and an input type
// that decodes both the router's start input (whose fields it ignores) and
// its own continue-as-new input.
package example

import (
	"encoding/json"
	"time"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/dedupio/dedup/worker/signals"
)

// WorkflowName is the name the route's workflow type names.
const WorkflowName = "OrderTotalsWorkflow"

// Queries the workflow answers.
const (
	QueryTotals  = "totals"  // Totals: all runs
	QueryApplied = "applied" // []Fold: this run's folds, in order
	QueryStats   = "signals" // signals.Stats: this run's receiver
)

// Folding: the events that arrive within FoldWindow after an event are
// applied with it, as one fold, up to FoldMax events.
const (
	FoldWindow = 2 * time.Second
	FoldMax    = 100
)

// Input is the workflow's input: empty (the router's start input decodes
// to the zero value) in a chain's first run, what the previous run
// carried in the next.
type Input struct {
	Totals  Totals        `json:"totals"`
	Signals signals.State `json:"signals"`
	// MaxSeen is the Receiver's (0: signals.DefaultMaxSeen), carried so
	// that every run of the chain uses the same.
	MaxSeen int `json:"max_seen,omitempty"`
}

// Totals are the folded state of the order, over all runs.
type Totals struct {
	Events      int   `json:"events"`       // events applied (rejected ones included)
	AmountCents int64 `json:"amount_cents"` // the sum of their amounts
	Folds       int   `json:"folds"`        // batches applied
	Rejected    int   `json:"rejected"`     // events whose data is not an order event
}

// Fold is one batch the workflow applied: the audit of what was folded.
type Fold struct {
	EventIDs    []string `json:"event_ids"`          // in arrival order, the rejected ones included
	Rejected    []string `json:"rejected,omitempty"` // IDs of events that added nothing
	AmountCents int64    `json:"amount_cents"`
}

// orderEvent is the data of an order event.
type orderEvent struct {
	OrderID     string `json:"order_id"`
	AmountCents *int64 `json:"amount_cents"`
}

// Register registers the workflow under WorkflowName.
func Register(w worker.WorkflowRegistry) {
	w.RegisterWorkflowWithOptions(OrderTotalsWorkflow, workflow.RegisterOptions{Name: WorkflowName})
}

// OrderTotalsWorkflow folds the order's events until it is cancelled
// (it returns the totals) or its Receiver ends the run: it continues as
// new with the totals and the Receiver's State. It never completes on its
// own: a completed chain would deliver a re-driven event again.
func OrderTotalsWorkflow(ctx workflow.Context, in Input) (Totals, error) {
	r, err := signals.NewReceiver(ctx, signals.Options{MaxSeen: in.MaxSeen}, in.Signals)
	if err != nil {
		return in.Totals, err
	}
	st := in.Totals
	var folds []Fold
	if err := workflow.SetQueryHandler(ctx, QueryTotals, func() (Totals, error) { return st, nil }); err != nil {
		return st, err
	}
	if err := workflow.SetQueryHandler(ctx, QueryApplied, func() ([]Fold, error) { return folds, nil }); err != nil {
		return st, err
	}
	if err := workflow.SetQueryHandler(ctx, QueryStats, func() (signals.Stats, error) { return r.Stats(), nil }); err != nil {
		return st, err
	}
	for {
		batch, ok := r.ReceiveBatch(ctx, FoldWindow, FoldMax)
		if !ok {
			break
		}
		f := fold(batch)
		st.Events += len(batch)
		st.AmountCents += f.AmountCents
		st.Folds++
		st.Rejected += len(f.Rejected)
		folds = append(folds, f)
	}
	if err := ctx.Err(); err != nil {
		return st, err
	}
	return st, workflow.NewContinueAsNewError(ctx, WorkflowName, Input{Totals: st, Signals: r.State(), MaxSeen: in.MaxSeen})
}

// fold sums a batch's amounts.
func fold(batch []signals.Event) Fold {
	var f Fold
	for _, ev := range batch {
		f.EventIDs = append(f.EventIDs, ev.EventID)
		var o orderEvent
		if json.Unmarshal(ev.Data, &o) != nil || o.AmountCents == nil {
			f.Rejected = append(f.Rejected, ev.EventID)
			continue
		}
		f.AmountCents += *o.AmountCents
	}
	return f
}
