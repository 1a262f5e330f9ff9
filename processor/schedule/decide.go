package schedule

import (
	"slices"
	"time"
)

// Outcome is what became of one due slot. Every slot the scheduler
// decides gets exactly one.
type Outcome string

const (
	// OnTime means the slot ran, decided within the misfire threshold.
	OnTime Outcome = "on_time"
	// CatchUp means the slot misfired and ran late with its own workflow ID
	// (misfire_policy catchup).
	CatchUp Outcome = "catchup"
	// Compressed means the slot is covered by one compressed run
	// (misfire_policy compress); the run itself is at the latest of them.
	Compressed Outcome = "compressed"
	// Skipped means the slot misfired and never runs.
	Skipped Outcome = "skipped"
	// SkippedOverlap means the slot would have run but never runs: the
	// trigger's overlap is skip and its previous run was still open (or
	// another slot of the same decision ran).
	SkippedOverlap Outcome = "skipped_overlap"
)

// Outcomes lists every outcome, for metrics.
var Outcomes = []Outcome{OnTime, CatchUp, Compressed, Skipped, SkippedOverlap}

// MaxWalk bounds the slots one decision looks at from the cursor forward
// (go-cron's Next costs well under a microsecond for dense schedules):
// after an outage of more slots than this (a year of a per-minute
// schedule, twelve days of a per-second one) the decision finds the
// latest slots by searching back from now instead, and the count of
// missed slots is a lower bound.
const MaxWalk = 1_000_000

// Cursor is a trigger's state in PostgreSQL.
type Cursor struct {
	Trigger string
	// LastSlot is the newest slot decided (run or not); the next decision
	// looks at the slots after it. A new cursor starts at its creation
	// time (Since): slots before a trigger existed never fire.
	LastSlot time.Time
	// LastFired is the newest slot that was decided to run (zero if none):
	// a compressed run's window starts there.
	LastFired time.Time
	// Since is when the cursor was created.
	Since  time.Time
	Paused bool
	// PausedAt and ResumedAt are the trigger's last pause and the resume
	// after it (zero if none): slots after PausedAt up to ResumedAt came
	// due in the pause, and misfired whenever they are decided. (A slot
	// due before the pause is judged by the misfire threshold alone.)
	PausedAt, ResumedAt time.Time
	// Previous is the trigger's newest fire (zero if none): the run an
	// overlap policy looks at.
	Previous PreviousFire
}

// PreviousFire is a trigger's newest decided fire and its state.
type PreviousFire struct {
	ScheduledFor time.Time
	WorkflowID   string
	State        FireState // "" when there is none
}

// Fire is one run the scheduler decided: stored with the decision, before
// any start, so that every replay of it (a crash, another replica) starts
// the same workflow with the same window.
type Fire struct {
	Trigger      string
	ActivityID   string
	WorkflowID   string
	ScheduledFor time.Time
	Kind         Outcome // OnTime, CatchUp or Compressed
	WindowStart  time.Time
	WindowEnd    time.Time
	MissedCount  int64
}

// Decision is what one tick decides for one trigger.
type Decision struct {
	Fires  []Fire
	Counts map[Outcome]int64 // slots by outcome
	Cursor Cursor            // the cursor after the decision
	// Capped: the walk hit MaxWalk; the missed count is a lower bound.
	Capped bool
	// Walked counts the Next calls the decision made (tests bound it).
	Walked int
	// Overlapped are the slots that would have run and were skipped for
	// overlap (ApplyOverlap), oldest first: for a skipped compressed run,
	// every slot it covers. It lists MaxOverlappedListed slots at most
	// (the newest); OverlappedNotListed counts the others.
	Overlapped          []time.Time
	OverlappedNotListed int64
}

// MaxOverlappedListed bounds Decision.Overlapped: the slots one overlap
// log line lists (a compressed run after a long outage covers thousands).
const MaxOverlappedListed = 100

