package ops

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/sink/ledger"
)

// What dedup explain says of each workflow: its verdict, and the story of
// the record.

// verdict says what the record at is to one workflow: what the ledger
// decided for it, or will decide when it is read.
func verdict(at *Coordinates, g *Group, recHash []byte, row *ledger.Row, mine *ledger.Conflict, rt *Route) (string, string) {
	behind := g != nil && g.Behind
	switch {
	case at == nil && row == nil:
		return "unknown", "no ledger row and no record names this workflow ID"
	case mine != nil:
		return "conflict", fmt.Sprintf("this record's payload (hash %.12s…) differs from the one %s was claimed with (hash %.12s…, by the record the row names): "+
			"the producer reused event ID %s for another payload; this copy was never started and was dead-lettered as conflict",
			hex.EncodeToString(mine.PayloadHash), mine.WorkflowID, hex.EncodeToString(mine.LedgerPayloadHash), mine.EventID)
	case row == nil && g == nil:
		return "unknown", "the ledger has no row; whether the group read the record is unknown (Kafka did not answer)"
	case row == nil && behind:
		return "forgotten", "the group committed past this record but the ledger has no row: it was purged (postgres.retention, dedup ledger purge) " +
			"or the ledger was reset; a replay of this record starts the workflow again, unless Temporal still refuses the ID " +
			"(reject_duplicate, within the namespace's retention)"
	case row == nil:
		return "not_read_yet", "not claimed yet: the group has not committed past this record (unread, or in flight now); when read, it claims the workflow as new"
	}
	state := stateStory(row, rt)
	claimedHere := at != nil && row.Topic == at.Topic && row.Partition == at.Partition && row.Offset == at.Offset
	// What a claim of this record gets from the row as it stands (without
	// the record's payload, the row's is assumed).
	next, reclaims := decide.ClaimVerdict(row.State, recHash == nil || bytes.Equal(recHash, row.PayloadHash), false, row.Generation)
	if next.Verdict == decide.VerdictConflict {
		if g == nil {
			return "unknown", fmt.Sprintf("the row was claimed by %s/%d/%d with another payload; no conflict is recorded for this record, "+
				"and whether the group read it is unknown (Kafka did not answer)", row.Topic, row.Partition, row.Offset)
		}
		if !behind {
			return "not_read_yet", fmt.Sprintf("when read, a conflict: the row was claimed by %s/%d/%d with another payload (hash %.12s…, this record's %.12s…)",
				row.Topic, row.Partition, row.Offset, hex.EncodeToString(row.PayloadHash), hex.EncodeToString(recHash))
		}
		return "conflict", fmt.Sprintf("this record's payload differs from the row's, but no conflict is recorded for it: the row was claimed again, "+
			"by %s/%d/%d, after this record was read (purged, then re-claimed by another payload)", row.Topic, row.Partition, row.Offset)
	}
	switch {
	case claimedHere && behind:
		return "claimed", "this record claimed the workflow (verdict new); " + state
	case claimedHere:
		return "claimed", "this record claimed the workflow (verdict new), and the group has not committed past it yet; " + state
	case g == nil:
		return "unknown", fmt.Sprintf("%s/%d/%d claimed the workflow; whether the group read this record is unknown (Kafka did not answer); %s",
			row.Topic, row.Partition, row.Offset, state)
	case behind:
		return "duplicate", fmt.Sprintf("a copy of the event that %s/%d/%d claimed first: this record was skipped as a duplicate "+
			"(or, while the row was pending, re-drove it); %s", row.Topic, row.Partition, row.Offset, state)
	}
	what := "a duplicate"
	switch {
	case reclaims:
		what = "a new claim of the dead-lettered row (started again)"
	case next.Verdict == decide.VerdictRedrive:
		what = "a re-drive (the row is pending)"
	}
	return "not_read_yet", fmt.Sprintf("not read yet; when read, %s of what %s/%d/%d claimed; %s", what, row.Topic, row.Partition, row.Offset, state)
}

// notMatched is the verdict on a workflow ID that the record, read and
// decided, does not give: a route it does not match (as the config
// stands), whose row another record with the same event ID claimed, or
// this one under an earlier config.
func notMatched(at *Coordinates, row *ledger.Row, rt *Route, n int) (string, string) {
	route := "its route"
	if rt != nil {
		route = "route " + rt.ID
	}
	why := fmt.Sprintf("this record does not match %s as the config stands (it matches %d route(s)): not one of its workflows", route, n)
	switch {
	case row == nil:
	case at != nil && row.Topic == at.Topic && row.Partition == at.Partition && row.Offset == at.Offset:
		why += "; yet it claimed this row: the route's match or ID changed since"
	default:
		why += fmt.Sprintf("; the row was claimed by %s/%d/%d (explain that record)", row.Topic, row.Partition, row.Offset)
	}
	return "not_matched", why
}

