package bench

import (
	"cmp"
	"encoding/json"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/dedupio/dedup/integration/bench/peer"
)

// Report is everything one run measured.
type Report struct {
	When      time.Time `json:"when"`
	Machine   string    `json:"machine"`
	Params    Params    `json:"params"`
	Reps      int       `json:"repetitions"`
	Placement Placement `json:"placement"`
	// Postgres says which PostgreSQL the run used and how it was set.
	Postgres string `json:"postgres"`
	// Stages is the -stages filter (empty: every stage ran), BaselineExe
	// the -baseline-exe binary the "this build / baseline" rows compare
	// with.
	Stages      []string `json:"stages,omitempty"`
	BaselineExe string   `json:"baseline_exe,omitempty"`
	// StageExe is the -stage-exe binary that ran "this build"'s stages,
	// if not this one.
	StageExe string `json:"stage_exe,omitempty"`
	// Profiles has one entry per latency profile, each with its
	// repetitions.
	Profiles []Profile `json:"profiles"`
	// Ratios are computed from the profiles (Finish): each a spread over
	// the repetitions, with its target where one is set.
	Ratios []RatioRow    `json:"ratios"`
	Ledger []LedgerPoint `json:"ledger_growth"`
	RSS    *RSSResult    `json:"rss,omitempty"`
	// Guarantees is the guarantees stage's (one run, no added latency);
	// nil when skipped (GuaranteeRecords 0).
	Guarantees *peer.GuaranteesResult `json:"guarantees,omitempty"`
	// Scale and Retention are the on-demand ledger stages'.
	Scale     []ScalePoint     `json:"ledger_scale,omitempty"`
	Retention *RetentionResult `json:"retention,omitempty"`
}

// Profile is the repetitions at one latency profile.
type Profile struct {
	Latency Latency `json:"latency"`
	Reps    []Rep   `json:"repetitions"`
}

// Rep is one repetition of every comparison, its stages run back to back.
type Rep struct {
	RawStarts Rate `json:"raw_temporal_starts"`
	// SDKStarts is the same starts through the SDK's ExecuteWorkflow.
	SDKStarts   Rate         `json:"sdk_starts"`
	Unique      RouterResult `json:"router_unique_heavy"`
	NaiveUnique RouterResult `json:"naive_unique_heavy"`
	RawClaims   ClaimRates   `json:"raw_ledger_claims"`
	Replay      RouterResult `json:"router_replay"`
	// ReplayRawClaim is the claim statement alone over the replay's own
	// workflow IDs (all started), on its database, right after it.
	ReplayRawClaim Rate         `json:"replay_raw_claim"`
	NaiveReplay    RouterResult `json:"naive_replay"`
	// Watermill is the Watermill peer over the unique-heavy backlog (the
	// router's records), WatermillReplay over an all-duplicate backlog
	// whose workflows Temporal has started.
	Watermill       RouterResult `json:"watermill_unique_heavy"`
	WatermillReplay RouterResult `json:"watermill_replay"`
	RawConsume      Rate         `json:"raw_consume"`
	// Backlogs has one run per duplicate ratio (the first is Unique).
	Backlogs []RouterResult `json:"router_backlogs"`
	Live     []RouterResult `json:"router_live"`
	// Costs are the cost stages (costs.go), nil when skipped.
	Costs *CostRuns `json:"costs,omitempty"`
	// Ran names the stages the repetition ran (-stages): the report
	// leaves out the rows of the others.
	Ran []string `json:"stages_ran"`
	// Baseline is the baseline binary's runs of the compared stages
	// (-baseline-exe), nil without one.
	Baseline *Rep `json:"baseline,omitempty"`
}

