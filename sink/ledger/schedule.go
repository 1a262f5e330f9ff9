package ledger

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dedupio/dedup/processor/schedule"
)

var _ schedule.Store = (*Postgres)(nil)

// keepFires is how many ended fires a trigger keeps in
// dedup_schedule_fires (the newest): a history for operators; pending
// fires are always kept.
const keepFires = 1000

// Now is PostgreSQL's clock: the scheduler's in production, so that
// replicas whose hosts' clocks disagree still agree on which slots are due.
func (p *Postgres) Now(ctx context.Context) (time.Time, error) {
	var t time.Time
	if err := p.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&t); err != nil {
		return t, p.classify(fmt.Errorf("reading the clock: %w", err))
	}
	return t.UTC(), nil
}

// Decide runs one decision round in one transaction (see schedule.Store):
// cursors created, locked with FOR UPDATE SKIP LOCKED unless another
// scheduler holds them (held_by, held_until: a cursor another replica
// holds is left to it, for its decision and its starts), decided, updated
// with their fires, the triggers left with pending fires held for
// r.Holder, and those fires returned.
func (p *Postgres) Decide(ctx context.Context, r schedule.Round, decide func(schedule.Cursor) schedule.Decision) ([]schedule.Fire, error) {
	var pending []schedule.Fire
	triggers, now := r.Triggers, r.Now
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		pending = nil
		since := now.Truncate(time.Second)
		if _, err := tx.Exec(ctx, `INSERT INTO dedup_schedule_cursors (trigger_name, last_slot, since)
SELECT n, $2, $2 FROM unnest($1::text[]) AS n ON CONFLICT DO NOTHING`, triggers, since); err != nil {
			return fmt.Errorf("creating cursors: %w", err)
		}
		// With each cursor, its trigger's newest fire (the run an overlap
		// policy looks at), through the fires' primary key.
		rows, err := tx.Query(ctx, `SELECT c.trigger_name, c.last_slot, c.last_fired, c.since, c.paused, c.resumed_at, c.paused_at,
	f.scheduled_for, f.workflow_id, f.state
FROM dedup_schedule_cursors c
LEFT JOIN LATERAL (SELECT scheduled_for, workflow_id, state FROM dedup_schedule_fires
	WHERE trigger_name = c.trigger_name ORDER BY scheduled_for DESC LIMIT 1) f ON true
WHERE c.trigger_name = ANY($1::text[]) AND (c.held_until IS NULL OR c.held_until <= $2 OR c.held_by = $3)
ORDER BY c.trigger_name FOR UPDATE OF c SKIP LOCKED`, triggers, now, r.Holder)
		if err != nil {
			return fmt.Errorf("locking cursors: %w", err)
		}
		cursors, err := pgx.CollectRows(rows, scanCursor)
		if err != nil {
			return fmt.Errorf("locking cursors: %w", err)
		}
		if len(cursors) == 0 {
			return nil
		}
		var (
			locked, moved        []string
			lastSlot             []time.Time
			lastFired            []*time.Time
			fTrig, fWID, fAct    []string
			fKind                []string
			fAt, fStart, fEnd    []time.Time
			fMissed              []int64
			triggersWithNewFires []string
		)
		for _, c := range cursors {
			locked = append(locked, c.Trigger)
			d := decide(c)
			if !d.Cursor.LastSlot.Equal(c.LastSlot) || !d.Cursor.LastFired.Equal(c.LastFired) {
				moved = append(moved, c.Trigger)
				lastSlot = append(lastSlot, d.Cursor.LastSlot)
				var lf *time.Time
				if !d.Cursor.LastFired.IsZero() {
					t := d.Cursor.LastFired
					lf = &t
				}
				lastFired = append(lastFired, lf)
			}
			if len(d.Fires) > 0 {
				triggersWithNewFires = append(triggersWithNewFires, c.Trigger)
			}
			for _, f := range d.Fires {
				fTrig, fWID, fAct, fKind = append(fTrig, f.Trigger), append(fWID, f.WorkflowID), append(fAct, f.ActivityID), append(fKind, string(f.Kind))
				fAt, fStart, fEnd = append(fAt, f.ScheduledFor), append(fStart, f.WindowStart), append(fEnd, f.WindowEnd)
				fMissed = append(fMissed, f.MissedCount)
			}
		}
		if len(moved) > 0 {
			if _, err := tx.Exec(ctx, `UPDATE dedup_schedule_cursors c SET last_slot = u.last_slot, last_fired = u.last_fired, updated_at = now()
FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[]) AS u(trigger_name, last_slot, last_fired)
WHERE c.trigger_name = u.trigger_name`, moved, lastSlot, lastFired); err != nil {
				return fmt.Errorf("moving %d cursors: %w", len(moved), err)
			}
		}
		if len(fTrig) > 0 {
			// A slot decided before keeps its first decision (its window).
			if _, err := tx.Exec(ctx, `INSERT INTO dedup_schedule_fires
	(trigger_name, scheduled_for, workflow_id, activity_id, kind, window_start, window_end, missed_count, decided_at)
SELECT t, s, w, a, k, ws, we, m, $9 FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::timestamptz[], $8::int8[])
	AS u(t, s, w, a, k, ws, we, m)
ON CONFLICT DO NOTHING`, fTrig, fAt, fWID, fAct, fKind, fStart, fEnd, fMissed, now); err != nil {
				return fmt.Errorf("storing %d fires: %w", len(fTrig), err)
			}
			if _, err := tx.Exec(ctx, `DELETE FROM dedup_schedule_fires f USING (
	SELECT trigger_name, scheduled_for FROM (
		SELECT trigger_name, scheduled_for, row_number() OVER (PARTITION BY trigger_name ORDER BY scheduled_for DESC) AS rn
		FROM dedup_schedule_fires WHERE trigger_name = ANY($1::text[])) x
	WHERE rn > $2) old
WHERE f.trigger_name = old.trigger_name AND f.scheduled_for = old.scheduled_for AND f.state <> 'pending'`,
				triggersWithNewFires, keepFires); err != nil {
				return fmt.Errorf("pruning fires: %w", err)
			}
		}
		// A paused trigger's pending fires wait for its resume: while
		// paused, nothing of it starts (a fire decided before the pause
		// included).
		rows, err = tx.Query(ctx, `SELECT f.trigger_name, f.scheduled_for, f.workflow_id, f.activity_id, f.kind, f.window_start, f.window_end, f.missed_count
FROM dedup_schedule_fires f JOIN dedup_schedule_cursors c USING (trigger_name)
WHERE f.trigger_name = ANY($1::text[]) AND f.state = 'pending' AND NOT c.paused ORDER BY f.trigger_name, f.scheduled_for`, locked)
		if err != nil {
			return fmt.Errorf("reading pending fires: %w", err)
		}
		pending, err = pgx.CollectRows(rows, scanFire)
		if err != nil {
			return fmt.Errorf("reading pending fires: %w", err)
		}
		var held []string
		for i, f := range pending {
			if i == 0 || f.Trigger != pending[i-1].Trigger {
				held = append(held, f.Trigger)
			}
		}
		if len(held) > 0 {
			if _, err := tx.Exec(ctx, `UPDATE dedup_schedule_cursors SET held_by = $2, held_until = $3
WHERE trigger_name = ANY($1::text[])`, held, r.Holder, r.HoldUntil); err != nil {
				return fmt.Errorf("holding %d triggers: %w", len(held), err)
			}
		}
		return nil
	})
	return pending, p.classify(err)
}

