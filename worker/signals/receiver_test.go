package signals_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/dedupio/dedup/worker/signals"
)

// probeInput is the probe workflow's input, carried across its
// continue-as-new with the Receiver's State and what it delivered so far.
type probeInput struct {
	Opts    signals.Options
	Carried signals.State
	// Window or Max set: ReceiveBatch(Window, Max); else Receive.
	Window time.Duration
	Max    int
	Log    []delivery // every run's deliveries, in order
	// Unread are the signal names with signals unread when the run
	// continued as new (after State): none, or the server drops them.
	Unread []string
}

// delivery is one Receive or ReceiveBatch: the IDs returned and when
// (workflow time since the chain's start, as set by the test).
type delivery struct {
	Run int
	At  time.Duration
	IDs []string
}

var epoch = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

// probe delivers until cancelled (then returns its log, to the test) or
// until the Receiver ends the run: it continues as new.
func probe(ctx workflow.Context, in probeInput) (probeInput, error) {
	r, err := signals.NewReceiver(ctx, in.Opts, in.Carried)
	if err != nil {
		return in, err
	}
	run := 1
	if n := len(in.Log); n > 0 {
		run = in.Log[n-1].Run + 1
	}
	if err := workflow.SetQueryHandler(ctx, "stats", func() (signals.Stats, error) { return r.Stats(), nil }); err != nil {
		return in, err
	}
	for {
		var batch []signals.Event
		ok := false
		if in.Window > 0 || in.Max > 0 {
			batch, ok = r.ReceiveBatch(ctx, in.Window, in.Max)
		} else {
			var ev signals.Event
			ev, ok = r.Receive(ctx)
			batch = []signals.Event{ev}
		}
		if !ok {
			break
		}
		d := delivery{Run: run, At: workflow.Now(ctx).Sub(epoch)}
		for _, ev := range batch {
			d.IDs = append(d.IDs, ev.EventID)
		}
		in.Log = append(in.Log, d)
	}
	if ctx.Err() != nil {
		return in, nil // the test's end: the log as the result
	}
	in.Carried = r.State()
	in.Unread = workflow.GetUnhandledSignalNames(ctx)
	return in, workflow.NewContinueAsNewError(ctx, probe, in)
}

// signal is one signal the test sends: ev at at (test time since the
// run's start). Buffered signals wait, unread, for the next unbuffered
// one: they reach the workflow in the same workflow task.
type signal struct {
	at       time.Duration
	id       string
	buffered bool
}

func ev(id string) signals.Event {
	return signals.Event{EventID: id, DeliveryID: "d-" + id, Type: "order.updated", Data: []byte(`{"order_id":"o-1"}`)}
}

// runProbe runs one run of probe with in, sending sigs, and cancels it at
// cancelAt if it has not continued as new by then. It returns the
// continue-as-new input (next, true) or the final one.
func runProbe(t *testing.T, start time.Time, in probeInput, sigs []signal, cancelAt time.Duration) (out probeInput, continued bool, env *testsuite.TestWorkflowEnvironment) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env = s.NewTestWorkflowEnvironment()
	env.SetStartTime(start)
	env.RegisterWorkflow(probe)
	for _, sg := range sigs {
		sg := sg
		env.RegisterDelayedCallback(func() {
			if sg.buffered {
				env.SignalWorkflowSkippingWorkflowTask(signals.DefaultSignal, ev(sg.id))
			} else {
				env.SignalWorkflow(signals.DefaultSignal, ev(sg.id))
			}
		}, sg.at)
	}
	env.RegisterDelayedCallback(env.CancelWorkflow, cancelAt)
	env.ExecuteWorkflow(probe, in)
	if !env.IsWorkflowCompleted() {
		t.Fatal("the run did not end")
	}
	err := env.GetWorkflowError()
	var can *workflow.ContinueAsNewError
	if errors.As(err, &can) {
		if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &out); err != nil {
			t.Fatal(err)
		}
		return out, true, env
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	return out, false, env
}

func ids(log []delivery) string {
	var b strings.Builder
	for _, d := range log {
		fmt.Fprintf(&b, "run%d@%s%v ", d.Run, d.At, d.IDs)
	}
	return strings.TrimSpace(b.String())
}

func flat(log []delivery) []string {
	var out []string
	for _, d := range log {
		out = append(out, d.IDs...)
	}
	return out
}

