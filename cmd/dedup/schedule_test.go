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
	if code, _, err := dedup("schedule", "pause", "weekly", "--config", cfg); code == 0 || !strings.Contains(err, `no trigger "weekly" (schedules.triggers: nightly)`) {
		t.Errorf("unknown trigger: %d %s", code, err)
	}
	for _, args := range [][]string{{"schedule"}, {"schedule", "stop", "nightly"}, {"schedule", "pause"}} {
		if code, _, err := dedup(append(args, "--config", cfg)...); code != 2 || !strings.Contains(err, "usage") {
			t.Errorf("%v: %d %s, want usage", args, code, err)
		}
	}
}
