package schedule_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/schedule"
	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/sink/ledger"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

// clock is the injected clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now(context.Context) (time.Time, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now, nil
}

func (c *clock) set(s string) {
	c.mu.Lock()
	c.now = utc(s)
	c.mu.Unlock()
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// temporal stands in for Temporal under reject_duplicate: one execution
// per workflow ID; a second start is "already started" with its run. Runs
// close as soon as they start, unless the test holds them open (no worker
// polls their task queue, or their workflow blocks).
type temporal struct {
	mu       sync.Mutex
	runs     map[string]schemas.WorkflowInput
	ids      map[string]string
	starts   int
	holdOpen bool            // runs started from now on stay open
	open     map[string]bool // workflow IDs whose run is open
}

func newTemporal() *temporal {
	return &temporal{runs: map[string]schemas.WorkflowInput{}, ids: map[string]string{}, open: map[string]bool{}}
}

func (f *temporal) Start(ctx context.Context, req decide.StartRequest) (processor.StartResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.starts++
	if req.ReusePolicy != decide.ReuseRejectDuplicate {
		return processor.StartResult{}, processor.Permanent(fmt.Errorf("policy %s", req.ReusePolicy))
	}
	if id, ok := f.ids[req.WorkflowID]; ok {
		return processor.StartResult{RunID: id, AlreadyStarted: true}, nil
	}
	f.ids[req.WorkflowID] = fmt.Sprintf("run-%d", len(f.ids)+1)
	f.runs[req.WorkflowID] = req.Input
	if f.holdOpen {
		f.open[req.WorkflowID] = true
	}
	return processor.StartResult{RunID: f.ids[req.WorkflowID]}, nil
}

func (f *temporal) LastRun(_ context.Context, _, workflowID string) (decide.Run, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id, ok := f.ids[workflowID]
	if !ok {
		return decide.Run{}, processor.Permanent(fmt.Errorf("workflow %s not found", workflowID))
	}
	return decide.Run{ID: id, Closed: !f.open[workflowID]}, nil
}

// hold makes the runs started from now on stay open, or, with false,
// closes every run and lets later ones close at once.
func (f *temporal) hold(open bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holdOpen = open
	if !open {
		clear(f.open)
	}
}

// executions lists the scheduled_for keys of the executions, sorted.
func (f *temporal) executions() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, in := range f.runs {
		out = append(out, in.ScheduledFor)
	}
	sort.Strings(out)
	return out
}

func (f *temporal) input(scheduledFor string) schemas.WorkflowInput {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, in := range f.runs {
		if in.ScheduledFor == scheduledFor {
			return in
		}
	}
	return schemas.WorkflowInput{}
}

// world is one database, one Temporal and one clock, shared by replicas.
type world struct {
	t     *testing.T
	url   string
	clock *clock
	tmp   *temporal
	led   *ledger.Postgres
}

func newWorld(t *testing.T) *world {
	t.Helper()
	url := pgtest.NewDatabase(t)
	if err := ledger.Migrate(context.Background(), url); err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, url: url, clock: &clock{}, tmp: newTemporal()}
	w.led = w.open()
	return w
}