// Decide decides which of the trigger's slots after cur.LastSlot and up to
// now run, and with which windows. It is pure: the scheduler calls it
// with the cursor locked and stores its result before starting anything.
//
// A due slot is on time when now is within the misfire threshold of it
// and it did not come due while the trigger was paused (at or before
// cur.ResumedAt); otherwise it misfired, and the policy decides: skip runs none of the
// misfired slots, catchup the most recent CatchupLimit of them (oldest
// first), compress one run at the latest due slot for all of them. On-time
// slots always run, each with its own window, except under compress when
// something misfired: then the one compressed run covers them too. A
// paused trigger, or a clock behind the cursor, decides nothing.
func Decide(t *Trigger, cur Cursor, now time.Time, maxWalk int) Decision {
	d := Decision{Cursor: cur, Counts: map[Outcome]int64{}}
	if cur.Paused || !now.After(cur.LastSlot) {
		return d
	}
	cutoff := now.Add(-t.MisfireThreshold)
	// A slot that came due while the trigger was paused was missed for
	// the pause, however soon after it the resume came; one due before
	// the pause is on time within the threshold.
	inPause := func(s time.Time) bool { return s.After(cur.PausedAt) && !s.After(cur.ResumedAt) }
	keep := 1 // misfired slots to keep: the one before the first on-time slot (its window start)
	if t.MisfirePolicy == Catchup {
		keep = t.Limit() + 1
	}
	w := walkDue(t.cron, cur.LastSlot, now, cutoff, keep, maxWalk)
	d.Walked, d.Capped = w.walked, w.capped
	if w.total == 0 {
		return d
	}
	var misfired, onTime []int // indexes into w.slots, oldest first
	for i, s := range w.slots {
		if s.After(cutoff) && !inPause(s) {
			onTime = append(onTime, i)
		} else {
			misfired = append(misfired, i)
		}
	}
	m := w.total - int64(len(onTime)) // every misfired slot, kept or not
	// A cursor that never decided a slot (its last slot is still the
	// moment the trigger was first seen) has no slot before its first
	// due one: that window starts at the slot before it, which came
	// before the trigger existed.
	fresh := cur.LastSlot.Equal(cur.Since)
	before := w.before
	if fresh && before.Equal(cur.LastSlot) {
		before = prevSlot(t.cron, w.slots[0], cur.Since, maxWalk)
	}
	// prev is the due slot before w.slots[i] (window starts).
	prev := func(i int) time.Time {
		if i == 0 {
			return before
		}
		return w.slots[i-1]
	}
	fire := func(i int, kind Outcome, missed int64) {
		s := w.slots[i]
		d.Fires = append(d.Fires, Fire{Trigger: t.Name, ActivityID: t.ActivityID, ScheduledFor: s, Kind: kind,
			WindowStart: prev(i), WindowEnd: s, MissedCount: missed})
		d.Counts[kind]++
	}
	switch {
	case t.MisfirePolicy == Compress && m > 0:
		// One run covers every due slot, on time or not: its window
		// starts at the newest slot decided before them, and its
		// missed_count is the slots it covers, as fires_total counts them.
		latest := w.slots[len(w.slots)-1]
		start := cur.LastSlot
		if fresh {
			start = prevSlot(t.cron, t.cron.Next(cur.LastSlot), cur.Since, maxWalk)
		}
		d.Fires = append(d.Fires, Fire{Trigger: t.Name, ActivityID: t.ActivityID, ScheduledFor: latest, Kind: Compressed,
			WindowStart: start, WindowEnd: latest, MissedCount: w.total})
		d.Counts[Compressed] = w.total
	case t.MisfirePolicy == Catchup:
		// The most recent Limit misfired slots, and every on-time one,
		// in slot order.
		n := min(int64(t.Limit()), m)
		caught := map[int]bool{}
		for _, i := range misfired[max(0, len(misfired)-int(n)):] {
			caught[i] = true
		}
		for i := range w.slots {
			switch {
			case caught[i]:
				fire(i, CatchUp, 1)
			case slices.Contains(onTime, i):
				fire(i, OnTime, 0)
			}
		}
		d.Counts[Skipped] = m - n
	default: // skip, or compress with nothing missed
		d.Counts[Skipped] = m
		for _, i := range onTime {
			fire(i, OnTime, 0)
		}
	}
	d.Cursor.LastSlot = w.slots[len(w.slots)-1]
	if len(d.Fires) > 0 {
		d.Cursor.LastFired = d.Fires[len(d.Fires)-1].ScheduledFor
	}
	return d
}

// ApplyOverlap applies the trigger's overlap policy to its decision d.
// previousOpen says whether the trigger's previous run (its newest fire
// before d's) is still open. Under OverlapSkip a decision starts one run
// at most, and none while the previous run is open: each fire it would
// have started beyond that is dropped, and the slots it stood for (one, or
// for a compressed run every slot it covers) are counted SkippedOverlap.
// It is pure, like Decide.
func ApplyOverlap(t *Trigger, cur Cursor, d Decision, previousOpen bool) Decision {
	if t.Overlap != OverlapSkip || len(d.Fires) == 0 {
		return d
	}
	n := 1
	if previousOpen {
		n = 0
	}
	d.Overlapped = slices.Clone(d.Overlapped)
	for _, f := range d.Fires[n:] {
		k, slots := int64(1), []time.Time{f.ScheduledFor}
		if f.Kind == Compressed {
			k = f.MissedCount // every slot it covers: what Decide counted compressed
			slots = coveredSlots(t, f, MaxOverlappedListed)
			d.OverlappedNotListed += max(0, k-int64(len(slots)))
		}
		d.Counts[f.Kind] -= k
		d.Counts[SkippedOverlap] += k
		d.Overlapped = append(d.Overlapped, slots...)
	}
	if over := len(d.Overlapped) - MaxOverlappedListed; over > 0 {
		d.Overlapped = d.Overlapped[over:]
		d.OverlappedNotListed += int64(over)
	}
	d.Fires = d.Fires[:n:n]
	d.Cursor.LastFired = cur.LastFired
	if n > 0 {
		d.Cursor.LastFired = d.Fires[0].ScheduledFor
	}
	return d
}

