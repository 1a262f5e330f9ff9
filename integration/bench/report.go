package bench

import (
	"encoding/json"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Report is everything one run measured.
type Report struct {
	When    time.Time `json:"when"`
	Machine string    `json:"machine"`
	Params  Params    `json:"params"`
	// RawStartRuns are the raw Temporal start runs, one before each
	// unique-heavy backlog in UniqueRuns and one after the last: with no
	// worker every started workflow stays open and the in-process server
	// slows as they pile up, so each backlog is compared with the mean of
	// the raw runs either side of it.
	RawStartRuns []Rate         `json:"raw_temporal_start_runs"`
	UniqueRuns   []RouterResult `json:"unique_heavy_runs"`
	RawClaims    ClaimRates     `json:"raw_ledger_claims"`
	// ReplayRawClaim is the claim statement alone over the replay's own
	// workflow IDs (all started), on its database, right after it.
	ReplayRawClaim Rate `json:"replay_raw_claim"`
	RawConsume     Rate `json:"raw_consume"`
	// Backlogs has one run per duplicate ratio; the 0% one combines
	// UniqueRuns.
	Backlogs    []RouterResult `json:"router_backlogs"`
	Live        []RouterResult `json:"router_live"`
	Replay      RouterResult   `json:"router_replay"`
	NaiveUnique RouterResult   `json:"naive_unique_heavy"`
	NaiveReplay RouterResult   `json:"naive_replay"`
	Ledger      []LedgerPoint  `json:"ledger_growth"`
	RSS         *RSSResult     `json:"rss,omitempty"`
}

// Machine describes where the run happened.
func Machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				model = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d cores, %s/%s, %s", model, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
}