func (w *world) open() *ledger.Postgres {
	cfg := ledger.DefaultConfig()
	cfg.URL = w.url
	l, err := ledger.Open(context.Background(), cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(l.Close)
	return l
}

// replica is one dedup replica's scheduler (its own connections,
// registry and log).
type replica struct {
	*schedule.Scheduler
	reg  *prometheus.Registry
	logs *logBuffer
}

func (w *world) replica(cfg schedule.Config, hooks schedule.Hooks) *replica {
	w.t.Helper()
	l := w.open()
	reg := prometheus.NewRegistry()
	logs := &logBuffer{}
	s, err := schedule.New(cfg, schedule.Options{Store: l, Ledger: l, Starter: w.tmp, Clock: w.clock,
		Registerer: reg, Log: slog.New(slog.NewTextHandler(logs, nil)), Hooks: hooks})
	if err != nil {
		w.t.Fatal(err)
	}
	return &replica{Scheduler: s, reg: reg, logs: logs}
}

// logBuffer keeps a replica's log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the lines that contain every one of parts.
func (b *logBuffer) lines(parts ...string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, l := range strings.Split(b.buf.String(), "\n") {
		ok := l != ""
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}

func (r *replica) tick(t *testing.T) {
	t.Helper()
	if err := r.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// outcomes sums dedup_schedule_fires_total by outcome over registries.
func outcomes(regs ...*prometheus.Registry) map[string]float64 {
	out := map[string]float64{}
	for _, reg := range regs {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() != "dedup_schedule_fires_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" {
						out[l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return out
}

func gauge(reg *prometheus.Registry, name string) float64 {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

func oneTrigger(spec string, p schedule.Policy, threshold time.Duration) schedule.Config {
	return schedule.Config{Tick: time.Second, Triggers: []schedule.Trigger{{Name: "report", ActivityID: "550e8400-e29b-41d4-a716-446655440000",
		Cron: spec, MisfirePolicy: p, MisfireThreshold: threshold, WorkflowType: "RunActivityWorkflow", TaskQueue: "activities",
		Definition: &schemas.ActivityDefinition{DedupeKeyStrategy: string(p), Tasks: []schemas.TaskSpec{{Type: "noop"}}}}}}
}

// fireStates counts dedup_schedule_fires rows by state.
func (w *world) fireStates() map[schedule.FireState]int {
	rows, err := w.led.Pool().Query(context.Background(), `SELECT state, count(*) FROM dedup_schedule_fires GROUP BY state`)
	if err != nil {
		w.t.Fatal(err)
	}
	defer rows.Close()
	out := map[schedule.FireState]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			w.t.Fatal(err)
		}
		out[schedule.FireState(s)] = n
	}
	return out
}

func keys(from string, n int, step time.Duration) []string {
	var out []string
	for i, t := 0, utc(from); i < n; i, t = i+1, t.Add(step) {
		out = append(out, decide.ScheduledForKey(t))
	}
	return out
}

func same(a, b []string) bool {
	return fmt.Sprint(a) == fmt.Sprint(b)
}

// Two replicas tick the same per-second trigger at the same instants for a
// minute: every slot is decided once and runs once; the outcome counters
// of both add up to the slots.
func TestTwoReplicasOneRunPerSlot(t *testing.T) {
	w := newWorld(t)
	cfg := oneTrigger("* * * * * *", schedule.Catchup, 5*time.Second)
	a, b := w.replica(cfg, schedule.Hooks{}), w.replica(cfg, schedule.Hooks{})
	w.clock.set("2026-03-01T09:00:00.2Z")
	for i := 0; i <= 60; i++ {
		var wg sync.WaitGroup
		for _, r := range []*replica{a, b} {
			wg.Add(1)
			go func() { defer wg.Done(); r.tick(t) }()
		}
		wg.Wait()
		w.clock.add(time.Second)
	}
	if got, want := w.tmp.executions(), keys("2026-03-01T09:00:01Z", 60, time.Second); !same(got, want) {
		t.Fatalf("executions %v, want one per slot %v", got, want)
	}
	if o := outcomes(a.reg, b.reg); o["on_time"] != 60 || o["catchup"]+o["skipped"]+o["compressed"] != 0 {
		t.Errorf("outcomes %v, want 60 on time", o)
	}
	if st := w.fireStates(); st[schedule.FireStarted] != 60 || len(st) != 1 {
		t.Errorf("fires %v", st)
	}
}

// Two replicas whose ticks line up (started together, every second, for a
// minute): one start call per slot, never a second one sent to Temporal
// for a fire the other replica decided and is starting. The cursor one
// holds is left to it until its tick has started what it decided.
func TestTwoReplicasTickingTogetherSendEachFireOnce(t *testing.T) {
	w := newWorld(t)
	cfg := oneTrigger("* * * * * *", schedule.Skip, 5*time.Second)
	a, b := w.replica(cfg, schedule.Hooks{}), w.replica(cfg, schedule.Hooks{})
	w.clock.set("2026-03-01T09:00:00.2Z")
	for i := 0; i <= 60; i++ {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, r := range []*replica{a, b} {
			wg.Add(1)
			go func() { defer wg.Done(); <-start; r.tick(t) }()
		}
		close(start)
		wg.Wait()
		w.clock.add(time.Second)
	}
	if got, want := w.tmp.executions(), keys("2026-03-01T09:00:01Z", 60, time.Second); !same(got, want) {
		t.Fatalf("executions %v, want one per slot %v", got, want)
	}
	dup := counter(a.reg, "dedup_schedule_starts_total", "duplicate") + counter(b.reg, "dedup_schedule_starts_total", "duplicate")
	if w.tmp.starts != 60 || dup != 0 {
		t.Errorf("%d start calls for 60 slots, %v counted duplicate; want 60 and 0", w.tmp.starts, dup)
	}
}

// A replica decides a slot and stops before starting it for longer than
// its hold of the trigger (a crash, or a pause: threshold 10s, tick 1s, a
// hold of 9s); the other replica, ticking after the hold, starts it; then
// the first goes on and starts it too. One execution.
func TestDoubleFireFromTwoReplicasAndACrash(t *testing.T) {
	w := newWorld(t)
	cfg := oneTrigger("* * * * *", schedule.Compress, 10*time.Second)
	proceed, bDone := make(chan struct{}), make(chan struct{})
	stalls := 0
	a := w.replica(cfg, schedule.Hooks{AfterDecide: func() error {
		if stalls++; stalls == 2 {
			<-proceed // decided and committed; b ticks now
		}
		return nil
	}})
	b := w.replica(cfg, schedule.Hooks{})
	w.clock.set("2026-03-01T09:00:00.5Z")
	a.tick(t) // creates the cursor
	w.clock.set("2026-03-01T09:01:00.5Z")
	done := make(chan error)
	go func() { done <- a.Tick(context.Background()) }()
	go func() {
		defer close(bDone)
		// Wait for a's decision to commit, then tick b over the same
		// fire once a's hold has ended.
		for i := 0; i < 200; i++ {
			if w.fireStates()[schedule.FirePending] == 1 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		w.clock.set("2026-03-01T09:01:10Z")
		b.tick(t)
	}()
	<-bDone
	close(proceed)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// And a crash: a decides 09:02 and dies before starting it; b leaves
	// it while the dead replica's hold lasts, then replays it.
	crash := w.replica(cfg, schedule.Hooks{AfterDecide: func() error { return errors.New("crash") }})
	w.clock.set("2026-03-01T09:02:00.5Z")
	if err := crash.Tick(context.Background()); err == nil {
		t.Fatal("crash hook not called")
	}
	w.clock.set("2026-03-01T09:02:01.5Z")
	b.tick(t)
	if n := len(w.tmp.executions()); n != 1 {
		t.Fatalf("%d executions: b started a fire the crashed replica still held", n)
	}
	w.clock.set("2026-03-01T09:02:10Z")
	b.tick(t)
	if got, want := w.tmp.executions(), keys("2026-03-01T09:01:00Z", 2, time.Minute); !same(got, want) {
		t.Fatalf("executions %v, want %v", got, want)
	}
	// a's fire of 09:01 came after b's: the ledger answered it started.
	if n := counter(a.reg, "dedup_schedule_starts_total", "duplicate"); n != 1 {
		t.Errorf("a's duplicate fires: %v, want 1 (the test did not fire 09:01 twice)", n)
	}
}

func counter(reg *prometheus.Registry, name, result string) float64 {
	mfs, _ := reg.Gather()
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

// A crash between the decision's commit and the start: the next tick (on
// any replica, much later) starts the stored fire with the window decided
// then, and decides the later slots on their own. Nothing lost, no second
// window.
func TestCrashBetweenDecisionAndStart(t *testing.T) {
	w := newWorld(t)
	cfg := oneTrigger("* * * * *", schedule.Compress, 10*time.Second)
	crash := w.replica(cfg, schedule.Hooks{AfterDecide: func() error { return errors.New("crash") }})
	w.clock.set("2026-03-01T09:00:00.5Z")
	if err := crash.Tick(context.Background()); err == nil {
		t.Fatal("no crash")
	}
	ok := w.replica(cfg, schedule.Hooks{})
	w.clock.set("2026-03-01T09:00:30Z")
	ok.tick(t)
	w.clock.set("2026-03-01T09:25:30Z") // 25 slots missed
	if err := crash.Tick(context.Background()); err == nil {
		t.Fatal("no crash")
	}
	if n := len(w.tmp.executions()); n != 0 {
		t.Fatalf("%d executions before any start", n)
	}
	w.clock.set("2026-03-01T09:40:30Z") // 15 more missed
	ok.tick(t)
	got := w.tmp.executions()
	if want := []string{"2026-03-01T09:25:00+00:00", "2026-03-01T09:40:00+00:00"}; !same(got, want) {
		t.Fatalf("executions %v, want %v", got, want)
	}
	first, second := w.tmp.input(got[0]), w.tmp.input(got[1])
	if first.WindowStart != "2026-03-01T09:00:00+00:00" || first.WindowEnd != "2026-03-01T09:25:00+00:00" || first.MissedCount != 25 {
		t.Errorf("the stored fire ran with %s..%s missed %d, want the window decided before the crash", first.WindowStart, first.WindowEnd, first.MissedCount)
	}
	if second.WindowStart != "2026-03-01T09:25:00+00:00" || second.MissedCount != 15 {
		t.Errorf("the later fire: %s..%s missed %d", second.WindowStart, second.WindowEnd, second.MissedCount)
	}
	if o := outcomes(crash.reg, ok.reg); o["compressed"] != 40 {
		t.Errorf("outcomes %v, want the 40 slots compressed", o)
	}
}

// A crash after the start and before the ledger mark: the next tick
// re-drives the claim, Temporal says already started, one execution.
func TestCrashBetweenStartAndMark(t *testing.T) {
	w := newWorld(t)
	cfg := oneTrigger("* * * * *", schedule.Skip, 10*time.Second)
	crash := w.replica(cfg, schedule.Hooks{AfterStart: func() error { return errors.New("crash") }})
	ok := w.replica(cfg, schedule.Hooks{})
	w.clock.set("2026-03-01T09:00:00.5Z")
	ok.tick(t)
	w.clock.set("2026-03-01T09:01:00.5Z")
	if err := crash.Tick(context.Background()); err == nil {
		t.Fatal("no crash")
	}
	w.clock.set("2026-03-01T09:01:10Z") // the crashed replica's hold (9s) has ended
	ok.tick(t)
	if got := w.tmp.executions(); !same(got, []string{"2026-03-01T09:01:00+00:00"}) || w.tmp.starts != 2 {
		t.Fatalf("executions %v after %d starts, want one after two", got, w.tmp.starts)
	}
	if c, _ := w.led.Count(context.Background()); c.Started != 1 || c.Pending != 0 {
		t.Errorf("ledger %+v", c)
	}
}

// The input carries the trigger kind, the slot, the window and the missed
// count; the workflow ID is the seed contract's. A compressed run whose own
// slot is on time counts the same slots in its input, its log line and
// fires_total; the trigger's first window starts at the slot before its
// first slot.
func TestFireInput(t *testing.T) {
	w := newWorld(t)
	r := w.replica(oneTrigger("0 9 * * *", schedule.Compress, time.Minute), schedule.Hooks{})
	w.clock.set("2026-02-25T12:00:00Z")
	r.tick(t)
	w.clock.set("2026-03-01T09:00:30Z") // 26, 27, 28 Feb 09:00 missed; 1 Mar on time
	r.tick(t)
	in := w.tmp.input("2026-03-01T09:00:00+00:00")
	want := schemas.WorkflowInput{WorkflowID: "activity-550e8400-e29b-41d4-a716-446655440000:2026-03-01T09:00:00+00:00",
		ActivityID: "550e8400-e29b-41d4-a716-446655440000", TriggerKind: "cron", ScheduledFor: "2026-03-01T09:00:00+00:00",
		Schedule: "report", Fire: "compressed", WindowStart: "2026-02-25T09:00:00+00:00", WindowEnd: "2026-03-01T09:00:00+00:00", MissedCount: 4,
		IDRule: "schedule", EventID: "schedule/report/2026-03-01T09:00:00+00:00"}
	if in.WorkflowID != want.WorkflowID || in.TriggerKind != want.TriggerKind || in.ScheduledFor != want.ScheduledFor ||
		in.Schedule != want.Schedule || in.Fire != want.Fire || in.WindowStart != want.WindowStart || in.WindowEnd != want.WindowEnd ||
		in.MissedCount != want.MissedCount || in.IDRule != want.IDRule || in.EventID != want.EventID || in.ActivityID != want.ActivityID ||
		in.Definition == nil || in.Definition.DedupeKeyStrategy != "compress" {
		t.Errorf("input\n%+v\nwant\n%+v", in, want)
	}
	if o := outcomes(r.reg); o["compressed"] != 4 || o["on_time"] != 0 {
		t.Errorf("fires_total %v, want the 4 slots the run covers compressed", o)
	}
	if l := r.logs.lines("schedule decided", "compressed=4"); len(l) != 1 {
		t.Errorf("log: %q, want one decision with compressed=4", r.logs.lines("schedule decided"))
	}
	if g := gauge(r.reg, "dedup_schedule_last_fire_timestamp_seconds"); g != float64(utc("2026-03-01T09:00:00Z").Unix()) {
		t.Errorf("last fire gauge %v", g)
	}
	if g := gauge(r.reg, "dedup_schedule_next_fire_timestamp_seconds"); g != float64(utc("2026-03-02T09:00:00Z").Unix()) {
		t.Errorf("next fire gauge %v", g)
	}
	if g := gauge(r.reg, "dedup_schedule_interval_seconds"); g != 86400 {
		t.Errorf("interval gauge %v", g)
	}
}

// An on-time run's input says missed_count 0 (present, as the docs'
// table has it; an event's input has none), and a new trigger's first run
// covers the interval from the slot before it.
func TestOnTimeInput(t *testing.T) {
	w := newWorld(t)
	r := w.replica(oneTrigger("* * * * *", schedule.Skip, 10*time.Second), schedule.Hooks{})
	w.clock.set("2026-03-01T09:00:30Z") // first seen
	r.tick(t)
	w.clock.set("2026-03-01T09:01:00.5Z")
	r.tick(t)
	in := w.tmp.input("2026-03-01T09:01:00+00:00")
	if in.Fire != "on_time" || in.WindowStart != "2026-03-01T09:00:00+00:00" || in.WindowEnd != "2026-03-01T09:01:00+00:00" {
		t.Errorf("first run: %s (%s, %s], want on_time (09:00, 09:01]", in.Fire, in.WindowStart, in.WindowEnd)
	}
	raw, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(raw, &fields); err != nil {
		t.Fatal(err)
	}
	if n, ok := fields["missed_count"]; !ok || n != 0.0 {
		t.Errorf("on-time input: missed_count %v (present %v), want 0: %s", n, ok, raw)
	}
	raw, _ = json.Marshal(schemas.WorkflowInput{WorkflowID: "activity-a:e1", TriggerKind: schemas.TriggerEvent, Data: json.RawMessage(`{}`)})
	if strings.Contains(string(raw), "missed_count") {
		t.Errorf("an event's input has a missed_count: %s", raw)
	}
}

// Paused across 25 slots, resumed: the policy applies to the pause's
// slots; then the schedule goes on on time.
func TestPauseResume(t *testing.T) {
	cases := map[schedule.Policy][]string{
		schedule.Skip:     {"09:01", "09:27"},
		schedule.Catchup:  {"09:01", "09:17", "09:18", "09:19", "09:20", "09:21", "09:22", "09:23", "09:24", "09:25", "09:26", "09:27"},
		schedule.Compress: {"09:01", "09:26", "09:27"},
	}
	for p, want := range cases {
		t.Run(string(p), func(t *testing.T) {
			w := newWorld(t)
			cfg := oneTrigger("* * * * *", p, 10*time.Second)
			r := w.replica(cfg, schedule.Hooks{})
			w.clock.set("2026-03-01T09:00:00.5Z")
			r.tick(t)
			w.clock.set("2026-03-01T09:01:00.5Z")
			r.tick(t)
			w.clock.set("2026-03-01T09:01:30Z")
			if err := schedule.SetPaused(context.Background(), cfg, w.led, w.clock, "report", true); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 50; i++ { // ticks every 30s to 09:26:30: nothing fires
				w.clock.add(30 * time.Second)
				r.tick(t)
			}
			if n := len(w.tmp.executions()); n != 1 {
				t.Fatalf("%d executions while paused, want the one before", n)
			}
			if g := gauge(r.reg, "dedup_schedule_paused"); g != 1 {
				t.Errorf("paused gauge %v", g)
			}
			// Not in the past while paused: the next slot after now (09:26:30).
			if g := gauge(r.reg, "dedup_schedule_next_fire_timestamp_seconds"); g != float64(utc("2026-03-01T09:27:00Z").Unix()) {
				t.Errorf("next fire gauge while paused: %s, want 09:27:00", time.Unix(int64(g), 0).UTC())
			}
			w.clock.set("2026-03-01T09:26:40Z")
			if err := schedule.SetPaused(context.Background(), cfg, w.led, w.clock, "report", false); err != nil {
				t.Fatal(err)
			}
			r.tick(t)
			w.clock.set("2026-03-01T09:27:00.5Z")
			r.tick(t)
			var got []string
			for _, k := range w.tmp.executions() {
				got = append(got, k[11:16])
			}
			if !same(got, want) {
				t.Fatalf("executions %v, want %v", got, want)
			}
			o := outcomes(r.reg)
			if o["on_time"]+o["catchup"]+o["compressed"]+o["skipped"] != 27 {
				t.Errorf("outcomes %v, want 27 slots", o)
			}
			if p == schedule.Compress {
				if in := w.tmp.input("2026-03-01T09:26:00+00:00"); in.WindowStart != "2026-03-01T09:01:00+00:00" || in.MissedCount != 25 {
					t.Errorf("compressed run %s..%s missed %d", in.WindowStart, in.WindowEnd, in.MissedCount)
				}
			}
		})
	}
	// An unknown trigger is refused.
	w := newWorld(t)
	if err := schedule.SetPaused(context.Background(), oneTrigger("* * * * *", schedule.Skip, 10*time.Second), w.led, w.clock, "nope", true); err == nil {
		t.Error("paused an unknown trigger")
	}
}

// A slot that came due while the trigger was paused follows the misfire
// policy on resume even when the resume comes within misfire_threshold of
// it: paused at 09:01:30, resumed at 09:02:20, decided at 09:02:21 (21 s
// after 09:02, threshold 60 s). Skip skips it, catchup runs it as a
// catch-up, compress as a compressed run; 09:03 then runs on time.
func TestPauseSlotWithinThresholdFollowsThePolicy(t *testing.T) {
	for p, want := range map[schedule.Policy]string{schedule.Skip: "", schedule.Catchup: "catchup", schedule.Compress: "compressed"} {
		t.Run(string(p), func(t *testing.T) {
			w := newWorld(t)
			cfg := oneTrigger("* * * * *", p, time.Minute)
			r := w.replica(cfg, schedule.Hooks{})
			w.clock.set("2026-03-01T09:00:30Z")
			r.tick(t)
			w.clock.set("2026-03-01T09:01:00.5Z")
			r.tick(t)
			w.clock.set("2026-03-01T09:01:30Z")
			if err := schedule.SetPaused(context.Background(), cfg, w.led, w.clock, "report", true); err != nil {
				t.Fatal(err)
			}
			w.clock.set("2026-03-01T09:02:00.5Z")
			r.tick(t)
			w.clock.set("2026-03-01T09:02:20Z")
			if err := schedule.SetPaused(context.Background(), cfg, w.led, w.clock, "report", false); err != nil {
				t.Fatal(err)
			}
			w.clock.set("2026-03-01T09:02:21Z")
			r.tick(t)
			w.clock.set("2026-03-01T09:03:00.5Z")
			r.tick(t)
			in := w.tmp.input("2026-03-01T09:02:00+00:00")
			if in.Fire != want {
				t.Errorf("09:02, due while paused: fire %q, want %q", in.Fire, want)
			}
			if in := w.tmp.input("2026-03-01T09:03:00+00:00"); in.Fire != "on_time" {
				t.Errorf("09:03 after the resume: fire %q, want on_time", in.Fire)
			}
			o := outcomes(r.reg)
			if p == schedule.Skip && (o["skipped"] != 1 || o["on_time"] != 2) {
				t.Errorf("outcomes %v, want 09:02 skipped, 09:01 and 09:03 on time", o)
			}
		})
	}
}

// A skip trigger whose runs stay open (no worker, or a workflow that
// blocks): one run at a time, as Temporal's ScheduleOverlapPolicy.SKIP
// would have it. 22 slots come due while the first run is open: none of
// them starts; each is counted skipped_overlap and logged. When the run
// closes, the next slot runs.
func TestOverlapSkipWhileThePreviousRunIsOpen(t *testing.T) {
	w := newWorld(t)
	cfg := oneTrigger("* * * * *", schedule.Skip, 10*time.Second)
	r := w.replica(cfg, schedule.Hooks{})
	w.tmp.hold(true)
	w.clock.set("2026-03-01T09:00:30Z")
	r.tick(t)
	for m := 1; m <= 23; m++ {
		w.clock.set(fmt.Sprintf("2026-03-01T09:%02d:00.5Z", m))
		r.tick(t)
	}
	if got := w.tmp.executions(); !same(got, []string{"2026-03-01T09:01:00+00:00"}) {
		t.Fatalf("%d runs open at once %v, want the first only", len(got), got)
	}
	if o := outcomes(r.reg); o["skipped_overlap"] != 22 || o["on_time"] != 1 {
		t.Errorf("outcomes %v, want 1 on time and 22 skipped_overlap", o)
	}
	if l := r.logs.lines("previous run is still open", "trigger=report"); len(l) != 22 {
		t.Errorf("%d overlap log lines, want 22: %q", len(l), l)
	}
	w.tmp.hold(false) // the run completes
	w.clock.set("2026-03-01T09:24:00.5Z")
	r.tick(t)
	if got := w.tmp.executions(); !same(got, []string{"2026-03-01T09:01:00+00:00", "2026-03-01T09:24:00+00:00"}) {
		t.Errorf("after the run closed: executions %v", got)
	}
}

// A compress trigger under overlap skip, its run open: the compressed run
// that covers 09:02..09:06 is skipped for overlap, and its log line lists
// the five slots skipped_overlap counts, not only the run's own 09:06.
func TestOverlapLogLineOfACompressedRunListsTheSlotsItSkipped(t *testing.T) {
	w := newWorld(t)
	cfg := oneTrigger("* * * * *", schedule.Compress, 10*time.Second)
	cfg.Triggers[0].Overlap = schedule.OverlapSkip
	r := w.replica(cfg, schedule.Hooks{})
	w.tmp.hold(true)
	w.clock.set("2026-03-01T09:00:30Z")
	r.tick(t)
	w.clock.set("2026-03-01T09:01:00.5Z") // 09:01 runs and stays open
	r.tick(t)
	w.clock.set("2026-03-01T09:06:00.5Z") // 09:02..09:05 misfired, 09:06 on time: one compressed run
	r.tick(t)
	if o := outcomes(r.reg); o["skipped_overlap"] != 5 {
		t.Fatalf("outcomes %v, want 5 skipped_overlap (09:02 .. 09:06)", o)
	}
	l := r.logs.lines("previous run is still open", "trigger=report")
	if len(l) != 1 {
		t.Fatalf("%d overlap log lines, want 1: %q", len(l), l)
	}
	for m := 2; m <= 6; m++ {
		if slot := fmt.Sprintf("2026-03-01T09:%02d:00+00:00", m); !strings.Contains(l[0], slot) {
			t.Errorf("overlap log line %q does not list slot %s, which it skipped", l[0], slot)
		}
	}
}

// The clock moves backwards after a fire: nothing fires again, and the
// schedule resumes when the clock passes the next slot.
func TestClockBackwardsNoRefire(t *testing.T) {
	w := newWorld(t)
	r := w.replica(oneTrigger("* * * * *", schedule.Catchup, 10*time.Second), schedule.Hooks{})
	w.clock.set("2026-03-01T09:04:59Z")
	r.tick(t)
	w.clock.set("2026-03-01T09:05:00.5Z")
	r.tick(t)
	for _, back := range []string{"2026-03-01T09:02:00Z", "2026-03-01T08:00:00Z", "2026-03-01T09:05:00Z"} {
		w.clock.set(back)
		r.tick(t)
	}
	w.clock.set("2026-03-01T09:06:00.5Z")
	r.tick(t)
	if got := w.tmp.executions(); !same(got, []string{"2026-03-01T09:05:00+00:00", "2026-03-01T09:06:00+00:00"}) || w.tmp.starts != 2 {
		t.Fatalf("executions %v after %d starts", got, w.tmp.starts)
	}
}

// Ticking through the DST days of America/New_York every 10 minutes: the
// 02:30 job runs once on 8 March, at 03:00 EDT (07:00Z); the 01:30 job
// runs once on 1 November, at 01:30 EDT (05:30Z).
func TestDSTNewYorkThroughTheScheduler(t *testing.T) {
	for _, c := range []struct {
		spec, from, to string
		want           []string
	}{
		{"30 2 * * *", "2026-03-07T05:00:00Z", "2026-03-10T05:00:00Z",
			[]string{"2026-03-07T07:30:00+00:00", "2026-03-08T07:00:00+00:00", "2026-03-09T06:30:00+00:00"}},
		{"30 1 * * *", "2026-10-31T04:00:00Z", "2026-11-03T05:00:00Z",
			[]string{"2026-10-31T05:30:00+00:00", "2026-11-01T05:30:00+00:00", "2026-11-02T06:30:00+00:00"}},
	} {
		w := newWorld(t)
		cfg := oneTrigger(c.spec, schedule.Skip, 15*time.Minute)
		cfg.Triggers[0].TimeZone = "America/New_York"
		r := w.replica(cfg, schedule.Hooks{})
		w.clock.set(c.from)
		for end := utc(c.to); ; w.clock.add(10 * time.Minute) {
			now, _ := w.clock.Now(context.Background())
			if now.After(end) {
				break
			}
			r.tick(t)
		}
		if got := w.tmp.executions(); !same(got, c.want) {
			t.Errorf("%s: executions %v, want %v", c.spec, got, c.want)
		}
		if o := outcomes(r.reg); o["skipped"] != 0 {
			t.Errorf("%s: %v skipped", c.spec, o)
		}
	}
}