// The same event ID signalled again, in another workflow task or in the
// same one, with another delivery ID or the same, is delivered once.
func TestRepeatedEventIDIsDeliveredOnce(t *testing.T) {
	out, continued, env := runProbe(t, epoch, probeInput{}, []signal{
		{at: time.Second, id: "e1"},
		{at: 2 * time.Second, id: "e1"},
		{at: 3 * time.Second, id: "e2", buffered: true},
		{at: 3 * time.Second, id: "e2", buffered: true},
		{at: 3 * time.Second, id: "e1"},
		{at: 4 * time.Second, id: "e3"},
	}, time.Minute)
	if continued {
		t.Fatal("continued as new, want one run")
	}
	if got, want := flat(out.Log), []string{"e1", "e2", "e3"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("delivered %v, want %v (%s)", got, want, ids(out.Log))
	}
	v, err := env.QueryWorkflow("stats")
	if err != nil {
		t.Fatal(err)
	}
	var st signals.Stats
	if err := v.Get(&st); err != nil {
		t.Fatal(err)
	}
	if st != (signals.Stats{Delivered: 3, Dropped: 3, Held: 3}) {
		t.Fatalf("stats %+v, want 3 delivered, 3 dropped, 3 held", st)
	}
}

// An event without an ID cannot be told from another: it is delivered
// every time, and not recorded.
func TestEventWithoutIDIsDeliveredEveryTime(t *testing.T) {
	out, _, _ := runProbe(t, epoch, probeInput{}, []signal{
		{at: time.Second, id: ""}, {at: 2 * time.Second, id: ""}, {at: 3 * time.Second, id: "e1"},
	}, time.Minute)
	if got, want := flat(out.Log), []string{"", "", "e1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("delivered %q, want %q", got, want)
	}
}

// After MaxSeen events the run continues as new, carrying the IDs: a
// repeat of an event delivered by the previous run (or by the one before
// it) is dropped in the next.
func TestRepeatAfterContinueAsNewIsDropped(t *testing.T) {
	in := probeInput{Opts: signals.Options{MaxSeen: 3}}
	in, continued, _ := runProbe(t, epoch, in, []signal{
		{at: time.Second, id: "e1"}, {at: 2 * time.Second, id: "e2"}, {at: 3 * time.Second, id: "e3"},
	}, time.Minute)
	if !continued {
		t.Fatalf("run 1 did not continue as new after MaxSeen events: %s", ids(in.Log))
	}
	if got := seenIDs(in.Carried); !reflect.DeepEqual(got, []string{"e1", "e2", "e3"}) {
		t.Fatalf("run 1 carries %v, want e1 e2 e3", got)
	}
	// Run 2: e2 re-driven, e4 new, e1 re-driven, e5 new: continues as new
	// after its third handled event (e2, e4, e1), e5 is delivered by run 3.
	in, continued, _ = runProbe(t, epoch.Add(time.Hour), in, []signal{
		{at: time.Second, id: "e2"}, {at: 2 * time.Second, id: "e4"}, {at: 3 * time.Second, id: "e1"},
	}, time.Minute)
	if !continued {
		t.Fatalf("run 2 did not continue as new after MaxSeen events handled: %s", ids(in.Log))
	}
	in, _, _ = runProbe(t, epoch.Add(2*time.Hour), in, []signal{
		{at: time.Second, id: "e3"}, {at: 2 * time.Second, id: "e5"},
	}, time.Minute)
	if got, want := flat(in.Log), []string{"e1", "e2", "e3", "e4", "e5"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("delivered %v over three runs, want each once: %v (%s)", got, want, ids(in.Log))
	}
}

// The bound, stated: State carries the last Keep delivered IDs. A repeat
// of an event older than that is delivered again in the next run; one
// within it is dropped.
func TestRepeatOlderThanKeepIsDeliveredAgain(t *testing.T) {
	in := probeInput{Opts: signals.Options{MaxSeen: 3, Keep: 2}}
	in, continued, _ := runProbe(t, epoch, in, []signal{
		{at: time.Second, id: "e1"}, {at: 2 * time.Second, id: "e2"}, {at: 3 * time.Second, id: "e3"},
	}, time.Minute)
	if !continued || !reflect.DeepEqual(seenIDs(in.Carried), []string{"e2", "e3"}) {
		t.Fatalf("run 1: continued %v, carries %v; want e2 e3", continued, seenIDs(in.Carried))
	}
	in, _, _ = runProbe(t, epoch.Add(time.Hour), in, []signal{
		{at: time.Second, id: "e1"}, {at: 2 * time.Second, id: "e3"},
	}, time.Minute)
	if got, want := flat(in.Log), []string{"e1", "e2", "e3", "e1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("delivered %v, want %v: e1 (older than the last 2) again, e3 dropped", got, want)
	}
}

