package schedule

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
)

// Clock tells the scheduler the time. Production uses PostgreSQL's clock
// (one clock for every replica, whatever their hosts' clocks say); tests
// inject theirs.
type Clock interface {
	Now(ctx context.Context) (time.Time, error)
}

// ClockFunc adapts a function to Clock.
type ClockFunc func(ctx context.Context) (time.Time, error)

// Now calls f.
func (f ClockFunc) Now(ctx context.Context) (time.Time, error) { return f(ctx) }

// Store keeps the triggers' cursors and decided fires (sink/ledger
// implements it in PostgreSQL). Every method is safe to retry.
type Store interface {
	// Decide runs one decision round in one transaction: it creates the
	// cursors of triggers seen for the first time (at r.Now), locks the
	// cursors of r.Triggers that no other scheduler holds (skipping, with
	// no waiting, those locked by another round in progress and those
	// another holder holds until after r.Now), calls decide for each
	// locked cursor, stores each decision (the new cursor, and its fires,
	// a slot's first decision kept if one exists), holds every locked
	// trigger left with fires to start for r.Holder until r.HoldUntil,
	// and commits. It returns those fires, oldest first per trigger: the
	// ones just decided and any an earlier round decided but did not see
	// started (a crash, a failed start).
	Decide(ctx context.Context, r Round, decide func(Cursor) Decision) ([]Fire, error)
	// Release ends holder's holds of the triggers (once their fires are
	// started or given up for this tick).
	Release(ctx context.Context, holder string, triggers []string) error
	// EndFires records how fires ended (started, failed, conflict).
	EndFires(ctx context.Context, ends []FireEnd) error
	// SetPaused pauses or resumes a trigger (creating its cursor at now if
	// it has none); a resume of a paused trigger records now as its
	// resume (Cursor.ResumedAt).
	SetPaused(ctx context.Context, trigger string, paused bool, now time.Time) error
	// Cursors reads the named triggers' cursors (no lock) and, per
	// trigger, the newest slot whose run started.
	Cursors(ctx context.Context, triggers []string) ([]CursorState, error)
}

// Round is one scheduler's decision round (Store.Decide).
type Round struct {
	Triggers []string
	Now      time.Time // the scheduler's clock
	// Holder names the scheduler. A trigger it leaves the round with
	// fires to start is its own until HoldUntil (or its Release): another
	// scheduler's round leaves the trigger and its fires alone meanwhile,
	// so that a fire is sent to Temporal by the replica that decided it,
	// once, not also by one whose tick came a few milliseconds later.
	Holder    string
	HoldUntil time.Time
}

// FireEnd says how a fire ended.
type FireEnd struct {
	Trigger      string
	ScheduledFor time.Time
	State        FireState // FireStarted, FireFailed, FireConflict
	RunID        string
}

// CursorState is a cursor with the newest started slot.
type CursorState struct {
	Cursor
	LastStarted time.Time // zero if no run started
}

// Hooks let tests stop a tick where a crash would: a hook's error ends
// the tick there, as a crash would, leaving the triggers held until their
// hold ends (a failed tick releases them).
type Hooks struct {
	// AfterDecide runs after the decisions are committed and before any
	// start.
	AfterDecide func() error
	// AfterStart runs after a fire's start and before it is marked.
	AfterStart func() error
}

// crash is a hook's error: the tick ends as if the process had died.
type crash struct{ error }

func (c crash) Unwrap() error { return c.error }

// Scheduler fires the configured triggers. Any number of replicas may run
// one against the same PostgreSQL: each trigger's cursor is locked by at
// most one of them per tick, the decision is committed before any start,
// and every fire is claimed in the ledger and started with
// reject-duplicate, like an event, so a crash or a second replica replays
// a fire without a second run.
type Scheduler struct {
	cfg     Config
	store   Store
	ledger  processor.Ledger
	starter processor.Starter
	clock   Clock
	log     *slog.Logger
	m       *metrics
	hooks   Hooks
	names   []string
	byName  map[string]*Trigger
	maxWalk int
	holder  string        // this scheduler, in the cursors it holds
	hold    time.Duration // how long it holds a trigger it decided fires for
}

// MaxHold bounds a scheduler's hold of a trigger (Round.HoldUntil): a
// replica that dies after deciding leaves its triggers to the others that
// long at most.
const MaxHold = 30 * time.Second

// holdFor is how long a scheduler holds the triggers it decides fires for:
// long enough for its tick to start them, and short enough that a replica
// dying mid-tick delays the next decision of its triggers by less than
// their misfire threshold (minus the tick that decides it): MaxHold, or
// less for a trigger with a short threshold. A tick that takes longer than
// that may see its fires started a second time by another replica, which
// Temporal answers "already started": a duplicate, never a second run.
func holdFor(cfg Config) time.Duration {
	h := MaxHold
	for _, t := range cfg.Triggers {
		h = min(h, t.MisfireThreshold-cfg.Tick)
	}
	return h
}

