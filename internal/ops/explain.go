package ops

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/sink/ledger"
)

func explainCommand() command {
	return command{
		name:    "explain",
		summary: "what dedup decided for a record, and why",
		usage:   "--config FILE (--topic T --partition P --offset O | --event-id ID | --workflow-id WID) [--scan] [--output json]",
		help: `Explains what dedup decided for one record, and why: the record read back from Kafka, the
decision the router's own code makes of it (envelope, ID rule and the value it used, routes and
workflow IDs), each workflow's ledger row (state, attempts, generation, the record that claimed it,
timestamps, its payload hash against this record's), conflicts with both hashes, dead letters with
their reason and where they are in the dead-letter topic, the group's committed offset (is the
record behind it?), and Temporal's execution (status, run ID, start and close time), with any
disagreement between the ledger and Temporal named. A record that has left retention is explained
from the ledger alone (a scan of dedup_ledger by the claiming record).

--event-id looks up the workflow IDs the config's routes give that ID (routes keyed by event_id);
--scan also scans dedup_ledger for rows of that event ID under any route (no index: a full scan).
--workflow-id starts from that ledger row. Both then explain the record that claimed the row.
A record's workflows are the routes it matches: a route keyed by event_id that the record does
not match is not listed, unless a row of it exists (claimed by another record with the same ID:
verdict not_matched). With no record at hand (no row, no conflict), only the workflow IDs some
source knows (a dead letter, a Temporal run) are listed.

Read-only. Exit code 0 when the record or any trace of it was found, 1 when nothing is known of it,
2 on an error (what the other sources said is still printed).`,
		example: `dedup explain --config dedup.yaml --topic orders --partition 3 --offset 88120
dedup explain --config dedup.yaml --event-id evt_8812 --output json`,
		flags: func(fs *flag.FlagSet) func(context.Context, *Tool, []string) (any, int, error) {
			topic := fs.String("topic", "", "the record's topic")
			partition := fs.Int("partition", -1, "the record's partition")
			offset := fs.Int64("offset", -1, "the record's offset")
			eventID := fs.String("event-id", "", "explain the record that claimed this event ID's workflows")
			workflowID := fs.String("workflow-id", "", "explain the record that claimed this workflow ID")
			scan := fs.Bool("scan", false, "with --event-id: also scan dedup_ledger for the event's rows under any route")
			return func(ctx context.Context, t *Tool, args []string) (any, int, error) {
				q := Query{Topic: *topic, EventID: *eventID, WorkflowID: *workflowID, Scan: *scan}
				forms := 0
				if *topic != "" || *partition >= 0 || *offset >= 0 {
					if *topic == "" || *partition < 0 || *offset < 0 {
						return nil, ExitError, errors.New("--topic, --partition and --offset go together")
					}
					p, o := int32(*partition), *offset
					q.Partition, q.Offset = &p, &o
					forms++
				}
				if *eventID != "" {
					forms++
				}
				if *workflowID != "" {
					forms++
				}
				if forms != 1 || len(args) > 0 {
					return nil, ExitError, errors.New("name one record: --topic/--partition/--offset, --event-id or --workflow-id")
				}
				return t.Explain(ctx, q)
			}
		},
	}
}

// Explain answers q in named steps: find the record (asked for, or the one
// that claimed the rows asked for), read and decide it, gather what the
// ledger knows of its workflow IDs, then judge each workflow against
// Temporal.
func (t *Tool) Explain(ctx context.Context, q Query) (*Explanation, int, error) {
	x := &explaining{
		t:          t,
		ex:         &Explanation{Query: q, Workflows: []Workflow{}},
		rows:       map[string]*ledger.Row{},
		candidates: map[string]bool{},
		entities:   map[string]string{},
	}
	var err error
	x.led, err = t.ledger(ctx)
	x.problems.add("postgres", err)

	x.nameRecord(q)
	x.findRecord(ctx, q)
	if x.at != nil {
		if err := x.readRecord(ctx); err != nil {
			return nil, ExitError, err
		}
	} else if x.led != nil {
		var err error
		x.deadLetters, err = x.led.DeadLetters(ctx, "", 0, 0, x.wids)
		x.problems.add("postgres", err)
	}
	x.readMissingRows(ctx)
	x.judgeWorkflows(ctx)
	return x.answer()
}

// explaining is one Explain's state, built up by its steps.
type explaining struct {
	t        *Tool
	ex       *Explanation
	problems errs
	led      *ledger.Postgres

	rows map[string]*ledger.Row
	wids []string // in the order they are printed
	// at is the record explained, nil until one is named or found.
	at *Coordinates
	// candidates are the workflow IDs --event-id looks up: one per route
	// keyed by event ID, whether or not the event matches it. They only
	// find the record; the record's workflows are the routes it matches.
	candidates  map[string]bool
	conflicts   []ledger.Conflict
	deadLetters []ledger.DeadLetterEntry
	recHash     []byte // the record's payload hash, when it was read and decoded
	// matched are the workflow IDs the record gives, when it was read and
	// decided (nil otherwise).
	matched  map[string]bool
	entities map[string]string // a delivery key's entity workflow, from the decision
}