// KeepFor limits the carried IDs to those delivered within it: an ID
// delivered longer ago is not carried (its repeat would be delivered).
func TestKeepForCarriesOnlyRecentIDs(t *testing.T) {
	in := probeInput{Opts: signals.Options{MaxSeen: 3, KeepFor: time.Hour}}
	in, continued, _ := runProbe(t, epoch, in, []signal{
		{at: time.Second, id: "e1"}, {at: 90 * time.Minute, id: "e2"}, {at: 100 * time.Minute, id: "e3"},
	}, 3*time.Hour)
	if !continued {
		t.Fatal("run 1 did not continue as new")
	}
	if got := seenIDs(in.Carried); !reflect.DeepEqual(got, []string{"e2", "e3"}) {
		t.Fatalf("carried %v, want e2 e3 (e1 was delivered 99 minutes before the continue-as-new, KeepFor 1h)", got)
	}
}

// Signals that arrive while the run decides to continue as new (buffered
// in the channel, unread: the same workflow task) are drained by State and
// carried, without repeats; the next run delivers them first, in order,
// before its own signals.
func TestSignalsAtContinueAsNewAreDrainedAndCarried(t *testing.T) {
	in := probeInput{Opts: signals.Options{MaxSeen: 1}}
	in, continued, _ := runProbe(t, epoch, in, []signal{
		{at: time.Second, id: "e2", buffered: true},
		{at: time.Second, id: "e3", buffered: true},
		{at: time.Second, id: "e2", buffered: true},
		{at: time.Second, id: "e1", buffered: true},
		{at: time.Second, id: "e4"},
	}, time.Minute)
	if !continued {
		t.Fatal("run 1 did not continue as new")
	}
	if got := flat(in.Log); !reflect.DeepEqual(got, []string{"e2"}) {
		t.Fatalf("run 1 delivered %v, want e2 (MaxSeen 1)", got)
	}
	var pending []string
	for _, ev := range in.Carried.Pending {
		pending = append(pending, ev.EventID)
	}
	if want := []string{"e3", "e1", "e4"}; !reflect.DeepEqual(pending, want) {
		t.Fatalf("carried pending %v, want %v (e2's repeat dropped)", pending, want)
	}
	if in.Carried.Pending[0].DeliveryID != "d-e3" || string(in.Carried.Pending[0].Data) != `{"order_id":"o-1"}` {
		t.Fatalf("carried event %+v lost its fields", in.Carried.Pending[0])
	}
	if len(in.Unread) != 0 {
		t.Fatalf("signals %v unread at continue-as-new, want none", in.Unread)
	}
	in.Opts.MaxSeen = 100
	in, _, _ = runProbe(t, epoch.Add(time.Hour), in, []signal{{at: time.Second, id: "e5"}, {at: 2 * time.Second, id: "e3"}}, time.Minute)
	if got, want := flat(in.Log), []string{"e2", "e3", "e1", "e4", "e5"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
	if in.Log[1].Run != 2 || in.Log[1].At != time.Hour {
		t.Fatalf("carried events delivered %s, want by run 2 at its start", ids(in.Log))
	}
}

// The control for the test above: a run that ends without State leaves
// the signals buffered behind the one it read unread (the SDK warns "Workflow has
// unhandled signals"); the server drops them with the run.
func TestRunEndingWithoutStateLeavesSignalsUnread(t *testing.T) {
	lossy := func(ctx workflow.Context, _ int) ([]string, error) {
		r, err := signals.NewReceiver(ctx, signals.Options{MaxSeen: 1}, signals.State{})
		if err != nil {
			return nil, err
		}
		r.Receive(ctx)
		return workflow.GetUnhandledSignalNames(ctx), nil
	}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(lossy, workflow.RegisterOptions{Name: "lossy"})
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflowSkippingWorkflowTask(signals.DefaultSignal, ev("e1"))
		env.SignalWorkflow(signals.DefaultSignal, ev("e2"))
	}, time.Second)
	env.ExecuteWorkflow("lossy", 0)
	var unread []string
	if err := env.GetWorkflowResult(&unread); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(unread, []string{signals.DefaultSignal}) {
		t.Fatalf("unread at the end %v, want [event] (e2)", unread)
	}
}

