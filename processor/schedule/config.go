package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
)

// Policy is a trigger's misfire policy: what happens to slots that passed
// by more than the misfire threshold before the scheduler decided them
// (dedup was down, overloaded, or the trigger was paused).
type Policy string

const (
	// Skip discards missed slots (counted, never run).
	Skip Policy = "skip"
	// Catchup runs the most recent CatchupLimit missed slots late, oldest
	// first, each with its own workflow ID; older ones are counted.
	Catchup Policy = "catchup"
	// Compress runs one workflow, at the latest due slot, whose window
	// covers every missed slot since the last run.
	Compress Policy = "compress"
)

// Overlap is what a trigger does with a slot that comes due while its
// previous run is still open: Temporal's ScheduleOverlapPolicy, of which
// dedup has two.
type Overlap string

const (
	// OverlapSkip starts nothing while the trigger's previous run is open
	// (ScheduleOverlapPolicy.SKIP): the slot is counted skipped_overlap
	// and logged, and a decision starts one run at most. The default under
	// misfire_policy skip, which the seed contract maps to it.
	OverlapSkip Overlap = "skip"
	// OverlapAllowAll starts every slot whatever runs are open
	// (ScheduleOverlapPolicy.ALLOW_ALL). The default under catchup and
	// compress, whose runs each cover their own interval and which promise
	// to run the slots they replay or fold.
	OverlapAllowAll Overlap = "allow_all"
)

// DefaultOverlap is a misfire policy's overlap policy.
func DefaultOverlap(p Policy) Overlap {
	if p == Skip {
		return OverlapSkip
	}
	return OverlapAllowAll
}

// Defaults and bounds.
const (
	DefaultCatchupLimit     = 10
	MaxCatchupLimit         = 100
	DefaultMisfireThreshold = 60 * time.Second
	DefaultTick             = time.Second
)

// Config is the config file's schedules section.
type Config struct {
	// Tick is how often each replica looks at the triggers' cursors (one
	// short transaction per tick for all triggers). A slot fires at most
	// a tick after its time, plus the start.
	Tick     time.Duration `yaml:"tick"`
	Triggers []Trigger     `yaml:"triggers"`
}

// Trigger is one scheduled activity: a cron-like trigger whose slots start
// RunActivityWorkflow (or WorkflowType) with the workflow ID
// activity-{activity_id}:{scheduled_for}.
type Trigger struct {
	// Name identifies the trigger's cursor in PostgreSQL and in `dedup
	// schedule pause|resume NAME`; defaults to ActivityID. Renaming a
	// trigger starts it afresh (a new cursor): its old cursor's slots are
	// not replayed.
	Name string `yaml:"name"`
	// ActivityID is the first half of every workflow ID. Never change it
	// for a live trigger: every later slot gets another workflow ID. A
	// route with key scheduled_for and the same ID names the same
	// workflows: whichever fires a slot first starts it, the other is a
	// duplicate.
	ActivityID string `yaml:"activity_id"`
	// Cron is the schedule: 5 fields (minute hour day-of-month month
	// day-of-week), 6 with seconds first, or a descriptor (@hourly,
	// @daily, @every 10m).
	Cron string `yaml:"cron"`
	// TimeZone is the IANA zone the cron fields are read in (default
	// UTC); workflow IDs are always in UTC.
	TimeZone string `yaml:"time_zone"`
	// MisfirePolicy is skip, catchup or compress. Required: it must match
	// Definition.DedupeKeyStrategy.
	MisfirePolicy Policy `yaml:"misfire_policy"`
	// CatchupLimit is how many missed slots catchup replays at most
	// (default 10, at most 100). Only for misfire_policy catchup.
	CatchupLimit *int `yaml:"catchup_limit"`
	// MisfireThreshold is how late a slot may be decided and still count
	// as on time (default 60s). Keep it above Tick.
	MisfireThreshold time.Duration `yaml:"misfire_threshold"`
	// Overlap is skip or allow_all: whether a slot starts while the
	// trigger's previous run is still open. Default: skip under
	// misfire_policy skip, allow_all otherwise (DefaultOverlap). Skip costs
	// a DescribeWorkflowExecution of the previous run per slot due.
	Overlap      Overlap `yaml:"overlap"`
	WorkflowType string  `yaml:"workflow_type"`
	TaskQueue    string  `yaml:"task_queue"`
	// Namespace is the Temporal namespace the runs start in; empty: the
	// starter's (temporal.namespace). A route with key scheduled_for that
	// should agree with the trigger must name the same one.
	Namespace string `yaml:"namespace"`
	// Definition is passed to the workflow (the tasks RunActivityWorkflow
	// spawns) and must say dedupe_key_strategy. Its task types are checked
	// as routes' are, by shape only: any type a worker registers.
	Definition *schemas.ActivityDefinition `yaml:"definition"`

	cron *Cron // parsed by Validate
}

// Limit is the catch-up limit in effect.
func (t *Trigger) Limit() int {
	if t.CatchupLimit == nil {
		return DefaultCatchupLimit
	}
	return *t.CatchupLimit
}

// Schedule is the parsed Cron (after Validate).
func (t *Trigger) Schedule() *Cron { return t.cron }

// DefaultConfig has no triggers.
func DefaultConfig() Config { return Config{Tick: DefaultTick} }

