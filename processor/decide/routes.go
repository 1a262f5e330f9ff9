package decide

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/schemas"
)

// taskTypeName is the shape of a definition's task type (part of task IDs
// task-{run_id}:{type}:{index}, so never a colon).
var taskTypeName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// ValidateDefinition checks an activity definition (nil: none) where the
// config has one, at (routes[0].definition, schedules.triggers[0].definition):
// the shape of its task types, its bounds, its dedupe_key_strategy. It is
// the one rule for routes and triggers alike. Which task types exist is not
// checked: the worker knows its types (built-in webhook and noop, and its
// users' task types), and a run naming a type its worker lacks fails there.
func ValidateDefinition(at string, d *schemas.ActivityDefinition) error {
	if d == nil {
		return nil
	}
	for j, tk := range d.Tasks {
		// Only the name's shape, which is part of task IDs.
		if !taskTypeName.MatchString(tk.Type) {
			return fmt.Errorf("%s.tasks[%d].type: %q (webhook, noop, or a task type the worker registers: letters, digits, '_', '.', '-')", at, j, tk.Type)
		}
	}
	switch {
	case d.ActivityTimeoutSeconds < 0:
		return fmt.Errorf("%s.activity_timeout_seconds: %d", at, d.ActivityTimeoutSeconds)
	case d.MaxAttempts < 0:
		return fmt.Errorf("%s.max_attempts: %d", at, d.MaxAttempts)
	case d.ScheduleToCloseSeconds < 0:
		return fmt.Errorf("%s.schedule_to_close_seconds: %d", at, d.ScheduleToCloseSeconds)
	}
	switch d.DedupeKeyStrategy {
	case "", "skip", "catchup", "compress":
	default:
		return fmt.Errorf("%s.dedupe_key_strategy: %q (skip, catchup, compress)", at, d.DedupeKeyStrategy)
	}
	return nil
}

// ReusePolicy is the Temporal workflow ID reuse policy of a route.
type ReusePolicy string

const (
	// ReuseRejectDuplicate allows one execution per workflow ID for the
	// namespace's retention, whatever became of it. The default: an event
	// triggers an activity once.
	ReuseRejectDuplicate ReusePolicy = "reject_duplicate"
	// ReuseAllowDuplicateFailedOnly makes each redelivery (or replay) of an
	// event whose latest run failed, timed out, was cancelled or
	// terminated start exactly one new run; an open or completed run
	// never runs again. Each duplicate costs one DescribeWorkflowExecution.
	ReuseAllowDuplicateFailedOnly ReusePolicy = "allow_duplicate_failed_only"
	// ReuseAllowDuplicate does the same for any closed run, completed ones
	// too: each redelivery after the latest run closed starts exactly one
	// new run.
	ReuseAllowDuplicate ReusePolicy = "allow_duplicate"
)

// MayRerun says whether a started workflow can ever run again under the
// policy: then a duplicate of it is not finished at once but checked
// (LastRun), and a producer's repeat is always written. The one place the
// router, the operators' forecast and the producer client ask it.
func (p ReusePolicy) MayRerun() bool { return p != "" && p != ReuseRejectDuplicate }

// RerunsAfter says whether a workflow whose last run closed as run says
// runs again under the policy: allow_duplicate after any close,
// allow_duplicate_failed_only after a failure (failed, timed out,
// terminated, cancelled), reject_duplicate never.
func (p ReusePolicy) RerunsAfter(run Run) bool {
	switch p {
	case ReuseAllowDuplicate:
		return run.Closed
	case ReuseAllowDuplicateFailedOnly:
		return run.Closed && run.Failed
	}
	return false
}

// MayRerun says whether a started workflow of the route can ever run
// again, for the router's duplicates, the operators' forecast and the
// producer client: under an allow_* policy, for a start route. A signal
// route never delivers a delivered event again, whatever its policy
// (which governs only the start half of its SignalWithStart).
func (r *Route) MayRerun() bool { return r.Mode != ModeSignal && r.IDReusePolicy.MayRerun() }

// Route modes.
const (
	// ModeStart starts one workflow per event, activity-{id}:{event_id}
	// (or {scheduled_for}). The default.
	ModeStart = "start"
	// ModeSignal delivers each event once, as a signal, into the entity
	// workflow its workflow_id_template names, starting it if it is not
	// running (SignalWithStartWorkflowExecution). docs/signals.md.
	ModeSignal = "signal"
)

