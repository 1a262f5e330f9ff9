package schedule

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dedupio/dedup/schemas"
)

// trigger is a validated trigger for tests.
func trigger(t testing.TB, spec string, p Policy, threshold time.Duration, limit ...int) *Trigger {
	t.Helper()
	tr := Trigger{ActivityID: "report", Cron: spec, MisfirePolicy: p, MisfireThreshold: threshold,
		WorkflowType: "RunActivityWorkflow", TaskQueue: "q", Definition: &schemas.ActivityDefinition{DedupeKeyStrategy: string(p)}}
	if len(limit) > 0 {
		tr.CatchupLimit = &limit[0]
	}
	cfg := Config{Tick: time.Second, Triggers: []Trigger{tr}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return &cfg.Triggers[0]
}

func fireList(fs []Fire) string {
	s := ""
	for _, f := range fs {
		s += fmt.Sprintf("%s %s (%s, %s] missed %d; ", f.Kind, f.ScheduledFor.Format("15:04"), f.WindowStart.Format("15:04"),
			f.WindowEnd.Format("15:04"), f.MissedCount)
	}
	return s
}

// A cursor that last ran 09:00, a per-minute schedule, a 10s threshold.
var at0900 = Cursor{Trigger: "report", LastSlot: utc("2026-03-01T09:00:00Z"), LastFired: utc("2026-03-01T09:00:00Z"),
	Since: utc("2026-03-01T08:00:00Z")}

func TestDecideNothingMissed(t *testing.T) {
	for _, p := range []Policy{Skip, Catchup, Compress} {
		d := Decide(trigger(t, "* * * * *", p, 10*time.Second), at0900, utc("2026-03-01T09:01:00.4Z"), MaxWalk)
		if got, want := fireList(d.Fires), "on_time 09:01 (09:00, 09:01] missed 0; "; got != want {
			t.Errorf("%s: %s, want %s", p, got, want)
		}
		if d.Counts[OnTime] != 1 || d.Counts[Skipped] != 0 || !d.Cursor.LastSlot.Equal(utc("2026-03-01T09:01:00Z")) {
			t.Errorf("%s: counts %v cursor %+v", p, d.Counts, d.Cursor)
		}
	}
}

// An outage shorter than the threshold: the slot runs late, with its
// nominal time.
func TestDecideOutageShorterThanThreshold(t *testing.T) {
	for _, p := range []Policy{Skip, Catchup, Compress} {
		d := Decide(trigger(t, "* * * * *", p, time.Minute), at0900, utc("2026-03-01T09:01:50Z"), MaxWalk)
		if got, want := fireList(d.Fires), "on_time 09:01 (09:00, 09:01] missed 0; "; got != want {
			t.Errorf("%s: %s, want %s", p, got, want)
		}
	}
}

// 25 missed slots (09:01 .. 09:25, decided at 09:25:30 with a 10s
// threshold): skip runs none and counts 25; catchup runs the last 10
// oldest first and counts 15; compress runs once at 09:25 with the whole
// window and missed_count 25.
func TestDecideOutageOf25Slots(t *testing.T) {
	now := utc("2026-03-01T09:25:30Z")
	d := Decide(trigger(t, "* * * * *", Skip, 10*time.Second), at0900, now, MaxWalk)
	if len(d.Fires) != 0 || d.Counts[Skipped] != 25 || !d.Cursor.LastSlot.Equal(utc("2026-03-01T09:25:00Z")) || !d.Cursor.LastFired.Equal(at0900.LastFired) {
		t.Errorf("skip: %s counts %v cursor %+v", fireList(d.Fires), d.Counts, d.Cursor)
	}
	d = Decide(trigger(t, "* * * * *", Catchup, 10*time.Second), at0900, now, MaxWalk)
	want := ""
	for m := 16; m <= 25; m++ {
		want += fmt.Sprintf("catchup 09:%02d (09:%02d, 09:%02d] missed 1; ", m, m-1, m)
	}
	if got := fireList(d.Fires); got != want || d.Counts[Skipped] != 15 || d.Counts[CatchUp] != 10 {
		t.Errorf("catchup: %s counts %v, want %s", got, d.Counts, want)
	}
	d = Decide(trigger(t, "* * * * *", Catchup, 10*time.Second, 30), at0900, now, MaxWalk)
	if len(d.Fires) != 25 || d.Counts[Skipped] != 0 || !d.Fires[0].WindowStart.Equal(at0900.LastSlot) {
		t.Errorf("catchup 30: %s counts %v", fireList(d.Fires), d.Counts)
	}
	d = Decide(trigger(t, "* * * * *", Compress, 10*time.Second), at0900, now, MaxWalk)
	if got, want := fireList(d.Fires), "compressed 09:25 (09:00, 09:25] missed 25; "; got != want || d.Counts[Compressed] != 25 || d.Counts[Skipped] != 0 {
		t.Errorf("compress: %s counts %v, want %s", got, d.Counts, want)
	}
	if !d.Cursor.LastFired.Equal(utc("2026-03-01T09:25:00Z")) {
		t.Errorf("compress cursor %+v", d.Cursor)
	}
}

// Missed slots and an on-time one: the on-time one runs under every
// policy (compress folds the missed ones into it).
func TestDecideMissedThenOnTime(t *testing.T) {
	now := utc("2026-03-01T09:05:05Z") // 09:01..09:04 missed, 09:05 on time
	cases := map[Policy]string{
		Skip:    "on_time 09:05 (09:04, 09:05] missed 0; ",
		Catchup: "catchup 09:01 (09:00, 09:01] missed 1; catchup 09:02 (09:01, 09:02] missed 1; catchup 09:03 (09:02, 09:03] missed 1; catchup 09:04 (09:03, 09:04] missed 1; on_time 09:05 (09:04, 09:05] missed 0; ",
		// The compressed run covers five slots, its own on time: its
		// missed_count is what fires_total and the log count, 5.
		Compress: "compressed 09:05 (09:00, 09:05] missed 5; ",
	}
	for p, want := range cases {
		d := Decide(trigger(t, "* * * * *", p, 10*time.Second), at0900, now, MaxWalk)
		if got := fireList(d.Fires); got != want {
			t.Errorf("%s: %s, want %s", p, got, want)
		}
		var sum int64
		for _, n := range d.Counts {
			sum += n
		}
		if sum != 5 {
			t.Errorf("%s: outcomes %v do not add up to the 5 due slots", p, d.Counts)
		}
		if p == Compress && d.Counts[Compressed] != d.Fires[0].MissedCount {
			t.Errorf("compress: %d slots counted compressed, the run's missed_count %d", d.Counts[Compressed], d.Fires[0].MissedCount)
		}
	}
}

// A trigger's first window starts at the slot before its first slot (a
// slot that came before the trigger was first seen), not at the moment it
// was first seen: compressed or on time.
func TestDecideFirstWindow(t *testing.T) {
	cur := Cursor{Trigger: "report", LastSlot: utc("2026-03-01T08:59:30Z"), Since: utc("2026-03-01T08:59:30Z")}
	d := Decide(trigger(t, "* * * * *", Compress, 10*time.Second), cur, utc("2026-03-01T09:03:30Z"), MaxWalk)
	if got, want := fireList(d.Fires), "compressed 09:03 (08:59, 09:03] missed 4; "; got != want || !d.Fires[0].WindowStart.Equal(utc("2026-03-01T08:59:00Z")) {
		t.Errorf("compressed: %s, want %s from 08:59:00", got, want)
	}
	for _, p := range []Policy{Skip, Catchup, Compress} {
		d = Decide(trigger(t, "* * * * *", p, 10*time.Second), cur, utc("2026-03-01T09:00:00.5Z"), MaxWalk)
		if len(d.Fires) != 1 || !d.Fires[0].WindowStart.Equal(utc("2026-03-01T08:59:00Z")) {
			t.Errorf("%s, on time: %s, want the window from 08:59:00", p, fireList(d.Fires))
		}
	}
	// A daily schedule first seen at noon: its first run's window is the
	// day before it.
	cur = Cursor{Trigger: "report", LastSlot: utc("2026-03-01T12:00:00Z"), Since: utc("2026-03-01T12:00:00Z")}
	d = Decide(trigger(t, "0 9 * * *", Skip, 10*time.Second), cur, utc("2026-03-02T09:00:01Z"), MaxWalk)
	if len(d.Fires) != 1 || !d.Fires[0].WindowStart.Equal(utc("2026-03-01T09:00:00Z")) {
		t.Errorf("daily: %+v", d.Fires)
	}
}

// A clock behind the cursor (moved backwards) decides nothing: no slot
// fires twice; a paused trigger decides nothing either.
func TestDecideClockBackwardsAndPaused(t *testing.T) {
	tr := trigger(t, "* * * * *", Catchup, 10*time.Second)
	cur := at0900
	cur.LastSlot = utc("2026-03-01T09:05:00Z")
	for _, now := range []string{"2026-03-01T09:02:00Z", "2026-03-01T09:05:00Z", "2026-03-01T09:05:59Z"} {
		if d := Decide(tr, cur, utc(now), MaxWalk); len(d.Fires) != 0 || d.Cursor != cur {
			t.Errorf("now %s: %s", now, fireList(d.Fires))
		}
	}
	cur.Paused = true
	if d := Decide(tr, cur, utc("2026-03-01T10:00:00Z"), MaxWalk); len(d.Fires) != 0 || d.Cursor != cur {
		t.Errorf("paused: %s", fireList(d.Fires))
	}
}

// Years of missed slots of a per-second schedule: the work is bounded,
// the decision still fires the right latest slots, and the missed count
// is a lower bound.
func TestDecideOutageOfYearsIsBounded(t *testing.T) {
	cur := Cursor{Trigger: "report", LastSlot: utc("2020-01-01T00:00:00Z"), LastFired: utc("2020-01-01T00:00:00Z"), Since: utc("2019-01-01T00:00:00Z")}
	now := utc("2026-03-01T09:00:00.5Z")
	const maxWalk = 100_000
	start := time.Now()
	d := Decide(trigger(t, "* * * * * *", Catchup, 10*time.Second), cur, now, maxWalk)
	took := time.Since(start)
	if d.Walked > 2*maxWalk || !d.Capped {
		t.Errorf("catchup walked %d Next calls (capped %v), want at most %d", d.Walked, d.Capped, 2*maxWalk)
	}
	// 08:59:51 .. 09:00:00: 10 on time (threshold 10s) ... and catch-up
	// of the 10 before them.
	if len(d.Fires) != 20 || !d.Fires[19].ScheduledFor.Equal(utc("2026-03-01T09:00:00Z")) || d.Fires[0].Kind != CatchUp ||
		!d.Fires[0].ScheduledFor.Equal(utc("2026-03-01T08:59:41Z")) || !d.Fires[0].WindowStart.Equal(utc("2026-03-01T08:59:40Z")) {
		t.Errorf("catchup fires: %d, first %+v", len(d.Fires), d.Fires[0])
	}
	if d.Counts[Skipped] < maxWalk {
		t.Errorf("skipped %d, want at least %d", d.Counts[Skipped], maxWalk)
	}
	d = Decide(trigger(t, "* * * * * *", Compress, 10*time.Second), cur, now, maxWalk)
	if len(d.Fires) != 1 || !d.Fires[0].ScheduledFor.Equal(utc("2026-03-01T09:00:00Z")) || !d.Fires[0].WindowStart.Equal(cur.LastFired) ||
		d.Fires[0].MissedCount < maxWalk || d.Walked > 2*maxWalk {
		t.Errorf("compress: %s walked %d", fireList(d.Fires), d.Walked)
	}
	// The default bound, on the real clock: well under a second.
	start = time.Now()
	d = Decide(trigger(t, "* * * * * *", Skip, 10*time.Second), cur, now, MaxWalk)
	if took := time.Since(start); took > 5*time.Second || d.Walked > 2*MaxWalk {
		t.Errorf("default bound: %s, %d Next calls", took, d.Walked)
	}
	t.Logf("years of per-second slots: %s with maxWalk %d, %s with MaxWalk", took, maxWalk, time.Since(start))
	// A daily schedule over six years is under the bound: exact count
	// (2020-01-01 to 2026-03-01 is 2,252 days; the last is on time).
	d = Decide(trigger(t, "0 9 * * *", Skip, 10*time.Second), cur, now, MaxWalk)
	if d.Capped || d.Counts[Skipped] != 2251 || len(d.Fires) != 1 {
		t.Errorf("daily: capped %v skipped %d fires %d", d.Capped, d.Counts[Skipped], len(d.Fires))
	}
}

// Overlap skip: while the previous run is open, nothing the decision would
// start runs, and the slots are counted skipped_overlap (a compressed run:
// every slot it covers); once closed, one run per decision, the first.
// allow_all changes nothing.
func TestApplyOverlap(t *testing.T) {
	now := utc("2026-03-01T09:05:05Z") // 09:01..09:04 missed, 09:05 on time
	catchup := trigger(t, "* * * * *", Catchup, 10*time.Second)
	if catchup.Overlap != OverlapAllowAll {
		t.Fatalf("catchup's default overlap %q, want allow_all", catchup.Overlap)
	}
	d := Decide(catchup, at0900, now, MaxWalk)
	if got := ApplyOverlap(catchup, at0900, d, true); len(got.Fires) != 5 || got.Counts[SkippedOverlap] != 0 {
		t.Errorf("allow_all: %s %v", fireList(got.Fires), got.Counts)
	}
	catchup.Overlap = OverlapSkip
	d = ApplyOverlap(catchup, at0900, Decide(catchup, at0900, now, MaxWalk), false)
	if got, want := fireList(d.Fires), "catchup 09:01 (09:00, 09:01] missed 1; "; got != want || d.Counts[SkippedOverlap] != 4 ||
		d.Counts[CatchUp] != 1 || d.Counts[OnTime] != 0 || !d.Cursor.LastFired.Equal(utc("2026-03-01T09:01:00Z")) || len(d.Overlapped) != 4 {
		t.Errorf("skip, previous closed: %s %v last fired %s, want %s and 4 skipped_overlap", got, d.Counts, d.Cursor.LastFired, want)
	}
	d = ApplyOverlap(catchup, at0900, Decide(catchup, at0900, now, MaxWalk), true)
	if len(d.Fires) != 0 || d.Counts[SkippedOverlap] != 5 || !d.Cursor.LastFired.Equal(at0900.LastFired) ||
		!d.Cursor.LastSlot.Equal(utc("2026-03-01T09:05:00Z")) {
		t.Errorf("skip, previous open: %s %v cursor %+v", fireList(d.Fires), d.Counts, d.Cursor)
	}
	compress := trigger(t, "* * * * *", Compress, 10*time.Second)
	compress.Overlap = OverlapSkip
	d = ApplyOverlap(compress, at0900, Decide(compress, at0900, now, MaxWalk), true)
	if len(d.Fires) != 0 || d.Counts[SkippedOverlap] != 5 || d.Counts[Compressed] != 0 {
		t.Errorf("compress, previous open: %s %v", fireList(d.Fires), d.Counts)
	}
	skip := trigger(t, "* * * * *", Skip, 10*time.Second)
	if skip.Overlap != OverlapSkip {
		t.Errorf("skip's default overlap %q, want skip", skip.Overlap)
	}
}

// A compressed run skipped for overlap stands for every slot it covers:
// Overlapped lists each of them (the overlap log line prints it), as
// skipped_overlap counts them, not only the run's own slot.
func TestApplyOverlapListsEverySlotASkippedCompressedRunCovers(t *testing.T) {
	now := utc("2026-03-01T09:05:05Z") // 09:01..09:04 missed, 09:05 on time
	compress := trigger(t, "* * * * *", Compress, 10*time.Second)
	compress.Overlap = OverlapSkip
	d := ApplyOverlap(compress, at0900, Decide(compress, at0900, now, MaxWalk), true)
	var got []string
	for _, s := range d.Overlapped {
		got = append(got, s.Format("15:04"))
	}
	if want := []string{"09:01", "09:02", "09:03", "09:04", "09:05"}; !slices.Equal(got, want) || d.OverlappedNotListed != 0 {
		t.Errorf("compressed run skipped for overlap: Overlapped %v (%d not listed), want %v: every slot its skipped_overlap (%d) counts",
			got, d.OverlappedNotListed, want, d.Counts[SkippedOverlap])
	}
}

// A compressed run that covers more slots than a log line should carry
// lists the newest MaxOverlappedListed and counts the rest.
func TestApplyOverlapBoundsTheSlotsItLists(t *testing.T) {
	now := utc("2026-03-01T13:00:05Z") // four hours of minute slots missed
	compress := trigger(t, "* * * * *", Compress, 10*time.Second)
	compress.Overlap = OverlapSkip
	d := ApplyOverlap(compress, at0900, Decide(compress, at0900, now, MaxWalk), true)
	if n := int64(len(d.Overlapped)); n != MaxOverlappedListed || n+d.OverlappedNotListed != d.Counts[SkippedOverlap] ||
		!d.Overlapped[n-1].Equal(utc("2026-03-01T13:00:00Z")) {
		t.Errorf("Overlapped %d slots (last %v) and %d not listed, want the newest %d and %d counted in all",
			n, d.Overlapped[len(d.Overlapped)-1], d.OverlappedNotListed, MaxOverlappedListed, d.Counts[SkippedOverlap])
	}
}
