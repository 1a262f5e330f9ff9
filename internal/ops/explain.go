package ops

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/sink/ledger"
)

func explainCommand() command {
	return command{
		name:  "explain",
		usage: "dedup explain --config FILE (--topic T --partition P --offset O | --event-id ID | --workflow-id WID) [--scan] [--output json]",
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
2 on an error (what the other sources said is still printed).

Example:
  dedup explain --config dedup.yaml --topic orders --partition 3 --offset 88120
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

// Query is what dedup explain was asked.
type Query struct {
	Topic      string `json:"topic,omitempty"`
	Partition  *int32 `json:"partition,omitempty"`
	Offset     *int64 `json:"offset,omitempty"`
	EventID    string `json:"event_id,omitempty"`
	WorkflowID string `json:"workflow_id,omitempty"`
	Scan       bool   `json:"scan,omitempty"`
}

// Explanation is dedup explain's answer.
type Explanation struct {
	Query Query `json:"query"`
	// Record is the record explained; nil when no record could be named
	// (a workflow or event the ledger has no row of).
	Record   *Record   `json:"record,omitempty"`
	Decision *Decision `json:"decision,omitempty"`
	Group    *Group    `json:"group,omitempty"`
	// Workflows are the record's workflow IDs (and the one asked for),
	// each with the ledger's and Temporal's view.
	Workflows []Workflow `json:"workflows"`
	// DeadLetters are the record's dead letters written before any claim
	// (decode failures, oversized, no_route); per-workflow ones
	// (conflict, temporal_permanent) are under their workflow.
	DeadLetters []DeadLetter `json:"dead_letters,omitempty"`
	// Story is the explanation, in sentences.
	Story []string `json:"story"`
	Found bool     `json:"found"`
	// Errors are the sources that did not answer: the answer is
	// incomplete (exit code 2).
	Errors []string `json:"errors,omitempty"`
}

// Record is the record explained.
type Record struct {
	Coordinates
	// State is where it stands: read, out_of_retention, not_produced,
	// absent, uncommitted (in a transaction still open), unknown.
	State    string `json:"state"`
	LogStart int64  `json:"log_start"`
	LogEnd   int64  `json:"log_end"`
	// LastStable is where the router (kafka.isolation_level) reads the
	// partition up to now: under read_committed, the first offset of the
	// oldest transaction still open (the log end when none is).
	LastStable int64      `json:"last_stable"`
	Timestamp  *time.Time `json:"timestamp,omitempty"`
	Key        string     `json:"key,omitempty"` // as text, or "base64:..." when not UTF-8
	Headers    []Header   `json:"headers,omitempty"`
	ValueBytes int        `json:"value_bytes"`
}

// Header is a record header (values over 200 bytes are cut).
type Header struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Decision is what the router's code (processor.Decider) makes of the
// record.
type Decision struct {
	Envelope    string `json:"envelope,omitempty"`
	EventID     string `json:"event_id,omitempty"`
	Rule        string `json:"rule,omitempty"`
	IDFrom      string `json:"id_from,omitempty"` // the header or field the ID came from
	Type        string `json:"type,omitempty"`
	Source      string `json:"source,omitempty"`
	Time        string `json:"time,omitempty"`
	PayloadHash string `json:"payload_hash,omitempty"`
	// DeadLetter is the reason the record is dead-lettered before any
	// claim, with Error.
	DeadLetter string `json:"dead_letter,omitempty"`
	Error      string `json:"error,omitempty"`
	// Tombstone: a null value without CloudEvents headers, which the
	// router skips and counts (dedup_records_tombstone_total).
	Tombstone bool `json:"tombstone,omitempty"`
	// NoRoute: no route matches; NoRoutePolicy is kafka.no_route.
	NoRoute       bool         `json:"no_route"`
	NoRoutePolicy string       `json:"no_route_policy,omitempty"`
	Routes        []RouteMatch `json:"routes"`
}

// RouteMatch is a matching route and the workflow ID it gives: for a
// signal route, the delivery key the ledger claims
// (signal-{route}:{event_id}) and the entity workflow the event is
// signalled into.
type RouteMatch struct {
	Route            Route  `json:"route"`
	WorkflowID       string `json:"workflow_id"`
	EntityWorkflowID string `json:"entity_workflow_id,omitempty"`
}

// Group is the consumer group's progress on the record's partition.
type Group struct {
	Name string `json:"name"`
	// Committed is the group's committed offset (the next record it
	// reads); nil when it has none.
	Committed *int64 `json:"committed,omitempty"`
	// Behind: the record is before the committed offset, so the group
	// read it and finished it.
	Behind bool `json:"behind"`
}

// Workflow is one workflow ID of the record.
type Workflow struct {
	WorkflowID string `json:"workflow_id"`
	Route      *Route `json:"route,omitempty"` // nil when the config has no route of its activity
	// EntityWorkflowID is, for a signal route's delivery key, the entity
	// workflow the record's event is signalled into (when the record was
	// read and decided): Temporal is its execution, and the ledger's run
	// the entity run that took the signal. No ledger/Temporal disagreement
	// is judged for a delivery but a stale pending row: an entity's
	// latest run moves on (continue-as-new, later events) by design.
	EntityWorkflowID string `json:"entity_workflow_id,omitempty"`
	// Ledger is its row; nil when there is none (or PostgreSQL did not
	// answer).
	Ledger *LedgerRow `json:"ledger,omitempty"`
	// SamePayload says whether the record's payload hash is the row's
	// (nil when either is unknown).
	SamePayload *bool        `json:"same_payload,omitempty"`
	Conflicts   []Conflict   `json:"conflicts,omitempty"`
	DeadLetters []DeadLetter `json:"dead_letters,omitempty"`
	Temporal    *Execution   `json:"temporal,omitempty"`
	// Verdict is what the record is to this workflow: claimed (it claimed
	// the row: verdict new), duplicate, conflict, not_read_yet, forgotten
	// (a route the record matches, behind the committed offset, no row),
	// not_matched (the record, read, does not match the workflow's route:
	// its row is another record's), unknown.
	Verdict       string         `json:"verdict"`
	Why           string         `json:"why"`
	Disagreements []Disagreement `json:"disagreements,omitempty"`
}

// Explain answers q.
func (t *Tool) Explain(ctx context.Context, q Query) (*Explanation, int, error) {
	ex := &Explanation{Query: q, Workflows: []Workflow{}}
	var problems errs
	led, err := t.ledger(ctx)
	problems.add("postgres", err)

	rows := map[string]*ledger.Row{}
	var wids []string // in the order they are printed
	addWID := func(w string) {
		if !slices.Contains(wids, w) {
			wids = append(wids, w)
		}
	}
	addRows := func(rs []ledger.Row) {
		for i := range rs {
			rows[rs[i].WorkflowID] = &rs[i]
			addWID(rs[i].WorkflowID)
		}
	}

	// Name the record: asked for, or the one that claimed the rows asked for.
	var at *Coordinates
	// candidates are the workflow IDs --event-id looks up: one per route
	// keyed by event ID, whether or not the event matches it. They only
	// find the record; the record's workflows are the routes it matches.
	candidates := map[string]bool{}
	switch {
	case q.Topic != "":
		at = &Coordinates{q.Topic, *q.Partition, *q.Offset}
	case q.WorkflowID != "":
		addWID(q.WorkflowID)
	case q.EventID != "":
		for i := range t.cfg.Routes {
			if rt := &t.cfg.Routes[i]; rt.Key == processor.KeyEventID {
				w := processor.WorkflowID(rt.ID, q.EventID)
				if rt.Mode == processor.ModeSignal {
					w = processor.DeliveryKey(rt.ID, q.EventID)
				}
				candidates[w] = true
				addWID(w)
			}
		}
	}
	var conflicts []ledger.Conflict
	var deadLetters []ledger.DeadLetterEntry
	if at == nil && led != nil {
		rs, err := led.Rows(ctx, wids)
		problems.add("postgres", err)
		addRows(rs)
		if q.Scan && q.EventID != "" {
			rs, err := led.RowsOfEvent(ctx, q.EventID)
			problems.add("postgres", err)
			addRows(rs)
		}
		for _, w := range wids {
			if r := rows[w]; r != nil {
				at = &Coordinates{r.Topic, r.Partition, r.Offset}
				break
			}
		}
		if at == nil {
			// No row: a conflicting copy may still be recorded.
			cs, err := led.Conflicts(ctx, "", 0, 0, wids)
			problems.add("postgres", err)
			if len(cs) > 0 {
				at = &Coordinates{cs[0].Topic, cs[0].Partition, cs[0].Offset}
			}
		}
	}

	var recHash []byte // the record's payload hash, when it was read and decoded
	// matched are the workflow IDs the record gives, when it was read and
	// decided (nil otherwise).
	var matched map[string]bool
	entities := map[string]string{} // a delivery key's entity workflow, from the decision
	if at != nil {
		rec, state, b, err := t.readRecord(ctx, at.Topic, at.Partition, at.Offset)
		problems.add("kafka", err)
		ex.Record = &Record{Coordinates: *at, State: state, LogStart: b.start, LogEnd: b.end, LastStable: b.stable}
		if rec != nil {
			fillRecord(ex.Record, rec)
			d, err := t.decide(ctx, rec)
			if err != nil {
				return nil, ExitError, err
			}
			ex.Decision = decisionView(&d, t.cfg.Kafka.NoRoute)
			matched = map[string]bool{}
			for j, in := range d.Intents {
				addWID(in.WorkflowID)
				matched[in.WorkflowID] = true
				if d.Entities != nil && d.Entities[j] != "" {
					entities[in.WorkflowID] = d.Entities[j]
				}
			}
			if d.DeadLetter == "" && !d.Skipped() {
				recHash = d.Event.PayloadHash[:]
			}
		}
		cm, err := t.committed(ctx)
		problems.add("kafka", err)
		if err == nil {
			ex.Group = &Group{Name: t.cfg.Kafka.Group}
			if c, ok := cm[at.Topic][at.Partition]; ok {
				ex.Group.Committed = &c
				ex.Group.Behind = at.Offset < c
			}
		}
		if led != nil {
			if rec == nil && state != RecordNotProduced {
				// Out of retention (or unreadable): the ledger alone says
				// which workflows the record claimed.
				rs, err := led.RowsClaimedAt(ctx, at.Topic, at.Partition, at.Offset)
				problems.add("postgres", err)
				addRows(rs)
			}
			conflicts, err = led.Conflicts(ctx, at.Topic, at.Partition, at.Offset, wids)
			problems.add("postgres", err)
			for _, c := range conflicts {
				if c.Topic == at.Topic && c.Partition == at.Partition && c.Offset == at.Offset {
					addWID(c.WorkflowID)
				}
			}
			deadLetters, err = led.DeadLetters(ctx, at.Topic, at.Partition, at.Offset, wids)
			problems.add("postgres", err)
		}
	} else if led != nil {
		var err error
		deadLetters, err = led.DeadLetters(ctx, "", 0, 0, wids)
		problems.add("postgres", err)
	}
	if led != nil {
		var missing []string
		for _, w := range wids {
			if rows[w] == nil {
				missing = append(missing, w)
			}
		}
		if len(missing) > 0 {
			rs, err := led.Rows(ctx, missing)
			problems.add("postgres", err)
			addRows(rs)
		}
	}

	now := time.Now()
	for _, w := range wids {
		wf := Workflow{WorkflowID: w, Route: routeView(t.cfg.Routes.RouteOf(w))}
		row := rows[w]
		if row != nil {
			wf.Ledger = rowView(*row)
			if recHash != nil {
				same := bytes.Equal(recHash, row.PayloadHash)
				wf.SamePayload = &same
			}
		}
		var mine *ledger.Conflict
		for i, c := range conflicts {
			if c.WorkflowID != w {
				continue
			}
			wf.Conflicts = append(wf.Conflicts, conflictView(c))
			if at != nil && c.Topic == at.Topic && c.Partition == at.Partition && c.Offset == at.Offset {
				mine = &conflicts[i]
			}
		}
		for _, d := range deadLetters {
			if d.WorkflowID == w {
				wf.DeadLetters = append(wf.DeadLetters, t.locate(ctx, d, &problems))
			}
		}
		traced := row != nil || len(wf.Conflicts) > 0 || len(wf.DeadLetters) > 0
		if candidates[w] && !matched[w] && !traced && matched != nil {
			// A route of --event-id that the record does not match, and
			// that nothing claimed: not one of its workflows.
			continue
		}
		rt := t.cfg.Routes.RouteOf(w)
		signal := rt != nil && rt.Mode == processor.ModeSignal
		var tex *Execution
		var err error
		switch {
		case !signal:
			tex, err = t.describe(ctx, w, false)
		case entities[w] != "":
			// A delivery key is no Temporal workflow: its entity is.
			wf.EntityWorkflowID = entities[w]
			tex, err = t.describeIn(ctx, t.namespace(w), entities[w], false)
		}
		problems.add("temporal", err)
		if candidates[w] && !matched[w] && !traced && (tex == nil || !tex.Found) {
			// No record decided, and no source knows this workflow ID:
			// the event may not match its route at all.
			continue
		}
		wf.Temporal = tex
		wf.Verdict, wf.Why = verdict(at, ex.Group, recHash, row, mine, wf.Route)
		if matched != nil && !matched[w] {
			wf.Verdict, wf.Why = notMatched(at, row, wf.Route, len(matched))
		}
		if signal {
			wf.Disagreements = judge(row, nil, now, t.cfg.Postgres.PendingAlertAfter)
		} else {
			wf.Disagreements = judge(row, tex, now, t.cfg.Postgres.PendingAlertAfter)
		}
		ex.Workflows = append(ex.Workflows, wf)
		if row != nil || len(wf.Conflicts) > 0 || len(wf.DeadLetters) > 0 || (tex != nil && tex.Found) {
			ex.Found = true
		}
	}
	for _, d := range deadLetters {
		if d.WorkflowID == "" {
			ex.DeadLetters = append(ex.DeadLetters, t.locate(ctx, d, &problems))
			ex.Found = true
		}
	}
	if ex.Record != nil && ex.Record.State == RecordRead {
		ex.Found = true
	}
	ex.Story = story(ex, t.cfg.Kafka.NoRoute)
	ex.Errors = problems
	switch {
	case len(problems) > 0:
		return ex, ExitError, problems.err()
	case !ex.Found:
		return ex, ExitNotFound, nil
	}
	return ex, ExitFound, nil
}

// locate is d, with where it is in its dead-letter topic.
func (t *Tool) locate(ctx context.Context, d ledger.DeadLetterEntry, problems *errs) DeadLetter {
	v := deadLetterView(d)
	dlq, err := t.findDeadLetter(ctx, d.DeadLetterTopic, d.Topic, d.Partition, d.Offset, d.WorkflowID, d.WrittenAt)
	problems.add("kafka (dead-letter topic)", err)
	v.DLQ = dlq
	return v
}

func fillRecord(r *Record, kr *kgo.Record) {
	ts := kr.Timestamp
	r.Timestamp = &ts
	r.ValueBytes = len(kr.Value)
	r.Key = printable(kr.Key)
	for _, h := range kr.Headers {
		v := h.Value
		if len(v) > 200 {
			v = v[:200]
		}
		r.Headers = append(r.Headers, Header{Key: h.Key, Value: printable(v)})
	}
}

func printable(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return "base64:" + base64.StdEncoding.EncodeToString(b)
}

func decisionView(d *processor.Decision, noRoute string) *Decision {
	v := &Decision{Envelope: string(d.Event.Envelope), EventID: d.Event.ID, Rule: string(d.Event.Rule), IDFrom: d.Event.IDFrom,
		Type: d.Event.Type, Source: d.Event.Source, Time: d.Event.Time, DeadLetter: string(d.DeadLetter), NoRoute: d.NoRoute,
		Tombstone: d.Tombstone, Routes: []RouteMatch{}}
	if d.Event.ID != "" {
		v.PayloadHash = hex.EncodeToString(d.Event.PayloadHash[:])
	}
	if d.Err != nil && !d.Tombstone {
		v.Error = d.Err.Error()
	}
	if d.NoRoute {
		v.NoRoutePolicy = noRoute
	}
	for i, in := range d.Intents {
		m := RouteMatch{Route: *routeView(d.Routes[i]), WorkflowID: in.WorkflowID}
		if d.Entities != nil {
			m.EntityWorkflowID = d.Entities[i]
		}
		v.Routes = append(v.Routes, m)
	}
	return v
}

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
	next, reclaims := processor.ClaimVerdict(row.State, recHash == nil || bytes.Equal(recHash, row.PayloadHash), false, row.Generation)
	if next.Verdict == processor.VerdictConflict {
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
	case next.Verdict == processor.VerdictRedrive:
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