func (x *explaining) addWID(w string) {
	if !slices.Contains(x.wids, w) {
		x.wids = append(x.wids, w)
	}
}

func (x *explaining) addRows(rs []ledger.Row) {
	for i := range rs {
		x.rows[rs[i].WorkflowID] = &rs[i]
		x.addWID(rs[i].WorkflowID)
	}
}

// nameRecord takes what q names: the record's coordinates, a workflow ID,
// or the workflow IDs of an event ID (candidates).
func (x *explaining) nameRecord(q Query) {
	switch {
	case q.Topic != "":
		x.at = &Coordinates{q.Topic, *q.Partition, *q.Offset}
	case q.WorkflowID != "":
		x.addWID(q.WorkflowID)
	case q.EventID != "":
		for i := range x.t.cfg.Routes {
			if rt := &x.t.cfg.Routes[i]; rt.Key == decide.KeyEventID {
				w := decide.WorkflowID(rt.ID, q.EventID)
				if rt.Mode == decide.ModeSignal {
					w = decide.DeliveryKey(rt.ID, q.EventID)
				}
				x.candidates[w] = true
				x.addWID(w)
			}
		}
	}
}

// findRecord, when q named no record, finds the one that claimed the rows
// of the workflow IDs asked for (or, without a row, a conflicting copy).
func (x *explaining) findRecord(ctx context.Context, q Query) {
	if x.at != nil || x.led == nil {
		return
	}
	rs, err := x.led.Rows(ctx, x.wids)
	x.problems.add("postgres", err)
	x.addRows(rs)
	if q.Scan && q.EventID != "" {
		rs, err := x.led.RowsOfEvent(ctx, q.EventID)
		x.problems.add("postgres", err)
		x.addRows(rs)
	}
	for _, w := range x.wids {
		if r := x.rows[w]; r != nil {
			x.at = &Coordinates{r.Topic, r.Partition, r.Offset}
			return
		}
	}
	// No row: a conflicting copy may still be recorded.
	cs, err := x.led.Conflicts(ctx, "", 0, 0, x.wids)
	x.problems.add("postgres", err)
	if len(cs) > 0 {
		x.at = &Coordinates{cs[0].Topic, cs[0].Partition, cs[0].Offset}
	}
}

// readRecord reads the record at x.at and decides it, reads the group's
// progress on its partition, and the ledger's conflicts and dead letters
// of it. Only a decision that cannot be made is an error.
func (x *explaining) readRecord(ctx context.Context) error {
	at := x.at
	rec, state, b, err := x.t.readRecord(ctx, at.Topic, at.Partition, at.Offset)
	x.problems.add("kafka", err)
	x.ex.Record = &Record{Coordinates: *at, State: state, LogStart: b.start, LogEnd: b.end, LastStable: b.stable}
	if rec != nil {
		if err := x.decide(ctx, rec); err != nil {
			return err
		}
	}
	cm, err := x.t.committed(ctx)
	x.problems.add("kafka", err)
	if err == nil {
		x.ex.Group = &Group{Name: x.t.cfg.Kafka.Group}
		if c, ok := cm[at.Topic][at.Partition]; ok {
			x.ex.Group.Committed = &c
			x.ex.Group.Behind = at.Offset < c
		}
	}
	if x.led == nil {
		return nil
	}
	if rec == nil && state != RecordNotProduced {
		// Out of retention (or unreadable): the ledger alone says
		// which workflows the record claimed.
		rs, err := x.led.RowsClaimedAt(ctx, at.Topic, at.Partition, at.Offset)
		x.problems.add("postgres", err)
		x.addRows(rs)
	}
	x.conflicts, err = x.led.Conflicts(ctx, at.Topic, at.Partition, at.Offset, x.wids)
	x.problems.add("postgres", err)
	for _, c := range x.conflicts {
		if c.Topic == at.Topic && c.Partition == at.Partition && c.Offset == at.Offset {
			x.addWID(c.WorkflowID)
		}
	}
	x.deadLetters, err = x.led.DeadLetters(ctx, at.Topic, at.Partition, at.Offset, x.wids)
	x.problems.add("postgres", err)
	return nil
}

// decide runs the router's decision on rec: its workflow IDs (matched),
// the entities of its deliveries, and its payload hash.
func (x *explaining) decide(ctx context.Context, rec *kgo.Record) error {
	fillRecord(x.ex.Record, rec)
	d, err := x.t.decide(ctx, rec)
	if err != nil {
		return err
	}
	x.ex.Decision = decisionView(&d, x.t.cfg.Kafka.NoRoute)
	x.ex.Decision.NotMatched = routeMisses(x.t.cfg.Routes, &d)
	x.matched = map[string]bool{}
	for j, in := range d.Intents {
		x.addWID(in.WorkflowID)
		x.matched[in.WorkflowID] = true
		if d.Entities != nil && d.Entities[j] != "" {
			x.entities[in.WorkflowID] = d.Entities[j]
		}
	}
	if d.DeadLetter == "" && !d.Skipped() {
		x.recHash = d.Event.PayloadHash[:]
	}
	return nil
}