// stateStory tells a row's state.
func stateStory(row *ledger.Row, rt *Route) string {
	var s string
	switch row.State {
	case ledger.StateStarted:
		s = fmt.Sprintf("the ledger says started, run %s, generation %d", orNone(row.RunID), row.Generation)
		if row.StartedAt != nil {
			s += ", at " + row.StartedAt.UTC().Format(time.RFC3339)
		}
		if row.Generation > 1 && rt != nil {
			s += fmt.Sprintf(" (re-run %d time(s) under %s)", row.Generation-1, rt.IDReusePolicy)
		}
	case ledger.StatePending:
		s = fmt.Sprintf("the ledger says pending: claimed %d time(s), not started yet (last claimed %s)", row.Attempts, row.UpdatedAt.UTC().Format(time.RFC3339))
	case ledger.StateDeadLettered:
		s = "the ledger says dead_lettered: Temporal refused the start for good (temporal_permanent); replaying the record claims it again"
	default:
		s = "the ledger says " + string(row.State)
	}
	return s
}

// story is the explanation in sentences.
func story(ex *Explanation, noRoute string) []string {
	var out []string
	say := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if r := ex.Record; r != nil {
		switch r.State {
		case RecordRead:
			say("Record %s (%s, %d bytes) was read back from Kafka.", r.Coordinates, r.Timestamp.UTC().Format(time.RFC3339), r.ValueBytes)
		case RecordOutOfRetention:
			say("Record %s has left retention (the partition's log now starts at %d): explained from the ledger alone.", r.Coordinates, r.LogStart)
		case RecordNotProduced:
			say("There is no record %s yet: the partition's log ends at %d.", r.Coordinates, r.LogEnd)
		case RecordAbsent:
			say("There is no record at %s for the router: compacted away, a record of an aborted transaction, or a transaction marker.", r.Coordinates)
		case RecordUncommitted:
			say("Record %s is in a transaction still open (the partition's last stable offset is %d): the router reads it once the transaction commits, never if it aborts.",
				r.Coordinates, r.LastStable)
		default:
			say("Record %s could not be read from Kafka.", r.Coordinates)
		}
	} else {
		say("No record names what was asked: no ledger row and no conflict of it.")
	}
	if g := ex.Group; g != nil && ex.Record != nil {
		switch {
		case g.Committed == nil:
			say("Group %s has no committed offset for this partition: it has not finished any record of it.", g.Name)
		case g.Behind:
			say("Group %s committed offset %d on this partition: the record is behind it, read and finished.", g.Name, *g.Committed)
		case ex.Record.State == RecordOutOfRetention:
			say("Group %s committed offset %d: the record left retention before the group read it (lost; dedup_records_lost_total).", g.Name, *g.Committed)
		default:
			say("Group %s committed offset %d: the record is not behind it (unread, or in flight now).", g.Name, *g.Committed)
		}
	}
	if d := ex.Decision; d != nil {
		switch {
		case d.Tombstone:
			say("The record is a tombstone (a null value without CloudEvents headers): the router skips it and counts it (dedup_records_tombstone_total); no workflow, no ledger row, no dead letter.")
		case d.DeadLetter != "":
			say("The router dead-letters it before any claim: %s (%s).", d.DeadLetter, d.Error)
			behind := ex.Group != nil && ex.Group.Behind
			switch {
			case len(ex.DeadLetters) > 0:
				dl := ex.DeadLetters[0]
				where := "no longer in " + dl.DLQTopic
				if dl.DLQ != nil {
					where = fmt.Sprintf("at %s/%d/%d", dl.DLQ.Topic, dl.DLQ.Partition, dl.DLQ.Offset)
				}
				say("It was dead-lettered as %s at %s, %s.", dl.Reason, dl.WrittenAt.UTC().Format(time.RFC3339), where)
			case behind:
				say("The dead-letter log has no entry for it (purged by postgres.retention?).")
			default:
				say("It is not dead-lettered yet: the group has not read it.")
			}
		case d.NoRoute:
			say("Event %s (rule %s) has type %q, source %q: no route matches, so it is skipped (kafka.no_route: %s): no workflow, no ledger row.",
				d.EventID, d.Rule, d.Type, d.Source, noRoute)
		default:
			from := d.Rule
			if d.IDFrom != "" {
				from += " " + d.IDFrom
			}
			say("Read as %s: event ID %q by rule %s; type %q, source %q; %d route(s) match.", d.Envelope, d.EventID, from, d.Type, d.Source, len(d.Routes))
		}
	}
	// Each workflow's why is under it; the story sums them up.
	for _, w := range ex.Workflows {
		s := fmt.Sprintf("%s: %s", w.WorkflowID, w.Verdict)
		if w.Ledger != nil {
			s += ", ledger " + string(w.Ledger.State)
		}
		if tx := w.Temporal; tx != nil {
			if tx.Found {
				s += fmt.Sprintf(", Temporal %s (run %s)", tx.Status, tx.RunID)
			} else {
				s += ", no execution in Temporal"
			}
		}
		for _, d := range w.Disagreements {
			s += "; they disagree: " + d.Kind
		}
		say("%s.", s)
	}
	return out
}