func ratio(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// Markdown renders the report with its ratios and targets.
func (r *Report) Markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("Benchmark of %s on %s (%d records per backlog, %d partitions, start concurrency %d, batch %d, payload ~%d B).\n\n",
		r.When.Format("2006-01-02 15:04"), r.Machine, r.Params.Records, r.Params.Partitions, r.Params.Concurrency, r.Params.Batch, r.Params.PayloadBytes)
	p("| stage | records/s | workflows started/s | Temporal calls / workflow | PG round trips / record | latency p50 / p95 / p99 ms |\n|---|---|---|---|---|---|\n")
	raws := make([]string, len(r.RawStartRuns))
	for i, x := range r.RawStartRuns {
		raws[i] = fmt.Sprintf("%.0f", x.PerSec)
	}
	p("| raw Temporal starts (c=%d, %d each), runs interleaved with the unique-heavy backlogs | | %s | 1 | | |\n", r.Params.Concurrency, r.Params.RawStarts, strings.Join(raws, " / "))
	p("| raw ledger claim, new rows (batch %d) | %.0f | | | 1 per batch | |\n", r.Params.Batch, r.RawClaims.New.PerSec)
	p("| raw ledger claim, duplicate rows | %.0f | | | 1 per batch | %.1f / %.1f / %.1f per batch |\n", r.RawClaims.Duplicate.PerSec,
		r.RawClaims.LatencyMs.P50, r.RawClaims.LatencyMs.P95, r.RawClaims.LatencyMs.P99)
	p("| raw consume with commits | %.0f | | | | |\n", r.RawConsume.PerSec)
	for i, x := range r.UniqueRuns {
		p("| dedup, backlog, %.0f%% duplicates, round %d | %.0f | %.0f | %.2f | %.3f | |\n", x.DupRatio*100, i+1, x.Records.PerSec, x.Workflows.PerSec, x.TemporalPerUnique, x.PGPerRecord)
	}
	for _, x := range r.Backlogs {
		p("| dedup, backlog, %.0f%% duplicates | %.0f | %.0f | %.2f | %.3f | |\n", x.DupRatio*100, x.Records.PerSec, x.Workflows.PerSec, x.TemporalPerUnique, x.PGPerRecord)
	}
	for _, x := range r.Live {
		p("| dedup, live at %d rec/s, %.0f%% duplicates | %.0f | %.0f | %.2f | %.3f | %.0f / %.0f / %.0f |\n", r.Params.LiveRate, x.DupRatio*100,
			x.Records.PerSec, x.Workflows.PerSec, x.TemporalPerUnique, x.PGPerRecord, x.LatencyMs.P50, x.LatencyMs.P95, x.LatencyMs.P99)
	}
	p("| dedup, replay (all duplicates, %d records, %d intents = %.0f intents/s; claim in flight %.0f%% of the time) | %.0f | %.0f | %d calls | %.4f | |\n",
		r.Replay.Records.N, r.Replay.Intents.N, r.Replay.Intents.PerSec, r.Replay.ClaimBusy*100, r.Replay.Records.PerSec, r.Replay.Workflows.PerSec, r.Replay.TemporalCalls, r.Replay.PGPerRecord)
	p("| raw ledger claim of the replay's own workflow IDs (all started), right after it | %.0f rows/s | | | 1 per batch | |\n", r.ReplayRawClaim.PerSec)
	p("| naive, unique-heavy (%d records) | %.0f | %.0f | %.2f | %.2f | |\n", r.NaiveUnique.Records.N, r.NaiveUnique.Records.PerSec, r.NaiveUnique.Workflows.PerSec,
		float64(r.NaiveUnique.TemporalCalls)/max(1, float64(r.NaiveUnique.Workflows.N)), r.NaiveUnique.PGPerRecord)
	p("| naive, replay (%d records) | %.0f | | %d calls | %.2f | |\n", r.NaiveReplay.Records.N, r.NaiveReplay.Records.PerSec, r.NaiveReplay.TemporalCalls, r.NaiveReplay.PGPerRecord)

	unique := r.Backlogs[0]
	p("\n| ratio | measured | target |\n|---|---|---|\n")
	rs := r.UniqueRatios()
	each := make([]string, len(rs))
	for i, x := range rs {
		each[i] = fmt.Sprintf("%.2f", x)
	}
	p("| dedup / raw start capacity (unique-heavy, %.0f%% dup, workflows/s; each round vs the mean of the raw runs either side: %s) | %s | >= 0.90 |\n", unique.DupRatio*100, strings.Join(each, ", "), ratio(mean(rs), 1))
	p("| dedup / raw claim capacity (all-duplicate replay, records/s vs duplicate rows/s of the raw stage) | %s | >= 0.60, with 0 Temporal calls (%d) |\n", ratio(r.Replay.Records.PerSec, r.RawClaims.Duplicate.PerSec), r.Replay.TemporalCalls)
	p("| stricter: dedup / the claim alone over the replay's own IDs, on its database, right after it (records/s vs rows/s) | %s | (none set; shown for scale) |\n", ratio(r.Replay.Records.PerSec, r.ReplayRawClaim.PerSec))
	p("| dedup / naive, replay (records/s) | %s | >= 10 |\n", ratio(r.Replay.Records.PerSec, r.NaiveReplay.Records.PerSec))
	p("| dedup / naive, unique-heavy (records/s) | %s | >= 1.2 |\n", ratio(unique.Records.PerSec, r.NaiveUnique.Records.PerSec))
	if len(r.Ledger) > 0 {
		p("\nClaim statement as the ledger grows (batches of %d):\n\n| ledger rows | new rows/s | duplicate rows/s | duplicate batch p50 / p99 ms | duplicate rows/s vs smallest ledger |\n|---|---|---|---|---|\n", r.Params.Batch)
		for _, l := range r.Ledger {
			p("| %d | %.0f | %.0f | %.1f / %.1f | %s |\n", l.Rows, l.Raw.New.PerSec, l.Raw.Duplicate.PerSec, l.Raw.LatencyMs.P50, l.Raw.LatencyMs.P99, ratio(l.Raw.Duplicate.PerSec, r.Ledger[0].Raw.Duplicate.PerSec))
		}
	}
	if r.RSS != nil {
		p("\n`dedup run` over a %d-record backlog (max_in_flight %d): peak RSS %.0f MiB (target < 256), heap in use at the end %.0f MiB, %.0f records/s, %.0f Temporal start calls.\n",
			r.RSS.Backlog, r.RSS.MaxInFlight, r.RSS.PeakRSSMiB, r.RSS.HeapMiB, r.RSS.Records.PerSec, r.RSS.StartCalls)
	}
	return b.String()
}

