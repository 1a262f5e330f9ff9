package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/worker/signals"
	"github.com/dedupio/dedup/worker/signals/example"
)

// chainRun is one run of an entity workflow's chain: its ID, its status
// and the signals in its history.
type chainRun struct {
	RunID   string
	Status  enumspb.WorkflowExecutionStatus
	Signals []signal
}

// chain follows an entity workflow's runs from first, through each
// continue-as-new, to the current run (whose signals are settled).
func (e *env) chain(id, first string) []chainRun {
	e.t.Helper()
	var out []chainRun
	for runID := first; runID != ""; {
		next := ""
		for _, ev := range e.history(id, runID) {
			if a := ev.GetWorkflowExecutionContinuedAsNewEventAttributes(); a != nil {
				next = a.GetNewExecutionRunId()
			}
		}
		status, _ := e.runStatus(id, runID)
		var sigs []signal
		if status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			sigs = e.settledSignals(id, runID)
		} else {
			sigs = e.signalsIn(id, runID)
		}
		out = append(out, chainRun{RunID: runID, Status: status, Signals: sigs})
		runID = next
	}
	return out
}

// The signal route end to end with a real entity worker: N order events
// for K orders, every record produced twice (the copies on both
// partitions, racing), through a router process that crashes between a
// SignalWithStart and its mark (DEDUP_FAILPOINT=after-signal) and is
// restarted (re-drives), into example.OrderTotalsWorkflow on an SDK worker
// in the test, which continues as new every MaxSeen events. Some records
// come a third time after their order continued as new. Each order's chain
// of runs applied each of its events exactly once (the query `applied`
// answers one run's folds, so every run of the chain is queried, the
// continued-as-new ones too), and its totals (the current run's) are the
// sum of its events' amounts.
//
// The router starts an entity with no input, which gives the example the
// default MaxSeen (10000; Keep is not an option of the example: always
// signals.DefaultKeep, 1000): so the test starts each order's first run
// itself, with a small MaxSeen in its input, which every later run of the
// chain carries; the router's SignalWithStart signals that open run.
func TestSignalEndToEnd(t *testing.T) {
	began := time.Now()
	e := newEnv(t, 2)
	queue := "sige2e-" + e.namespace
	w := sdkworker.New(e.tc, queue, sdkworker.Options{})
	example.Register(w)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)

	const (
		n, k     = 120, 4
		maxSeen  = 4  // a run continues as new after 4 events: about 7 runs per order
		crashAt  = 90 // the crashed router's Nth accepted SignalWithStart: the 30th of the second half
		perOrder = n / k
	)
	ctx := context.Background()

	// Each order's first run, with a small MaxSeen.
	first := map[string]string{} // entity workflow ID -> its chain's first run
	for o := range k {
		id := fmt.Sprintf("order-o-%d", o)
		run, err := e.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue},
			example.WorkflowName, example.Input{MaxSeen: maxSeen})
		if err != nil {
			t.Fatal(err)
		}
		first[id] = run.GetRunID()
	}

	cfg := e.config()
	cfg.Routes = decide.Routes{{ID: "orders", Mode: decide.ModeSignal, Match: decide.Match{Type: "order.*"},
		WorkflowIDTemplate: "order-{data.order_id}", WorkflowType: example.WorkflowName, TaskQueue: queue}}
	cfg.Kafka.MaxPollRecords = 50
	cfg.Starts.MarkInterval = 200 * time.Millisecond // marks lag the signals: more of them are in the crash's window

	want := map[string][]string{}   // entity -> its event IDs
	cents := map[string]int64{}     // entity -> the sum of its events' amounts
	entityOf := map[string]string{} // event ID -> entity
	value := map[string][]byte{}    // event ID -> its record's value
	var recs []*kgo.Record
	for i := range n {
		id, order := fmt.Sprintf("e2e-%d", i), fmt.Sprintf("o-%d", i%k)
		amount := int64(100 + i)
		v, err := json.Marshal(map[string]any{"specversion": "1.0", "id": id, "type": "order.placed", "source": "shop",
			"data": map[string]any{"order_id": order, "amount_cents": amount}})
		if err != nil {
			t.Fatal(err)
		}
		for c := range int32(2) {
			recs = append(recs, &kgo.Record{Topic: e.topic, Partition: (int32(i) + c) % 2, Value: v})
		}
		entity := "order-" + order
		want[entity] = append(want[entity], id)
		cents[entity] += amount
		entityOf[id] = entity
		value[id] = v
	}
	produced := len(recs)

	// 1. A router that crashes after its crashAt-th signal, before the
	// mark: the first half of the events is delivered and marked (their
	// offsets committed), the second half produced then, and the router
	// crashes amid it.
	half := len(recs) / 2
	if err := e.kcl.ProduceSync(ctx, recs[:half]...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	crashed := e.spawn("crashed", cfg, fmt.Sprintf("DEDUP_FAILPOINT=after-signal:%d", crashAt))
	e.waitCommitted(2 * time.Minute)
	if err := e.kcl.ProduceSync(ctx, recs[half:]...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if code := crashed.wait(t, 2*time.Minute); code != 137 {
		t.Fatalf("router exited %d, want 137 at the failpoint", code)
	}
	// Where each event's signal landed so far, and the rows left pending
	// whose signal an order already has: what the restart re-drives into
	// its chain, the same run or a later one. The folds' timers fire
	// FoldWindow after the crash and the runs that are due continue as
	// new: observed until one such row's run has (a fixed sleep of
	// FoldWindow + 1 s left a busy machine one second for a timer and a
	// workflow task).
	var (
		landed        map[string]string // event ID -> the run that has its signal
		runsAtCrash   map[string][]chainRun
		pending       map[string]bool
		window        []string
		windowMovedOn int // of those, the ones whose run has continued as new since
	)
	observe := func() bool {
		landed, runsAtCrash, pending, window, windowMovedOn = map[string]string{}, map[string][]chainRun{}, map[string]bool{}, nil, 0
		for entity, run := range first {
			runsAtCrash[entity] = e.chain(entity, run)
			for _, r := range runsAtCrash[entity] {
				for _, sg := range r.Signals {
					landed[sg.EventID] = r.RunID
				}
			}
		}
		rows, err := e.led.Pool().Query(ctx, `SELECT workflow_id FROM dedup_ledger WHERE state = 'pending'`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var key string
			if err := rows.Scan(&key); err != nil {
				t.Fatal(err)
			}
			pending[strings.TrimPrefix(key, "signal-orders:")] = true
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		for ev := range pending {
			run, ok := landed[ev]
			if !ok {
				continue
			}
			window = append(window, ev)
			cur := runsAtCrash[entityOf[ev]]
			if cur[len(cur)-1].RunID != run {
				windowMovedOn++
			}
		}
		return windowMovedOn > 0
	}
	time.Sleep(example.FoldWindow)
	eventually(30*time.Second, observe)
	slices.Sort(window)
	if len(window) == 0 {
		t.Fatal("no pending row whose signal was delivered: the failpoint did not fire between signal and mark")
	}
	if windowMovedOn == 0 {
		t.Fatal("no row signalled and not marked whose run continued as new since: the re-drive reaches no later run (MaxSeen too high?)")
	}
	t.Logf("after the crash: %d signals landed, %d rows pending, %d of them signalled and not marked (%d into a run that has continued as new since)",
		len(landed), len(pending), len(window), windowMovedOn)

	// 2. A third copy of each order's first two events that are marked
	// and whose run has continued as new.
	var thirds []*kgo.Record
	for entity, runs := range runsAtCrash {
		if len(runs) < 2 {
			t.Fatalf("%s has not continued as new by the crash (%d run): MaxSeen %d", entity, len(runs), maxSeen)
		}
		picked := 0
		for _, sg := range runs[0].Signals {
			if picked == 2 || pending[sg.EventID] {
				continue
			}
			thirds = append(thirds, &kgo.Record{Topic: e.topic, Partition: int32(picked), Value: value[sg.EventID]})
			picked++
		}
	}
	if len(thirds) == 0 {
		t.Fatal("no marked event in any order's first run to produce a third time")
	}
	if err := e.kcl.ProduceSync(ctx, thirds...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	produced += len(thirds)

	// 3. The restarted router re-drives the pending rows and finishes.
	restarted := e.spawn("restarted", cfg)
	e.waitCommitted(3 * time.Minute)
	redrives := restarted.metric("dedup_intents_total", "outcome", "redrive")
	duplicates := restarted.metric("dedup_intents_total", "outcome", "duplicate")
	delivered := restarted.metric("dedup_signals_delivered_total", "", "")
	restarted.stop(t)
	t.Logf("restarted router: %v re-drives, %v duplicates, %v deliveries", redrives, duplicates, delivered)
	if redrives < float64(len(window)) {
		t.Errorf("%v re-drives, want at least the %d rows signalled and not marked", redrives, len(window))
	}
	for _, ev := range window {
		var state string
		var attempts int
		if err := e.led.Pool().QueryRow(ctx, `SELECT state, attempts FROM dedup_ledger WHERE workflow_id = $1`,
			decide.DeliveryKey("orders", ev)).Scan(&state, &attempts); err != nil {
			t.Fatal(err)
		}
		if state != "started" || attempts < 2 {
			t.Errorf("%s: %s after %d claim(s), want started after a re-drive", ev, state, attempts)
		}
	}

	// 4. Each order: every event applied once, over the chain's runs.
	cans, repeatsInHistory, repeatsSameRun, dropped := 0, 0, 0, 0
	for entity, ids := range want {
		slices.Sort(ids)
		var totals example.Totals
		if !eventually(time.Minute, func() bool {
			v, err := e.tc.QueryWorkflow(ctx, entity, "", example.QueryTotals)
			return err == nil && v.Get(&totals) == nil && totals.Events >= perOrder
		}) {
			t.Errorf("%s: totals %+v, want %d events", entity, totals, perOrder)
			continue
		}
		time.Sleep(example.FoldWindow + time.Second) // a late repeat would show now
		runs := e.chain(entity, first[entity])
		cans += len(runs) - 1
		var applied []string
		var appliedCents int64
		folds := 0
		perEvent := map[string]map[string]int{} // event ID -> run -> signals
		for i, r := range runs {
			if last := i == len(runs)-1; last != (r.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING) ||
				!last && r.Status != enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
				t.Errorf("%s run %d of %d (%s) is %s", entity, i+1, len(runs), r.RunID, r.Status)
			}
			for _, sg := range r.Signals {
				if perEvent[sg.EventID] == nil {
					perEvent[sg.EventID] = map[string]int{}
				}
				perEvent[sg.EventID][r.RunID]++
			}
			v, err := e.tc.QueryWorkflow(ctx, entity, r.RunID, example.QueryApplied)
			var fs []example.Fold
			if err == nil {
				err = v.Get(&fs)
			}
			if err != nil {
				t.Errorf("%s run %d (%s): query %s: %v", entity, i+1, r.RunID, example.QueryApplied, err)
				continue
			}
			for _, f := range fs {
				applied = append(applied, f.EventIDs...)
				appliedCents += f.AmountCents
				if len(f.Rejected) != 0 {
					t.Errorf("%s: fold rejected %v", entity, f.Rejected)
				}
			}
			folds += len(fs)
			var st signals.Stats
			if v, err := e.tc.QueryWorkflow(ctx, entity, r.RunID, example.QueryStats); err != nil || v.Get(&st) != nil {
				t.Errorf("%s run %d: query %s: %v", entity, i+1, example.QueryStats, err)
			}
			dropped += st.Dropped
		}
		for ev, byRun := range perEvent {
			total := 0
			for _, c := range byRun {
				total += c
				if c > 1 {
					repeatsSameRun += c - 1
					t.Errorf("%s: %s signalled %d times into one run: Temporal did not drop the re-sent request ID", entity, ev, c)
				}
			}
			repeatsInHistory += total - 1
		}
		slices.Sort(applied)
		if !slices.Equal(applied, ids) {
			t.Errorf("%s: %d runs applied %d events %v, want each of its %d once %v", entity, len(runs), len(applied), applied, len(ids), ids)
		}
		if appliedCents != cents[entity] {
			t.Errorf("%s: the folds add %d cents, want %d", entity, appliedCents, cents[entity])
		}
		// totals of the current run: the whole chain's.
		v, err := e.tc.QueryWorkflow(ctx, entity, "", example.QueryTotals)
		if err != nil || v.Get(&totals) != nil {
			t.Fatalf("%s: query %s: %v", entity, example.QueryTotals, err)
		}
		if wantTotals := (example.Totals{Events: perOrder, AmountCents: cents[entity], Folds: folds}); totals != wantTotals {
			t.Errorf("%s: totals %+v, want %+v", entity, totals, wantTotals)
		}
		t.Logf("%s: %d runs (%d continue-as-new), %d folds, %d events, %d cents", entity, len(runs), len(runs)-1, folds, totals.Events, totals.AmountCents)
	}

	counts, err := e.led.Count(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if counts.Started != n || counts.Pending != 0 || counts.DeadLettered != 0 {
		t.Errorf("ledger %+v, want %d started", counts, n)
	}
	if d := e.dlqReasons(); len(d) != 0 {
		t.Errorf("dead letters %v", d)
	}
	t.Logf("%d events for %d orders, %d records (%d third copies); %d continue-as-new; crash after %d signals, %d rows signalled and not marked (%d into a run continued as new since), %v re-drives; "+
		"%d repeats reached a history (%d into the same run), %d dropped by the Receiver; %s",
		n, k, produced, len(thirds), cans, crashAt, len(window), windowMovedOn, redrives,
		repeatsInHistory, repeatsSameRun, dropped, time.Since(began).Round(time.Second))
}
