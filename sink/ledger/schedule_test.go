package ledger_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dedupio/dedup/processor/schedule"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

// One decision round per cursor at a time: a round that finds a cursor
// locked by another skips it without waiting, and one held by another
// scheduler (its fires not started yet) until the hold ends or is
// released; a slot decided again (a cursor moved back by hand) keeps its
// first decision and window.
func TestScheduleDecideLocksAndKeepsTheFirstDecision(t *testing.T) {
	l := open(t)
	ctx := deadline(t, time.Minute)
	now := at("2026-03-01T09:00:30Z")
	fire := func(c schedule.Cursor, start string) schedule.Decision {
		f := schedule.Fire{Trigger: c.Trigger, ActivityID: "a", WorkflowID: "activity-a:2026-03-01T09:00:00+00:00",
			ScheduledFor: at("2026-03-01T09:00:00Z"), Kind: schedule.Compressed, WindowStart: at(start),
			WindowEnd: at("2026-03-01T09:00:00Z"), MissedCount: 3}
		c.LastSlot, c.LastFired = f.ScheduledFor, f.ScheduledFor
		return schedule.Decision{Cursor: c, Fires: []schedule.Fire{f}}
	}
	// The cursor exists (a first round created it; a round that creates
	// one holds others back until it commits).
	if _, err := l.Decide(ctx, round("r1", at("2026-03-01T08:00:00Z")), func(c schedule.Cursor) schedule.Decision {
		return schedule.Decision{Cursor: c}
	}); err != nil {
		t.Fatal(err)
	}
	// The holder keeps its transaction (and its pooled connection) open
	// until release is closed. Whatever way the test ends, release is
	// closed and the holder waited for before the pool is closed (cleanups
	// run last-in first-out; open's l.Close was registered first): a
	// failed assertion below fails the test instead of hanging it in
	// pool.Close, which waits for every connection to be returned.
	holding, release := make(chan struct{}), make(chan struct{})
	type result struct {
		fs  []schedule.Fire
		err error
	}
	done := make(chan result, 1) // never blocks the holder
	var releaseOnce sync.Once
	releaseHolder := func() { releaseOnce.Do(func() { close(release) }) }
	go func() {
		fs, err := l.Decide(ctx, round("r1", now), func(c schedule.Cursor) schedule.Decision {
			close(holding)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return fire(c, "2026-03-01T08:00:00Z")
		})
		done <- result{fs, err} // reported to the test goroutine: no t.Error after the test ended
	}()
	var held *result
	t.Cleanup(func() {
		releaseHolder()
		if held == nil {
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Error("the holder's Decide did not return after its release")
			}
		}
	})
	select {
	case <-holding:
	case r := <-done:
		held = &r
		t.Fatalf("the holder's Decide returned before deciding: %v", r.err)
	case <-ctx.Done():
		t.Fatalf("waiting for the holder to lock the cursor: %v", ctx.Err())
	}
	called := false
	start := time.Now()
	bctx, cancel := context.WithTimeout(ctx, 5*time.Second) // SKIP LOCKED: never waits for the holder
	fs, err := l.Decide(bctx, round("r2", now), func(c schedule.Cursor) schedule.Decision { called = true; return schedule.Decision{Cursor: c} })
	cancel()
	if err != nil || called || len(fs) != 0 || time.Since(start) > 5*time.Second {
		t.Fatalf("a round beside a locked cursor: called %v, fires %v, err %v, took %s", called, fs, err, time.Since(start))
	}
	releaseHolder()
	select {
	case r := <-done:
		held = &r
	case <-ctx.Done():
		t.Fatalf("waiting for the holder's round: %v", ctx.Err())
	}
	if fs := held.fs; held.err != nil || len(fs) != 1 || !fs[0].WindowStart.Equal(at("2026-03-01T08:00:00Z")) {
		t.Fatalf("the holder's pending fires: %+v %v", fs, held.err)
	}
	// Its fire pending, the trigger is r1's until its hold ends (or r1
	// releases it): r2's round leaves it and its fire alone, with the
	// cursor unlocked; r1's own next round takes it; after the hold, r2's.
	for _, c := range []struct {
		holder string
		now    time.Time
		want   bool
	}{{"r2", now, false}, {"r2", now.Add(time.Minute - time.Millisecond), false}, {"r1", now, true}, {"r2", now.Add(time.Minute), true}} {
		called = false
		fs, err := l.Decide(ctx, round(c.holder, c.now), func(c schedule.Cursor) schedule.Decision { called = true; return schedule.Decision{Cursor: c} })
		if err != nil || called != c.want || (len(fs) == 1) != c.want {
			t.Fatalf("%s's round at %s: called %v, fires %v, err %v; want %v", c.holder, c.now, called, fs, err, c.want)
		}
	}
	// A round's cursor carries the trigger's newest fire.
	var prev schedule.PreviousFire
	if _, err := l.Decide(ctx, round("r2", now.Add(time.Minute)), func(c schedule.Cursor) schedule.Decision { prev = c.Previous; return schedule.Decision{Cursor: c} }); err != nil ||
		!prev.ScheduledFor.Equal(at("2026-03-01T09:00:00Z")) || prev.WorkflowID != "activity-a:2026-03-01T09:00:00+00:00" || prev.State != schedule.FirePending {
		t.Fatalf("previous fire %+v, %v", prev, err)
	}
	// r2 holds it now (until now+2m); r1's round is left out until r2
	// releases it.
	called = false
	if fs, err := l.Decide(ctx, round("r1", now.Add(time.Minute)), func(c schedule.Cursor) schedule.Decision { called = true; return schedule.Decision{Cursor: c} }); err != nil || called || len(fs) != 0 {
		t.Fatalf("r1's round beside r2's hold: called %v, fires %v, err %v", called, fs, err)
	}
	if err := l.Release(ctx, "r1", []string{"t1"}); err != nil { // not r1's: nothing
		t.Fatal(err)
	}
	var holder *string
	if err := l.Pool().QueryRow(ctx, `SELECT held_by FROM dedup_schedule_cursors WHERE trigger_name = 't1'`).Scan(&holder); err != nil || holder == nil || *holder != "r2" {
		t.Fatalf("held by %v (%v), want r2 still", holder, err)
	}
	if err := l.Release(ctx, "r2", []string{"t1"}); err != nil {
		t.Fatal(err)
	}
	if fs, err := l.Decide(ctx, round("r1", now), func(c schedule.Cursor) schedule.Decision { return schedule.Decision{Cursor: c} }); err != nil || len(fs) != 1 {
		t.Fatalf("r1's round after r2's release: fires %v, err %v", fs, err)
	}
	// Moved back by hand, decided again with another window: the first stays.
	if _, err := l.Pool().Exec(ctx, `UPDATE dedup_schedule_cursors SET last_slot = $1`, at("2026-03-01T08:00:00Z")); err != nil {
		t.Fatal(err)
	}
	fs, err = l.Decide(ctx, round("r1", now), func(c schedule.Cursor) schedule.Decision { return fire(c, "2026-03-01T08:30:00Z") })
	if err != nil || len(fs) != 1 || !fs[0].WindowStart.Equal(at("2026-03-01T08:00:00Z")) || fs[0].MissedCount != 3 {
		t.Fatalf("decided again: %+v %v", fs, err)
	}
	// Ended once; a second end (a replica that also started it) keeps the first.
	for _, run := range []string{"run-1", "run-2"} {
		if err := l.EndFires(ctx, []schedule.FireEnd{{Trigger: "t1", ScheduledFor: fs[0].ScheduledFor, State: schedule.FireStarted, RunID: run}}); err != nil {
			t.Fatal(err)
		}
	}
	var run string
	if err := l.Pool().QueryRow(ctx, `SELECT run_id FROM dedup_schedule_fires`).Scan(&run); err != nil || run != "run-1" {
		t.Fatalf("run %q %v", run, err)
	}
	cs, err := l.Cursors(ctx, []string{"t1"})
	if err != nil || len(cs) != 1 || !cs[0].LastStarted.Equal(at("2026-03-01T09:00:00Z")) || !cs[0].Since.Equal(at("2026-03-01T08:00:00Z")) {
		t.Fatalf("cursors %+v %v", cs, err)
	}
	// Pause twice keeps the first pause time; resume keeps it (the last
	// pause's start: the slots between it and the resume came due in the
	// pause) and records the resume; a second resume keeps the first.
	for _, p := range []struct {
		paused          bool
		now             string
		want, wantResum *string
	}{{true, "2026-03-01T10:00:00Z", ptr("2026-03-01T10:00:00Z"), nil}, {true, "2026-03-01T11:00:00Z", ptr("2026-03-01T10:00:00Z"), nil},
		{false, "2026-03-01T12:00:00Z", ptr("2026-03-01T10:00:00Z"), ptr("2026-03-01T12:00:00Z")}, {false, "2026-03-01T13:00:00Z", ptr("2026-03-01T10:00:00Z"), ptr("2026-03-01T12:00:00Z")}} {
		if err := l.SetPaused(ctx, "t1", p.paused, at(p.now)); err != nil {
			t.Fatal(err)
		}
		var got, resumed *time.Time
		var paused bool
		if err := l.Pool().QueryRow(ctx, `SELECT paused, paused_at, resumed_at FROM dedup_schedule_cursors WHERE trigger_name = 't1'`).Scan(&paused, &got, &resumed); err != nil {
			t.Fatal(err)
		}
		if paused != p.paused || (got == nil) != (p.want == nil) || (got != nil && !got.Equal(at(*p.want))) {
			t.Errorf("after SetPaused(%v) at %s: paused %v at %v", p.paused, p.now, paused, got)
		}
		if (resumed == nil) != (p.wantResum == nil) || (resumed != nil && !resumed.Equal(at(*p.wantResum))) {
			t.Errorf("after SetPaused(%v) at %s: resumed at %v", p.paused, p.now, resumed)
		}
	}
	if n, err := l.Now(ctx); err != nil || time.Since(n).Abs() > time.Minute {
		t.Errorf("PostgreSQL's clock: %s %v", n, err)
	}
}

func ptr(s string) *string { return &s }

// round is holder's round over trigger t1 at now, holding for a minute.
func round(holder string, now time.Time) schedule.Round {
	return schedule.Round{Triggers: []string{"t1"}, Now: now, Holder: holder, HoldUntil: now.Add(time.Minute)}
}

// deadline is the test's context, ended after d (or when the test ends):
// every statement of a schedule test fails within it instead of waiting
// for a lock, or a connection, for ever.
func deadline(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
