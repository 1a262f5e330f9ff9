package processor

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupio/dedup/processor/decide"
)

// allow_duplicate_failed_only, end to end through the router: a
// redelivered event whose run is still open or completed never runs again;
// one whose run failed starts exactly one new run (generation 2), even when
// two copies of it arrive together; under reject_duplicate a failed run is
// never followed.
func TestFailedOnlyRerunsOnceAfterAFailure(t *testing.T) {
	for _, policy := range []decide.ReusePolicy{decide.ReuseAllowDuplicateFailedOnly, decide.ReuseRejectDuplicate} {
		t.Run(string(policy), func(t *testing.T) {
			e := newTestEnv(t, 2, envOpt{})
			cfg := e.config()
			cfg.Routes[0].IDReusePolicy = policy
			w := wid("x")
			e.produce(0, "x", "v")
			rn := e.start("r1", cfg)
			e.waitCommittedToEnd(10 * time.Second)
			runs := func() int { return len(e.starter.executionsOf(w)) }
			if runs() != 1 || e.led.state(w) != stateStarted {
				t.Fatalf("first delivery: %d runs, ledger %q", runs(), e.led.state(w))
			}

			// Redelivered while the run is open: nothing happens.
			e.produce(1, "x", "v")
			e.waitCommittedToEnd(10 * time.Second)
			if runs() != 1 {
				t.Fatalf("redelivery of an open run started %d runs", runs())
			}

			// The run fails; two copies are redelivered, on both partitions.
			e.starter.fail(w)
			e.produce(0, "x", "v")
			e.produce(1, "x", "v")
			e.waitCommittedToEnd(10 * time.Second)
			want := 1
			if policy == decide.ReuseAllowDuplicateFailedOnly {
				want = 2
			}
			if runs() != want {
				t.Fatalf("after a failed run and two redeliveries: %d runs, want %d", runs(), want)
			}
			if policy == decide.ReuseAllowDuplicateFailedOnly {
				if g := e.starter.executionsOf(w)[1].req.Generation; g != 2 {
					t.Errorf("second run's generation %d, want 2", g)
				}
				if st := e.led.state(w); st != stateStarted {
					t.Errorf("ledger %q after the rerun, want started", st)
				}
				if run, gen := e.led.row(w); run != e.starter.executionsOf(w)[1].runID || gen != 2 {
					t.Errorf("ledger records run %q generation %d after the rerun, want the second run, generation 2", run, gen)
				}
			}

			// Redelivered again while the newest run is open: nothing.
			e.produce(0, "x", "v")
			e.waitCommittedToEnd(10 * time.Second)
			if runs() != want {
				t.Fatalf("redelivery after the rerun: %d runs, want %d", runs(), want)
			}
			if err := rn.stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if got := e.dlqReasons(); len(got) != 0 {
				t.Errorf("dead letters %v", got)
			}
			t.Logf("%s: %d runs, ledger calls MarkStarted=%d", policy, runs(), e.led.callCount("MarkStarted"))
		})
	}
}

