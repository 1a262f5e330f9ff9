package integration

import (
	"context"
	"testing"
	"time"

	"github.com/dedupio/dedup/internal/workload"
	"github.com/dedupio/dedup/sink/ledger"
)

// TestExactlyOnceWithTwoRouters is the end-to-end check: 10,000
// events over 8 partitions, 30% duplicates (identical and ID-less re-sends,
// some to other partitions) plus conflicts, consumed by two routers in one
// group. Then the group is reset to the earliest offsets and consumed again.
func TestExactlyOnceWithTwoRouters(t *testing.T) {
	e := newEnv(t, 8)
	w := workload.Generate(workload.Spec{Topic: e.topic, Partitions: 8, Records: 10000, DupRatio: 0.30,
		Conflicts: 25, CrossPartition: 0.2, Seed: 1, IDPrefix: "e2e-"})
	want := expectedWorkflows(w)
	t.Logf("workload: %d records, %d unique events (%d order, %d signup, %d unrouted), %d duplicates, %d conflicts -> %d workflows",
		len(w.Records), len(w.Unique), w.CountType(workload.TypeOrder), w.CountType(workload.TypeSignup),
		w.CountType(workload.TypeUnrouted), w.Duplicates, w.Conflicts, want)
	e.produce(w)

	began := time.Now()
	r1 := e.startRouter(e.config())
	r2 := e.startRouter(e.config())
	e.waitCommitted(6 * time.Minute)
	t.Logf("first pass: all offsets committed after %s", time.Since(began).Round(time.Millisecond))
	r1.stop(t)
	r2.stop(t)
	t.Logf("routers stopped after %s", time.Since(began).Round(time.Millisecond))

	started := counter(r1.reg, "dedup_workflow_starts_total", "result", "started") + counter(r2.reg, "dedup_workflow_starts_total", "result", "started")
	already := counter(r1.reg, "dedup_workflow_starts_total", "result", "already_started") + counter(r2.reg, "dedup_workflow_starts_total", "result", "already_started")
	dups := counter(r1.reg, "dedup_intents_total", "outcome", "duplicate") + counter(r2.reg, "dedup_intents_total", "outcome", "duplicate")
	records := counter(r1.reg, "dedup_records_total", "", "") + counter(r2.reg, "dedup_records_total", "", "")
	t.Logf("routers: records=%v started=%v already_started=%v duplicate_intents=%v (r1 started %v, r2 started %v)",
		records, started, already, dups,
		counter(r1.reg, "dedup_workflow_starts_total", "result", "started"), counter(r2.reg, "dedup_workflow_starts_total", "result", "started"))
	if records < float64(len(w.Records)) {
		t.Errorf("routers polled %v records, want at least %d", records, len(w.Records))
	}
	if int(started) != want {
		t.Errorf("Temporal accepted %v new starts, want %d", started, want)
	}
	if counter(r1.reg, "dedup_workflow_starts_total", "result", "started") == 0 || counter(r2.reg, "dedup_workflow_starts_total", "result", "started") == 0 {
		t.Errorf("one router did no work: the group did not share partitions")
	}

	e.checkExactlyOnce(w, want)
	t.Logf("checked after %s", time.Since(began).Round(time.Millisecond))
	if got := e.dlqReasons(); got["conflict"] != w.Conflicts || len(got) != 1 {
		t.Errorf("dead letters %v, want exactly %d conflicts", got, w.Conflicts)
	}

	// Replay: every record is now a duplicate, and none may reach Temporal.
	e.resetToEarliest()
	began = time.Now()
	r3 := e.startRouter(e.config())
	r4 := e.startRouter(e.config())
	e.waitCommitted(3 * time.Minute)
	r3.stop(t)
	r4.stop(t)
	calls := 0.0
	for _, r := range []*router{r3, r4} {
		calls += counter(r.reg, "dedup_workflow_starts_total", "", "") + counter(r.reg, "dedup_workflow_start_errors_total", "", "")
	}
	replayDups := counter(r3.reg, "dedup_intents_total", "outcome", "duplicate") + counter(r4.reg, "dedup_intents_total", "outcome", "duplicate")
	t.Logf("replay: %s, %v duplicate intents, %v Temporal calls", time.Since(began).Round(time.Millisecond), replayDups, calls)
	if calls != 0 {
		t.Errorf("replay made %v Temporal start calls, want 0", calls)
	}
	if replayDups < float64(want) {
		t.Errorf("replay saw %v duplicate intents, want at least %d", replayDups, want)
	}
	e.checkExactlyOnce(w, want)
}

// checkExactlyOnce asserts from Temporal and the ledger that every unique
// workflow ID has exactly one execution and nothing else exists, and
// returns how many executions Temporal listed.
func (e *env) checkExactlyOnce(w *workload.Workload, want int) int {
	e.t.Helper()
	execs := e.executions(want)
	total, multi := 0, 0
	for id, n := range execs {
		total += n
		if n != 1 {
			multi++
			if multi <= 5 {
				e.t.Errorf("workflow %s has %d executions", id, n)
			}
		}
	}
	if total != want || len(execs) != want {
		e.t.Errorf("Temporal has %d executions of %d workflow IDs, want %d of %d", total, len(execs), want, want)
	}
	for _, ev := range w.Unique {
		if ev.ID == "" {
			continue
		}
		var ids []string
		switch ev.Type {
		case workload.TypeOrder:
			ids = []string{"activity-order-confirmation:" + ev.ID}
		case workload.TypeSignup:
			ids = []string{"activity-welcome-email:" + ev.ID, "activity-crm-sync:" + ev.ID}
		}
		for _, id := range ids {
			if execs[id] != 1 {
				e.t.Errorf("%s: %d executions, want 1", id, execs[id])
				return total
			}
		}
	}
	counts, err := e.led.Count(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	if counts != (ledger.Counts{Started: int64(want), Conflicts: int64(w.Conflicts)}) {
		e.t.Errorf("ledger %+v, want %d started, 0 pending, %d conflicts", counts, want, w.Conflicts)
	}
	// Every started ledger row names a run Temporal has.
	rows, err := e.led.Pool().Query(context.Background(), `SELECT workflow_id FROM dedup_ledger WHERE state = 'started' AND run_id IS NOT NULL`)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			e.t.Fatal(err)
		}
		if execs[id] != 1 {
			e.t.Errorf("ledger row %s has no execution", id)
		}
		n++
	}
	if n != want {
		e.t.Errorf("%d ledger rows carry a run ID, want %d", n, want)
	}
	e.t.Logf("exactly once: %d workflow IDs, %d executions, ledger %+v", len(execs), total, counts)
	return total
}
