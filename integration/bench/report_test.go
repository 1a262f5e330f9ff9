package bench

import "testing"

func TestSpread(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want Spread
	}{
		{nil, Spread{}},
		{[]float64{2}, Spread{2, 2, 2, 1}},
		{[]float64{3, 1, 2}, Spread{1, 2, 3, 3}},
		{[]float64{4, 1, 3, 2}, Spread{1, 2.5, 4, 4}},
	} {
		if got := spread(c.in); got != c.want {
			t.Errorf("spread(%v) = %+v, want %+v", c.in, got, c.want)
		}
	}
}

// A target is judged on the median of the repetitions, only at the
// profile it is set for.
func TestFinishJudgesTargetsOnTheMedian(t *testing.T) {
	rep := func(routerWF, rawPerSec float64) Rep {
		return Rep{Unique: RouterResult{Workflows: Rate{N: 100, PerSec: routerWF}}, RawStarts: Rate{N: 100, PerSec: rawPerSec}}
	}
	r := &Report{Profiles: []Profile{
		{Latency: Latency{Name: "0ms"}, Reps: []Rep{rep(50, 100), rep(50, 100), rep(50, 100)}},
		// 0.80, 0.95, 0.99: the median 0.95 meets >= 0.90 though one repetition does not.
		{Latency: Latency{Name: "20ms"}, Reps: []Rep{rep(80, 100), rep(95, 100), rep(99, 100)}},
	}}
	r.Finish()
	var seen int
	for _, row := range r.Ratios {
		if row.Name != "router workflows/s / raw start capacity at the same concurrency (unique-heavy)" {
			continue
		}
		seen++
		switch row.Profile {
		case "0ms":
			if row.Met != nil {
				t.Errorf("0ms: judged (%v) though the target is set at 20ms", *row.Met)
			}
		case "20ms":
			if row.Met == nil || !*row.Met || row.Spread.Min != 0.8 || row.Spread.Median != 0.95 {
				t.Errorf("20ms: %+v, want met on the median 0.95 with min 0.80", row)
			}
		}
	}
	if seen != 2 {
		t.Fatalf("%d rows for the unique-heavy ratio, want one per profile", seen)
	}
}
