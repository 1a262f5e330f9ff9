package integration

import (
	"testing"
	"time"

	"github.com/dedupio/dedup/internal/demo/workload"
)

// A replay ends the records the ledger knows without deciding them again
// (processor/known.go): no Temporal call, each of their intents counted a
// duplicate, one execution per workflow ID. A route added since is a
// changed deciding configuration: the next replay decides every record
// again and starts the new route's workflows, once each.
func TestAReplayEndsKnownRecordsAndDecidesThemAgainAfterTheRoutesChanged(t *testing.T) {
	e := newEnv(t, 2)
	w := workload.Generate(workload.Spec{Topic: e.topic, Partitions: 2, Records: 3000, DupRatio: 0.2, Seed: 43, IDPrefix: "known-"})
	e.produce(w)
	two := e.config()
	two.Routes = two.Routes[:2] // order-confirmation and welcome-email: reject_duplicate
	want := w.CountType(workload.TypeOrder) + w.CountType(workload.TypeSignup)

	pass := func(name string, cfg func() *router) *router {
		t.Helper()
		began := time.Now()
		r := cfg()
		e.waitCommitted(3 * time.Minute)
		r.stop(t)
		t.Logf("%s: %s, records %v, known %v, intents new %v duplicate %v redrive %v, starts %v",
			name, time.Since(began).Round(time.Millisecond), counter(r.reg, "dedup_records_total", "", ""),
			counter(r.reg, "dedup_records_known_total", "", ""), counter(r.reg, "dedup_intents_total", "outcome", "new"),
			counter(r.reg, "dedup_intents_total", "outcome", "duplicate"), counter(r.reg, "dedup_intents_total", "outcome", "redrive"),
			counter(r.reg, "dedup_workflow_starts_total", "", ""))
		return r
	}
	calls := func(r *router) float64 {
		return counter(r.reg, "dedup_workflow_starts_total", "", "") + counter(r.reg, "dedup_workflow_start_errors_total", "", "")
	}
	intents := func(r *router) float64 {
		return counter(r.reg, "dedup_intents_total", "outcome", "new") + counter(r.reg, "dedup_intents_total", "outcome", "redrive") +
			counter(r.reg, "dedup_intents_total", "outcome", "duplicate")
	}

	first := pass("first pass", func() *router { return e.startRouter(two) })
	execs := e.executions(want)
	if len(execs) != want {
		t.Fatalf("after the first pass: %d workflow IDs in Temporal, want %d", len(execs), want)
	}

	e.resetToEarliest()
	replay := pass("replay", func() *router { return e.startRouter(two) })
	if n := calls(replay); n != 0 {
		t.Errorf("the replay made %v Temporal calls, want 0", n)
	}
	known := counter(replay.reg, "dedup_records_known_total", "", "")
	// The polls decided before the replay's first claim showed a replay
	// are decided; a copy at another offset is never known (its rows are
	// its original's).
	if known == 0 || known > float64(len(w.Records)-w.Duplicates) {
		t.Errorf("the replay ended %v of %d records as known, want some, and none of the %d copies", known, len(w.Records), w.Duplicates)
	}
	if got, was := counter(replay.reg, "dedup_intents_total", "outcome", "duplicate"), intents(first); got != was {
		t.Errorf("the replay counted %v duplicate intents, want the first pass's %v intents", got, was)
	}
	if execs := e.executions(want); len(execs) != want {
		t.Errorf("after the replay: %d workflow IDs in Temporal, want %d", len(execs), want)
	}

	// The routes change (crm-sync, allow_duplicate_failed_only, added):
	// every record is decided again, and its workflows start.
	e.resetToEarliest()
	all := pass("replay with a route added", func() *router { return e.startRouter(e.config()) })
	if n := counter(all.reg, "dedup_records_known_total", "", ""); n != 0 {
		t.Errorf("after the routes changed, %v records were ended as known, want 0", n)
	}
	signups := w.CountType(workload.TypeSignup)
	if n := counter(all.reg, "dedup_workflow_starts_total", "result", "started"); n != float64(signups) {
		t.Errorf("the route added started %v workflows, want %d (one per sign-up)", n, signups)
	}
	e.checkExactlyOnce(w, expectedWorkflows(w))

}