// coveredSlots are the newest slots (max at most, oldest first) that the
// compressed run f covers: its window (WindowStart, WindowEnd], found by
// walking back from the run's own slot.
func coveredSlots(t *Trigger, f Fire, max int) []time.Time {
	var out []time.Time // newest first
	for s := f.WindowEnd; len(out) < max && s.After(f.WindowStart); s = prevSlot(t.cron, s, f.WindowStart, MaxWalk) {
		out = append(out, s)
	}
	slices.Reverse(out)
	return out
}

// walked is the result of walkDue.
type walked struct {
	// slots are the last due slots, oldest first: every on-time one (after
	// the cutoff) and up to keep misfired ones before them.
	slots []time.Time
	// before is the due slot before slots[0], or the cursor when slots[0]
	// is the first due slot.
	before time.Time
	total  int64 // due slots (a lower bound when capped)
	capped bool
	walked int // Next calls
}

// walkDue walks the slots in (after, now]. It calls Next at most maxWalk
// times from after; if that does not reach now, it finds the latest slots
// by walking windows back from now that double in length (each walk
// bounded by maxWalk too), and total counts only what it walked.
func walkDue(c *Cron, after, now, cutoff time.Time, keep, maxWalk int) walked {
	var w walked
	w.before = after
	tail := &tailBuf{cutoff: cutoff, keep: keep}
	s := after
	for {
		if w.walked == maxWalk {
			w.capped = true
			break
		}
		n := c.Next(s)
		w.walked++
		if n.IsZero() || n.After(now) {
			break
		}
		w.total++
		tail.push(n, &w.before)
		s = n
	}
	if !w.capped {
		w.slots = tail.slots()
		return w
	}
	// Capped at s: search back from now for the latest slots, down to s.
	floor := s
	var found []time.Time // oldest first
	before := floor
	hi, span := now, time.Second
	for hi.After(floor) {
		lo := hi.Add(-span)
		if !lo.After(floor) {
			lo = floor
		}
		seg, complete, calls := segment(c, lo, hi, maxWalk)
		w.walked += calls
		if !complete && span > time.Second {
			span /= 4 // too dense a window: look at a shorter one
			continue
		}
		found = append(seg, found...)
		w.total += int64(len(seg))
		hi, span = lo, span*2
		if enough(found, cutoff, keep+1) {
			break
		}
	}
	// Keep what the decision needs; the slot before the kept ones is its
	// window start.
	t2 := &tailBuf{cutoff: cutoff, keep: keep}
	for _, x := range found {
		t2.push(x, &before)
	}
	w.slots, w.before = t2.slots(), before
	return w
}

// prevSearch bounds how far back prevSlot looks: a schedule has a slot in
// every five years (Validate), and the longest gap between two (a 29
// February job over a century year) is eight.
const prevSearch = 10 * 366 * 24 * time.Hour

// prevSlot is the schedule's latest slot before s, found by walking
// windows back from s that double in length (each walk bounded by
// maxWalk); fallback when there is none within prevSearch. (A window with
// more than maxWalk slots right after an empty one half its length would
// give a slot before s that is not the latest: no schedule dedup accepts
// is that dense for that long, since the empty half bounds the window.)
func prevSlot(c *Cron, s, fallback time.Time, maxWalk int) time.Time {
	hi := s.Add(-time.Nanosecond)
	for span := time.Second; span <= 2*prevSearch; span *= 2 {
		seg, _, _ := segment(c, s.Add(-span), hi, maxWalk)
		if len(seg) > 0 {
			return seg[len(seg)-1]
		}
	}
	return fallback
}

// segment returns the slots in (lo, hi], and whether it saw them all
// within maxWalk Next calls.
func segment(c *Cron, lo, hi time.Time, maxWalk int) (slots []time.Time, complete bool, calls int) {
	for s := lo; calls < maxWalk; {
		n := c.Next(s)
		calls++
		if n.IsZero() || n.After(hi) {
			return slots, true, calls
		}
		slots = append(slots, n)
		s = n
	}
	return slots, false, calls
}

// enough: found holds at least n misfired slots (at or before cutoff).
func enough(found []time.Time, cutoff time.Time, n int) bool {
	k := 0
	for _, s := range found {
		if !s.After(cutoff) {
			k++
		}
	}
	return k >= n
}

// tailBuf keeps the slots pushed in order that a decision needs: all
// after the cutoff, and the last keep at or before it.
type tailBuf struct {
	cutoff time.Time
	keep   int
	buf    []time.Time
	start  int
}

// push adds s; a slot it drops becomes *before (the slot before the kept
// ones).
func (b *tailBuf) push(s time.Time, before *time.Time) {
	b.buf = append(b.buf, s)
	// Drop the oldest while more than keep kept slots are misfired.
	for len(b.buf)-b.start > b.keep && !b.buf[b.start+b.keep].After(b.cutoff) {
		*before = b.buf[b.start]
		b.start++
	}
	if b.start > 1024 && b.start > len(b.buf)/2 {
		b.buf = append([]time.Time(nil), b.buf[b.start:]...)
		b.start = 0
	}
}

func (b *tailBuf) slots() []time.Time { return b.buf[b.start:] }