// Route maps events to one activity's workflow.
type Route struct {
	// ID is the activity ID: part of every workflow ID of this route,
	// activity-{id}:{event_id} (a signal route: of every delivery key,
	// signal-{id}:{event_id}). Never change it for a live route: that
	// changes every workflow ID and defeats deduplication.
	ID    string `yaml:"id"`
	Match Match  `yaml:"match"`
	// Mode is start (the default: one workflow per event) or signal (each
	// event delivered once into a long-lived entity workflow, named by
	// WorkflowIDTemplate, with SignalWithStart).
	Mode string `yaml:"mode"`
	// WorkflowIDTemplate (signal routes only, required there) names the
	// entity workflow an event goes to: literal text and the placeholders
	// {activity_id} and {data.<dotted path>} (IDTemplate), e.g.
	// "order-{data.order_id}".
	WorkflowIDTemplate string `yaml:"workflow_id_template"`
	// Signal (signal routes only) is the signal's name; default "event".
	Signal string `yaml:"signal"`
	// WorkflowType is the registered workflow name to start (for a signal
	// route: the entity workflow's, started when no run is open).
	WorkflowType string `yaml:"workflow_type"`
	TaskQueue    string `yaml:"task_queue"`
	// IDReusePolicy defaults to reject_duplicate for start routes. For a
	// signal route it governs the start half of SignalWithStart when the
	// entity's last run has closed, and defaults to allow_duplicate (an
	// event for a closed entity starts a new run of it);
	// allow_duplicate_failed_only starts one only after a failed run,
	// reject_duplicate never: the event is then dead-lettered
	// (temporal_permanent).
	IDReusePolicy ReusePolicy `yaml:"id_reuse_policy"`
	// Namespace is the Temporal namespace this route's workflows start
	// in; empty: the starter's (temporal.namespace). The ledger knows
	// workflow IDs, not namespaces: moving a live route to another
	// namespace does not start its already started events again there.
	Namespace string `yaml:"namespace"`
	// Definition, when set, is passed to the workflow with the event: the
	// tasks the shipped RunActivityWorkflow spawns.
	Definition *schemas.ActivityDefinition `yaml:"definition"`
	// tmpl is WorkflowIDTemplate, parsed by Validate.
	tmpl *IDTemplate
	// Key selects the second half of the workflow ID: "event_id" (default),
	// or "scheduled_for" for cron-like triggers, whose events carry the
	// nominal fire time in data.scheduled_for: the workflow ID is then
	// activity-{id}:{scheduled_for} with the time normalised to
	// 2006-01-02T15:04:05+00:00, so that a schedule fired twice for the same
	// slot (by two schedulers, or a retry) starts once.
	Key string `yaml:"key"`
}

// Match selects events by type and, optionally, source and fields of
// their data. Type "*" matches every type; a type ending in ".*" matches
// that prefix.
type Match struct {
	Type   string `yaml:"type"`
	Source string `yaml:"source"`
	// Fields, when set, are fields of the event's data that must all
	// match: "data.<dotted path>" to the value's text or a prefix and "*",
	// e.g. {"data.order.status": "paid", "data.region": "eu-*"}. A missing
	// field never matches (fieldmatch.go).
	Fields map[string]string `yaml:"fields"`
	fields []fieldMatch      // Fields, parsed by Validate
}

func (m *Match) matches(ev *eventid.Event) bool {
	if m.Source != "" && m.Source != ev.Source || !m.typeMatches(ev.Type) {
		return false
	}
	return len(m.Fields) == 0 || m.fieldsMatch(ev.Data)
}

func (m *Match) typeMatches(typ string) bool {
	switch {
	case m.Type == "*":
		return true
	case strings.HasSuffix(m.Type, ".*"):
		return strings.HasPrefix(typ, m.Type[:len(m.Type)-1])
	}
	return m.Type == typ
}

// Routes is a validated route table.
type Routes []Route