// New validates cfg and o and builds a scheduler.
func New(cfg Config, o Options) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	store, ledger, starter, clock, reg, log, hooks := o.Store, o.Ledger, o.Starter, o.Clock, o.Registerer, o.Log, o.Hooks
	var id [6]byte
	_, _ = rand.Read(id[:])
	host, _ := os.Hostname()
	s := &Scheduler{cfg: cfg, store: store, ledger: ledger, starter: starter, clock: clock, log: log, hooks: hooks,
		byName: map[string]*Trigger{}, maxWalk: MaxWalk, hold: holdFor(cfg),
		holder: fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(id[:]))}
	for i := range s.cfg.Triggers {
		t := &s.cfg.Triggers[i]
		s.names = append(s.names, t.Name)
		s.byName[t.Name] = t
	}
	m, err := newMetrics(reg, s.names)
	if err != nil {
		return nil, err
	}
	s.m = m
	return s, nil
}

// stopGrace is how long a tick in progress may go on once Run's context
// ends: long enough to start what it decided, so that a clean shutdown
// leaves no fire for the next tick to replay.
const stopGrace = 10 * time.Second

// Run ticks every cfg.Tick until ctx ends, then lets the tick in progress
// finish (for up to stopGrace). A failed tick is logged and the next one
// tries again: decided fires stay in PostgreSQL until started.
func (s *Scheduler) Run(ctx context.Context) {
	if len(s.names) == 0 {
		return
	}
	t := time.NewTicker(s.cfg.Tick)
	defer t.Stop()
	for {
		tctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		stop := context.AfterFunc(ctx, func() { time.AfterFunc(stopGrace, cancel) })
		if err := s.Tick(tctx); err != nil && tctx.Err() == nil {
			s.log.Warn("schedule tick failed; the next tick retries", "err", err)
		}
		stop()
		cancel()
		if ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Tick decides the due slots of every trigger whose cursor it can lock and
// starts the fires decided (now or by an earlier, interrupted tick). It
// holds the triggers it has fires to start for until they are started,
// then releases them.
func (s *Scheduler) Tick(ctx context.Context) (err error) {
	now, err := s.clock.Now(ctx)
	if err != nil {
		return fmt.Errorf("reading the clock: %w", err)
	}
	now = now.UTC()
	type decidedTrigger struct {
		Decision
		previous PreviousFire
	}
	var decided []decidedTrigger
	r := Round{Triggers: s.names, Now: now, Holder: s.holder, HoldUntil: now.Add(s.hold)}
	pending, err := s.store.Decide(ctx, r, func(cur Cursor) Decision {
		t := s.byName[cur.Trigger]
		d := Decide(t, cur, now, s.maxWalk)
		if t.Overlap == OverlapSkip && len(d.Fires) > 0 {
			// Inside the round's transaction: the trigger is locked, so the
			// previous fire is the newest one while this asks Temporal.
			open, err := s.previousOpen(ctx, t, cur.Previous)
			if err != nil {
				s.log.Warn("schedule: cannot tell whether the previous run is still open; the slots wait for the next tick",
					"trigger", t.Name, "previous_workflow_id", cur.Previous.WorkflowID, "err", err)
				return Decision{Cursor: cur, Counts: map[Outcome]int64{}} // decided nothing
			}
			d = ApplyOverlap(t, cur, d, open)
		}
		for i := range d.Fires {
			d.Fires[i].WorkflowID = decide.WorkflowID(t.ActivityID, decide.ScheduledForKey(d.Fires[i].ScheduledFor))
		}
		decided = append(decided, decidedTrigger{d, cur.Previous})
		return d
	})
	if err != nil {
		return fmt.Errorf("deciding schedules: %w", err)
	}
	if held := heldBy(pending); len(held) > 0 {
		defer func() {
			if errors.As(err, new(crash)) {
				return // a test's crash: the holds stay until they end
			}
			// The tick's context may have ended (shutdown): release anyway,
			// briefly; a release that fails leaves the holds to expire.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if rerr := s.store.Release(rctx, s.holder, held); rerr != nil {
				s.log.Warn("releasing schedule triggers failed; they are held until their hold ends",
					"triggers", held, "hold", s.hold, "err", rerr)
			}
		}()
	}
	for _, d := range decided { // committed: count them once, here
		for o, n := range d.Counts {
			s.m.fires.WithLabelValues(d.Cursor.Trigger, string(o)).Add(float64(n))
		}
		if d.Capped {
			s.log.Warn("schedule outage longer than the walk bound; missed_count is a lower bound",
				"trigger", d.Cursor.Trigger, "max_walk", s.maxWalk)
		}
		if len(d.Fires) > 0 || d.Counts[Skipped] > 0 || d.Counts[SkippedOverlap] > 0 {
			s.log.Info("schedule decided", "trigger", d.Cursor.Trigger, "fires", len(d.Fires),
				"skipped", d.Counts[Skipped], "compressed", d.Counts[Compressed], "skipped_overlap", d.Counts[SkippedOverlap])
		}
		if len(d.Overlapped) > 0 {
			slots := make([]string, len(d.Overlapped))
			for i, x := range d.Overlapped {
				slots[i] = decide.ScheduledForKey(x)
			}
			previous := d.previous.WorkflowID
			if len(d.Fires) > 0 { // the decision's own first run
				previous = d.Fires[0].WorkflowID
			}
			attrs := []any{"trigger", d.Cursor.Trigger, "slots", slots, "skipped_overlap", d.Counts[SkippedOverlap], "previous_workflow_id", previous}
			if d.OverlappedNotListed > 0 { // older slots of a long compressed run
				attrs = append(attrs, "slots_not_listed", d.OverlappedNotListed)
			}
			s.log.Info("schedule slot skipped for overlap: the previous run is still open (overlap skip)", attrs...)
		}
	}
	if s.hooks.AfterDecide != nil {
		if err := s.hooks.AfterDecide(); err != nil {
			return crash{err}
		}
	}
	err = s.start(ctx, pending)
	if gerr := s.gauges(ctx, now); err == nil {
		err = gerr
	}
	return err
}

// start claims the fires in the ledger (one call), starts the new and
// re-driven ones in order with reject-duplicate, marks them started and
// ends them. It stops at the first transient error: the next tick goes on
// from there, oldest first.
func (s *Scheduler) start(ctx context.Context, fires []Fire) error {
	if len(fires) == 0 {
		return nil
	}
	intents := make([]decide.Intent, len(fires))
	for i, f := range fires {
		key := decide.ScheduledForKey(f.ScheduledFor)
		intents[i] = decide.Intent{WorkflowID: f.WorkflowID, ActivityID: f.ActivityID,
			EventID: "schedule/" + f.Trigger + "/" + key, IDRule: "schedule",
			PayloadHash: decide.SlotPayloadHash(f.ActivityID, key)}
	}
	verdicts, err := s.ledger.Claim(ctx, intents)
	if err != nil {
		return fmt.Errorf("claiming %d fires: %w", len(fires), err)
	}
	var (
		started []processor.Started
		ends    []FireEnd
		runErr  error
	)
	flush := func() error {
		if len(started) > 0 {
			if err := s.ledger.MarkStarted(ctx, started); err != nil {
				return fmt.Errorf("marking %d fires started: %w", len(started), err)
			}
		}
		if len(ends) > 0 {
			if err := s.store.EndFires(ctx, ends); err != nil {
				return fmt.Errorf("ending %d fires: %w", len(ends), err)
			}
		}
		return nil
	}
	for i, f := range fires {
		t := s.byName[f.Trigger]
		end := FireEnd{Trigger: f.Trigger, ScheduledFor: f.ScheduledFor}
		switch v := verdicts[i]; v.Verdict {
		case decide.VerdictDuplicate:
			// Started already: by an earlier tick that crashed before
			// ending the fire, another replica, or an event routed with
			// key scheduled_for.
			end.State = FireStarted
			s.m.starts.WithLabelValues(f.Trigger, "duplicate").Inc()
			ends = append(ends, end)
			continue
		case decide.VerdictConflict:
			end.State = FireConflict
			s.m.starts.WithLabelValues(f.Trigger, "conflict").Inc()
			s.log.Error("schedule fire conflicts with a ledger row claimed with another payload; not started",
				"trigger", f.Trigger, "workflow_id", f.WorkflowID)
			ends = append(ends, end)
			continue
		default:
			req := decide.StartRequest{Namespace: t.Namespace, WorkflowID: f.WorkflowID, WorkflowType: t.WorkflowType, TaskQueue: t.TaskQueue,
				ReusePolicy: decide.ReuseRejectDuplicate, Generation: v.Generation, Input: input(t, f, intents[i].EventID)}
			res, err := s.starter.Start(ctx, req)
			switch {
			case err == nil:
				end.State, end.RunID = FireStarted, res.RunID
				started = append(started, processor.Started{WorkflowID: f.WorkflowID, RunID: res.RunID, Generation: v.Generation})
				result := "started"
				if res.AlreadyStarted {
					result = "duplicate"
				}
				s.m.starts.WithLabelValues(f.Trigger, result).Inc()
				if now, err := s.clock.Now(ctx); err == nil {
					s.m.lag.WithLabelValues(f.Trigger).Set(now.Sub(f.ScheduledFor).Seconds())
				}
				if s.hooks.AfterStart != nil {
					if err := s.hooks.AfterStart(); err != nil {
						return crash{err}
					}
				}
			case processor.IsPermanent(err):
				end.State = FireFailed
				s.m.starts.WithLabelValues(f.Trigger, "failed").Inc()
				s.log.Error("temporal refused a schedule fire for good; not retried", "trigger", f.Trigger,
					"workflow_id", f.WorkflowID, "err", err)
				if merr := s.ledger.MarkDeadLettered(ctx, []processor.DeadLettered{{WorkflowID: f.WorkflowID}}); merr != nil {
					runErr = merr
				}
			default:
				runErr = fmt.Errorf("starting %s: %w", f.WorkflowID, err)
			}
		}
		if runErr != nil {
			break
		}
		ends = append(ends, end)
	}
	return errors.Join(runErr, flush())
}

// previousOpen says whether a trigger's previous run is still open: a
// fire still pending is (it starts before any later one); a started one is
// if Temporal says its run is running; a failed or conflicting one never
// ran. A workflow Temporal does not know (past the namespace's retention)
// is closed. Any other error is returned: the caller decides nothing.
func (s *Scheduler) previousOpen(ctx context.Context, t *Trigger, prev PreviousFire) (bool, error) {
	switch prev.State {
	case "":
		return false, nil
	case FirePending:
		return true, nil
	case FireStarted:
	default:
		return false, nil
	}
	run, err := s.starter.LastRun(ctx, t.Namespace, prev.WorkflowID)
	switch {
	case err == nil:
		return !run.Closed, nil
	case processor.IsPermanent(err):
		return false, nil
	}
	return false, err
}

// heldBy lists the triggers of fires, once each: the ones a round holds.
func heldBy(fires []Fire) []string {
	var out []string
	for i, f := range fires {
		if i == 0 || f.Trigger != fires[i-1].Trigger { // grouped by trigger
			out = append(out, f.Trigger)
		}
	}
	return out
}

// input is the workflow input of a fire.
func input(t *Trigger, f Fire, eventID string) schemas.WorkflowInput {
	key := decide.ScheduledForKey(f.ScheduledFor)
	data, _ := json.Marshal(map[string]any{"schedule": f.Trigger, "scheduled_for": key})
	return schemas.WorkflowInput{WorkflowID: f.WorkflowID, ActivityID: f.ActivityID, EventID: eventID, IDRule: "schedule",
		Type: "dedup.schedule.fired", Source: "dedup/schedule/" + f.Trigger, Time: key, Data: data, Definition: t.Definition,
		TriggerKind: schemas.TriggerCron, ScheduledFor: key, Schedule: f.Trigger, Fire: string(f.Kind),
		WindowStart: decide.ScheduledForKey(f.WindowStart), WindowEnd: decide.ScheduledForKey(f.WindowEnd),
		MissedCount: f.MissedCount}
}

// gauges export each trigger's next slot, interval, newest started slot
// and pause, from the cursors as PostgreSQL has them (every replica
// exports the same values). The next slot of a paused trigger is the next
// after now: its cursor stands still, and the slot after it is long past.
func (s *Scheduler) gauges(ctx context.Context, now time.Time) error {
	cs, err := s.store.Cursors(ctx, s.names)
	if err != nil {
		return fmt.Errorf("reading schedule cursors: %w", err)
	}
	for _, c := range cs {
		t := s.byName[c.Trigger]
		if t == nil {
			continue
		}
		next := t.cron.Next(c.LastSlot)
		if !next.IsZero() {
			s.m.interval.WithLabelValues(c.Trigger).Set(next.Sub(c.LastSlot).Seconds())
		}
		if c.Paused && now.After(c.LastSlot) {
			next = t.cron.Next(now)
		}
		if !next.IsZero() {
			s.m.next.WithLabelValues(c.Trigger).Set(float64(next.Unix()))
		}
		last := c.LastStarted
		if last.IsZero() {
			last = c.Since // never fired: count from the trigger's start
		}
		s.m.lastFire.WithLabelValues(c.Trigger).Set(float64(last.Unix()))
		paused := 0.0
		if c.Paused {
			paused = 1
		}
		s.m.paused.WithLabelValues(c.Trigger).Set(paused)
	}
	return nil
}

// SetPaused pauses or resumes the named trigger. While paused, no slot
// fires; on resume, the next tick applies the trigger's misfire policy to
// the slots of the pause.
func SetPaused(ctx context.Context, cfg Config, store Store, clock Clock, name string, paused bool) error {
	if _, err := cfg.Trigger(name); err != nil {
		return err
	}
	now, err := clock.Now(ctx)
	if err != nil {
		return fmt.Errorf("reading the clock: %w", err)
	}
	return store.SetPaused(ctx, name, paused, now.UTC())
}
