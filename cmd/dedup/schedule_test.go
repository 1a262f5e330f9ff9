package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `dedup schedule pause|resume NAME` names the trigger it does not know
// (before touching PostgreSQL), and anything else is a usage error.
func TestScheduleCommand(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "dedup.yaml")
	if err := os.WriteFile(cfg, []byte(`
kafka: {brokers: [b:9092], group: g, topics: [t], reset_offset: earliest}
routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]
postgres: {url: "postgres://u@127.0.0.1:1/d"}
schedules:
  triggers:
    - {name: nightly, activity_id: report, cron: "0 2 * * *", misfire_policy: skip, workflow_type: W, task_queue: q,
       definition: {dedupe_key_strategy: skip}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"schedule", "pause", "weekly", "--config", cfg}); err == nil || !strings.Contains(err.Error(), `no trigger "weekly" (schedules.triggers: nightly)`) {
		t.Errorf("unknown trigger: %v", err)
	}
	for _, args := range [][]string{{"schedule"}, {"schedule", "stop", "nightly"}, {"schedule", "pause"}} {
		if err := run(append(args, "--config", cfg)); err == nil || !strings.Contains(err.Error(), "usage") {
			t.Errorf("%v: %v, want usage", args, err)
		}
	}
}
