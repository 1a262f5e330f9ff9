package integration

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/worker"
)

// A re-run retries what failed, end to end: routes under
// allow_duplicate_failed_only with one webhook task each, a real HTTP
// endpoint that counts requests, the router, and redeliveries.
//
// Generation 1 fails (the endpoint answers 400, or 503 until the task's
// attempts are spent); the operator fixes the endpoint (or points the route
// at a new URL) and the event is delivered again; the router starts
// generation 2, which must call the endpoint exactly once more and complete,
// whether the redelivered copy carries the same CloudEvents time or another
// one. Within generation 1 nothing changes: the 400 is sent once, the 503
// max_attempts times, under the step key. The endpoint answered those
// failures, so generation 2 calls under a new Idempotency-Key, the step key
// at epoch 1 ({key}:1): an endpoint with Stripe's semantics would replay
// the failure it saved for the old key (worker/adv_webhook_rerun_test.go).
func TestRerunRetriesWhatFailed(t *testing.T) {
	e := newEnv(t, 1)
	const queue = "wk-rerun-retries"
	e.startWorker(queue)
	s := newSink(t)

	type rerunCase struct {
		name        string
		first       int  // the endpoint's answer in generation 1
		maxAttempts int  // the definition's max_attempts (0: 10)
		otherTime   bool // the redelivered copy carries another CloudEvents time
		moveTo      string
		calls1      int // requests in generation 1
	}
	cases := []rerunCase{
		{name: "a", first: http.StatusBadRequest, calls1: 1},
		{name: "b", first: http.StatusBadRequest, otherTime: true, calls1: 1},
		{name: "c", first: http.StatusServiceUnavailable, maxAttempts: 2, otherTime: true, calls1: 2},
		// The operator's fix is a new URL in the route's definition.
		{name: "d", first: http.StatusBadRequest, moveTo: "/d-fixed", calls1: 1},
	}
	cfg := e.config()
	cfg.Routes = nil
	for _, c := range cases {
		s.set("/"+c.name, c.first)
		cfg.Routes = append(cfg.Routes, decide.Route{ID: "rerun-" + c.name, Match: decide.Match{Type: "rerun." + c.name},
			WorkflowType: worker.RunActivityWorkflowName, TaskQueue: queue, IDReusePolicy: decide.ReuseAllowDuplicateFailedOnly,
			Definition: &schemas.ActivityDefinition{ActivityTimeoutSeconds: 5, MaxAttempts: c.maxAttempts,
				Tasks: []schemas.TaskSpec{{Type: "webhook", URL: s.url("/" + c.name)}}}})
	}
	wid := func(c rerunCase) string { return "activity-rerun-" + c.name + ":evt-rerun-" + c.name }
	deliver := func(round int) {
		t.Helper()
		var recs []*kgo.Record
		for _, c := range cases {
			at := "2026-03-01T09:00:00Z"
			if round > 1 && c.otherTime {
				at = "2026-03-01T09:05:00Z" // a redelivered copy, re-stamped
			}
			recs = append(recs, &kgo.Record{Topic: e.topic, Partition: 0, Value: []byte(fmt.Sprintf(
				`{"specversion":"1.0","id":"evt-rerun-%s","type":"rerun.%s","source":"lab","time":%q,"data":{"user":"u1"}}`, c.name, c.name, at))})
		}
		if err := e.kcl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		r := e.startRouter(cfg)
		e.waitCommitted(2 * time.Minute)
		r.stop(t)
	}
	// settle waits until every case's workflow ID has closed round runs
	// (or a minute passed) and returns their statuses.
	settle := func(round int) map[string]string {
		t.Helper()
		var runs map[string]string
		eventually(time.Minute, func() bool {
			runs = e.runsByStatus()
			for _, c := range cases {
				sts := runs[wid(c)]
				if strings.Count(sts, ",")+1 != round || strings.Contains(sts, "running") || sts == "" {
					return false
				}
			}
			return true
		})
		return runs
	}

	deliver(1)
	runs := settle(1)
	for _, c := range cases {
		if runs[wid(c)] != "failed" {
			t.Fatalf("case %s, generation 1: runs [%s], want [failed]", c.name, runs[wid(c)])
		}
		if n, keys := s.at("/" + c.name); n != c.calls1 || len(keys) != 1 {
			t.Fatalf("case %s, generation 1: %d requests under keys %v, want %d under one key", c.name, n, keys, c.calls1)
		}
	}

	// The operator fixes the endpoints; one route moves to a new URL.
	for _, c := range cases {
		s.set("/"+c.name, http.StatusOK)
	}
	for i, c := range cases {
		if c.moveTo != "" {
			def := *cfg.Routes[i].Definition
			def.Tasks = []schemas.TaskSpec{{Type: "webhook", URL: s.url(c.moveTo)}}
			cfg.Routes[i].Definition = &def
		}
	}
	deliver(2)
	runs = settle(2)
	for _, c := range cases {
		if got := runs[wid(c)]; got != "failed,completed" {
			t.Errorf("case %s, generation 2: runs [%s], want [failed,completed] (the re-run retries what failed)", c.name, got)
		}
		path := "/" + c.name
		want := c.calls1 + 1
		if c.moveTo != "" {
			path, want = c.moveTo, 1
			if n, _ := s.at("/" + c.name); n != c.calls1 {
				t.Errorf("case %s: the old URL got %d requests, want %d (generation 1's only)", c.name, n, c.calls1)
			}
		}
		n, keys := s.at(path)
		if n != want || s.effectsAt(path) != 1 {
			t.Errorf("case %s: %s got %d requests (%d effects) under keys %v, want %d and 1 effect (exactly one more call)",
				c.name, path, n, s.effectsAt(path), keys, want)
		}
		key := worker.StepKey(worker.TaskID(worker.RunID(wid(c)), "webhook", 0), "post")
		wantKeys := []string{key, key + ":1"} // generation 1's, generation 2's (sorted)
		if c.moveTo != "" {
			wantKeys = wantKeys[1:]
			if _, old := s.at("/" + c.name); fmt.Sprint(old) != fmt.Sprint([]string{key}) {
				t.Errorf("case %s: the old URL got keys %v, want the step key %s", c.name, old, key)
			}
		}
		if fmt.Sprint(keys) != fmt.Sprint(wantKeys) {
			t.Errorf("case %s: keys %v, want %v (the step key in generation 1, at epoch 1 in generation 2)", c.name, keys, wantKeys)
		}
		if status, errText := e.runRow(wid(c)); status != "completed" {
			t.Errorf("case %s: activity_runs %s (%q), want completed", c.name, status, errText)
		}
		if got := e.attempts(wid(c)); got != "failed,completed" {
			t.Errorf("case %s: attempts %q, want failed,completed", c.name, got)
		}
	}
}