// Validate names the first invalid field, fills defaults and parses the
// schedules.
func (c *Config) Validate() error {
	if c.Tick <= 0 {
		return fmt.Errorf("schedules.tick: %s, want > 0", c.Tick)
	}
	names := map[string]bool{}
	activities := map[string]int{} // activity_id: the trigger that has it
	for i := range c.Triggers {
		t := &c.Triggers[i]
		at := fmt.Sprintf("schedules.triggers[%d]", i)
		named := t.Name != ""
		if !named {
			t.Name = t.ActivityID
		}
		if t.MisfireThreshold == 0 {
			t.MisfireThreshold = DefaultMisfireThreshold
		}
		switch {
		case t.ActivityID == "":
			return fmt.Errorf("%s.activity_id: empty", at)
		case strings.ContainsAny(t.ActivityID, ": \t\n"):
			return fmt.Errorf("%s.activity_id: %q has a colon or white space, which would make workflow IDs ambiguous", at, t.ActivityID)
		}
		if j, ok := activities[t.ActivityID]; ok {
			// The workflow ID is activity-{activity_id}:{scheduled_for}: the
			// slots the two share would be one workflow, started by
			// whichever fired first, and the other's run would be a
			// duplicate of it, counted on time. Checked before the names:
			// a trigger without one is named after its activity_id, and
			// what was written twice is the activity_id.
			return fmt.Errorf("%s.activity_id: %q of trigger %q is also schedules.triggers[%d] (%q)'s: their slots would share workflow IDs; give each trigger its own activity_id",
				at, t.ActivityID, t.Name, j, c.Triggers[j].Name)
		}
		switch {
		case names[t.Name] && named:
			return fmt.Errorf("%s.name: %q used twice", at, t.Name)
		case names[t.Name]:
			return fmt.Errorf("%s.name: empty, so the trigger is named after its activity_id %q, which is another trigger's name; give it a name of its own", at, t.Name)
		case t.WorkflowType == "":
			return fmt.Errorf("%s.workflow_type: empty", at)
		case t.TaskQueue == "":
			return fmt.Errorf("%s.task_queue: empty", at)
		case t.MisfireThreshold <= c.Tick:
			return fmt.Errorf("%s.misfire_threshold: %s, want more than schedules.tick (%s): a slot is decided up to a tick late", at, t.MisfireThreshold, c.Tick)
		}
		names[t.Name] = true
		activities[t.ActivityID] = i
		switch t.MisfirePolicy {
		case Skip, Catchup, Compress:
		case "":
			return fmt.Errorf("%s.misfire_policy: empty, want skip, catchup or compress", at)
		default:
			return fmt.Errorf("%s.misfire_policy: %q, want skip, catchup or compress", at, t.MisfirePolicy)
		}
		switch t.Overlap {
		case "":
			t.Overlap = DefaultOverlap(t.MisfirePolicy)
		case OverlapSkip, OverlapAllowAll:
		default:
			return fmt.Errorf("%s.overlap: %q, want skip or allow_all (buffer_one, buffer_all, cancel_other and terminate_other are not implemented)", at, t.Overlap)
		}
		if t.CatchupLimit != nil {
			switch n := *t.CatchupLimit; {
			case t.MisfirePolicy != Catchup:
				return fmt.Errorf("%s.catchup_limit: %d on a trigger with misfire_policy %q; only catchup replays missed slots", at, n, t.MisfirePolicy)
			case n < 1 || n > MaxCatchupLimit:
				return fmt.Errorf("%s.catchup_limit: %d, want 1 to %d", at, n, MaxCatchupLimit)
			}
		}
		if err := t.checkStrategy(at); err != nil {
			return err
		}
		// The routes' rule: any task type a worker may register (the
		// worker is where types are known), in the shape of task IDs.
		if err := decide.ValidateDefinition(at+".definition", t.Definition); err != nil {
			return err
		}
		cr, err := ParseCron(t.Cron, t.TimeZone)
		if err != nil {
			if strings.HasPrefix(err.Error(), "time zone") {
				return fmt.Errorf("%s.time_zone: %w", at, err)
			}
			return fmt.Errorf("%s.cron: %w", at, err)
		}
		if cr.Next(time.Now()).IsZero() {
			return fmt.Errorf("%s.cron: %q has no slot in the next five years", at, t.Cron)
		}
		t.cron = cr
	}
	return nil
}

// checkStrategy is the seed contract's rule: the activity definition's
// dedupe_key_strategy must match the trigger's misfire_policy.
func (t *Trigger) checkStrategy(at string) error {
	if t.Definition == nil || t.Definition.DedupeKeyStrategy == "" {
		return fmt.Errorf("%s.definition.dedupe_key_strategy: empty; it must say how the activity handles missed runs and match %s.misfire_policy %q",
			at, at, t.MisfirePolicy)
	}
	if s := t.Definition.DedupeKeyStrategy; s != string(t.MisfirePolicy) {
		return fmt.Errorf("%s.definition.dedupe_key_strategy %q does not match %s.misfire_policy %q", at, s, at, t.MisfirePolicy)
	}
	return nil
}

// Trigger returns the named trigger, or an error naming the known ones.
func (c *Config) Trigger(name string) (*Trigger, error) {
	var known []string
	for i := range c.Triggers {
		if c.Triggers[i].Name == name {
			return &c.Triggers[i], nil
		}
		known = append(known, c.Triggers[i].Name)
	}
	if len(known) == 0 {
		return nil, errors.New("no trigger is configured (schedules.triggers)")
	}
	return nil, fmt.Errorf("no trigger %q (schedules.triggers: %s)", name, strings.Join(known, ", "))
}
