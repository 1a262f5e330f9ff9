package ops

import (
	"encoding/hex"
	"fmt"
	"time"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/sink/ledger"
)

// Coordinates name a record.
type Coordinates struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

func (c Coordinates) String() string { return fmt.Sprintf("%s/%d/%d", c.Topic, c.Partition, c.Offset) }

// LedgerRow is a dedup_ledger row as the commands print it.
type LedgerRow struct {
	WorkflowID  string       `json:"workflow_id"`
	ActivityID  string       `json:"activity_id"`
	EventID     string       `json:"event_id"`
	IDRule      string       `json:"id_rule"`
	PayloadHash string       `json:"payload_hash"`
	State       ledger.State `json:"state"`
	RunID       string       `json:"run_id,omitempty"`
	Attempts    int          `json:"attempts"`
	Generation  int          `json:"generation"`
	ClaimedBy   Coordinates  `json:"claimed_by"`
	ClaimedAt   time.Time    `json:"claimed_at"`
	StartedAt   *time.Time   `json:"started_at,omitempty"`
	UpdatedAt   time.Time    `json:"updated_at"`
}

func rowView(r ledger.Row) *LedgerRow {
	return &LedgerRow{WorkflowID: r.WorkflowID, ActivityID: r.ActivityID, EventID: r.EventID, IDRule: r.IDRule,
		PayloadHash: hex.EncodeToString(r.PayloadHash), State: r.State, RunID: r.RunID, Attempts: r.Attempts,
		Generation: r.Generation, ClaimedBy: Coordinates{r.Topic, r.Partition, r.Offset}, ClaimedAt: r.ClaimedAt,
		StartedAt: r.StartedAt, UpdatedAt: r.UpdatedAt}
}

// Conflict is a dedup_conflicts row: a copy of the workflow ID read with
// another payload.
type Conflict struct {
	WorkflowID        string      `json:"workflow_id"`
	EventID           string      `json:"event_id"`
	PayloadHash       string      `json:"payload_hash"`        // the conflicting copy's
	LedgerPayloadHash string      `json:"ledger_payload_hash"` // the row's
	Record            Coordinates `json:"record"`              // the conflicting copy
	DetectedAt        time.Time   `json:"detected_at"`
}

func conflictView(c ledger.Conflict) Conflict {
	return Conflict{WorkflowID: c.WorkflowID, EventID: c.EventID, PayloadHash: hex.EncodeToString(c.PayloadHash),
		LedgerPayloadHash: hex.EncodeToString(c.LedgerPayloadHash), Record: Coordinates{c.Topic, c.Partition, c.Offset},
		DetectedAt: c.DetectedAt}
}

// DeadLetter is a dedup_dead_letters entry, with where the dead letter
// is in its topic when it was found there.
type DeadLetter struct {
	Reason     string      `json:"reason"`
	Error      string      `json:"error"`
	WorkflowID string      `json:"workflow_id,omitempty"`
	Record     Coordinates `json:"record"`
	DLQTopic   string      `json:"dlq_topic"`
	// DLQ is where the dead letter is in DLQTopic; nil when it was not
	// found there (deleted by retention, or not searched).
	DLQ       *DLQCoordinates `json:"dlq,omitempty"`
	WrittenAt time.Time       `json:"written_at"`
}

func deadLetterView(d ledger.DeadLetterEntry) DeadLetter {
	return DeadLetter{Reason: d.Reason, Error: d.Error, WorkflowID: d.WorkflowID,
		Record: Coordinates{d.Topic, d.Partition, d.Offset}, DLQTopic: d.DeadLetterTopic, WrittenAt: d.WrittenAt}
}

// Route is a route of the config as the commands print it.
type Route struct {
	ID            string `json:"id"`
	WorkflowType  string `json:"workflow_type"`
	TaskQueue     string `json:"task_queue"`
	IDReusePolicy string `json:"id_reuse_policy"`
	Key           string `json:"key"`
	// Mode is start or signal; a signal route's workflow ID template and
	// signal name follow.
	Mode               string `json:"mode,omitempty"`
	WorkflowIDTemplate string `json:"workflow_id_template,omitempty"`
	Signal             string `json:"signal,omitempty"`
}

