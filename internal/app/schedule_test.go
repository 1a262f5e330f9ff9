package app

import (
	"strings"
	"testing"

	"github.com/dedupio/dedup/internal/config"
)

// `dedup validate` names the triggers it checked, with their schedule and
// policies, or says there are none.
func TestCheckedTriggers(t *testing.T) {
	base := `
kafka: {brokers: [b:9092], group: g, topics: [t], reset_offset: earliest}
routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]
postgres: {url: "postgres://u@127.0.0.1:1/d"}
`
	cfg, err := config.Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if got := CheckedTriggers(cfg); got != "no triggers" {
		t.Errorf("no schedules: %q", got)
	}
	cfg, err = config.Parse([]byte(base + `
schedules:
  triggers:
    - {name: nightly, activity_id: report, cron: "0 2 * * *", time_zone: America/New_York, misfire_policy: skip,
       workflow_type: W, task_queue: q, definition: {dedupe_key_strategy: skip}}
    - {activity_id: sync, cron: "@every 10m", misfire_policy: catchup, workflow_type: W, task_queue: q,
       definition: {dedupe_key_strategy: catchup, tasks: [{type: billing.sync}]}}
`))
	if err != nil {
		t.Fatal(err)
	}
	got := CheckedTriggers(cfg)
	for _, want := range []string{"2 triggers: ", `nightly ("0 2 * * *" America/New_York, misfire skip, overlap skip)`,
		`sync ("@every 10m" UTC, misfire catchup, overlap allow_all)`} {
		if !strings.Contains(got, want) {
			t.Errorf("%q, want it to say %s", got, want)
		}
	}
}
