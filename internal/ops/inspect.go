package ops

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/dedupio/dedup/sink/ledger"
)

func inspectCommand() command {
	return command{
		name:    "inspect",
		summary: "the ledger's and Temporal's view of a workflow",
		usage:   "--config FILE WORKFLOW_ID [--output json]",
		help: `Shows a workflow ID's ledger row (state, run ID, attempts, generation, the record that claimed
it, timestamps), its conflicts and dead letters, and Temporal's view of it (the latest run's
status, run ID, generation, start and close time, and every run visibility lists), side by side,
and names where they disagree:

  temporal_forgot            the ledger says started, Temporal has no execution (its retention passed)
  temporal_only              Temporal has a run, the ledger has no row (purged, reset, or started outside dedup)
  mark_not_landed            the ledger says pending, Temporal has a run (the start's mark has not landed)
  rerun_not_recorded         Temporal's run is of a newer generation than the ledger's (an allow_* re-run not yet marked)
  run_mismatch               both have a run, not the same one (reset, or started outside dedup)
  dead_lettered_but_started  the ledger says Temporal refused the start, Temporal has a run
  pending_stale              pending for longer than postgres.pending_alert_after

Read-only. Exit code 0 when the ledger or Temporal knows the workflow ID, 1 when neither does,
2 on an error.`,
		example: `dedup inspect --config dedup.yaml activity-550e8400-e29b-41d4-a716-446655440000:evt_8812`,
		flags: func(fs *flag.FlagSet) func(context.Context, *Tool, []string) (any, int, error) {
			return func(ctx context.Context, t *Tool, args []string) (any, int, error) {
				if len(args) != 1 || args[0] == "" {
					return nil, ExitError, errors.New("name one workflow ID")
				}
				return t.Inspect(ctx, args[0])
			}
		},
	}
}

// Inspection is dedup inspect's answer.
type Inspection struct {
	WorkflowID    string         `json:"workflow_id"`
	Route         *Route         `json:"route,omitempty"`
	Ledger        *LedgerRow     `json:"ledger,omitempty"`
	Conflicts     []Conflict     `json:"conflicts,omitempty"`
	DeadLetters   []DeadLetter   `json:"dead_letters,omitempty"`
	Temporal      *Execution     `json:"temporal,omitempty"`
	Disagreements []Disagreement `json:"disagreements"`
	// Summary says in a sentence what the two views add up to.
	Summary string   `json:"summary"`
	Found   bool     `json:"found"`
	Errors  []string `json:"errors,omitempty"`
}

// Inspect answers dedup inspect for workflowID.
func (t *Tool) Inspect(ctx context.Context, workflowID string) (*Inspection, int, error) {
	in := &Inspection{WorkflowID: workflowID, Route: routeView(t.cfg.Routes.RouteOf(workflowID)), Disagreements: []Disagreement{}}
	var problems errs
	var row *ledger.Row
	if led, err := t.ledger(ctx); err != nil {
		problems.add("postgres", err)
	} else {
		rows, err := led.Rows(ctx, []string{workflowID})
		problems.add("postgres", err)
		if len(rows) == 1 {
			row = &rows[0]
			in.Ledger = rowView(*row)
		}
		cs, err := led.Conflicts(ctx, "", 0, 0, []string{workflowID})
		problems.add("postgres", err)
		for _, c := range cs {
			in.Conflicts = append(in.Conflicts, conflictView(c))
		}
		dls, err := led.DeadLetters(ctx, "", 0, 0, []string{workflowID})
		problems.add("postgres", err)
		for _, d := range dls {
			in.DeadLetters = append(in.DeadLetters, t.locate(ctx, d, &problems))
		}
	}
	ex, err := t.describe(ctx, workflowID, true)
	problems.add("temporal", err)
	in.Temporal = ex
	in.Disagreements = append(in.Disagreements, judge(row, ex, time.Now(), t.cfg.Postgres.PendingAlertAfter)...)
	in.Found = row != nil || len(in.Conflicts) > 0 || len(in.DeadLetters) > 0 || (ex != nil && ex.Found)
	in.Summary = summary(row, ex, in)
	in.Errors = t.redacted(problems)
	switch {
	case len(problems) > 0:
		return in, ExitError, problems.err()
	case !in.Found:
		return in, ExitNotFound, nil
	}
	return in, ExitFound, nil
}

func summary(row *ledger.Row, ex *Execution, in *Inspection) string {
	if len(in.Disagreements) > 0 {
		return fmt.Sprintf("the ledger and Temporal disagree: %s", in.Disagreements[0].Kind)
	}
	switch {
	case row == nil && (ex == nil || !ex.Found) && len(in.Conflicts) > 0:
		return "no ledger row and no execution, but conflicting copies are recorded"
	case row == nil && ex != nil && !ex.Found:
		return "neither the ledger nor Temporal knows this workflow ID"
	case row == nil:
		return "the ledger has no row of this workflow ID"
	case ex == nil:
		return "the ledger says " + string(row.State) + "; Temporal was not asked (see errors)"
	case row.State == ledger.StateStarted:
		return fmt.Sprintf("they agree: started, run %s (%s)", ex.RunID, ex.Status)
	case row.State == ledger.StatePending:
		return "they agree: claimed, not started yet"
	}
	return "they agree: dead-lettered, no run in Temporal"
}
