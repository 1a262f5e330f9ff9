package example_test

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/dedupio/dedup/worker/signals"
	"github.com/dedupio/dedup/worker/signals/example"
)

var epoch = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

// send is a signal of the test: an order event at at (since the run's
// start); buffered ones reach the workflow with the next unbuffered one,
// in one workflow task.
type send struct {
	at       time.Duration
	id       string
	cents    int64
	buffered bool
}

func order(id string, cents int64) signals.Event {
	return signals.Event{EventID: id, DeliveryID: "d-" + id, Type: "order.paid",
		Data: []byte(fmt.Sprintf(`{"order_id":"o-1","amount_cents":%d}`, cents))}
}

// run is one run's outcome.
type run struct {
	next      *example.Input // the continue-as-new input; nil if the run was cancelled
	totals    example.Totals
	applied   []example.Fold
	receiver  signals.Stats
	cancelled bool
}

// runOnce runs one run of the workflow with in, sends sends, and cancels
// it at cancelAt unless it continued as new before.
func runOnce(t *testing.T, in example.Input, sends []send, cancelAt time.Duration) run {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.SetStartTime(epoch)
	example.Register(env)
	for _, sd := range sends {
		sd := sd
		env.RegisterDelayedCallback(func() {
			if sd.buffered {
				env.SignalWorkflowSkippingWorkflowTask(signals.DefaultSignal, order(sd.id, sd.cents))
			} else {
				env.SignalWorkflow(signals.DefaultSignal, order(sd.id, sd.cents))
			}
		}, sd.at)
	}
	env.RegisterDelayedCallback(env.CancelWorkflow, cancelAt)
	env.ExecuteWorkflow(example.WorkflowName, in)
	if !env.IsWorkflowCompleted() {
		t.Fatal("the run did not end")
	}
	var out run
	for q, v := range map[string]any{example.QueryTotals: &out.totals, example.QueryApplied: &out.applied, example.QueryStats: &out.receiver} {
		res, err := env.QueryWorkflow(q)
		if err != nil {
			t.Fatalf("query %s: %v", q, err)
		}
		if err := res.Get(v); err != nil {
			t.Fatal(err)
		}
	}
	err := env.GetWorkflowError()
	var can *workflow.ContinueAsNewError
	switch {
	case errors.As(err, &can):
		out.next = &example.Input{}
		if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, out.next); err != nil {
			t.Fatal(err)
		}
	case temporal.IsCanceledError(err):
		out.cancelled = true
	default:
		t.Fatalf("the run ended with %v, want continue-as-new or cancelled", err)
	}
	return out
}

func appliedIDs(folds []example.Fold) []string {
	var out []string
	for _, f := range folds {
		out = append(out, f.EventIDs...)
	}
	return out
}

// The same event ID signalled twice (a re-drive: another delivery ID,
// or the same) is applied once: counted and summed once.
func TestSameEventTwiceIsAppliedOnce(t *testing.T) {
	r := runOnce(t, example.Input{}, []send{
		{at: time.Second, id: "e1", cents: 1000},
		{at: 10 * time.Second, id: "e1", cents: 1000},
		{at: 20 * time.Second, id: "e2", cents: 250},
		{at: 21 * time.Second, id: "e2", cents: 250},
	}, time.Minute)
	if !r.cancelled {
		t.Fatal("the run continued as new, want it to run until cancelled")
	}
	if want := (example.Totals{Events: 2, AmountCents: 1250, Folds: 2}); r.totals != want {
		t.Fatalf("totals %+v, want %+v", r.totals, want)
	}
	if got := appliedIDs(r.applied); !reflect.DeepEqual(got, []string{"e1", "e2"}) {
		t.Fatalf("applied %v, want e1 e2 once each", got)
	}
	if r.receiver.Dropped != 2 {
		t.Fatalf("receiver dropped %d, want 2", r.receiver.Dropped)
	}
}

// The events within FoldWindow of an event are applied with it, as one
// fold whose audit lists every event ID; an event with other data adds
// nothing and is listed rejected.
func TestBurstIsFoldedWithItsAudit(t *testing.T) {
	r := runOnce(t, example.Input{}, []send{
		{at: time.Second, id: "e1", cents: 100},
		{at: 1500 * time.Millisecond, id: "e2", cents: 200},
		{at: 2 * time.Second, id: "e1", cents: 100},
		{at: 2500 * time.Millisecond, id: "e3", cents: 300},
		{at: 10 * time.Second, id: "e4", cents: 400},
	}, time.Minute)
	want := []example.Fold{{EventIDs: []string{"e1", "e2", "e3"}, AmountCents: 600}, {EventIDs: []string{"e4"}, AmountCents: 400}}
	if !reflect.DeepEqual(r.applied, want) {
		t.Fatalf("folds %+v, want %+v", r.applied, want)
	}
	if r.totals != (example.Totals{Events: 4, AmountCents: 1000, Folds: 2}) {
		t.Fatalf("totals %+v", r.totals)
	}
}