// scanCursor reads a cursor row of Decide's lock, with its trigger's
// newest fire.
func scanCursor(r pgx.CollectableRow) (schedule.Cursor, error) {
	var c schedule.Cursor
	var fired, resumed, pausedAt, prevAt *time.Time
	var prevWID, prevState *string
	err := r.Scan(&c.Trigger, &c.LastSlot, &fired, &c.Since, &c.Paused, &resumed, &pausedAt, &prevAt, &prevWID, &prevState)
	c.LastSlot, c.Since = c.LastSlot.UTC(), c.Since.UTC()
	if fired != nil {
		c.LastFired = fired.UTC()
	}
	if resumed != nil {
		c.ResumedAt = resumed.UTC()
	}
	if pausedAt != nil {
		c.PausedAt = pausedAt.UTC()
	}
	if prevAt != nil && prevWID != nil && prevState != nil {
		c.Previous = schedule.PreviousFire{ScheduledFor: prevAt.UTC(), WorkflowID: *prevWID, State: schedule.FireState(*prevState)}
	}
	return c, err
}

// scanFire reads a pending fire row.
func scanFire(r pgx.CollectableRow) (schedule.Fire, error) {
	var f schedule.Fire
	var kind string
	err := r.Scan(&f.Trigger, &f.ScheduledFor, &f.WorkflowID, &f.ActivityID, &kind, &f.WindowStart, &f.WindowEnd, &f.MissedCount)
	f.Kind = schedule.Outcome(kind)
	f.ScheduledFor, f.WindowStart, f.WindowEnd = f.ScheduledFor.UTC(), f.WindowStart.UTC(), f.WindowEnd.UTC()
	return f, err
}

