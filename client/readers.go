package client

import (
	"context"

	"github.com/dedupio/dedup/processor/decide"
)

// LedgerEntry is what the routers' ledger holds for one workflow ID: its
// state, the payload hash it was claimed with, its run, and the conflicts
// recorded for it.
type LedgerEntry = decide.LedgerEntry

// LedgerReader reads the routers' ledger; the client never writes it.
// sink/ledger/ledgerread.Reader is PostgreSQL's (read-only sessions), and
// sink/ledger.Postgres (the routers' own, with write access) satisfies it
// too.
type LedgerReader interface {
	// Lookup returns what the ledger holds for each of workflowIDs (in one
	// round trip); an ID it does not know is absent from the map. It must
	// not write: the client asks it on every Send. Send gives
	// payloadHashes too, one per workflow ID: the payload hash of the copy
	// it sends for it; an entry's ConflictHashes must then hold that hash
	// when the routers recorded it as a conflict of the ID, however many
	// other conflicts the lookup bounds out (ledgerread.MaxConflictHashes).
	Lookup(ctx context.Context, workflowIDs []string, payloadHashes ...[32]byte) (map[string]LedgerEntry, error)
}

// RunReader reads workflow runs from Temporal; the client never starts,
// signals or changes one. client/temporalread implements it over a
// Temporal SDK client (DescribeWorkflowExecution and
// GetWorkflowExecutionHistory only), with the SDK's data converter.
type RunReader interface {
	// Describe returns the current run of workflowID in namespace. ok is
	// false when Temporal has no run of it: its record still waits for a
	// router, its start was refused, or Temporal's retention forgot it.
	Describe(ctx context.Context, namespace, workflowID string) (run Run, ok bool, err error)
	// Outcome returns how a run of workflowID closed; runID "" is the
	// current run, whichever it is when it closes. With wait it blocks
	// until the run closes (or ctx ends); without, an open run gives ok
	// false. A workflow ID Temporal has no run of gives ok false, with or
	// without wait.
	Outcome(ctx context.Context, namespace, workflowID, runID string, wait bool) (out Outcome, ok bool, err error)
}

// Run is a workflow run as Temporal describes it.
type Run struct {
	ID string
	// Status is running, completed, failed, canceled, terminated,
	// continued_as_new or timed_out.
	Status string
}

// Closed says the run has ended.
func (r Run) Closed() bool { return r.Status != "running" }

// Outcome is how a run closed.
type Outcome struct {
	// Status is completed, failed, canceled, terminated, continued_as_new
	// or timed_out.
	Status string
	// Failure says why a run that did not complete ended: a failed run's
	// failure message, "timed out", "terminated: <reason>", "canceled".
	Failure string
	// Decode decodes a completed run's result into out, as the workflow's
	// Temporal data converter encoded it; nil when the run returned
	// nothing or did not complete.
	Decode func(out any) error
}