// UniqueRatios are, per unique-heavy round, its workflows/s over the mean
// of the raw start runs either side of it.
func (r *Report) UniqueRatios() []float64 {
	var out []float64
	for i, x := range r.UniqueRuns {
		if i+1 < len(r.RawStartRuns) {
			out = append(out, x.Workflows.PerSec/((r.RawStartRuns[i].PerSec+r.RawStartRuns[i+1].PerSec)/2))
		}
	}
	return out
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// Write saves report.md, report.json and throughput.png in dir.
func (r *Report) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(r.Markdown()), 0o644); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), b, 0o644); err != nil {
		return err
	}
	return r.plot(filepath.Join(dir, "throughput.png"))
}

// plot draws, against the duplicate ratio, records/s and workflows
// started/s of the backlog runs (log scale, with the raw start capacity
// for reference) above the p99 latency of the live runs.
func (r *Report) plot(path string) error {
	tp := plot.New()
	tp.Title.Text = "dedup: throughput (backlog runs) vs duplicate ratio"
	tp.X.Label.Text = "duplicate ratio (%)"
	tp.Y.Label.Text = "per second (log)"
	var recs, wfs plotter.XYs
	for _, x := range r.Backlogs {
		recs = append(recs, plotter.XY{X: x.DupRatio * 100, Y: max(x.Records.PerSec, 1)})
		wfs = append(wfs, plotter.XY{X: x.DupRatio * 100, Y: max(x.Workflows.PerSec, 1)})
	}
	if err := plotutil.AddLinePoints(tp, "records/s", recs, "workflows started/s (1 = none)", wfs); err != nil {
		return err
	}
	var rawMean float64
	for _, x := range r.RawStartRuns {
		rawMean += x.PerSec / float64(len(r.RawStartRuns))
	}
	raw, err := plotter.NewLine(plotter.XYs{{X: 0, Y: rawMean}, {X: 100, Y: rawMean}})
	if err != nil {
		return err
	}
	raw.Color = color.RGBA{R: 128, G: 128, B: 128, A: 255}
	raw.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	tp.Add(raw)
	tp.Legend.Add("raw Temporal start capacity (mean of the runs)", raw)
	tp.Legend.Top = true
	tp.Y.Scale = plot.LogScale{}
	tp.Y.Tick.Marker = plot.LogTicks{Prec: -1}

	bp := plot.New()
	bp.Title.Text = fmt.Sprintf("p99 latency, produce -> workflow started (live, %d records/s)", r.Params.LiveRate)
	bp.X.Label.Text = "duplicate ratio (%)"
	bp.Y.Label.Text = "ms"
	var p99, p50 plotter.XYs
	for _, x := range r.Live {
		if x.LatencyMs.N > 0 {
			p99 = append(p99, plotter.XY{X: x.DupRatio * 100, Y: x.LatencyMs.P99})
			p50 = append(p50, plotter.XY{X: x.DupRatio * 100, Y: x.LatencyMs.P50})
		}
	}
	if err := plotutil.AddLinePoints(bp, "p99", p99, "p50", p50); err != nil {
		return err
	}
	bp.Y.Min = 0

	const w, h = 9 * vg.Inch, 9 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadX: vg.Points(4), PadY: vg.Points(12)}
	canvases := plot.Align([][]*plot.Plot{{tp}, {bp}}, tiles, dc)
	tp.Draw(canvases[0][0])
	bp.Draw(canvases[1][0])
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(f)
	return err
}