// Release ends holder's holds of the triggers (see schedule.Store); a
// hold another scheduler took since (after this one's ended) is left.
func (p *Postgres) Release(ctx context.Context, holder string, triggers []string) error {
	if _, err := p.pool.Exec(ctx, `UPDATE dedup_schedule_cursors SET held_by = NULL, held_until = NULL
WHERE trigger_name = ANY($1::text[]) AND held_by = $2`, triggers, holder); err != nil {
		return p.classify(fmt.Errorf("releasing %d triggers: %w", len(triggers), err))
	}
	return nil
}

// EndFires records how fires ended; a fire already ended keeps its state.
func (p *Postgres) EndFires(ctx context.Context, ends []schedule.FireEnd) error {
	if len(ends) == 0 {
		return nil
	}
	ends = slices.SortedFunc(slices.Values(ends), func(a, b schedule.FireEnd) int {
		if c := strings.Compare(a.Trigger, b.Trigger); c != 0 {
			return c
		}
		return a.ScheduledFor.Compare(b.ScheduledFor)
	})
	n := len(ends)
	trig, state, run := make([]string, n), make([]string, n), make([]string, n)
	at := make([]time.Time, n)
	for i, e := range ends {
		trig[i], at[i], state[i], run[i] = e.Trigger, e.ScheduledFor, string(e.State), e.RunID
	}
	_, err := p.pool.Exec(ctx, `UPDATE dedup_schedule_fires f SET state = u.state, run_id = NULLIF(u.run_id, ''), ended_at = now()
FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[]) AS u(trigger_name, scheduled_for, state, run_id)
WHERE f.trigger_name = u.trigger_name AND f.scheduled_for = u.scheduled_for AND f.state = 'pending'`, trig, at, state, run)
	if err != nil {
		return p.classify(fmt.Errorf("ending %d fires: %w", n, err))
	}
	return nil
}

// SetPaused pauses or resumes a trigger, creating its cursor at now when
// it has none (a trigger paused before its first tick starts there). The
// pause's start (paused_at, kept after the resume) and the resume of a
// paused trigger (resumed_at) are recorded: the slots between them came
// due in the pause.
func (p *Postgres) SetPaused(ctx context.Context, trigger string, paused bool, now time.Time) error {
	since := now.Truncate(time.Second)
	_, err := p.pool.Exec(ctx, `INSERT INTO dedup_schedule_cursors AS c (trigger_name, last_slot, since, paused, paused_at)
VALUES ($1, $2, $2, $3, CASE WHEN $3 THEN $4::timestamptz END)
ON CONFLICT (trigger_name) DO UPDATE SET paused = EXCLUDED.paused,
	paused_at = CASE WHEN NOT EXCLUDED.paused THEN c.paused_at WHEN c.paused THEN c.paused_at ELSE EXCLUDED.paused_at END,
	resumed_at = CASE WHEN c.paused AND NOT EXCLUDED.paused THEN $4::timestamptz ELSE c.resumed_at END,
	updated_at = now()`, trigger, since, paused, now)
	if err != nil {
		return p.classify(fmt.Errorf("pausing trigger %s: %w", trigger, err))
	}
	return nil
}

// Cursors reads the named triggers' cursors without locking them, with
// the newest started slot of each.
func (p *Postgres) Cursors(ctx context.Context, triggers []string) ([]schedule.CursorState, error) {
	rows, err := p.pool.Query(ctx, `SELECT c.trigger_name, c.last_slot, c.last_fired, c.since, c.paused,
	(SELECT max(f.scheduled_for) FROM dedup_schedule_fires f WHERE f.trigger_name = c.trigger_name AND f.state = 'started')
FROM dedup_schedule_cursors c WHERE c.trigger_name = ANY($1::text[]) ORDER BY c.trigger_name`, triggers)
	if err != nil {
		return nil, p.classify(fmt.Errorf("reading cursors: %w", err))
	}
	cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (schedule.CursorState, error) {
		var c schedule.CursorState
		var fired, started *time.Time
		err := r.Scan(&c.Trigger, &c.LastSlot, &fired, &c.Since, &c.Paused, &started)
		c.LastSlot, c.Since = c.LastSlot.UTC(), c.Since.UTC()
		if fired != nil {
			c.LastFired = fired.UTC()
		}
		if started != nil {
			c.LastStarted = started.UTC()
		}
		return c, err
	})
	if err != nil {
		return nil, p.classify(fmt.Errorf("reading cursors: %w", err))
	}
	return cs, nil
}