func routeView(rt *decide.Route) *Route {
	if rt == nil {
		return nil
	}
	return &Route{ID: rt.ID, WorkflowType: rt.WorkflowType, TaskQueue: rt.TaskQueue, IDReusePolicy: string(rt.IDReusePolicy), Key: rt.Key,
		Mode: rt.Mode, WorkflowIDTemplate: rt.WorkflowIDTemplate, Signal: rt.Signal}
}

// Disagreement is where the ledger and Temporal tell different stories of
// one workflow ID, named.
type Disagreement struct {
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
}

// The disagreements judge names.
const (
	// The ledger says started; Temporal has no execution.
	TemporalForgot = "temporal_forgot"
	// Both have a run, not the same one, and Temporal's is no newer
	// generation.
	RunMismatch = "run_mismatch"
	// Temporal's run is of a newer generation than the ledger records.
	RerunNotRecorded = "rerun_not_recorded"
	// The ledger says pending; Temporal has a run.
	MarkNotLanded = "mark_not_landed"
	// The ledger says pending, for longer than postgres.pending_alert_after.
	PendingStale = "pending_stale"
	// The ledger says dead_lettered; Temporal has a run.
	DeadLetteredButStarted = "dead_lettered_but_started"
	// Temporal has a run; the ledger has no row.
	TemporalOnly = "temporal_only"
)

// judge names every disagreement between a ledger row and Temporal's
// execution of one workflow ID (either may be nil: not known, or not
// asked). now and staleAfter date pending rows.
func judge(row *ledger.Row, ex *Execution, now time.Time, staleAfter time.Duration) []Disagreement {
	var out []Disagreement
	add := func(kind, format string, args ...any) {
		out = append(out, Disagreement{Kind: kind, Detail: fmt.Sprintf(format, args...)})
	}
	if row != nil && row.State == ledger.StatePending && now.Sub(row.UpdatedAt) > staleAfter {
		add(PendingStale, "claimed %s ago (past postgres.pending_alert_after %s) and not started since: no live router is starting it "+
			"(its record was committed past, or its partition is stuck); re-produce the record to re-drive it (runbook: DedupLedgerPendingStale)",
			now.Sub(row.UpdatedAt).Round(time.Second), staleAfter)
	}
	if ex == nil {
		return out // Temporal not asked, or it did not answer
	}
	switch {
	case row == nil && ex.Found:
		add(TemporalOnly, "Temporal has run %s (%s) but the ledger has no row: the row was purged (postgres.retention, dedup ledger purge) "+
			"or the ledger was reset, or the workflow was started outside dedup; a replay of the event is refused by Temporal under "+
			"reject_duplicate while it keeps the run, and runs again under allow_*", ex.RunID, ex.Status)
	case row == nil:
	case row.State == ledger.StateStarted && !ex.Found:
		add(TemporalForgot, "the ledger says started (run %s) but Temporal has no execution: the run closed and the namespace's "+
			"retention passed (or it was deleted); the ledger still makes dedup skip this ID", orNone(row.RunID))
	case row.State == ledger.StateStarted && ex.Generation > row.Generation:
		add(RerunNotRecorded, "Temporal's latest run %s is generation %d, the ledger records generation %d (run %s): "+
			"a re-run whose mark has not landed yet (the next duplicate finds it)", ex.RunID, ex.Generation, row.Generation, orNone(row.RunID))
	case row.State == ledger.StateStarted && row.RunID != "" && ex.RunID != row.RunID:
		add(RunMismatch, "Temporal's latest run %s (%s) is not the one the ledger records (%s): the workflow was reset, "+
			"continued as new, or started again outside dedup", ex.RunID, ex.Status, row.RunID)
	case row.State == ledger.StatePending && ex.Found:
		add(MarkNotLanded, "the ledger says pending but Temporal has run %s (%s): the start happened and its mark has not landed "+
			"(a crash between start and mark, or the mark is in flight); a redelivery of the record re-drives it, finds it "+
			"already started and marks it", ex.RunID, ex.Status)
	case row.State == ledger.StateDeadLettered && ex.Found:
		add(DeadLetteredButStarted, "the ledger says Temporal refused the start for good (dead_lettered) but Temporal has run %s (%s): "+
			"it was started since, outside dedup, or by a replay not yet marked", ex.RunID, ex.Status)
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "not recorded"
	}
	return s
}
