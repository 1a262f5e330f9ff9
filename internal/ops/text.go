package ops

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/sink/ledger"
)

// The text forms of the answers: for people. Scripts use --output json.
// They are written into a strings.Builder, where no write fails (through a
// tabwriter too: it fails only when the writer under it does); run writes
// the whole answer to stdout at once and reports the error of that write.

func ts(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func (ex *Explanation) text(w *strings.Builder) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	if r := ex.Record; r != nil {
		if r.LastStable < r.LogEnd && r.State != RecordUnknown {
			p("record     %s  %s  (log %d..%d, last stable offset %d: a transaction is open)", r.Coordinates, r.State, r.LogStart, r.LogEnd, r.LastStable)
		} else {
			p("record     %s  %s  (log %d..%d)", r.Coordinates, r.State, r.LogStart, r.LogEnd)
		}
		if r.State == RecordRead {
			p("           timestamp %s, key %q, %d bytes", ts(r.Timestamp), r.Key, r.ValueBytes)
			for _, h := range r.Headers {
				p("           header %s: %q", h.Key, h.Value)
			}
		}
	}
	if g := ex.Group; g != nil {
		c := "none"
		if g.Committed != nil {
			c = fmt.Sprint(*g.Committed)
		}
		p("group      %s  committed %s  behind: %v", g.Name, c, g.Behind)
	}
	if d := ex.Decision; d != nil {
		switch {
		case d.DeadLetter != "":
			p("decision   dead letter before any claim: %s (%s)", d.DeadLetter, d.Error)
		case d.NoRoute:
			p("decision   no route (kafka.no_route: %s): event %q rule %s type %q source %q", d.NoRoutePolicy, d.EventID, d.Rule, d.Type, d.Source)
		default:
			p("decision   envelope %s, event ID %q, rule %s %s", d.Envelope, d.EventID, d.Rule, d.IDFrom)
			p("           type %q source %q time %q", d.Type, d.Source, d.Time)
			p("           payload hash %s", d.PayloadHash)
			for _, m := range d.Routes {
				if m.EntityWorkflowID != "" {
					p("           route %s (signal %q to %s, %s) -> delivery %s into workflow %s", m.Route.ID, m.Route.Signal,
						m.Route.WorkflowType, m.Route.IDReusePolicy, m.WorkflowID, m.EntityWorkflowID)
					continue
				}
				p("           route %s (%s, %s) -> %s", m.Route.ID, m.Route.WorkflowType, m.Route.IDReusePolicy, m.WorkflowID)
			}
		}
		if d.DeadLetter == "" {
			for _, m := range d.NotMatched {
				p("           not matched route %s: %s", m.Route, m.Why)
			}
		}
	}
	for _, dl := range ex.DeadLetters {
		deadLetterText(w, "dead letter", dl)
	}
	for _, wf := range ex.Workflows {
		p("")
		if wf.EntityWorkflowID != "" {
			p("delivery   %s  into workflow %s", wf.WorkflowID, wf.EntityWorkflowID)
		} else {
			p("workflow   %s", wf.WorkflowID)
		}
		workflowText(w, wf.Route, wf.Ledger, wf.SamePayload, wf.Conflicts, wf.DeadLetters, wf.Temporal, wf.Disagreements)
		p("  verdict  %s: %s", wf.Verdict, wf.Why)
	}
	p("")
	for _, q := range ex.TemporalQueries {
		p("find       %s", q.Command)
	}
	for _, s := range ex.Story {
		p("- %s", s)
	}
	for _, e := range ex.Errors {
		p("! %s", e)
	}
}