// Repeats count toward MaxSeen (each is a history event): a flood of
// them ends the run, although Receive returns none of them.
func TestFloodOfRepeatsEndsTheRun(t *testing.T) {
	sigs := []signal{{at: time.Second, id: "e1"}}
	for i := 2; i < 12; i++ {
		sigs = append(sigs, signal{at: time.Duration(i) * time.Second, id: "e1"})
	}
	out, continued, _ := runProbe(t, epoch, probeInput{Opts: signals.Options{MaxSeen: 5}}, sigs, time.Minute)
	if !continued || !reflect.DeepEqual(flat(out.Log), []string{"e1"}) {
		t.Fatalf("continued %v, delivered %v; want to continue as new after 5 handled, e1 once", continued, flat(out.Log))
	}
}

// A carried backlog larger than MaxSeen is delivered over several runs,
// MaxSeen events each, in order, and the rest carried on: every run makes
// progress.
func TestCarriedBacklogLargerThanMaxSeenMakesProgress(t *testing.T) {
	in := probeInput{Opts: signals.Options{MaxSeen: 2}}
	for _, id := range []string{"e1", "e2", "e1", "e3", "e4", "e5"} {
		in.Carried.Pending = append(in.Carried.Pending, ev(id))
	}
	runs := 0
	for continued := true; continued; runs++ {
		if runs > 5 {
			t.Fatalf("still continuing as new after %d runs: %s", runs, ids(in.Log))
		}
		in, continued, _ = runProbe(t, epoch.Add(time.Duration(runs)*time.Hour), in, nil, time.Minute)
	}
	if got, want := flat(in.Log), []string{"e1", "e2", "e3", "e4", "e5"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("delivered %v, want %v (%s)", got, want, ids(in.Log))
	}
	if runs != 3 {
		t.Fatalf("%d runs, want 3: e1 e2 (State drops e1's repeat from the backlog) | e3 e4 | e5, cancelled (%s)", runs, ids(in.Log))
	}
}

// The server's suggestion to continue as new ends the run, but only once
// it has handled an event: a run that starts above the server's threshold
// (a large carried input) still delivers one, so the chain progresses.
func TestServerSuggestionEndsTheRunAfterOneEvent(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.SetStartTime(epoch)
	env.SetContinueAsNewSuggested(true)
	env.RegisterWorkflow(probe)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflowSkippingWorkflowTask(signals.DefaultSignal, ev("e1"))
		env.SignalWorkflow(signals.DefaultSignal, ev("e2"))
	}, time.Second)
	env.RegisterDelayedCallback(env.CancelWorkflow, time.Minute)
	env.ExecuteWorkflow(probe, probeInput{Carried: signals.State{Pending: []signals.Event{ev("e0")}}})
	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("run ended with %v, want continue-as-new", err)
	}
	var next probeInput
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatal(err)
	}
	if got := flat(next.Log); !reflect.DeepEqual(got, []string{"e0"}) {
		t.Fatalf("delivered %v, want the carried e0 only", got)
	}
}

// ReceiveBatch folds the events that arrive within the window after the
// first (a workflow timer), drops repeats inside and across batches, and
// leaves later events to the next batch.
func TestReceiveBatchFoldsTheWindow(t *testing.T) {
	in := probeInput{Window: 10 * time.Second}
	out, _, _ := runProbe(t, epoch, in, []signal{
		{at: time.Second, id: "e1"},
		{at: 3 * time.Second, id: "e2"},
		{at: 5 * time.Second, id: "e1"},
		{at: 10 * time.Second, id: "e3"},
		{at: 12 * time.Second, id: "e4"}, // after the window (1s + 10s)
		{at: 13 * time.Second, id: "e3"},
		{at: 30 * time.Second, id: "e5"},
	}, time.Minute)
	want := []delivery{
		{Run: 1, At: 11 * time.Second, IDs: []string{"e1", "e2", "e3"}},
		{Run: 1, At: 22 * time.Second, IDs: []string{"e4"}},
		{Run: 1, At: 40 * time.Second, IDs: []string{"e5"}},
	}
	if !reflect.DeepEqual(out.Log, want) {
		t.Fatalf("batches %s, want %s", ids(out.Log), ids(want))
	}
}

