package schedule

import (
	"strings"
	"testing"
	"time"

	"github.com/dedupio/dedup/schemas"
)

func TestConfigValidation(t *testing.T) {
	ok := func() Trigger {
		return Trigger{ActivityID: "report", Cron: "0 9 * * *", MisfirePolicy: Compress, WorkflowType: "W", TaskQueue: "q",
			Definition: &schemas.ActivityDefinition{DedupeKeyStrategy: "compress"}}
	}
	n := func(v int) *int { return &v }
	cases := []struct {
		name string
		mod  func(*Trigger)
		want []string // every part must be in the error
	}{
		{"strategy mismatch", func(tr *Trigger) { tr.Definition.DedupeKeyStrategy = "skip" },
			[]string{`schedules.triggers[0].definition.dedupe_key_strategy "skip"`, `schedules.triggers[0].misfire_policy "compress"`}},
		{"strategy missing", func(tr *Trigger) { tr.Definition = nil },
			[]string{"schedules.triggers[0].definition.dedupe_key_strategy: empty", `misfire_policy "compress"`}},
		{"unknown policy", func(tr *Trigger) { tr.MisfirePolicy, tr.Definition.DedupeKeyStrategy = "retry", "retry" },
			[]string{`schedules.triggers[0].misfire_policy: "retry", want skip, catchup or compress`}},
		{"no policy", func(tr *Trigger) { tr.MisfirePolicy = "" }, []string{"schedules.triggers[0].misfire_policy: empty"}},
		{"N zero", func(tr *Trigger) {
			tr.MisfirePolicy, tr.Definition.DedupeKeyStrategy, tr.CatchupLimit = Catchup, "catchup", n(0)
		},
			[]string{"schedules.triggers[0].catchup_limit: 0, want 1 to 100"}},
		{"N over the cap", func(tr *Trigger) {
			tr.MisfirePolicy, tr.Definition.DedupeKeyStrategy, tr.CatchupLimit = Catchup, "catchup", n(101)
		},
			[]string{"schedules.triggers[0].catchup_limit: 101, want 1 to 100"}},
		{"N on skip", func(tr *Trigger) {
			tr.MisfirePolicy, tr.Definition.DedupeKeyStrategy, tr.CatchupLimit = Skip, "skip", n(5)
		},
			[]string{`schedules.triggers[0].catchup_limit: 5 on a trigger with misfire_policy "skip"`}},
		{"N on compress", func(tr *Trigger) { tr.CatchupLimit = n(10) },
			[]string{`schedules.triggers[0].catchup_limit: 10 on a trigger with misfire_policy "compress"`}},
		{"bad cron", func(tr *Trigger) { tr.Cron = "0 25 * * *" }, []string{"schedules.triggers[0].cron"}},
		{"zone in the spec", func(tr *Trigger) { tr.Cron = "CRON_TZ=UTC 0 9 * * *" }, []string{"schedules.triggers[0].cron", "time_zone"}},
		{"bad zone", func(tr *Trigger) { tr.TimeZone = "Mars/Olympus" }, []string{"schedules.triggers[0].time_zone"}},
		{"never fires", func(tr *Trigger) { tr.Cron = "0 9 30 2 *" }, []string{"schedules.triggers[0].cron", "no slot"}},
		{"threshold under the tick", func(tr *Trigger) { tr.MisfireThreshold = 500 * time.Millisecond },
			[]string{"schedules.triggers[0].misfire_threshold: 500ms, want more than schedules.tick (1s)"}},
		{"activity id", func(tr *Trigger) { tr.ActivityID = "a:b" }, []string{"schedules.triggers[0].activity_id"}},
		{"no task queue", func(tr *Trigger) { tr.TaskQueue = "" }, []string{"schedules.triggers[0].task_queue"}},
		{"overlap", func(tr *Trigger) { tr.Overlap = "buffer_one" },
			[]string{`schedules.triggers[0].overlap: "buffer_one", want skip or allow_all`, "not implemented"}},
		{"task type shape", func(tr *Trigger) { tr.Definition.Tasks = []schemas.TaskSpec{{Type: "send:email"}} },
			[]string{`schedules.triggers[0].definition.tasks[0].type: "send:email"`, "a task type the worker registers"}},
		{"negative timeout", func(tr *Trigger) { tr.Definition.ActivityTimeoutSeconds = -1 },
			[]string{"schedules.triggers[0].definition.activity_timeout_seconds: -1"}},
	}
	for _, c := range cases {
		tr := ok()
		c.mod(&tr)
		cfg := Config{Tick: time.Second, Triggers: []Trigger{tr}}
		err := cfg.Validate()
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: got %v, want it to say %s", c.name, err, w)
			}
		}
	}
	// Defaults, and two triggers with one name.
	cfg := Config{Tick: time.Second, Triggers: []Trigger{ok()}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if tr := cfg.Triggers[0]; tr.Name != "report" || tr.MisfireThreshold != time.Minute || tr.Limit() != 10 || tr.Overlap != OverlapAllowAll {
		t.Errorf("defaults: %+v", tr)
	}
	// Two triggers named alike (their activities differ).
	first, again := ok(), ok()
	first.Name, again.Name, again.ActivityID = "report", "report", "report-eu"
	cfg = Config{Tick: time.Second, Triggers: []Trigger{first, again}}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `schedules.triggers[1].name: "report" used twice`) {
		t.Errorf("duplicate name: %v", err)
	}
	// Two triggers, one activity: their slots would have the same workflow
	// IDs (the second's runs would be duplicates of the first's).
	second := ok()
	second.Name, second.Cron = "hourly", "0 * * * *"
	cfg = Config{Tick: time.Second, Triggers: []Trigger{ok(), second}}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `schedules.triggers[1].activity_id: "report"`) ||
		!strings.Contains(err.Error(), `"hourly"`) || !strings.Contains(err.Error(), `schedules.triggers[0] ("report")`) {
		t.Errorf("shared activity_id: %v", err)
	}
	// Any task type a worker may register (its shape only): routes accept
	// them, and so do triggers; the worker is where types are known.
	anyType := ok()
	anyType.Definition.Tasks = []schemas.TaskSpec{{Type: "email"}, {Type: "billing.invoice-v2"}, {Type: "webhook"}, {Type: "noop"}}
	cfg = Config{Tick: time.Second, Triggers: []Trigger{anyType}}
	if err := cfg.Validate(); err != nil {
		t.Errorf("a task type the worker registers: %v", err)
	}
	cfg = Config{Tick: 0}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "schedules.tick") {
		t.Errorf("tick: %v", err)
	}
	cfg = Config{Tick: time.Second, Triggers: []Trigger{ok()}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.Trigger("nope"); err == nil || !strings.Contains(err.Error(), "report") {
		t.Errorf("unknown trigger: %v", err)
	}
}

// Two triggers without names share an activity_id: each one's name
// defaults to its activity_id, but what the operator wrote twice is the
// activity_id, so that is what the error names.
func TestUnnamedTriggersSharingAnActivityIDAreReportedAsSharingIt(t *testing.T) {
	tr := Trigger{ActivityID: "report", Cron: "0 9 * * *", MisfirePolicy: Compress, WorkflowType: "W", TaskQueue: "q",
		Definition: &schemas.ActivityDefinition{DedupeKeyStrategy: "compress"}}
	cfg := Config{Tick: time.Second, Triggers: []Trigger{tr, tr}}
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), `schedules.triggers[1].activity_id: "report"`) ||
		!strings.Contains(err.Error(), `schedules.triggers[0]`) {
		t.Fatalf("two unnamed triggers with activity_id report: %v, want schedules.triggers[1].activity_id named as schedules.triggers[0]'s", err)
	}
	if strings.Contains(err.Error(), "used twice") {
		t.Errorf("two unnamed triggers with activity_id report: %v, reported as a name used twice although neither has a name", err)
	}
}