func workflowText(w *strings.Builder, rt *Route, row *LedgerRow, same *bool, cs []Conflict, dls []DeadLetter, tx *Execution, ds []Disagreement) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	if rt != nil {
		if rt.Mode == decide.ModeSignal {
			p("  route    %s: signal %q, workflow ID %s, %s on %s, %s", rt.ID, rt.Signal, rt.WorkflowIDTemplate, rt.WorkflowType, rt.TaskQueue, rt.IDReusePolicy)
		} else {
			p("  route    %s: %s on %s, %s, key %s", rt.ID, rt.WorkflowType, rt.TaskQueue, rt.IDReusePolicy, rt.Key)
		}
	} else {
		p("  route    none in the config")
	}
	if row == nil {
		p("  ledger   no row")
	} else {
		p("  ledger   %s  run %s  generation %d  attempts %d", row.State, orNone(row.RunID), row.Generation, row.Attempts)
		p("           event %q rule %s, claimed by %s", row.EventID, row.IDRule, row.ClaimedBy)
		p("           claimed %s, started %s, updated %s", row.ClaimedAt.UTC().Format(time.RFC3339), ts(row.StartedAt), row.UpdatedAt.UTC().Format(time.RFC3339))
		cmp := ""
		if same != nil {
			cmp = "  (this record's: different)"
			if *same {
				cmp = "  (= this record's)"
			}
		}
		p("           payload hash %s%s", row.PayloadHash, cmp)
	}
	for _, c := range cs {
		p("  conflict %s at %s: payload hash %s, ledger's %s", c.Record, c.DetectedAt.UTC().Format(time.RFC3339), c.PayloadHash, c.LedgerPayloadHash)
	}
	for _, dl := range dls {
		deadLetterText(w, "  dead letter", dl)
	}
	switch {
	case tx == nil:
		p("  temporal not known")
	case !tx.Found:
		p("  temporal no execution")
	default:
		p("  temporal %s  run %s  generation %d  started %s  closed %s", tx.Status, tx.RunID, tx.Generation, ts(tx.StartTime), ts(tx.CloseTime))
		for _, r := range tx.Runs {
			p("           run %s %s started %s closed %s", r.RunID, r.Status, ts(r.StartTime), ts(r.CloseTime))
		}
	}
	for _, d := range ds {
		p("  DISAGREE %s: %s", d.Kind, d.Detail)
	}
}

func deadLetterText(w *strings.Builder, label string, dl DeadLetter) {
	where := "not found in " + dl.DLQTopic
	if dl.DLQ != nil {
		where = fmt.Sprintf("at %s/%d/%d", dl.DLQ.Topic, dl.DLQ.Partition, dl.DLQ.Offset)
	}
	fmt.Fprintf(w, "%s %s (%s) of %s, written %s, %s\n", label, dl.Reason, dl.Error, dl.Record, dl.WrittenAt.UTC().Format(time.RFC3339), where)
}

func (in *Inspection) text(w *strings.Builder) {
	fmt.Fprintf(w, "workflow   %s\n", in.WorkflowID)
	workflowText(w, in.Route, in.Ledger, nil, in.Conflicts, in.DeadLetters, in.Temporal, in.Disagreements)
	fmt.Fprintf(w, "\n- %s\n", in.Summary)
	for _, e := range in.Errors {
		fmt.Fprintf(w, "! %s\n", e)
	}
}

