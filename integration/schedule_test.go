package integration

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/internal/app"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/schedule"
	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/sink/ledger"
	"github.com/dedupio/dedup/sink/starter"
	"github.com/dedupio/dedup/worker"
)

// fakeClock is the schedulers' injected clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now(context.Context) (time.Time, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now, nil
}

func (c *fakeClock) set(s string) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	c.mu.Lock()
	c.now = t.UTC()
	c.mu.Unlock()
}

const schedActivity = "550e8400-e29b-41d4-a716-446655440000"

func schedConfig(p schedule.Policy) schedule.Config {
	return schedule.Config{Tick: time.Second, Triggers: []schedule.Trigger{{Name: "report", ActivityID: schedActivity,
		Cron: "* * * * *", MisfirePolicy: p, MisfireThreshold: 10 * time.Second, WorkflowType: worker.RunActivityWorkflowName,
		TaskQueue: "sched", Definition: &schemas.ActivityDefinition{DedupeKeyStrategy: string(p), Tasks: []schemas.TaskSpec{{Type: "noop"}}}}}}
}

// scheduler is one replica's scheduler against the real Temporal server:
// its own ledger connections, the real starter.
func (e *env) scheduler(cfg schedule.Config, clock schedule.Clock, hooks schedule.Hooks) *schedule.Scheduler {
	e.t.Helper()
	lc := ledger.DefaultConfig()
	lc.URL = e.dbURL
	l, err := ledger.Open(context.Background(), lc)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(l.Close)
	st := starter.New(e.tc, starter.Config{Namespace: e.namespace, StartTimeout: 10 * time.Second})
	s, err := schedule.New(cfg, schedule.Options{Store: l, Ledger: l, Starter: st, Clock: clock,
		Registerer: prometheus.NewRegistry(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Hooks: hooks})
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func slotID(at string) string { return decide.WorkflowID(schedActivity, at) }

// Scheduled fires on the real Temporal server, run by the real
// RunActivityWorkflow: two replicas ticking together, a replica that
// crashes after its decision is committed, one that crashes after its
// start and before the mark, and a compressed outage. One execution per
// slot, each completed by the worker with the input the decision stored.
func TestScheduleOneExecutionPerSlot(t *testing.T) {
	e := newEnv(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wcfg := e.config()
	wcfg.Worker.TaskQueue = "sched"
	workerDone := make(chan error, 1)
	go func() {
		workerDone <- app.RunWorker(ctx, wcfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	}()

	clock := &fakeClock{}
	cfg := schedConfig(schedule.Compress)
	a, b := e.scheduler(cfg, clock, schedule.Hooks{}), e.scheduler(cfg, clock, schedule.Hooks{})
	tickBoth := func() {
		var wg sync.WaitGroup
		for _, s := range []*schedule.Scheduler{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := s.Tick(ctx); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	clock.set("2026-03-01T09:00:00.5Z")
	tickBoth()
	clock.set("2026-03-01T09:01:00.5Z")
	tickBoth()
	// Decided, committed, crashed before the start: the others replay it
	// once the dead replica's hold of the trigger (9s: threshold 10s, tick
	// 1s) has ended.
	crashed := e.scheduler(cfg, clock, schedule.Hooks{AfterDecide: func() error { return errors.New("crash") }})
	clock.set("2026-03-01T09:02:00.5Z")
	if err := crashed.Tick(ctx); err == nil {
		t.Fatal("no crash")
	}
	clock.set("2026-03-01T09:02:10Z")
	tickBoth()
	// 28 slots missed; started, then crashed before the mark.
	crashed = e.scheduler(cfg, clock, schedule.Hooks{AfterStart: func() error { return errors.New("crash") }})
	clock.set("2026-03-01T09:30:30Z")
	if err := crashed.Tick(ctx); err == nil {
		t.Fatal("no crash")
	}
	clock.set("2026-03-01T09:30:40Z")
	tickBoth()

	want := []string{slotID("2026-03-01T09:01:00+00:00"), slotID("2026-03-01T09:02:00+00:00"), slotID("2026-03-01T09:30:00+00:00")}
	runs := map[string]string{} // the activity runs (their noop tasks are child workflows of their own)
	if !eventually(time.Minute, func() bool {
		clear(runs)
		for id, st := range e.runsByStatus() {
			if strings.HasPrefix(id, "activity-") {
				runs[id] = st
			}
		}
		for _, id := range want {
			if runs[id] != "completed" {
				return false
			}
		}
		return len(runs) == len(want)
	}) {
		t.Fatalf("runs %v, want one completed run of each of %v", runs, want)
	}
	in := e.workflowInput(want[2])
	if in.TriggerKind != schemas.TriggerCron || in.Fire != "compressed" || in.ScheduledFor != "2026-03-01T09:30:00+00:00" ||
		in.WindowStart != "2026-03-01T09:02:00+00:00" || in.WindowEnd != "2026-03-01T09:30:00+00:00" || in.MissedCount != 28 ||
		in.Definition == nil || in.Definition.DedupeKeyStrategy != "compress" {
		t.Errorf("compressed run's input: %+v", in)
	}
	if in := e.workflowInput(want[0]); in.Fire != "on_time" || in.WindowStart != "2026-03-01T09:00:00+00:00" || in.MissedCount != 0 {
		t.Errorf("on-time run's input: %+v", in)
	}
	// RunActivityWorkflow logged one run per slot.
	var logged int
	if err := e.led.Pool().QueryRow(ctx, `SELECT count(DISTINCT workflow_id) FROM activity_runs WHERE workflow_id = ANY($1) AND status = 'completed'`,
		want).Scan(&logged); err != nil || logged != 3 {
		t.Errorf("activity_runs: %d completed workflows (%v), want 3", logged, err)
	}
	if c, err := e.led.Count(ctx); err != nil || c.Started != 3 || c.Pending != 0 || c.Conflicts != 0 {
		t.Errorf("ledger %+v %v", c, err)
	}
	cancel()
	if err := <-workerDone; err != nil {
		t.Errorf("worker: %v", err)
	}
}

// A route with key scheduled_for and dedup's scheduler name the same
// workflows: a slot an event fired first (spelled with +01:00) is a
// duplicate for the scheduler, a slot the scheduler fired first is a
// duplicate for the router's event (spelled with Z). One execution each,
// no conflict, no dead letter.
func TestScheduleAndScheduledForRouteAgree(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	cfg := e.config()
	cfg.Routes = append(cfg.Routes, decide.Route{ID: schedActivity, Match: decide.Match{Type: "report.due"},
		WorkflowType: worker.RunActivityWorkflowName, TaskQueue: "sched", Key: decide.KeyScheduledFor})
	produce := func(id, at string) {
		rec := &kgo.Record{Topic: e.topic, Value: []byte(`{"specversion":"1.0","id":"` + id + `","source":"crond","type":"report.due","data":{"scheduled_for":"` + at + `"}}`)}
		if err := e.kcl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	clock := &fakeClock{}
	// No worker polls "sched": every run stays open. allow_all, so that
	// the scheduler starts 09:02 while 09:01 is open (overlap skip, skip's
	// default, would not: TestScheduleOverlapSkipHoldsOneRunOpen).
	scfg := schedConfig(schedule.Skip)
	scfg.Triggers[0].Overlap = schedule.OverlapAllowAll
	s := e.scheduler(scfg, clock, schedule.Hooks{})
	clock.set("2026-03-01T09:00:30Z")
	if err := s.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	r := e.startRouter(cfg)
	produce("crond-1", "2026-03-01T10:01:00+01:00") // the event fires 09:01 first
	e.waitCommitted(time.Minute)
	clock.set("2026-03-01T09:01:00.5Z")
	if err := s.Tick(ctx); err != nil { // ... then the scheduler
		t.Fatal(err)
	}
	clock.set("2026-03-01T09:02:00.5Z")
	if err := s.Tick(ctx); err != nil { // the scheduler fires 09:02 first
		t.Fatal(err)
	}
	produce("crond-2", "2026-03-01T09:02:00Z") // ... then the event
	e.waitCommitted(time.Minute)
	r.stop(t)

	want := map[string]int{slotID("2026-03-01T09:01:00+00:00"): 1, slotID("2026-03-01T09:02:00+00:00"): 1}
	if got := e.executions(2); len(got) != 2 || got[slotID("2026-03-01T09:01:00+00:00")] != 1 || got[slotID("2026-03-01T09:02:00+00:00")] != 1 {
		t.Fatalf("executions %v, want %v", got, want)
	}
	if n := counter(r.reg, "dedup_intents_total", "outcome", "conflict"); n != 0 {
		t.Errorf("%v conflicts", n)
	}
	if n := counter(r.reg, "dedup_intents_total", "outcome", "duplicate"); n != 1 {
		t.Errorf("router duplicates %v, want 1 (09:02)", n)
	}
	if dl := e.dlqReasons(); len(dl) != 0 {
		t.Errorf("dead letters %v", dl)
	}
	// The event's run says it is a scheduled slot; the scheduler's own.
	if in := e.workflowInput(slotID("2026-03-01T09:01:00+00:00")); in.TriggerKind != schemas.TriggerCron || in.EventID != "crond-1" ||
		in.ScheduledFor != "2026-03-01T09:01:00+00:00" {
		t.Errorf("09:01 (event first): %+v", in)
	}
	if in := e.workflowInput(slotID("2026-03-01T09:02:00+00:00")); in.Schedule != "report" || in.Fire != "on_time" {
		t.Errorf("09:02 (scheduler first): %+v", in)
	}
}

// `dedup run` as two OS processes with a per-second trigger on
// PostgreSQL's clock, paused and resumed with `dedup schedule`: every
// decided slot started exactly once, nothing decided while paused, the
// pause's slots skipped on resume (skip, threshold 2s), and the two
// replicas' outcome counters add up to the slots decided.
func TestScheduleInDedupRun(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	cfg := e.config()
	cfg.Schedules = schedConfig(schedule.Skip)
	cfg.Schedules.Triggers[0].Cron = "* * * * * *"
	cfg.Schedules.Triggers[0].MisfireThreshold = 2 * time.Second
	// No worker: every run stays open; allow_all so that every slot starts.
	cfg.Schedules.Triggers[0].Overlap = schedule.OverlapAllowAll
	procs := []*proc{e.spawn("r1", cfg), e.spawn("r2", cfg)}
	for _, p := range procs {
		if !eventually(time.Minute, func() bool { return p.ready() == 200 }) {
			t.Fatalf("%s not ready in a minute", p.name)
		}
	}
	fires := func() (n int) {
		if err := e.led.Pool().QueryRow(ctx, `SELECT count(*) FROM dedup_schedule_fires`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if !eventually(30*time.Second, func() bool { return fires() >= 4 }) {
		t.Fatalf("%d fires in 30s of a per-second trigger", fires())
	}
	cli := func(verb string) {
		out, err := exec.Command(dedupBin, "schedule", verb, "report", "--config", e.writeConfig(cfg)).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "trigger report "+verb+"d") {
			t.Fatalf("dedup schedule %s: %v: %s", verb, err, out)
		}
	}
	cli("pause")
	paused := fires()
	time.Sleep(4 * time.Second)
	if n := fires(); n != paused {
		t.Fatalf("%d fires decided while paused", n-paused)
	}
	cli("resume")
	if !eventually(30*time.Second, func() bool { return fires() >= paused+3 }) {
		t.Fatalf("no fires after resume: %d", fires())
	}
	sum := func(outcome string) float64 {
		return procs[0].metric("dedup_schedule_fires_total", "outcome", outcome) + procs[1].metric("dedup_schedule_fires_total", "outcome", outcome)
	}
	if sum("skipped") < 1 {
		t.Errorf("the pause's slots were not skipped on resume: %v skipped", sum("skipped"))
	}
	cli("pause") // nothing decided from here: count, then stop
	// A tick's counter follows its decision's commit: a tick that committed
	// just before the pause may not have counted yet.
	eventually(10*time.Second, func() bool { return int(sum("on_time")) == fires() })
	n := fires()
	onTime := sum("on_time")
	for _, p := range procs {
		p.stop(t)
	}
	var started, runs int
	if err := e.led.Pool().QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'started'), count(DISTINCT workflow_id) FROM dedup_schedule_fires`).Scan(&started, &runs); err != nil {
		t.Fatal(err)
	}
	if started != n || runs != n {
		t.Errorf("fires: %d, %d started, %d workflow IDs", n, started, runs)
	}
	if c, err := e.led.Count(ctx); err != nil || c.Started != int64(n) || c.Pending != 0 {
		t.Errorf("ledger %+v %v, want %d started", c, err, n)
	}
	got := e.executions(n)
	for id, k := range got {
		if k != 1 {
			t.Errorf("%s: %d executions", id, k)
		}
	}
	if len(got) != n {
		t.Errorf("%d executions, want %d", len(got), n)
	}
	if int(onTime) != n {
		t.Errorf("on_time %v over both replicas, want the %d fires (each slot counted once)", onTime, n)
	}
}
