package integration

import (
	"context"
	"testing"
	"time"

	"github.com/dedupio/dedup/internal/demo/workload"
	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/sink/ledger"
)

// TestExactlyOnceWithTwoRouters is the end-to-end check: 10,000
// events over 8 partitions, 30% duplicates (identical and ID-less re-sends,
// some to other partitions) plus conflicts (half of them on another
// partition than their original, so either copy may win), consumed by two
// routers in one group. Then the group is reset to the earliest offsets and
// consumed again.
func TestExactlyOnceWithTwoRouters(t *testing.T) {
	e := newEnv(t, 8)
	w := workload.Generate(workload.Spec{Topic: e.topic, Partitions: 8, Records: 10000, DupRatio: 0.30,
		Conflicts: 25, CrossPartition: 0.2, ConflictCrossPartition: 0.5, Seed: 1, IDPrefix: "e2e-"})
	want := expectedWorkflows(w)
	t.Logf("workload: %d records, %d unique events (%d order, %d signup, %d unrouted), %d duplicates (%d on another partition), %d conflicts (%d on another partition) over %d event IDs -> %d workflows",
		len(w.Records), len(w.Unique), w.CountType(workload.TypeOrder), w.CountType(workload.TypeSignup),
		w.CountType(workload.TypeUnrouted), w.Duplicates, w.CrossDuplicates, w.Conflicts, w.CrossConflicts, len(w.ConflictSets), want)
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
	// What users rely on (one execution per workflow ID, the ledger, the
	// offsets, the dead letters) is checked below. The start results are
	// only bounded: every workflow needs one accepted start and none is
	// accepted twice, but a start may legitimately be made twice and the
	// second answered already_started, when a claim still pending (started,
	// not yet marked) is claimed again and re-driven:
	//   - a record polled twice: when r2 joins, r1's in-flight records of
	//     the partitions it gives up are redelivered to r2 (each record has
	//     at most 2 routes, so at most 2 re-drives per redelivered record;
	//     measured: 199 already_started for ~2,000 records polled twice);
	//   - a re-send on another partition than its original's
	//     (w.CrossDuplicates), claimed by the other router while the
	//     original's claim is pending: at most 2 re-drives each (a copy
	//     on its original's partition waits on the start in flight, in
	//     the one router that owns both). How many of them race depends
	//     on the pace: each router claims whole polls at once and starts
	//     them at Temporal's pace, so on a loaded machine most of the
	//     backlog is claimed and pending together (CI, beside the other
	//     lane: 279 already_started with no record polled twice, first
	//     pass 1m43s; alone: 35 and 37s), and a bound on the share that
	//     races is a bound on the machine's speed.
	//   - under the allow_* policies (the crm-sync route), a re-driven
	//     start carries the claim's request ID and Temporal answers it with
	//     the run it made, reporting it as started: such a re-drive counts
	//     as started again, so started is bounded by the re-drives too.
	redelivered := int(records) - len(w.Records)
	redrives := counter(r1.reg, "dedup_intents_total", "outcome", "redrive") + counter(r2.reg, "dedup_intents_total", "outcome", "redrive")
	if int(started) > want+int(redrives) {
		t.Errorf("Temporal accepted %v new starts, more than the %d workflows + %v re-drives", started, want, redrives)
	}
	if int(started+already) < want {
		t.Errorf("%v starts accepted + %v already started < %d workflows", started, already, want)
	}
	if bound := 2*redelivered + 2*w.CrossDuplicates; int(already) > bound {
		t.Errorf("%v starts answered already_started, want at most %d (2 per record polled twice, %d, and per re-send on another partition, %d): a copy that no other router claimed was started again",
			already, bound, redelivered, w.CrossDuplicates)
	}
	if counter(r1.reg, "dedup_workflow_starts_total", "", "") == 0 || counter(r2.reg, "dedup_workflow_starts_total", "", "") == 0 {
		t.Errorf("one router did no work: the group did not share partitions")
	}
	if ok, state := e.committedAtEnd(); !ok {
		t.Errorf("committed offsets are not at the end after the routers stopped: %s", state)
	}

	e.checkExactlyOnce(w, want)
	t.Logf("checked after %s", time.Since(began).Round(time.Millisecond))
	// Conflicts, whichever copy won: one execution per conflicted ID with
	// one of its payloads, and the other payloads' records dead-lettered.
	conflicts, flipped := e.workflowsWithConflicts(w, e.deadLetters())
	t.Logf("conflicts: %d event IDs, %d won by a conflicting copy, %d records dead-lettered as conflicts (%d conflicting copies produced)",
		len(w.ConflictSets), flipped, conflicts, w.Conflicts)
	if got := e.dlqReasons(); got["conflict"] != conflicts || len(got) != 1 {
		t.Errorf("dead letters %v, want exactly %d conflicts", got, conflicts)
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
	if got := e.dlqReasons(); got["conflict"] != conflicts || len(got) != 1 {
		t.Errorf("after the replay: dead letters %v, want still exactly %d conflicts", got, conflicts)
	}
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
	// dedup_conflicts keeps one row per workflow ID and conflicting
	// payload (migration 00014). Each of these workloads' conflict sets
	// has two payloads (the event and one conflicting copy, whose re-sends
	// are copies of one payload, however encoded), one of which wins: one
	// row per workflow ID dead-lettered as a conflict. With conflicts on
	// other partitions than their originals, which records those are
	// depends on which copy won.
	dead := e.deadLetters()
	if w.CrossConflicts > 0 {
		e.workflowsWithConflicts(w, dead)
	}
	pairs := map[string]bool{}
	for _, d := range dead {
		if header(d, schemas.HeaderDLQReason) == "conflict" {
			pairs[header(d, schemas.HeaderDLQWorkflow)] = true
		}
	}
	for _, c := range w.ConflictSets {
		if len(c.Variants) != 2 {
			e.t.Fatalf("conflict set %s has %d payloads; the count below assumes two", c.Event.ID, len(c.Variants))
		}
	}
	if counts != (ledger.Counts{Started: int64(want), Conflicts: int64(len(pairs))}) {
		e.t.Errorf("ledger %+v, want %d started, 0 pending, %d conflicts (one per workflow ID dead-lettered as a conflict)", counts, want, len(pairs))
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