// A batch that fills max returns at once, and its timer is cancelled (no
// timer is started when the buffered events already fill it).
func TestReceiveBatchReturnsAtMax(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.SetStartTime(epoch)
	env.RegisterWorkflow(probe)
	var started, cancelled int
	env.SetOnTimerScheduledListener(func(string, time.Duration) { started++ })
	env.SetOnTimerCanceledListener(func(string) { cancelled++ })
	send := func(id string, buffered bool) {
		if buffered {
			env.SignalWorkflowSkippingWorkflowTask(signals.DefaultSignal, ev(id))
		} else {
			env.SignalWorkflow(signals.DefaultSignal, ev(id))
		}
	}
	env.RegisterDelayedCallback(func() { send("e1", false) }, time.Second)
	env.RegisterDelayedCallback(func() { send("e2", false) }, 2*time.Second)
	env.RegisterDelayedCallback(func() {
		send("e3", true)
		send("e4", true)
		send("e5", false)
	}, 20*time.Second)
	env.RegisterDelayedCallback(env.CancelWorkflow, time.Minute)
	env.ExecuteWorkflow(probe, probeInput{Window: 10 * time.Second, Max: 2})
	var out probeInput
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	want := []delivery{
		{Run: 1, At: 2 * time.Second, IDs: []string{"e1", "e2"}},
		{Run: 1, At: 20 * time.Second, IDs: []string{"e3", "e4"}},
		{Run: 1, At: 30 * time.Second, IDs: []string{"e5"}},
	}
	if !reflect.DeepEqual(out.Log, want) {
		t.Fatalf("batches %s, want %s", ids(out.Log), ids(want))
	}
	// Timers: batch 1 (cancelled at max), batch 3 (fired); batch 2 filled
	// from the buffer without one.
	if started != 2 || cancelled != 1 {
		t.Fatalf("%d timers started, %d cancelled; want 2 and 1", started, cancelled)
	}
}

// Cancellation ends Receive (ok false) once nothing is buffered, and ends
// a batch's window early with what it collected.
func TestCancellationEndsReceive(t *testing.T) {
	out, continued, _ := runProbe(t, epoch, probeInput{Window: time.Hour}, []signal{
		{at: time.Second, id: "e1"}, {at: 2 * time.Second, id: "e2"},
	}, time.Minute)
	want := []delivery{{Run: 1, At: time.Minute, IDs: []string{"e1", "e2"}}}
	if continued || !reflect.DeepEqual(out.Log, want) {
		t.Fatalf("batches %s, want %s", ids(out.Log), ids(want))
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		opts  signals.Options
		field string
	}{
		{signals.Options{}, ""},
		{signals.Options{Signal: "order", MaxSeen: 1, Keep: 1, KeepFor: time.Hour}, ""},
		{signals.Options{MaxSeen: -1}, "MaxSeen"},
		{signals.Options{Keep: -1}, "Keep"},
		{signals.Options{KeepFor: -time.Second}, "KeepFor"},
	} {
		err := c.opts.Validate()
		if (err == nil) != (c.field == "") || (err != nil && !strings.Contains(err.Error(), c.field)) {
			t.Errorf("%+v: %v, want an error naming %q", c.opts, err, c.field)
		}
	}
}

func seenIDs(st signals.State) []string {
	var out []string
	for _, s := range st.Seen {
		out = append(out, s.ID)
	}
	return out
}

// The default run ends well before Temporal's signal limit
// (history.maximumSignalsPerExecution, 10,000 by default): the server
// counts every signal of the run, read or not, so a run that continues
// as new only at 10,000 handled events is refused by the server first
// whenever its worker lags (a backlog of unread signals), and the entity
// waits until the worker catches up. At a fifth of the limit, a backlog
// of four fifths of it is absorbed without a refusal.
func TestDefaultRunEndsWellBeforeTheServerSignalLimit(t *testing.T) {
	const serverSignalLimit = 10000 // go.temporal.io/server v1.32.1, dynamicconfig.MaximumSignalsPerExecution
	if got := signals.DefaultMaxSeen; got > serverSignalLimit/5 {
		t.Fatalf("default MaxSeen %d, want at most %d (a fifth of the server's %d signals a run)", got, serverSignalLimit/5, serverSignalLimit)
	}
}