// Validate checks every route and fills defaults in place.
func (rs Routes) Validate() error {
	if len(rs) == 0 {
		return errors.New("routes: empty; dedup would start nothing")
	}
	seen := map[string]bool{}
	for i := range rs {
		r := &rs[i]
		at := fmt.Sprintf("routes[%d]", i)
		switch {
		case r.ID == "":
			return fmt.Errorf("%s.id: empty", at)
		case strings.ContainsAny(r.ID, ": \t\n"):
			return fmt.Errorf("%s.id: %q has a colon or white space, which would make workflow IDs ambiguous", at, r.ID)
		case seen[r.ID]:
			return fmt.Errorf("%s.id: %q used twice", at, r.ID)
		case r.Match.Type == "":
			return fmt.Errorf("%s.match.type: empty (use \"*\" for every type)", at)
		case r.WorkflowType == "":
			return fmt.Errorf("%s.workflow_type: empty", at)
		case r.TaskQueue == "":
			return fmt.Errorf("%s.task_queue: empty", at)
		}
		seen[r.ID] = true
		fs, err := parseFieldMatches(at+".match.fields", r.Match.Fields)
		if err != nil {
			return err
		}
		r.Match.fields = fs
		if err := r.validateMode(at); err != nil {
			return err
		}
		switch r.IDReusePolicy {
		case "":
			r.IDReusePolicy = ReuseRejectDuplicate
			if r.Mode == ModeSignal {
				r.IDReusePolicy = ReuseAllowDuplicate
			}
		case ReuseRejectDuplicate, ReuseAllowDuplicateFailedOnly, ReuseAllowDuplicate:
		default:
			return fmt.Errorf("%s.id_reuse_policy: %q (reject_duplicate, allow_duplicate_failed_only, allow_duplicate)", at, r.IDReusePolicy)
		}
		if err := ValidateDefinition(at+".definition", r.Definition); err != nil {
			return err
		}
		switch r.Key {
		case "":
			r.Key = KeyEventID
		case KeyEventID, KeyScheduledFor:
		default:
			return fmt.Errorf("%s.key: %q (event_id, scheduled_for)", at, r.Key)
		}
		if r.Mode == ModeSignal && r.Key != KeyEventID {
			return fmt.Errorf("%s.key: %q; a signal route delivers each event by its event ID (key event_id)", at, r.Key)
		}
	}
	// Signal routes that name one entity (the same template) must agree
	// on what it is: whichever event comes first starts it, and the
	// others' signals go into that run.
	for i := range rs {
		for j := i + 1; j < len(rs); j++ {
			a, b := &rs[i], &rs[j]
			if a.Mode != ModeSignal || b.Mode != ModeSignal || a.WorkflowIDTemplate != b.WorkflowIDTemplate {
				continue
			}
			if a.WorkflowType != b.WorkflowType || a.TaskQueue != b.TaskQueue || a.Signal != b.Signal || a.Namespace != b.Namespace {
				return fmt.Errorf("routes[%d] (%s) and routes[%d] (%s): both signal the entities of %s but with another workflow_type, task_queue, signal or namespace: "+
					"whichever event comes first starts the entity, and the other route's signals go into a run that does not read them", i, a.ID, j, b.ID, a.WorkflowIDTemplate)
			}
		}
	}
	return nil
}

// validateMode checks the mode and the fields that belong to it, and
// fills the signal route's defaults (signal name, parsed template).
func (r *Route) validateMode(at string) error {
	switch r.Mode {
	case "":
		r.Mode = ModeStart
	case ModeStart, ModeSignal:
	default:
		return fmt.Errorf("%s.mode: %q (start, signal)", at, r.Mode)
	}
	if r.Mode == ModeStart {
		switch {
		case r.WorkflowIDTemplate != "":
			return fmt.Errorf("%s.workflow_id_template: set on a start route (its workflow IDs are activity-%s:{event_id}); use mode: signal", at, r.ID)
		case r.Signal != "":
			return fmt.Errorf("%s.signal: set on a start route; use mode: signal", at)
		}
		r.tmpl = nil
		return nil
	}
	if r.WorkflowIDTemplate == "" {
		return fmt.Errorf("%s.workflow_id_template: empty; a signal route needs the entity workflow's ID, e.g. \"order-{data.order_id}\"", at)
	}
	t, err := ParseIDTemplate(r.WorkflowIDTemplate)
	if err != nil {
		return fmt.Errorf("%s.workflow_id_template: %w", at, err)
	}
	r.tmpl = &t
	if r.Signal == "" {
		r.Signal = schemas.DefaultSignalName
	}
	if hasControl(r.Signal) || len(r.Signal) > MaxWorkflowIDBytes {
		return fmt.Errorf("%s.signal: %q has a control character or is over %d bytes", at, r.Signal, MaxWorkflowIDBytes)
	}
	if r.Definition != nil {
		return fmt.Errorf("%s.definition: a signal route starts its entity workflow without input; the definition would be lost", at)
	}
	return nil
}

// Template is a signal route's parsed workflow ID template (nil for a
// start route). A route that was not validated has it parsed on demand.
func (r *Route) Template() (*IDTemplate, error) {
	if r.Mode != ModeSignal {
		return nil, nil
	}
	if r.tmpl != nil {
		return r.tmpl, nil
	}
	t, err := ParseIDTemplate(r.WorkflowIDTemplate)
	if err != nil {
		return nil, fmt.Errorf("route %s: workflow_id_template: %w", r.ID, err)
	}
	return &t, nil
}

// Match returns the routes an event triggers, in table order.
func (rs Routes) Match(ev *eventid.Event) []*Route {
	var buf [8]*Route // on the stack: the result is allocated once, at its size
	out := rs.appendMatch(buf[:0], ev)
	if len(out) == 0 {
		return nil
	}
	return slices.Clone(out)
}

// appendMatch appends the routes ev triggers, in table order, to out.
func (rs Routes) appendMatch(out []*Route, ev *eventid.Event) []*Route {
	for i := range rs {
		if rs[i].Match.matches(ev) {
			out = append(out, &rs[i])
		}
	}
	return out
}
