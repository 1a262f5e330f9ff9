package schedule_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/schedule"
)

// flakyTemporal is the test's Temporal whose starts fail (transiently)
// while down is set.
type flakyTemporal struct {
	*temporal
	mu   sync.Mutex
	down bool
}

func (f *flakyTemporal) setDown(v bool) {
	f.mu.Lock()
	f.down = v
	f.mu.Unlock()
}

func (f *flakyTemporal) Start(ctx context.Context, req decide.StartRequest) (processor.StartResult, error) {
	f.mu.Lock()
	down := f.down
	f.mu.Unlock()
	if down {
		return processor.StartResult{}, errors.New("temporal: connection refused")
	}
	return f.temporal.Start(ctx, req)
}

// Pause. `dedup schedule pause NAME` "stops the trigger for
// every replica" (docs/schedules.md) and SetPaused says "While paused, no
// slot fires". But a fire decided before the pause and not yet started
// (Temporal was unreachable at its tick, a crash after the decision) stays
// pending, and every tick re-drives the pending fires of every cursor it
// locks, paused or not (sink/ledger Decide reads the pending fires of all
// locked triggers; Decide's pause check only stops new decisions). So the
// run starts while the trigger is paused, the moment Temporal answers.
//
// Why it matters: an operator pauses a trigger precisely when its runs
// must not start now (the downstream is broken, a migration is running);
// a start slipping through the pause is the surprise the pause is for.
func TestPendingFireDoesNotStartWhilePaused(t *testing.T) {
	w := newWorld(t)
	cfg := oneTrigger("* * * * *", schedule.Skip, 10*time.Second)
	tmp := &flakyTemporal{temporal: w.tmp}
	l := w.open()
	s, err := schedule.New(cfg, schedule.Options{Store: l, Ledger: l, Starter: tmp, Clock: w.clock,
		Registerer: prometheus.NewRegistry(), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	w.clock.set("2026-03-01T09:00:30Z")
	if err := s.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	// 09:01 is decided while Temporal is unreachable: the fire stays pending.
	tmp.setDown(true)
	w.clock.set("2026-03-01T09:01:00.5Z")
	if err := s.Tick(ctx); err == nil {
		t.Fatal("tick with Temporal down: no error")
	}
	if st := w.fireStates(); st[schedule.FirePending] != 1 {
		t.Fatalf("fires %v, want the 09:01 fire pending", st)
	}
	// The operator pauses the trigger; Temporal comes back.
	w.clock.set("2026-03-01T09:01:05Z")
	if err := schedule.SetPaused(ctx, cfg, w.led, w.clock, "report", true); err != nil {
		t.Fatal(err)
	}
	tmp.setDown(false)
	for i := 0; i < 5; i++ {
		w.clock.add(5 * time.Second)
		if err := s.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := w.tmp.executions(); len(got) != 0 {
		t.Fatalf("while the trigger is paused, runs started: %v\n"+
			"(a fire decided before the pause and left pending is re-driven by every tick, paused or not)", got)
	}
}

// Resume. docs/schedules.md: "Every slot that came due while
// the trigger was paused (at or before the resume, resumed_at) has
// misfired". Decide implements only the parenthesis: every slot at or
// before resumed_at misfires, including a slot that came due before the
// pause began (paused_at is recorded, and not used). A slot that was due
// and on time when the operator paused, and was not decided yet (the
// ticks are 30 s apart here, or the replicas were restarting), is skipped
// by a five-second pause under misfire_policy skip, although it never came
// due while the trigger was paused and is still well within its
// misfire_threshold when the trigger is resumed.
//
// Why it matters: a short pause-and-resume (an operator checking
// something, a script toggling the trigger) silently drops a run that was
// already due before the pause, counted as skipped (misfired).
func TestSlotDueBeforeThePauseIsNotMissedForIt(t *testing.T) {
	w := newWorld(t)
	cfg := oneTrigger("* * * * *", schedule.Skip, 2*time.Minute)
	cfg.Tick = 30 * time.Second
	r := w.replica(cfg, schedule.Hooks{})
	ctx := context.Background()
	w.clock.set("2026-03-01T09:00:50Z")
	r.tick(t)
	// 09:01:00 comes due; the next tick is at 09:01:20. The operator
	// pauses at 09:01:05 and resumes at 09:01:10.
	w.clock.set("2026-03-01T09:01:05Z")
	if err := schedule.SetPaused(ctx, cfg, w.led, w.clock, "report", true); err != nil {
		t.Fatal(err)
	}
	w.clock.set("2026-03-01T09:01:10Z")
	if err := schedule.SetPaused(ctx, cfg, w.led, w.clock, "report", false); err != nil {
		t.Fatal(err)
	}
	w.clock.set("2026-03-01T09:01:20Z") // 20 s after the slot, threshold 2 min
	r.tick(t)
	if got := w.tmp.executions(); len(got) != 1 || got[0] != "2026-03-01T09:01:00+00:00" {
		t.Fatalf("executions %v (outcomes %v), want 09:01 on time: it came due at 09:01:00, before the pause (09:01:05-09:01:10), "+
			"and was decided 20 s late with a 2 min threshold", got, outcomes(r.reg))
	}
}