// A re-run starts first and is recorded after, so a re-run that goes away
// before its start (here the router stops while Temporal holds the start)
// leaves the row started at its generation, never pending with nobody to
// start it (the model's gap 2b, processor/model/README.md). A re-run whose
// mark never landed is seen through LastRun: the next failure's re-run
// starts after the newest run Temporal has, not after the ledger's.
func TestRerunWritesNothingBeforeItsStart(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	cfg.Routes[0].IDReusePolicy = decide.ReuseAllowDuplicateFailedOnly
	w := wid("x")
	e.produce(0, "x", "v")
	rn := e.start("r1", cfg)
	e.waitCommittedToEnd(10 * time.Second)
	e.starter.fail(w)

	// A redelivery's re-run is held by Temporal; the router stops.
	release := e.starter.block(w)
	e.produce(1, "x", "v")
	eventually(t, 10*time.Second, func() bool { return e.starter.heldCount(w) == 1 }, func() string { return "re-run start never reached Temporal" })
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	release()
	if st, gen := e.led.state(w), func() int { _, g := e.led.row(w); return g }(); st != stateStarted || gen != 1 {
		t.Fatalf("after an abandoned re-run the row is %q generation %d, want started generation 1", st, gen)
	}

	// Generation 2's run is created, but its mark is lost: only Temporal
	// knows it (the ledger still says generation 1).
	req := e.starter.executionsOf(w)[0].req
	req.Generation = 2
	if _, err := e.starter.Start(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	// The uncommitted copy is redelivered to a new router: run 2 is open,
	// nothing runs again. Then run 2 fails; a new copy re-runs once, as
	// generation 3.
	rn = e.start("r2", cfg)
	e.waitCommittedToEnd(10 * time.Second)
	if n := len(e.starter.executionsOf(w)); n != 2 {
		t.Fatalf("redelivery while run 2 is open: %d runs, want 2", n)
	}
	e.starter.fail(w)
	e.produce(0, "x", "v")
	e.waitCommittedToEnd(10 * time.Second)
	ex := e.starter.executionsOf(w)
	if len(ex) != 3 || ex[2].req.Generation != 3 {
		t.Fatalf("after run 2 failed: %d runs (last generation %d), want 3 runs, the last of generation 3", len(ex), ex[len(ex)-1].req.Generation)
	}
	if run, gen := e.led.row(w); run != ex[2].runID || gen != 3 || e.led.state(w) != stateStarted {
		t.Errorf("ledger: %q run %q generation %d, want started, run %q, generation 3", e.led.state(w), run, gen, ex[2].runID)
	}
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// Duplicates never reach Temporal's start: under reject_duplicate a
// redelivered copy of a started workflow makes no Temporal call at all;
// under allow_duplicate_failed_only a completed or open run is asked about
// (LastRun) and never started again; under allow_duplicate a completed run
// is followed by exactly one new run, an open one by none. The fake
// Temporal lets through what the server lets through (a second run after a
// close the policy allows), so a router that started a duplicate would be
// seen in the executions, and in the call counts even where the server
// would refuse it.
func TestDuplicatesNeverCallTemporalsStart(t *testing.T) {
	for _, policy := range []decide.ReusePolicy{decide.ReuseRejectDuplicate, decide.ReuseAllowDuplicateFailedOnly, decide.ReuseAllowDuplicate} {
		t.Run(string(policy), func(t *testing.T) {
			e := newTestEnv(t, 2, envOpt{})
			cfg := e.config()
			cfg.Routes[0].IDReusePolicy = policy
			w := wid("x")
			e.produce(0, "x", "v")
			rn := e.start("r1", cfg)
			e.waitCommittedToEnd(10 * time.Second)
			if n := e.starter.callCount(w); n != 1 {
				t.Fatalf("first delivery: %d start calls, want 1", n)
			}
			// Redelivered while the run is open, on both partitions.
			e.produce(0, "x", "v")
			e.produce(1, "x", "v")
			e.waitCommittedToEnd(10 * time.Second)
			if n := e.starter.callCount(w); n != 1 {
				t.Fatalf("redeliveries of an open run: %d start calls, want 1", n)
			}
			if policy == decide.ReuseRejectDuplicate {
				if n := e.starter.lastRunCount(w); n != 0 {
					t.Errorf("reject_duplicate asked Temporal about the last run %d times, want 0", n)
				}
			}
			// The run completes; redelivered again.
			e.starter.complete(w)
			e.produce(1, "x", "v")
			e.waitCommittedToEnd(10 * time.Second)
			runs, calls := len(e.starter.executionsOf(w)), e.starter.callCount(w)
			wantRuns, wantCalls := 1, 1
			if policy == decide.ReuseAllowDuplicate {
				wantRuns, wantCalls = 2, 2
			}
			if runs != wantRuns || calls != wantCalls {
				t.Fatalf("after the run completed and a redelivery: %d runs, %d start calls, want %d and %d", runs, calls, wantRuns, wantCalls)
			}
			if policy == decide.ReuseAllowDuplicate {
				if g := e.starter.executionsOf(w)[1].req.Generation; g != 2 {
					t.Errorf("the re-run's generation %d, want 2", g)
				}
			}
			if err := rn.stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
		})
	}
}

// under allow_duplicate_failed_only a redelivery after a failure
// gets one new run, even when it arrives while another copy's re-run is
// still being retried. Run 1 fails; copy A re-runs it as generation 2,
// whose start creates run 2 but loses the answer, so it is retried; run 2
// fails; copy B arrives while A's retry is in flight. B must not finish
// with A's answer (run 2, failed): it asks again once A's job ended, and
// re-runs as generation 3.
func TestRerunCheckArrivingDuringARetriedRerunIsNotSwallowed(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	cfg.Routes[0].IDReusePolicy = decide.ReuseAllowDuplicateFailedOnly
	cfg.Retry.Initial, cfg.Retry.Max = 300*time.Millisecond, 2*time.Second
	w := wid("x")
	e.produce(0, "x", "v")
	rn := e.start("r1", cfg)
	e.waitCommittedToEnd(10 * time.Second)
	e.starter.fail(w)

	// Copy A: its re-run creates run 2, the answer is lost.
	e.starter.loseAnswer(w, 1)
	e.produce(0, "x", "v")
	eventually(t, 10*time.Second, func() bool { return len(e.starter.executionsOf(w)) == 2 },
		func() string { return "copy A's re-run never created run 2" })
	release := e.starter.block(w) // A's retry is held
	defer release()
	eventually(t, 10*time.Second, func() bool { return e.starter.heldCount(w) == 1 },
		func() string { return "copy A's retry never reached Temporal" })
	e.starter.fail(w) // run 2 fails

	// Copy B arrives while A's retry is in flight.
	e.produce(1, "x", "v")
	eventually(t, 10*time.Second, func() bool { return waitersOf(rn.r, w) == 1 },
		func() string { return fmt.Sprintf("copy B is not waiting on A's job (waiters %d)", waitersOf(rn.r, w)) })
	release()
	e.waitCommittedToEnd(10 * time.Second)
	ex := e.starter.executionsOf(w)
	if len(ex) != 3 {
		t.Fatalf("%d runs, want 3: copy B saw run 2 failed and finished without a newer run", len(ex))
	}
	if g := ex[2].req.Generation; g != 3 {
		t.Errorf("run 3's generation %d, want 3", g)
	}
	if run, gen := e.led.row(w); run != ex[2].runID || gen != 3 {
		t.Errorf("ledger records run %q generation %d, want %q generation 3", run, gen, ex[2].runID)
	}
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// A mark that finds no row (the purge deleted it: a started row older
// than the retention) changes nothing and reports no error, so it does
// not say that the row is started. A copy whose claim then inserts the
// row anew (VerdictNew) owns it: it must start it (Temporal answers with
// the open run) and mark it, not finish as a duplicate of that mark,
// which commits its offset past a row left pending with no owner (the
// model's D and E2). Every Temporal answer here is consistent; the purge
// is the only outside event.
//
// Steps: (1) x@p0 starts generation 1; the run completes. (2) x@p1, a
// redelivery, is a duplicate: its check re-runs the workflow
// (allow_duplicate), and generation 2's start is held in Temporal. (3) The
// purge deletes the row (started long ago). (4) x@p0#2 is polled; its
// claim has begun and is on its way to the ledger when generation 2's
// start is answered and marked: the mark finds no row, and the job leaves
// the pool ok while the claim is in progress. (5) The claim inserts the
// row (pending, VerdictNew). At 75a60b5 the copy finds the workflow in
// startPool.marked, finishes as a duplicate (its check sees run 2 open
// and runs nothing), and the row stays pending.
func TestACopyThatClaimsAPurgedRowAnewIsNotADuplicateOfAMarkThatFoundNoRow(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	cfg.Routes[0].IDReusePolicy = decide.ReuseAllowDuplicate
	w := wid("x")
	e.produce(0, "x", "v")
	rn := e.start("r1", cfg)
	e.waitCommittedToEnd(10 * time.Second)
	if st := e.led.state(w); st != stateStarted {
		t.Fatalf("first delivery: ledger %q, want started", st)
	}
	e.starter.complete(w)

	// (2) The redelivery's re-run is held in Temporal.
	release := e.starter.block(w)
	defer release()
	e.produce(1, "x", "v")
	eventually(t, 10*time.Second, func() bool { return e.starter.heldCount(w) == 1 },
		func() string { return "the re-run's start never reached Temporal" })
	// (3) The purge.
	e.led.purge(w)

	// (4) x@p0#2's claim is held on its way to the ledger while the
	// re-run is answered, marked (on no row) and leaves the pool.
	claimEntered, claimHold := make(chan struct{}), make(chan struct{})
	var claimOnce, holdClaim sync.Once
	letClaim := func() { holdClaim.Do(func() { close(claimHold) }) }
	defer letClaim()
	e.led.mu.Lock()
	e.led.gate = func(intents []decide.Intent) bool {
		for _, in := range intents {
			if in.WorkflowID == w {
				claimOnce.Do(func() {
					close(claimEntered)
					<-claimHold
				})
			}
		}
		return false
	}
	e.led.mu.Unlock()
	off2 := e.produce(0, "x", "v")
	select {
	case <-claimEntered:
	case <-time.After(10 * time.Second):
		t.Fatal("x@p0#2 was never claimed")
	}
	marks := e.led.callCount("MarkStarted")
	release()
	eventually(t, 10*time.Second, func() bool {
		return e.led.callCount("MarkStarted") > marks && waitersOf(rn.r, w) == -1 && e.committed()[1] == 1
	}, func() string {
		return fmt.Sprintf("the re-run not marked and out of the pool (MarkStarted calls %d, waiters %d, committed %v)",
			e.led.callCount("MarkStarted"), waitersOf(rn.r, w), e.committed())
	})
	if st := e.led.state(w); st != "" {
		t.Fatalf("row %q after the re-run's mark, want none (the mark changed nothing)", st)
	}
	// (5) The claim inserts the row.
	letClaim()
	e.waitCommittedToEnd(10 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := len(e.starter.executionsOf(w)); n != 2 {
		t.Errorf("%d runs, want 2 (the first, the re-run)", n)
	}
	if st := e.led.state(w); st == statePending {
		t.Fatalf("x@p0#2 (offset %d) committed while the row its claim inserted is %q with no owner: Temporal start calls %d, LastRun calls %d",
			off2, st, e.starter.callCount(w), e.starter.lastRunCount(w))
	}
}

// Under allow_duplicate_failed_only, a copy claimed while the first copy's
// start was in flight (its claim read the row pending: VerdictRedrive)
// never saw a failed run: its claim is of the generation the first copy
// starts, and it finishes with that start, which the failure of its run
// does not undo. So when its turn in the claimer comes only after that
// start was marked and its run already failed, it still makes no second
// run: one run, as when it waits on the start in flight, and one
// Temporal call. The claimer is held in the ledger, after its read, or
// after the answer; either way the mark moves the row after the copy's
// read, and the copy ends as the start's waiter would have.
func TestACopyClaimedBeforeTheRunFailedDoesNotRerunIt(t *testing.T) {
	t.Run("held in the ledger", func(t *testing.T) { testCopyClaimedBeforeTheRunFailed(t, false) })
	t.Run("held after the answer", func(t *testing.T) { testCopyClaimedBeforeTheRunFailed(t, true) })
}

func testCopyClaimedBeforeTheRunFailed(t *testing.T, afterAnswer bool) {
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	cfg.Routes[0].IDReusePolicy = decide.ReuseAllowDuplicateFailedOnly
	w := wid("x")
	release := e.starter.block(w)
	defer release()
	var rn *runner
	held := false
	hold := func(intents []decide.Intent) {
		if len(intents) != 1 || intents[0].Partition != 1 {
			return
		}
		if st := e.led.state(w); st != statePending {
			t.Errorf("the second copy's claim read %q, want pending", st)
		}
		// The claimer is descheduled: the first copy's start is answered,
		// its run fails at once, and the start is marked and leaves the
		// pool before the second copy's turn.
		held = true
		release()
		eventually(t, 10*time.Second, func() bool { return len(e.starter.executionsOf(w)) == 1 },
			func() string { return "the first run was never created" })
		e.starter.fail(w)
		eventually(t, 10*time.Second, func() bool { return waitersOf(rn.r, w) == -1 },
			func() string { return "the first copy's start is still in the start pool" })
	}
	e.produce(0, "x", "v")
	rn = e.startWith("r1", cfg, func(r *Router, _ *prometheus.Registry) {
		if afterAnswer {
			r.claims.hooks.AfterClaim = func() {
				claims := e.led.claimLog()
				hold(claims[len(claims)-1])
			}
		}
	})
	eventually(t, 10*time.Second, func() bool { return e.starter.heldCount(w) == 1 },
		func() string { return "the first copy's start not in flight" })
	if !afterAnswer {
		e.led.setAfterClaim(hold)
	}
	e.produce(1, "x", "v")
	e.waitCommittedToEnd(10 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	if !held {
		t.Fatal("the claimer was never held: the case did not happen")
	}
	if n := len(e.starter.executionsOf(w)); n != 1 {
		t.Errorf("%d runs, want 1: a copy claimed before the run failed re-ran it (LastRun calls %d, Temporal start calls %d)",
			n, e.starter.lastRunCount(w), e.starter.callCount(w))
	}
	if c := e.starter.callCount(w); c != 1 {
		t.Errorf("Temporal start calls %d, want 1: the copy ends with the start its claim saw in flight", c)
	}
}

// TestACopyClaimedBeforeTheRunFailedDoesNotRerunIt's case, held after the
// answer, with the first copy's mark landing but its answer lost (a
// transient error after the commit): the marker's retry finds the row
// started and moves nothing. At d34cb2d (Moved: false) the second copy
// then owned a start of its own: a second Temporal start call of the one
// event under allow_duplicate_failed_only with its run failed (the fake,
// like Temporal, answers it with the first run by its request ID, so only
// the call count shows it), where waiting on the start in flight makes
// none. Started.Recorded says the row is started at the mark's generation.
func TestACopyClaimedBeforeTheRunFailedDoesNotRerunItWhenTheMarksAnswerWasLost(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	cfg.Routes[0].IDReusePolicy = decide.ReuseAllowDuplicateFailedOnly
	w := wid("x")
	release := e.starter.block(w)
	defer release()
	ml := &markLostAnswerLedger{fakeLedger: e.led, wid: w, entered: make(chan struct{}), hold: make(chan struct{})}
	close(ml.hold)
	var rn *runner
	held := false
	e.produce(0, "x", "v")
	rn = e.startWith("r1", cfg, func(r *Router, _ *prometheus.Registry) {
		r.starts.ledger = ml
		r.claims.hooks.AfterClaim = func() {
			claims := e.led.claimLog()
			if last := claims[len(claims)-1]; len(last) != 1 || last[0].Partition != 1 {
				return
			}
			if st := e.led.state(w); st != statePending {
				t.Errorf("the second copy's claim read %q, want pending", st)
			}
			held = true
			release()
			eventually(t, 10*time.Second, func() bool { return len(e.starter.executionsOf(w)) == 1 },
				func() string { return "the first run was never created" })
			e.starter.fail(w)
			eventually(t, 10*time.Second, func() bool { return waitersOf(rn.r, w) == -1 && e.led.state(w) == stateStarted },
				func() string { return "the first copy's start is not marked and out of the start pool" })
		}
	})
	eventually(t, 10*time.Second, func() bool { return e.starter.heldCount(w) == 1 },
		func() string { return "the first copy's start not in flight" })
	e.produce(1, "x", "v")
	e.waitCommittedToEnd(10 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	if !held {
		t.Fatal("the claimer was never held: the case did not happen")
	}
	select {
	case <-ml.entered:
	default:
		t.Fatal("the first copy's mark never went through the lost-answer ledger")
	}
	if n := len(e.starter.executionsOf(w)); n != 1 {
		t.Errorf("%d runs, want 1: a copy claimed before the run failed re-ran it (LastRun calls %d, Temporal start calls %d)",
			n, e.starter.lastRunCount(w), e.starter.callCount(w))
	}
	if c := e.starter.callCount(w); c != 1 {
		t.Errorf("Temporal start calls %d, want 1: the copy ends with the start its claim saw in flight", c)
	}
}

// lastRunGate is a Starter whose LastRun blocks until released (so copies
// can join a check while its read is under way) and answers an open run;
// Start records the requests it is asked to start.
type lastRunGate struct {
	entered chan string
	release chan struct{}
	mu      sync.Mutex
	started []decide.StartRequest
}

func (g *lastRunGate) LastRun(ctx context.Context, _, id string) (decide.Run, error) {
	g.entered <- id
	select {
	case <-g.release:
	case <-ctx.Done():
		return decide.Run{}, ctx.Err()
	}
	return decide.Run{ID: "run-" + id, Generation: 1}, nil // open: nothing runs again
}

func (g *lastRunGate) Start(_ context.Context, req decide.StartRequest) (StartResult, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.started = append(g.started, req)
	return StartResult{RunID: "new-" + req.WorkflowID}, nil
}

// A check (a duplicate under allow_duplicate) whose last run is still open
// runs nothing again, but copies that need a start (verdict new or
// re-drive) waited on it: the job then starts the first such waiter's
// request, exactly as that waiter's caller submitted it (workflow ID,
// generation, input, record), not a later waiter's, not the caller's
// variable as mutated after submit returned (the claimer builds one
// request per intent in a loop), not a zero value, and no two checks of
// different workflows share one waiting start. The waiters join while the
// checks' LastRun reads are under way, interleaved across two workflows,
// through one request variable the test reuses and rewrites between calls.
func TestACheckWhoseRunNeedsNoRerunStartsItsFirstWaitersRequest(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := DefaultConfig()
	m, err := newMetrics(prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	g := &lastRunGate{entered: make(chan string, 4), release: make(chan struct{})}
	var endMu sync.Mutex
	ended := map[*record]bool{}
	s := newStartPool(cfg, log, m, g, nil, newHealth(cfg, log, m, func(bool) {}, func(error) {}), hooks{}, nil,
		func(r *record, ok bool) { endMu.Lock(); ended[r] = ok; endMu.Unlock() }, ctx)
	part := &partition{ctx: ctx}
	newRec := func() *record { return &record{part: part} }

	ids := []string{"wf-x", "wf-y"}
	var req decide.StartRequest // reused by every call, as a caller's loop variable
	set := func(id string, gen int, evt string, off int64) decide.StartRequest {
		req.WorkflowID, req.WorkflowType, req.TaskQueue = id, "W", "q"
		req.ReusePolicy, req.Generation = decide.ReuseAllowDuplicate, gen
		req.Input.WorkflowID, req.Input.EventID, req.Input.Type = id, evt, "t"
		req.Input.Data = []byte(fmt.Sprintf(`{"offset":%d}`, off))
		req.Record = &decide.RecordRef{Topic: "events", Partition: 0, Offset: off}
		snap := req
		snap.Input.Data = []byte(fmt.Sprintf(`{"offset":%d}`, off))
		snap.Record = &decide.RecordRef{Topic: "events", Partition: 0, Offset: off}
		return snap
	}
	for i, id := range ids { // the checks: started before, generation 1
		set(id, 1, "check-"+id, int64(i))
		if s.submit(ctx, newRec(), req, true) {
			t.Fatalf("%s: the check waits on a start in flight: none is", id)
		}
	}
	for range ids {
		go s.worker()
	}
	for range ids { // both reads under way: j.checking
		select {
		case <-g.entered:
		case <-time.After(5 * time.Second):
			t.Fatal("the checks never asked LastRun")
		}
	}
	want := map[string]decide.StartRequest{}
	off := int64(100)
	for round := 0; round < 3; round++ {
		for _, id := range ids {
			off++
			snap := set(id, 2+round, fmt.Sprintf("evt-%s-%d", id, round), off)
			if round == 0 {
				want[id] = snap
			}
			if waits, started := s.submitClaimed(ctx, newRec(), req); !waits || started {
				t.Fatalf("%s round %d: waits %v started %v, want a waiter of the check", id, round, waits, started)
			}
			// The caller rewrites its request after submit returned.
			req.Generation, req.Input.EventID, req.Input.Data = 99, "mutated", []byte(`{"late":true}`)
			req.WorkflowType, req.TaskQueue = "Other", "other-q"
			req.Record = &decide.RecordRef{Topic: "mutated", Offset: -1}
		}
	}
	s.mu.Lock()
	if a, b := s.starting[ids[0]], s.starting[ids[1]]; a == nil || b == nil || a.startReq == nil || a.startReq == b.startReq {
		s.mu.Unlock()
		t.Fatalf("the checks' waiting starts: %+v and %+v, want two of their own", a, b)
	}
	s.mu.Unlock()
	close(g.release)
	for range ids {
		select {
		case <-s.markQ:
		case <-time.After(5 * time.Second):
			t.Fatal("the checks never started their waiters' requests")
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.started) != len(ids) {
		t.Fatalf("Temporal was asked %d starts, want %d: %+v", len(g.started), len(ids), g.started)
	}
	for _, got := range g.started {
		w, ok := want[got.WorkflowID]
		if !ok {
			t.Fatalf("started %+v: no such workflow's waiter", got)
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("%s started\n  %+v (record %+v)\nwant its first waiter's request\n  %+v (record %+v)",
				got.WorkflowID, got, got.Record, w, w.Record)
		}
	}
}
