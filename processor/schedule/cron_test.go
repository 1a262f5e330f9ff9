package schedule

import (
	"testing"
	"time"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

// slots lists the slots of spec in (from, to].
func slots(t *testing.T, spec, tz string, from, to time.Time) []string {
	t.Helper()
	c, err := ParseCron(spec, tz)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for s := c.Next(from); !s.IsZero() && !s.After(to); s = c.Next(s) {
		out = append(out, s.Format(time.RFC3339))
	}
	return out
}

func same(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// ISC cron's rules in America/New_York: a fixed-time job in the
// spring-forward gap runs once, at the end of the gap (03:00 local); one
// in the repeated hour runs once, at its first occurrence; a job with "*"
// in its hour field runs by the clock: no 02:00 in March, two 01:00s in
// November.
func TestCronDSTNewYork(t *testing.T) {
	cases := []struct {
		spec     string
		from, to string
		want     []string
	}{
		// 2026-03-08: 02:00 EST -> 03:00 EDT. 02:30 does not exist: 03:00 EDT = 07:00Z.
		{"30 2 * * *", "2026-03-07T00:00:00Z", "2026-03-10T00:00:00Z",
			[]string{"2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}},
		// 2026-11-01: 02:00 EDT -> 01:00 EST. 01:30 happens twice: the first (EDT, 05:30Z) only.
		{"30 1 * * *", "2026-10-31T00:00:00Z", "2026-11-03T00:00:00Z",
			[]string{"2026-10-31T05:30:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		// Seconds field, same rule.
		{"0 30 2 * * *", "2026-03-08T00:00:00Z", "2026-03-09T00:00:00Z", []string{"2026-03-08T07:00:00Z"}},
		// Several slots in the gap are one run at its end.
		{"0,20,40 2 * * *", "2026-03-08T00:00:00Z", "2026-03-09T00:00:00Z", []string{"2026-03-08T07:00:00Z"}},
		// A slot at 03:00 and one in the gap: one run.
		{"30 2,3 * * *", "2026-03-08T00:00:00Z", "2026-03-08T12:00:00Z", []string{"2026-03-08T07:00:00Z", "2026-03-08T07:30:00Z"}},
		// Hourly by the clock: 01:00 EST (06:00Z), then 03:00 EDT (07:00Z).
		{"0 * * * *", "2026-03-08T05:30:00Z", "2026-03-08T08:00:00Z",
			[]string{"2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"}},
		// Hourly in November: 01:00 EDT (05:00Z) and 01:00 EST (06:00Z).
		{"@hourly", "2026-11-01T04:30:00Z", "2026-11-01T07:00:00Z",
			[]string{"2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"}},
		// @daily is fixed-time: midnight local.
		{"@daily", "2026-03-07T00:00:00Z", "2026-03-09T00:00:00Z", []string{"2026-03-07T05:00:00Z", "2026-03-08T05:00:00Z"}},
	}
	for _, c := range cases {
		if got := slots(t, c.spec, "America/New_York", utc(c.from), utc(c.to)); !same(got, c.want) {
			t.Errorf("%q: %v, want %v", c.spec, got, c.want)
		}
	}
}

// Next from inside the repeated hour (after the first 01:30 ran) never
// gives the second 01:30; from inside the gap's end it never gives the
// gap slot again.
func TestCronDSTFromInsideTransitions(t *testing.T) {
	c, _ := ParseCron("30 1 * * *", "America/New_York")
	if got := c.Next(utc("2026-11-01T06:10:00Z")); !got.Equal(utc("2026-11-02T06:30:00Z")) { // 01:10 EST
		t.Errorf("from 01:10 EST: %s, want the next day", got)
	}
	c, _ = ParseCron("30 2 * * *", "America/New_York")
	if got := c.Next(utc("2026-03-08T07:00:00Z")); !got.Equal(utc("2026-03-09T06:30:00Z")) { // 03:00 EDT
		t.Errorf("from 03:00 EDT: %s, want the next day", got)
	}
}

func TestCronFormsAndZones(t *testing.T) {
	// @every is aligned to the Unix epoch, so its slots (and IDs) do not
	// depend on when dedup first saw the trigger.
	if got := slots(t, "@every 15s", "", utc("2026-03-01T09:00:07Z"), utc("2026-03-01T09:00:40Z")); !same(got,
		[]string{"2026-03-01T09:00:15Z", "2026-03-01T09:00:30Z"}) {
		t.Errorf("@every 15s: %v", got)
	}
	if got := slots(t, "*/20 * * * * *", "", utc("2026-03-01T09:00:00Z"), utc("2026-03-01T09:01:00Z")); !same(got,
		[]string{"2026-03-01T09:00:20Z", "2026-03-01T09:00:40Z", "2026-03-01T09:01:00Z"}) {
		t.Errorf("seconds: %v", got)
	}
	if got := slots(t, "0 9 * * *", "Europe/Paris", utc("2026-03-01T00:00:00Z"), utc("2026-03-02T00:00:00Z")); !same(got,
		[]string{"2026-03-01T08:00:00Z"}) {
		t.Errorf("Europe/Paris: %v", got)
	}
	// ISC: day of month and day of week both restricted means either.
	if got := slots(t, "0 0 1 * MON", "", utc("2026-03-01T00:00:00Z"), utc("2026-03-10T00:00:00Z")); !same(got,
		[]string{"2026-03-02T00:00:00Z", "2026-03-09T00:00:00Z"}) {
		t.Errorf("dom or dow: %v", got)
	}
	for _, bad := range []struct{ spec, tz string }{{"CRON_TZ=UTC 0 9 * * *", ""}, {"0 9 * *", ""}, {"0 9 * * *", "Mars/Olympus"},
		{"@every 500ms", ""}, {"", ""}} {
		if _, err := ParseCron(bad.spec, bad.tz); err == nil {
			t.Errorf("%q in %q accepted", bad.spec, bad.tz)
		}
	}
}
