package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"

	cron "github.com/netresearch/go-cron"
)

// parser reads cron specs: 5 fields, or 6 with seconds first; descriptors
// (@hourly, @daily, @every 5m, ...); day of month and day of week OR-ed
// when both are restricted, as in ISC (Vixie) cron.
var parser = cron.MustNewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow |
	cron.Descriptor | cron.DowOrDom)

// dstSpan bounds how far a time-zone transition moves the wall clock (an
// hour in most zones, two in a few historical ones).
const dstSpan = 3 * time.Hour

// Cron is a trigger's schedule: its slots, as instants. It follows ISC
// cron's rules for daylight saving time: a fixed-time schedule (its minute
// and hour fields do not start with "*") fires a slot whose wall-clock
// time does not exist (spring forward) once, at the end of the gap (a
// 02:30 job runs at 03:00), and a slot whose wall-clock time happens
// twice (fall back) once, at the first; a schedule with "*" in its
// minute or hour field (every n minutes, @hourly) fires at every instant
// whose local time matches, so it skips the missing hour and runs the
// repeated one twice. @every d fires every d since the Unix epoch.
//
// It uses go-cron's parser and Next (never its runner). Next of go-cron
// v0.9.1 does not do what its documentation says for fixed-time
// schedules (it gives 03:30 for a 02:30 job on spring-forward day and runs
// a 01:30 job twice on fall-back day), so for those Cron walks the same
// schedule in wall-clock time and maps each wall time to an instant
// itself.
type Cron struct {
	spec  cron.Schedule // in the trigger's zone: schedules with a "*" in minute or hour
	wall  cron.Schedule // the same fields in UTC, read as wall-clock time: fixed-time schedules
	loc   *time.Location
	every time.Duration // @every
}

// ParseCron parses spec in the time zone tz (an IANA name; empty means
// UTC). A CRON_TZ= or TZ= prefix in spec is refused: the zone is a field
// of its own, so that there is one place to read it.
func ParseCron(spec, tz string) (*Cron, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, errors.New("empty")
	}
	if strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ=") {
		return nil, fmt.Errorf("%q: give the time zone in time_zone, not in the spec", spec)
	}
	if tz == "" {
		tz = "UTC"
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("time zone %q: %w", tz, err)
	}
	c := &Cron{loc: loc}
	if strings.HasPrefix(spec, "@every") {
		s, err := parser.Parse(spec)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", spec, err)
		}
		d := s.(cron.ConstantDelaySchedule).Delay
		if d < time.Second || d%time.Second != 0 {
			return nil, fmt.Errorf("%q: @every needs whole seconds, at least 1s", spec)
		}
		c.every = d
		return c, nil
	}
	if c.spec, err = parser.Parse("CRON_TZ=" + tz + " " + spec); err != nil {
		return nil, fmt.Errorf("%q: %w", spec, err)
	}
	if fixedTime(spec) {
		if c.wall, err = parser.Parse("CRON_TZ=UTC " + spec); err != nil {
			return nil, fmt.Errorf("%q: %w", spec, err)
		}
	}
	return c, nil
}

// fixedTime reports whether ISC cron would treat the spec as a job "at a
// specific time": neither its minute nor its hour field starts with "*".
// Those are the jobs its DST rules adjust.
func fixedTime(spec string) bool {
	if strings.HasPrefix(spec, "@") {
		return spec != "@hourly" // @yearly, @annually, @monthly, @weekly, @daily, @midnight
	}
	f := strings.Fields(spec)
	if len(f) < 5 {
		return false
	}
	minute, hour := f[len(f)-5], f[len(f)-4]
	return !strings.HasPrefix(minute, "*") && !strings.HasPrefix(hour, "*")
}

// Next returns the first slot after t, in UTC; the zero time when the
// schedule has none within go-cron's search limit (five years).
func (c *Cron) Next(t time.Time) time.Time {
	switch {
	case c.every > 0:
		step := int64(c.every / time.Second)
		sec := t.Unix()
		next := (sec/step + 1) * step
		if sec < 0 && sec%step != 0 {
			next = (sec / step) * step
		}
		return time.Unix(next, 0).UTC()
	case c.wall != nil:
		return c.nextFixed(t)
	}
	n := c.spec.Next(t)
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// nextFixed walks the schedule in wall-clock time from t's wall time (a
// little earlier just after a transition, where wall times repeat) and
// returns the instant of the first wall slot that maps after t. Slots of
// one spring-forward gap map to one instant, the gap's end, and the second
// occurrence of a repeated wall time is never an instant of its own: the
// walk does the deduplication ISC cron does.
func (c *Cron) nextFixed(t time.Time) time.Time {
	lt := t.In(c.loc)
	w := naive(lt)
	if start, _ := lt.ZoneBounds(); !start.IsZero() && lt.Sub(start) < dstSpan {
		w = w.Add(-dstSpan)
	}
	for {
		if w = c.wall.Next(w); w.IsZero() {
			return w
		}
		if at := c.instant(w); at.After(t) {
			return at.UTC()
		}
	}
}

// naive is t's wall-clock time, labelled UTC.
func naive(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// instant maps a wall-clock time (labelled UTC) to the first instant whose
// local time in c.loc it is, or, if no instant has it (a spring-forward
// gap), to the end of the gap.
func (c *Cron) instant(w time.Time) time.Time {
	// Every offset in effect within a day of w; a wall time can only be
	// w minus one of them.
	var offs []int
	for _, d := range []time.Duration{-26 * time.Hour, 0, 26 * time.Hour} {
		_, off := w.Add(d).In(c.loc).Zone()
		if !containsInt(offs, off) {
			offs = append(offs, off)
		}
	}
	var best time.Time
	for _, off := range offs {
		at := w.Add(-time.Duration(off) * time.Second)
		if naive(at.In(c.loc)).Equal(w) && (best.IsZero() || at.Before(best)) {
			best = at
		}
	}
	if !best.IsZero() {
		return best
	}
	// In a gap: the transition after which the wall clock is past w.
	for _, off := range offs {
		at := w.Add(-time.Duration(off) * time.Second)
		start, _ := at.In(c.loc).ZoneBounds()
		if start.IsZero() {
			continue
		}
		if naive(start.In(c.loc)).After(w) && naive(start.Add(-time.Second).In(c.loc)).Before(w) {
			return start
		}
	}
	// Not reached for real zones; be safe: the plain reading.
	return time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), c.loc)
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