func (l *LagReport) text(w *strings.Builder) {
	fmt.Fprintf(w, "group %s  state %s  members %d  total lag %d\n", l.Group, orDash(l.State), l.Members, l.Total)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "TOPIC\tPARTITION\tCOMMITTED\tSTART\tEND\tLAG\tOWNER\tNOTE")
	for _, p := range l.Partitions {
		c := "-"
		if p.Committed != nil {
			c = fmt.Sprint(*p.Committed)
		}
		_, _ = fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\t%s\t%s\n", p.Topic, p.Partition, c, p.Start, p.End, p.Lag, orDash(p.Owner), p.Note)
	}
	_ = tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (r *ResetReport) text(w *strings.Builder) {
	verb := "reset"
	if r.DryRun {
		verb = "would reset"
	}
	fmt.Fprintf(w, "group %s: %s to %s\n", r.Group, verb, r.To)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "TOPIC\tPARTITION\tFROM\tTO\tRE-READ\tSKIPPED")
	for _, p := range r.Partitions {
		_, _ = fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\n", p.Topic, p.Partition, p.From, p.To, p.Reread, p.Skipped)
	}
	_ = tw.Flush()
	if f := r.Forecast; f != nil {
		fmt.Fprintf(w, "\nof the %d records re-read (%d workflow intents):\n", f.Records, f.Intents)
		fmt.Fprintf(w, "  new workflows expected        %d\n", f.NewWorkflows)
		fmt.Fprintf(w, "  skipped as started (ledger)   %d\n", f.Duplicates)
		fmt.Fprintf(w, "    of them may run again (allow_* routes, if their last run closed as the policy allows)  %d\n", f.MayRerun)
		fmt.Fprintf(w, "  re-driven (pending rows)      %d\n", f.Redrives)
		fmt.Fprintf(w, "  started again (dead_lettered rows)  %d\n", f.Reclaims)
		fmt.Fprintf(w, "  conflicts (dead-lettered unless logged already)  %d\n", f.Conflicts)
		fmt.Fprintf(w, "  dead letters before any claim: %d (%d logged already, not written again)\n", f.DeadLetters, f.DeadLettersLogged)
		fmt.Fprintf(w, "  skipped, no route             %d\n", f.NoRoute)
		fmt.Fprintf(w, "  skipped, tombstones           %d\n", f.Tombstones)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
	if r.DryRun {
		fmt.Fprintln(w, "nothing changed: this is the plan; run again with --execute to reset")
	}
}

func (s *StatsReport) text(w *strings.Builder) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "ACTIVITY\tSTATE\tROWS\tOLDEST UPDATE\tNEWEST UPDATE")
	for _, r := range s.Rows {
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", r.ActivityID, r.State, r.Rows, r.Oldest.UTC().Format(time.RFC3339), r.Newest.UTC().Format(time.RFC3339))
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\nrows: %d (pending %d, started %d, dead_lettered %d)\n", s.Total, s.ByState[ledger.StatePending], s.ByState[ledger.StateStarted], s.ByState[ledger.StateDeadLettered])
	if o := s.OldestPending; o != nil {
		fmt.Fprintf(w, "oldest pending: %s, claimed by %s, waiting %s\n", o.WorkflowID, o.ClaimedBy, s.OldestPendingAge)
	} else {
		fmt.Fprintln(w, "oldest pending: none")
	}
	fmt.Fprintf(w, "conflicts: %d\n", s.Conflicts)
	var dl []string
	for _, d := range s.DeadLetters {
		dl = append(dl, fmt.Sprintf("%s %d", d.Reason, d.Rows))
	}
	fmt.Fprintf(w, "dead letters: %s\n", orDash(strings.Join(dl, ", ")))
	for _, t := range s.Tables {
		fmt.Fprintf(w, "size of %s: %s (indexes %s)\n", t.Table, bytesText(t.TotalBytes), bytesText(t.IndexesBytes))
	}
}

func bytesText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func (p *PurgeReport) text(w *strings.Builder) {
	switch {
	case p.Refused:
		fmt.Fprintf(w, "not purged: nothing older than %s was counted or deleted (the reason follows)\n", p.OlderThan)
	case p.DryRun:
		fmt.Fprintf(w, "would purge %d ledger rows and %d dead-letter log entries older than %s\n", p.Rows, p.DeadLetters, p.OlderThan)
	default:
		fmt.Fprintf(w, "purged %d ledger rows (and dead-letter log entries) older than %s\n", p.Rows, p.OlderThan)
	}
	for _, n := range p.Notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
	if p.DryRun && !p.Refused {
		fmt.Fprintln(w, "nothing deleted: this is the plan; run again with --execute to purge")
	}
}