func TestNonOrderDataIsRejected(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	example.Register(env)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(signals.DefaultSignal, signals.Event{EventID: "x1", Data: []byte(`{"order_id":"o-1"}`)})
	}, time.Second)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(signals.DefaultSignal, signals.Event{EventID: "x2", DataBase64: []byte{0x0a, 0x01}})
	}, 10*time.Second)
	env.RegisterDelayedCallback(env.CancelWorkflow, time.Minute)
	env.ExecuteWorkflow(example.WorkflowName, example.Input{})
	res, err := env.QueryWorkflow(example.QueryTotals)
	if err != nil {
		t.Fatal(err)
	}
	var tot example.Totals
	if err := res.Get(&tot); err != nil {
		t.Fatal(err)
	}
	if tot != (example.Totals{Events: 2, Folds: 2, Rejected: 2}) {
		t.Fatalf("totals %+v, want 2 events, both rejected", tot)
	}
}

// After MaxSeen events the run continues as new with its totals and the
// Receiver's State; an event re-sent to the next run is dropped, and the
// totals go on from where they were.
func TestResentEventAfterContinueAsNewIsDropped(t *testing.T) {
	r1 := runOnce(t, example.Input{MaxSeen: 3}, []send{
		{at: time.Second, id: "e1", cents: 100},
		{at: 10 * time.Second, id: "e2", cents: 200},
		{at: 20 * time.Second, id: "e3", cents: 300},
	}, time.Hour)
	if r1.next == nil {
		t.Fatal("run 1 did not continue as new after MaxSeen events")
	}
	if r1.next.Totals != (example.Totals{Events: 3, AmountCents: 600, Folds: 3}) || r1.next.MaxSeen != 3 {
		t.Fatalf("run 1 carried %+v", *r1.next)
	}
	r2 := runOnce(t, *r1.next, []send{
		{at: time.Second, id: "e2", cents: 200}, // re-driven after the run that applied it closed
		{at: 10 * time.Second, id: "e4", cents: 400},
	}, time.Hour)
	if !r2.cancelled {
		t.Fatal("run 2 continued as new, want it cancelled")
	}
	if got := appliedIDs(r2.applied); !reflect.DeepEqual(got, []string{"e4"}) {
		t.Fatalf("run 2 applied %v, want e4 only", got)
	}
	if r2.totals != (example.Totals{Events: 4, AmountCents: 1000, Folds: 4}) {
		t.Fatalf("run 2 totals %+v, want 4 events, 1000 cents", r2.totals)
	}
}

// Signals that arrive in the workflow task that continues as new are not
// lost: carried as pending, applied first by the next run.
func TestSignalsDuringContinueAsNewAreApplied(t *testing.T) {
	r1 := runOnce(t, example.Input{MaxSeen: 2}, []send{
		{at: time.Second, id: "e1", cents: 100},
		{at: 10 * time.Second, id: "e2", cents: 200, buffered: true},
		{at: 10 * time.Second, id: "e3", cents: 300, buffered: true},
		{at: 10 * time.Second, id: "e4", cents: 400},
	}, time.Hour)
	if r1.next == nil {
		t.Fatal("run 1 did not continue as new")
	}
	if got := appliedIDs(r1.applied); !reflect.DeepEqual(got, []string{"e1", "e2"}) {
		t.Fatalf("run 1 applied %v, want e1 e2 (MaxSeen 2)", got)
	}
	r2 := runOnce(t, *r1.next, []send{{at: 10 * time.Second, id: "e3", cents: 300}}, time.Hour)
	if got := appliedIDs(r2.applied); !reflect.DeepEqual(got, []string{"e3", "e4"}) {
		t.Fatalf("run 2 applied %v, want e3 e4 (carried), and e3's re-send dropped", got)
	}
	if r2.totals != (example.Totals{Events: 4, AmountCents: 1000, Folds: 3}) {
		t.Fatalf("totals %+v, want 4 events, 1000 cents", r2.totals)
	}
}