// Spread is a figure over the repetitions.
type Spread struct {
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

func spread(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Spread{Min: s[0], Median: m, Max: s[len(s)-1], N: len(s)}
}

func (s Spread) String() string {
	switch s.N {
	case 0:
		return "n/a"
	case 1:
		return num(s.Median)
	}
	return fmt.Sprintf("%s / **%s** / %s", num(s.Min), num(s.Median), num(s.Max))
}

func num(x float64) string {
	switch {
	case x == 0:
		return "0"
	case x >= 100 || x <= -100:
		return fmt.Sprintf("%.0f", x)
	case x >= 10 || x <= -10:
		return fmt.Sprintf("%.1f", x)
	default:
		return fmt.Sprintf("%.2f", x)
	}
}

// RatioRow is one ratio at one latency profile.
type RatioRow struct {
	Name    string `json:"name"`
	Profile string `json:"profile"`
	Spread  Spread `json:"spread"`
	// Target is the bound ("<= 1.3"), empty for figures shown for scale;
	// Met compares the median with it (nil: no target at this profile).
	Target string `json:"target,omitempty"`
	Met    *bool  `json:"met,omitempty"`
}

// ratioDef is a ratio of a repetition, with its target: met when the
// median is at most (or, with atLeast, at least) bound; onlyAt names the
// latency profile the target is set for ("" for every one).
type ratioDef struct {
	name    string
	of      func(Rep) float64
	target  bool
	bound   float64
	atLeast bool
	onlyAt  string
	// needs are the stages (or baselineKey of one) every repetition must
	// have run for the row to be shown.
	needs []string
}

func ratioDefs() []ratioDef {
	div := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	uniq, starts, sdk, claims, replay := StageBacklog, StageRawStarts, StageSDKStarts, StageRawClaims, StageReplay
	return append(append([]ratioDef{
		// Issue #43's targets, at both profiles.
		{name: "router CPU per started workflow / the SDK's ExecuteWorkflow CPU per start (unique-heavy)", needs: []string{uniq, sdk},
			of: func(x Rep) float64 { return div(x.Unique.CPUPerWorkflow(), x.SDKStarts.CPUPer()) }, target: true, bound: 1.0},
		{name: "router records/s / raw duplicate-claim rows/s (all-duplicate replay)", needs: []string{replay, claims},
			of: func(x Rep) float64 { return div(x.Replay.Records.PerSec, x.RawClaims.Duplicate.PerSec) }, target: true, bound: 0.8, atLeast: true},
		{name: "router CPU per duplicate record / raw claim CPU per duplicate row", needs: []string{replay, claims},
			of: func(x Rep) float64 { return div(x.Replay.CPUPerRecord(), x.RawClaims.Duplicate.CPUPer()) }, target: true, bound: 3.0},
		{name: "router / Watermill peer, records/s (unique-heavy)", needs: []string{uniq, StageWatermill},
			of: func(x Rep) float64 { return div(x.Unique.Records.PerSec, x.Watermill.Records.PerSec) }, target: true, bound: 1.2, atLeast: true},
		// Figures.
		{name: "router CPU per duplicate record, µs (all-duplicate replay)", needs: []string{replay},
			of: func(x Rep) float64 { return x.Replay.CPUPerRecord() }},
		{name: "router workflows/s / raw start capacity at the same concurrency (unique-heavy)", needs: []string{uniq, starts},
			of: func(x Rep) float64 { return div(x.Unique.Workflows.PerSec, x.RawStarts.PerSec) }},
		{name: "router / naive consumer, records/s (unique-heavy)", needs: []string{uniq, StageNaiveUnique},
			of: func(x Rep) float64 { return div(x.Unique.Records.PerSec, x.NaiveUnique.Records.PerSec) }},
		{name: "Temporal calls during the all-duplicate replay", needs: []string{replay},
			of: func(x Rep) float64 { return float64(x.Replay.TemporalCalls) }, target: true, bound: 0},
		{name: "router CPU per started workflow / its starter's alone, per start (unique-heavy; the floor: the start is in both)", needs: []string{uniq, starts},
			of: func(x Rep) float64 { return div(x.Unique.CPUPerWorkflow(), x.RawStarts.CPUPer()) }},
		{name: "router's starter alone / the SDK's ExecuteWorkflow, CPU per start", needs: []string{starts, sdk},
			of: func(x Rep) float64 { return div(x.RawStarts.CPUPer(), x.SDKStarts.CPUPer()) }},
		{name: "router CPU per workflow, µs (unique-heavy)", needs: []string{uniq}, of: func(x Rep) float64 { return x.Unique.CPUPerWorkflow() }},
		{name: "the SDK's ExecuteWorkflow CPU per start, µs", needs: []string{sdk}, of: func(x Rep) float64 { return x.SDKStarts.CPUPer() }},
		{name: "router's starter alone CPU per start, µs", needs: []string{starts}, of: func(x Rep) float64 { return x.RawStarts.CPUPer() }},
		{name: "raw claim CPU per duplicate row, µs", needs: []string{claims}, of: func(x Rep) float64 { return x.RawClaims.Duplicate.CPUPer() }},
		{name: "naive consumer CPU per workflow, µs (unique-heavy)", needs: []string{StageNaiveUnique},
			of: func(x Rep) float64 { return x.NaiveUnique.CPUPerWorkflow() }},
		{name: "the replay's wait for its first records (the first fetch), ms", needs: []string{replay},
			of: func(x Rep) float64 { return x.Replay.FirstRecordsMs }},
		{name: "router records/s after its first records / raw duplicate-claim rows/s (all-duplicate replay)", needs: []string{replay, claims},
			of: func(x Rep) float64 { return div(x.Replay.AfterFirstRecords(), x.RawClaims.Duplicate.PerSec) }},
		{name: "router replay / the claim alone over its own IDs right after it (records/s vs rows/s)", needs: []string{replay},
			of: func(x Rep) float64 { return div(x.Replay.Records.PerSec, x.ReplayRawClaim.PerSec) }},
		{name: "router / naive consumer, records/s (all-duplicate replay)", needs: []string{replay, StageNaiveReplay},
			of: func(x Rep) float64 { return div(x.Replay.Records.PerSec, x.NaiveReplay.Records.PerSec) }},
		{name: "router / Watermill peer, records/s (all-duplicate replay)", needs: []string{replay, StageWatermillReplay},
			of: func(x Rep) float64 { return div(x.Replay.Records.PerSec, x.WatermillReplay.Records.PerSec) }},
		{name: "Watermill peer CPU per workflow, µs (unique-heavy)", needs: []string{StageWatermill},
			of: func(x Rep) float64 { return x.Watermill.CPUPerWorkflow() }},
		// The unique-heavy stages are bound by the infrastructure's core
		// (Temporal, PostgreSQL, Kafka; busy near 100%): there, records/s
		// go as the inverse of its CPU per workflow.
		{name: "router / Watermill peer, infrastructure core CPU per started workflow (unique-heavy)", needs: []string{uniq, StageWatermill},
			of: func(x Rep) float64 { return div(x.Unique.InfraCPUPerWorkflow(), x.Watermill.InfraCPUPerWorkflow()) }},
		{name: "router / its starter alone, infrastructure core CPU per started workflow (unique-heavy)", needs: []string{uniq, starts},
			of: func(x Rep) float64 { return div(x.Unique.InfraCPUPerWorkflow(), x.RawStarts.InfraCPUPer()) }},
		{name: "infrastructure core CPU per started workflow, µs: router (unique-heavy)", needs: []string{uniq},
			of: func(x Rep) float64 { return x.Unique.InfraCPUPerWorkflow() }},
		{name: "infrastructure core CPU per started workflow, µs: Watermill peer (unique-heavy)", needs: []string{StageWatermill},
			of: func(x Rep) float64 { return x.Watermill.InfraCPUPerWorkflow() }},
		{name: "infrastructure core CPU per start, µs: the router's starter alone", needs: []string{starts},
			of: func(x Rep) float64 { return x.RawStarts.InfraCPUPer() }},
		{name: "infrastructure core CPU per start, µs: the SDK's ExecuteWorkflow", needs: []string{sdk},
			of: func(x Rep) float64 { return x.SDKStarts.InfraCPUPer() }},
	}, baselineRatioDefs()...), costRatioDefs()...)
}

// Finish computes the ratios from the profiles.
func (r *Report) Finish() {
	r.Ratios = nil
	defs := ratioDefs()
	if r.Params.CostsOnly {
		defs = costRatioDefs()
	}
	defs = append(defs, baselineCostRatioDefs()...)
	for _, d := range defs {
		for _, p := range r.Profiles {
			if !p.ran(d.needs...) {
				continue // a stage did not run (-stages): no row rather than a 0
			}
			xs := make([]float64, len(p.Reps))
			for i, x := range p.Reps {
				xs[i] = d.of(x)
			}
			row := RatioRow{Name: d.name, Profile: p.Latency.Name, Spread: spread(xs)}
			if d.onlyAt == "" || d.onlyAt == p.Latency.Name {
				if d.target {
					op := "<="
					if d.bound == 0 {
						op = "="
					}
					met := row.Spread.Median <= d.bound
					if d.atLeast {
						op, met = ">=", row.Spread.Median >= d.bound
					}
					row.Target, row.Met = fmt.Sprintf("%s %s", op, num(d.bound)), &met
				}
			} else if d.target {
				row.Target = fmt.Sprintf("(set at %s)", d.onlyAt)
			}
			r.Ratios = append(r.Ratios, row)
		}
	}
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

// over is a figure's spread over a profile's repetitions.
func (p Profile) over(f func(Rep) float64) Spread {
	xs := make([]float64, len(p.Reps))
	for i, x := range p.Reps {
		xs[i] = f(x)
	}
	return spread(xs)
}

// Markdown renders the report: placement, targets, ratios, then each
// profile's figures (median over the repetitions, min–max beside).
func (r *Report) Markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("Benchmark of %s on %s: %d records per backlog, %d partitions, start concurrency %d, batch %d, payload ~%d B, Temporal gRPC compression %s (every stage); %d repetitions per latency profile, figures as min / **median** / max over them.\n\n",
		r.When.Format("2006-01-02 15:04"), r.Machine, r.Params.Records, r.Params.Partitions, r.Params.Concurrency, r.Params.Batch, r.Params.PayloadBytes,
		cmp.Or(r.Params.Compression, "none"), r.Reps)
	if len(r.Stages) > 0 {
		p("Stages run (-stages): %s; the rows of the others are left out.\n\n", strings.Join(r.Stages, ", "))
	}
	if r.StageExe != "" {
		p("**Stage binary (-stage-exe): `%s` ran every stage this report calls \"this build\"'s**; this program ran only the infrastructure.\n\n", r.StageExe)
	}
	if r.BaselineExe != "" {
		p("Baseline binary (-baseline-exe): `%s`, its runs of the compared stages right after this build's in odd repetitions and right before them in even ones, on the same infrastructure and params; \"this build / baseline\" rows below 1 mean less of the figure in this build.\n\n", r.BaselineExe)
	}
	if r.Reps < 3 {
		p("**%d repetition(s): fewer than the 3 a spread needs; these figures check the harness, not dedup.**\n\n", r.Reps)
	}
	if r.Placement.Pinned {
		p("Placement: the infrastructure (kfake, Temporal, PostgreSQL, the latency proxies) on CPU %s, each measured stage alone in its own process on CPU %s.\n",
			r.Placement.InfraCPU, r.Placement.StageCPU)
	} else {
		p("Placement: **not pinned** (-no-pin): the infrastructure and the measured process share every CPU; figures move with noise.\n")
	}
	for _, a := range r.Placement.Infra {
		p("- infra: `%s`\n", a)
	}
	if r.Placement.Stage != "" {
		p("- a stage: `%s`\n", r.Placement.Stage)
	}
	if r.Postgres != "" {
		p("\nPostgreSQL: %s.\n", r.Postgres)
	}
	if len(r.Profiles) == 0 { // a ledger-only run (make bench-ledger)
		b.WriteString(r.ledgerMarkdown())
		return b.String()
	}
	p("\nLatency profiles (round trips the proxies add):")
	for _, x := range r.Profiles {
		p(" **%s**: Temporal %s, PostgreSQL %s, Kafka %s;", x.Latency.Name, x.Latency.Temporal, x.Latency.Postgres, x.Latency.Kafka)
	}
	p(" CPU is the measured process's user + system time (getrusage) over the measured window only, which starts after the stage's set-up garbage is collected (twice: sync.Pools keep theirs for one more collection; the stages' franz-go clients send no client metrics, KIP-714: kfake subscribes every client, an Apache Kafka broker without a telemetry plugin none); infra core busy is the share of that window the infrastructure's CPU was busy (/proc/stat): near 100%%, the infrastructure, not the measured process, sets the pace.\n\n")

	p("| ratio or figure | profile | min / **median** / max | target | |\n|---|---|---|---|---|\n")
	for _, x := range r.Ratios {
		verdict := ""
		if x.Met != nil {
			verdict = map[bool]string{true: "met", false: "**missed**"}[*x.Met]
		}
		p("| %s | %s | %s | %s | %s |\n", x.Name, x.Profile, x.Spread, x.Target, verdict)
	}
	if r.RSS != nil {
		target, met := "< 256", map[bool]string{true: "met", false: "**missed**"}[r.RSS.PeakRSSMiB < 256]
		if r.RSS.Backlog < 1_000_000 {
			target, met = "(< 256 over 1M records)", ""
		}
		p("| peak RSS of `dedup run` over a %d-record backlog, MiB (max_in_flight %d; one run) | none | %.0f | %s | %s |\n",
			r.RSS.Backlog, r.RSS.MaxInFlight, r.RSS.PeakRSSMiB, target, met)
	}
	for _, pr := range r.Profiles {
		p("\n### Profile %s: Temporal %s, PostgreSQL %s round trip\n\n", pr.Latency.Name, pr.Latency.Temporal, pr.Latency.Postgres)
		if r.Params.CostsOnly {
			b.WriteString(r.costsMarkdown(pr))
			continue
		}
		p("| stage | records/s | workflows started/s | CPU µs / record | CPU µs / workflow | Temporal calls / workflow | PG round trips / record | infra core busy %% |\n|---|---|---|---|---|---|---|---|\n")
		busy := func(f func(Rep) float64) Spread { return pr.over(func(x Rep) float64 { return 100 * f(x) }) }
		if pr.ran(StageRawStarts) {
			p("| raw Temporal starts, the router's starter alone (c=%d, %d each) | | %s | | %s | 1 | | %s |\n", r.Params.Concurrency, r.Params.RawStarts,
				pr.over(func(x Rep) float64 { return x.RawStarts.PerSec }), pr.over(func(x Rep) float64 { return x.RawStarts.CPUPer() }),
				busy(func(x Rep) float64 { return x.RawStarts.InfraBusy }))
		}
		if pr.ran(StageSDKStarts) {
			p("| the SDK's ExecuteWorkflow, the same starts (c=%d, %d each) | | %s | | %s | 1 | | %s |\n", r.Params.Concurrency, r.Params.RawStarts,
				pr.over(func(x Rep) float64 { return x.SDKStarts.PerSec }), pr.over(func(x Rep) float64 { return x.SDKStarts.CPUPer() }),
				busy(func(x Rep) float64 { return x.SDKStarts.InfraBusy }))
		}
		if pr.ran(StageRawClaims) {
			p("| raw ledger claim, new rows (batch %d) | %s | | %s | | | 1 per batch | %s |\n", r.Params.Batch,
				pr.over(func(x Rep) float64 { return x.RawClaims.New.PerSec }), pr.over(func(x Rep) float64 { return x.RawClaims.New.CPUPer() }),
				busy(func(x Rep) float64 { return x.RawClaims.New.InfraBusy }))
			p("| raw ledger claim, duplicate rows | %s | | %s | | | 1 per batch | %s |\n",
				pr.over(func(x Rep) float64 { return x.RawClaims.Duplicate.PerSec }), pr.over(func(x Rep) float64 { return x.RawClaims.Duplicate.CPUPer() }),
				busy(func(x Rep) float64 { return x.RawClaims.Duplicate.InfraBusy }))
		}
		if pr.ran(StageRawConsume) {
			p("| raw consume with commits | %s | | %s | | | | %s |\n",
				pr.over(func(x Rep) float64 { return x.RawConsume.PerSec }), pr.over(func(x Rep) float64 { return x.RawConsume.CPUPer() }),
				busy(func(x Rep) float64 { return x.RawConsume.InfraBusy }))
		}
		row := func(label string, f func(Rep) RouterResult) {
			p("| %s | %s | %s | %s | %s | %s | %s | %s |\n", label,
				pr.over(func(x Rep) float64 { return f(x).Records.PerSec }), pr.over(func(x Rep) float64 { return f(x).Workflows.PerSec }),
				pr.over(func(x Rep) float64 { return f(x).CPUPerRecord() }), pr.over(func(x Rep) float64 { return f(x).CPUPerWorkflow() }),
				pr.over(func(x Rep) float64 { return f(x).TemporalPerUnique }), pr.over(func(x Rep) float64 { return f(x).PGPerRecord }),
				busy(func(x Rep) float64 { return f(x).InfraBusy }))
		}
		if pr.ran(StageBacklog) {
			for i, d := range r.Params.DupRatios {
				row(fmt.Sprintf("dedup, backlog, %.0f%% duplicates", d*100), func(x Rep) RouterResult { return at(x.Backlogs, i) })
			}
		}
		if pr.ran(baselineKey(StageBacklog)) {
			row(fmt.Sprintf("baseline binary, backlog, %.0f%% duplicates", r.Params.DupRatios[0]*100), func(x Rep) RouterResult { return x.Baseline.Unique })
		}
		if pr.ran(StageReplay) {
			row(fmt.Sprintf("dedup, all-duplicate replay (%d records)", r.Params.ReplayN), func(x Rep) RouterResult { return x.Replay })
			p("| raw claim of the replay's own IDs, right after it | %s | | %s | | | 1 per batch | %s |\n",
				pr.over(func(x Rep) float64 { return x.ReplayRawClaim.PerSec }), pr.over(func(x Rep) float64 { return x.ReplayRawClaim.CPUPer() }),
				busy(func(x Rep) float64 { return x.ReplayRawClaim.InfraBusy }))
		}
		if pr.ran(baselineKey(StageReplay)) {
			row(fmt.Sprintf("baseline binary, all-duplicate replay (%d records)", r.Params.ReplayN), func(x Rep) RouterResult { return x.Baseline.Replay })
		}
		for _, o := range []struct {
			stage, label string
			of           func(Rep) RouterResult
		}{
			{StageNaiveUnique, fmt.Sprintf("naive, unique-heavy (%d records)", r.Params.NaiveRecords), func(x Rep) RouterResult { return x.NaiveUnique }},
			{StageNaiveReplay, fmt.Sprintf("naive, all-duplicate replay (%d records)", r.Params.NaiveRecords), func(x Rep) RouterResult { return x.NaiveReplay }},
			{StageWatermill, fmt.Sprintf("Watermill peer, unique-heavy (%d records, the router's backlog)", r.Params.Records), func(x Rep) RouterResult { return x.Watermill }},
			{StageWatermillReplay, fmt.Sprintf("Watermill peer, all-duplicate replay (%d records, their workflows already started in Temporal; Temporal calls per workflow ID, each rejected as already started)", r.Params.Records),
				func(x Rep) RouterResult { return x.WatermillReplay }},
		} {
			if pr.ran(o.stage) {
				row(o.label, o.of)
			}
		}
		b.WriteString(r.costsMarkdown(pr))
		if !pr.ran(StageLive) {
			continue
		}
		p("\nLive at %d records/s for %d s, produce -> workflow started, ms:\n\n| duplicates | p50 | p95 | p99 |\n|---|---|---|---|\n", r.Params.LiveRate, r.Params.LiveSeconds)
		for i, d := range r.Params.DupRatios {
			l := func(f func(Percentiles) float64) Spread {
				return pr.over(func(x Rep) float64 { return f(at(x.Live, i).LatencyMs) })
			}
			p("| %.0f%% | %s | %s | %s |\n", d*100, l(func(q Percentiles) float64 { return q.P50 }), l(func(q Percentiles) float64 { return q.P95 }), l(func(q Percentiles) float64 { return q.P99 }))
		}
	}
	if r.Params.CostsOnly {
		return b.String()
	}
	b.WriteString(r.guaranteesMarkdown())
	if len(r.Ledger) > 0 {
		p("\nClaim statement as the ledger grows (batches of %d, no added latency, one run):\n\n| ledger rows | new rows/s | duplicate rows/s | duplicate batch p50 / p99 ms |\n|---|---|---|---|\n", r.Params.Batch)
		for _, l := range r.Ledger {
			p("| %d | %.0f | %.0f | %.1f / %.1f |\n", l.Rows, l.Raw.New.PerSec, l.Raw.Duplicate.PerSec, l.Raw.LatencyMs.P50, l.Raw.LatencyMs.P99)
		}
	}
	b.WriteString(r.ledgerMarkdown())
	if r.RSS != nil {
		p("\n`dedup run` over a %d-record backlog (max_in_flight %d): peak RSS %.0f MiB (target < 256), heap in use at the end %.0f MiB, %.0f records/s, %.0f Temporal start calls (`%s`).\n",
			r.RSS.Backlog, r.RSS.MaxInFlight, r.RSS.PeakRSSMiB, r.RSS.HeapMiB, r.RSS.Records.PerSec, r.RSS.StartCalls, r.RSS.Affinity)
	}
	return b.String()
}

func at(xs []RouterResult, i int) RouterResult {
	if i < len(xs) {
		return xs[i]
	}
	return RouterResult{}
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
	if len(r.Profiles) == 0 || r.Params.CostsOnly { // a ledger-only or costs-only run: nothing to plot
		return nil
	}
	for _, pr := range r.Profiles {
		if !pr.ran(StageBacklog, StageLive, StageRawStarts, StageNaiveUnique, StageNaiveReplay, StageWatermill, StageWatermillReplay) {
			return nil // a -stages run without a stage the plot draws
		}
	}
	return r.plot(filepath.Join(dir, "throughput.png"))
}

// plot draws, against the duplicate ratio and per latency profile, the
// backlog runs' records/s and workflows started/s (log scale) with the raw
// start capacity and the naive consumer on the same axes, above the live
// runs' p99 and p50 latency. Medians over the repetitions. Legends sit in
// a column of their own, right of the plots, clear of the data.
func (r *Report) plot(path string) error {
	palette := []color.Color{color.RGBA{R: 31, G: 119, B: 180, A: 255}, color.RGBA{R: 214, G: 39, B: 40, A: 255},
		color.RGBA{R: 44, G: 160, B: 44, A: 255}, color.RGBA{R: 148, G: 103, B: 189, A: 255}}
	dashed := []vg.Length{vg.Points(6), vg.Points(3)}
	dotted := []vg.Length{vg.Points(2), vg.Points(3)}
	tp := plot.New()
	tp.Title.Text = "throughput of backlog runs vs duplicate ratio (median of the repetitions)"
	tp.X.Label.Text = "duplicate ratio (%)"
	tp.Y.Label.Text = "per second (log)"
	tp.Y.Scale = plot.LogScale{}
	tp.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	tl := plot.NewLegend()
	bp := plot.New()
	bp.Title.Text = fmt.Sprintf("latency, produce -> workflow started (live, %d records/s)", r.Params.LiveRate)
	bp.X.Label.Text = "duplicate ratio (%)"
	bp.Y.Label.Text = "ms"
	bp.Y.Min = 0
	bp.X.Min, bp.X.Max = 0, 100
	if !r.Placement.Pinned {
		tp.Title.Text += " - NOT PINNED"
		bp.Title.Text += " - NOT PINNED"
	}
	bl := plot.NewLegend()
	line := func(pl *plot.Plot, lg *plot.Legend, name string, xys plotter.XYs, c color.Color, dashes []vg.Length, shape draw.GlyphDrawer) error {
		l, sc, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		l.Color, l.Dashes, l.Width = c, dashes, vg.Points(1.5)
		sc.Color, sc.Shape, sc.Radius = c, shape, vg.Points(3)
		pl.Add(l, sc)
		lg.Add(name, l, sc)
		return nil
	}
	for i, pr := range r.Profiles {
		c := palette[i%len(palette)]
		var recs, wfs, p99, p50 plotter.XYs
		for j, d := range r.Params.DupRatios {
			x := d * 100
			recs = append(recs, plotter.XY{X: x, Y: max(pr.over(func(x Rep) float64 { return at(x.Backlogs, j).Records.PerSec }).Median, 1)})
			wfs = append(wfs, plotter.XY{X: x, Y: max(pr.over(func(x Rep) float64 { return at(x.Backlogs, j).Workflows.PerSec }).Median, 1)})
			// No latency where no workflow started (all duplicates).
			if pr.over(func(x Rep) float64 { return float64(at(x.Live, j).LatencyMs.N) }).Max > 0 {
				p99 = append(p99, plotter.XY{X: x, Y: pr.over(func(x Rep) float64 { return at(x.Live, j).LatencyMs.P99 }).Median})
				p50 = append(p50, plotter.XY{X: x, Y: pr.over(func(x Rep) float64 { return at(x.Live, j).LatencyMs.P50 }).Median})
			}
		}
		name := pr.Latency.Name
		if err := line(tp, &tl, name+": dedup records/s", recs, c, nil, draw.CircleGlyph{}); err != nil {
			return err
		}
		if err := line(tp, &tl, name+": dedup workflows started/s (1 = none)", wfs, c, dashed, draw.TriangleGlyph{}); err != nil {
			return err
		}
		raw := pr.over(func(x Rep) float64 { return x.RawStarts.PerSec }).Median
		if err := line(tp, &tl, name+": raw Temporal start capacity", plotter.XYs{{X: 0, Y: raw}, {X: 100, Y: raw}}, c, dotted, draw.BoxGlyph{}); err != nil {
			return err
		}
		naive := plotter.XYs{{X: r.Params.DupRatios[0] * 100, Y: pr.over(func(x Rep) float64 { return x.NaiveUnique.Records.PerSec }).Median},
			{X: 100, Y: pr.over(func(x Rep) float64 { return x.NaiveReplay.Records.PerSec }).Median}}
		if err := line(tp, &tl, name+": naive consumer records/s", naive, c, []vg.Length{vg.Points(8), vg.Points(3), vg.Points(2), vg.Points(3)}, draw.CrossGlyph{}); err != nil {
			return err
		}
		wm := plotter.XYs{{X: r.Params.DupRatios[0] * 100, Y: max(pr.over(func(x Rep) float64 { return x.Watermill.Records.PerSec }).Median, 1)},
			{X: 100, Y: max(pr.over(func(x Rep) float64 { return x.WatermillReplay.Records.PerSec }).Median, 1)}}
		if err := line(tp, &tl, name+": Watermill peer records/s", wm, c, []vg.Length{vg.Points(14), vg.Points(4)}, draw.RingGlyph{}); err != nil {
			return err
		}
		if len(p99) == 0 {
			continue
		}
		if err := line(bp, &bl, name+": p99", p99, c, nil, draw.CircleGlyph{}); err != nil {
			return err
		}
		if err := line(bp, &bl, name+": p50", p50, c, dashed, draw.TriangleGlyph{}); err != nil {
			return err
		}
	}
	tl.Top, bl.Top, tl.Left, bl.Left = true, true, true, true

	const w, h, legendW = 13 * vg.Inch, 9 * vg.Inch, 4 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	plots := draw.Crop(dc, 0, -legendW, 0, 0)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadX: vg.Points(4), PadY: vg.Points(12)}
	canvases := plot.Align([][]*plot.Plot{{tp}, {bp}}, tiles, plots)
	tp.Draw(canvases[0][0])
	bp.Draw(canvases[1][0])
	legends := draw.Crop(dc, w-legendW+vg.Points(8), 0, 0, -vg.Points(30))
	tl.Draw(draw.Crop(legends, 0, 0, h/2, 0))
	bl.Draw(draw.Crop(legends, 0, 0, 0, -h/2))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// ledgerMarkdown renders the on-demand ledger stages.
func (r *Report) ledgerMarkdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	if len(r.Scale) > 0 {
		ids := "random event IDs (UUIDv4)"
		if r.Params.ScaleOrdered {
			ids = "time-ordered event IDs (UUIDv7)"
		}
		p("\nClaims as the ledger grows (%s, batches of %d, one run; target: within 10%% of the smallest size):\n\n", ids, ClaimBatch)
		p("Duplicates are the same rows claimed again once started: from their own records (a replay: a batch's records of each partition a run of offsets, as a poll's, read by one scan of dedup_ledger_by_record a run), from their own records in no order (scattered: each found by its record alone), then from records of their own (a producer's retries: found by the key). Known records are the replay's records read as a router reads them since known records (ledger.Postgres.Known: started under their digest, by runs, nothing claimed).\n\n")
		p("| ledger rows | new rows/s | vs smallest | new batch p50 / p99 ms | WAL bytes / new row | duplicate rows/s (replay) | vs smallest | duplicate batch p50 / p99 ms | known records/s (a replay's read) | vs smallest | known batch p50 / p99 ms | duplicate rows/s (scattered) | vs smallest | duplicate rows/s (retries) | vs smallest | heap / index MiB |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, s := range r.Scale {
			p("| %d | %.0f | %.2f | %.1f / %.1f | %.0f | %.0f | %.2f | %.1f / %.1f | %.0f | %.2f | %.1f / %.1f | %.0f | %.2f | %.0f | %.2f | %.0f / %.0f |\n", s.Rows, s.New.PerSec, s.NewVsFirst, s.NewMs.P50, s.NewMs.P99, s.NewWAL,
				s.Duplicate.PerSec, s.DupVsFirst, s.DupMs.P50, s.DupMs.P99, s.Known.PerSec, s.KnownVsFirst, s.KnownMs.P50, s.KnownMs.P99, s.Scattered.PerSec, s.ScatteredVsFirst, s.Retry.PerSec, s.RetryVsFirst, s.TableMiB, s.IndexMiB)
		}
		p("\nWhy (per row claimed; a block read is one shared_buffers did not hold, from the page cache or the disk; FPI: full-page images in the WAL):\n\n")
		p("| ledger rows | heap B/row | all indexes B/row | unique index: MiB, B/row, levels, leaf pages, leaf fill %% | new: key blocks read, key hit ratio, heap blocks read, other index blocks read, FPI, WAL records | duplicate: key blocks read, key hit ratio, heap blocks read, heap hit ratio |\n|---|---|---|---|---|---|\n")
		for _, s := range r.Scale {
			n, d := s.NewIO, s.DupIO
			p("| %d | %.0f | %.0f | %.0f, %.1f, %d, %d, %.0f | %.2f, %.3f, %.2f, %.2f, %.2f, %.1f | %.2f, %.3f, %.2f, %.3f |\n", s.Rows, s.HeapBytesPerRow, s.IndexBytesPerRow,
				s.Key.MiB, s.Key.BytesPerRow, s.Key.Depth, s.Key.LeafPages, s.Key.LeafDensity,
				n.KeyReadsPerRow, n.KeyHitRatio, n.HeapReadsPerRow, n.OtherReadsPerRow, n.FPIPerRow, n.WALRecordsPerRow,
				d.KeyReadsPerRow, d.KeyHitRatio, d.HeapReadsPerRow, d.HeapHitRatio)
		}
		last := r.Scale[len(r.Scale)-1]
		p("\nUnique index: `%s`. Server: %s.\n", last.Key.Definition, last.Settings)
		if len(last.Columns) > 0 {
			names := make([]string, 0, len(last.Columns))
			for c := range last.Columns {
				names = append(names, c)
			}
			sort.Strings(names)
			p("\nAverage stored bytes per column at %d rows (pg_column_size on a sample):", last.Rows)
			for _, c := range names {
				p(" %s %.1f;", c, last.Columns[c])
			}
			p("\n")
		}
	}
	if x := r.Retention; x != nil {
		p("\nRetention at %d rows over %d days, removing the oldest day (full_page_writes %s):\n\n", x.Rows, x.Days, x.FullPageWrites)
		p("| way | rows removed | seconds | WAL MiB | VACUUM seconds | scans of the ledger |\n|---|---|---|---|---|---|\n")
		p("| ledger.Purge (batched DELETE along the end-time index) | %d | %.2f | %.1f | %.2f | %d sequential (%d tuples), %d index |\n", x.Delete.Rows, x.Delete.Seconds,
			float64(x.Delete.WALBytes)/(1<<20), x.Delete.VacuumSeconds, x.PurgeScans.SeqScans, x.PurgeScans.SeqTuplesRead, x.PurgeScans.IndexScans)
		p("| DETACH + DROP of a day partition | %d | %.3f | %.2f | %.3f | |\n", x.DropPartition.Rows, x.DropPartition.Seconds,
			float64(x.DropPartition.WALBytes)/(1<<20), x.DropPartition.VacuumSeconds)
		p("\nA ledger partitioned by time cannot keep a workflow ID unique: %q; the claim's ON CONFLICT (workflow_id) there: %q; with the key (workflow_id, claimed_at), two claims of one ID leave %d rows. Reading %d existing IDs per statement: %.0f rows/s plain, %.0f partitioned (%d partitions).\n",
			x.UniqueWorkflowIDError, x.OnConflictError, x.RowsAfterTwoClaims, ClaimBatch, x.LookupPlain.PerSec, x.LookupPartitioned.PerSec, x.Partitions)
	}
	return b.String()
}