// readMissingRows reads the rows of the workflow IDs found since the
// ledger was last asked.
func (x *explaining) readMissingRows(ctx context.Context) {
	if x.led == nil {
		return
	}
	var missing []string
	for _, w := range x.wids {
		if x.rows[w] == nil {
			missing = append(missing, w)
		}
	}
	if len(missing) > 0 {
		rs, err := x.led.Rows(ctx, missing)
		x.problems.add("postgres", err)
		x.addRows(rs)
	}
}

// judgeWorkflows explains each workflow ID, and the dead letters that
// name none.
func (x *explaining) judgeWorkflows(ctx context.Context) {
	now := time.Now()
	for _, w := range x.wids {
		wf, ok := x.workflow(ctx, w, now)
		if !ok {
			continue
		}
		x.ex.Workflows = append(x.ex.Workflows, wf)
		if wf.Ledger != nil || len(wf.Conflicts) > 0 || len(wf.DeadLetters) > 0 || (wf.Temporal != nil && wf.Temporal.Found) {
			x.ex.Found = true
		}
	}
	for _, d := range x.deadLetters {
		if d.WorkflowID == "" {
			x.ex.DeadLetters = append(x.ex.DeadLetters, x.t.locate(ctx, d, &x.problems))
			x.ex.Found = true
		}
	}
	if x.ex.Record != nil && x.ex.Record.State == RecordRead {
		x.ex.Found = true
	}
}

// workflow explains workflow ID w: its row, conflicts, dead letters,
// Temporal's execution, the verdict and the disagreements; false when w is
// a route of --event-id that is not one of the record's workflows.
func (x *explaining) workflow(ctx context.Context, w string, now time.Time) (Workflow, bool) {
	t, at := x.t, x.at
	wf := Workflow{WorkflowID: w, Route: routeView(t.cfg.Routes.RouteOf(w))}
	row := x.rows[w]
	if row != nil {
		wf.Ledger = rowView(*row)
		if x.recHash != nil {
			same := bytes.Equal(x.recHash, row.PayloadHash)
			wf.SamePayload = &same
		}
	}
	var mine *ledger.Conflict
	for i, c := range x.conflicts {
		if c.WorkflowID != w {
			continue
		}
		wf.Conflicts = append(wf.Conflicts, conflictView(c))
		if at != nil && c.Topic == at.Topic && c.Partition == at.Partition && c.Offset == at.Offset {
			mine = &x.conflicts[i]
		}
	}
	for _, d := range x.deadLetters {
		if d.WorkflowID == w {
			wf.DeadLetters = append(wf.DeadLetters, t.locate(ctx, d, &x.problems))
		}
	}
	traced := row != nil || len(wf.Conflicts) > 0 || len(wf.DeadLetters) > 0
	candidate := x.candidates[w] && !x.matched[w] && !traced
	if candidate && x.matched != nil {
		// A route of --event-id that the record does not match, and
		// that nothing claimed: not one of its workflows.
		return wf, false
	}
	rt := t.cfg.Routes.RouteOf(w)
	signal := rt != nil && rt.Mode == decide.ModeSignal
	var tex *Execution
	var err error
	switch {
	case !signal:
		tex, err = t.describe(ctx, w, false)
	case x.entities[w] != "":
		// A delivery key is no Temporal workflow: its entity is.
		wf.EntityWorkflowID = x.entities[w]
		tex, err = t.describeIn(ctx, t.namespace(w), x.entities[w], false)
	}
	x.problems.add("temporal", err)
	if candidate && (tex == nil || !tex.Found) {
		// No record decided, and no source knows this workflow ID:
		// the event may not match its route at all.
		return wf, false
	}
	wf.Temporal = tex
	wf.Verdict, wf.Why = verdict(at, x.ex.Group, x.recHash, row, mine, wf.Route)
	if x.matched != nil && !x.matched[w] {
		wf.Verdict, wf.Why = notMatched(at, row, wf.Route, len(x.matched))
	}
	if signal {
		wf.Disagreements = judge(row, nil, now, t.cfg.Postgres.PendingAlertAfter)
	} else {
		wf.Disagreements = judge(row, tex, now, t.cfg.Postgres.PendingAlertAfter)
	}
	return wf, true
}

// answer is the explanation with its story and exit code.
func (x *explaining) answer() (*Explanation, int, error) {
	ex := x.ex
	ex.TemporalQueries = temporalQueries(x.t.cfg, ex)
	ex.Story = story(ex, x.t.cfg.Kafka.NoRoute)
	ex.Errors = x.t.redacted(x.problems)
	switch {
	case len(x.problems) > 0:
		return ex, ExitError, x.problems.err()
	case !ex.Found:
		return ex, ExitNotFound, nil
	}
	return ex, ExitFound, nil
}
