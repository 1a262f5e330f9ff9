package bench

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// This file is a repetition's run plan: which stage processes run, in
// which order, at which duplicate ratio, with which binary. runRep runs
// the plan; the plan itself is a pure function of the sizes, the stage
// filter (-stages), whether a baseline binary is given (-baseline-exe)
// and the repetition's number, so that its order is tested without
// infrastructure.

// StagePlan is the set of stages a run runs (-stages); nil runs every one.
type StagePlan []string

// costPairs are the cost stages that only mean something beside each
// other: a filter names both or neither.
var costPairs = [][2]string{{StageSRJSON, StageSRAvro}, {StageTracingOff, StageTracingOn}}

// ParseStages reads -stages: stage names, comma-separated ("" runs every
// stage). An unknown name is refused with the valid ones.
func ParseStages(s string) (StagePlan, error) {
	var plan StagePlan
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if !slices.Contains(Stages, f) {
			return nil, fmt.Errorf("-stages: unknown stage %q (stages: %s)", f, strings.Join(Stages, ", "))
		}
		if !slices.Contains(plan, f) {
			plan = append(plan, f)
		}
	}
	for _, pr := range costPairs {
		if slices.Contains(plan, pr[0]) != slices.Contains(plan, pr[1]) {
			return nil, fmt.Errorf("-stages: %s and %s are measured against each other: name both or neither", pr[0], pr[1])
		}
	}
	return plan, nil
}

// Runs says whether the plan runs stage name.
func (p StagePlan) Runs(name string) bool { return p == nil || slices.Contains(p, name) }

// Step is one stage process of a repetition.
type Step struct {
	Name string
	Dup  float64
	// Baseline runs the stage with the baseline binary (-baseline-exe).
	Baseline bool
}

func (s Step) String() string {
	who := "this build"
	if s.Baseline {
		who = "baseline"
	}
	return fmt.Sprintf("%s dup %g (%s)", s.Name, s.Dup, who)
}

// baselineKey is the name Rep.Ran records a baseline step under.
func baselineKey(name string) string { return "baseline/" + name }

// RepPlan is the steps of repetition rep (from 1). The SDK's starts, raw
// starts and the unique-heavy backlog alternate their order (the SDK's
// first in odd repetitions, last in even ones), as each cost pair does (its baseline first in odd ones).
// With baseline, each router stage compared across builds (the
// unique-heavy backlog, the replay, the cost stages) has the baseline
// binary's run right after this build's in odd repetitions and right
// before it in even ones.
func RepPlan(p Params, stages StagePlan, baseline bool, rep int) []Step {
	var steps []Step
	odd := rep%2 == 1
	add := func(name string, dup float64, compared bool) {
		if !stages.Runs(name) {
			return
		}
		this := Step{Name: name, Dup: dup}
		if !compared || !baseline {
			steps = append(steps, this)
			return
		}
		base := this
		base.Baseline = true
		if odd {
			steps = append(steps, this, base)
		} else {
			steps = append(steps, base, this)
		}
	}
	costs := func() {
		if p.CostRecords <= 0 {
			return
		}
		for _, pr := range [][3]any{{StageSRJSON, StageSRAvro, p.DupRatios[0]}, {StageSRJSON, StageSRAvro, 1.0}, {StageTracingOff, StageTracingOn, p.DupRatios[0]}} {
			first, second, dup := pr[0].(string), pr[1].(string), pr[2].(float64)
			if !odd {
				first, second = second, first
			}
			add(first, dup, true)
			add(second, dup, true)
		}
	}
	if p.CostsOnly {
		costs()
		return steps
	}
	if odd {
		add(StageSDKStarts, 0, false)
		add(StageRawStarts, 0, false)
		add(StageBacklog, p.DupRatios[0], true)
	} else {
		add(StageBacklog, p.DupRatios[0], true)
		add(StageRawStarts, 0, false)
		add(StageSDKStarts, 0, false)
	}
	add(StageNaiveUnique, p.DupRatios[0], false)
	add(StageWatermill, p.DupRatios[0], false)
	add(StageRawClaims, 0, false)
	add(StageReplay, 1, true)
	add(StageNaiveReplay, 1, false)
	add(StageWatermillReplay, 1, false)
	add(StageRawConsume, 0, false)
	for _, d := range p.DupRatios[1:] {
		add(StageBacklog, d, false)
	}
	costs()
	for _, d := range p.DupRatios {
		add(StageLive, d, false)
	}
	return steps
}

// record puts a step's result where the report reads it: a baseline
// step's in x.Baseline, and the stage's name in Ran.
func (x *Rep) record(p Params, st Step, res StageResult) error {
	if st.Baseline {
		if x.Baseline == nil {
			x.Baseline = &Rep{}
		}
		return x.Baseline.record(p, Step{Name: st.Name, Dup: st.Dup}, res)
	}
	missing := func(what string) error {
		return fmt.Errorf("stage %s (dup %g) printed no %s result", st.Name, st.Dup, what)
	}
	router := func(dst *RouterResult) error {
		if res.Router == nil {
			return missing("router")
		}
		*dst = *res.Router
		return nil
	}
	rate := func(dst *Rate) error {
		if res.Rate == nil {
			return missing("rate")
		}
		*dst = *res.Rate
		return nil
	}
	costs := func() *CostRuns {
		if x.Costs == nil {
			x.Costs = &CostRuns{}
		}
		return x.Costs
	}
	var err error
	switch st.Name {
	case StageRawStarts:
		err = rate(&x.RawStarts)
	case StageSDKStarts:
		err = rate(&x.SDKStarts)
	case StageRawConsume:
		err = rate(&x.RawConsume)
	case StageRawClaims:
		if res.Claims == nil {
			return missing("claims")
		}
		x.RawClaims = *res.Claims
	case StageBacklog:
		var b RouterResult
		if err = router(&b); err == nil {
			if len(x.Backlogs) == 0 {
				x.Unique = b
			}
			x.Backlogs = append(x.Backlogs, b)
		}
	case StageReplay:
		if err = router(&x.Replay); err == nil && res.ReplayRawClaim != nil {
			x.ReplayRawClaim = *res.ReplayRawClaim
		}
	case StageNaiveUnique:
		err = router(&x.NaiveUnique)
	case StageNaiveReplay:
		err = router(&x.NaiveReplay)
	case StageWatermill:
		err = router(&x.Watermill)
	case StageWatermillReplay:
		err = router(&x.WatermillReplay)
	case StageSRJSON:
		c := costs()
		err = router(map[bool]*RouterResult{false: &c.JSONUnique, true: &c.JSONReplay}[st.Dup >= 1])
	case StageSRAvro:
		c := costs()
		err = router(map[bool]*RouterResult{false: &c.AvroUnique, true: &c.AvroReplay}[st.Dup >= 1])
	case StageTracingOff:
		err = router(&costs().TracingOff)
	case StageTracingOn:
		err = router(&costs().TracingOn)
	case StageLive:
		var l RouterResult
		if err = router(&l); err == nil {
			x.Live = append(x.Live, l)
		}
	default:
		return fmt.Errorf("stage %s is not one a repetition runs", st.Name)
	}
	if err == nil && !slices.Contains(x.Ran, st.Name) {
		x.Ran = append(x.Ran, st.Name)
	}
	return err
}

// ran says whether the repetition ran stage key (a stage name, or
// baselineKey of one for the baseline binary's run). A repetition that
// records none (a report written before -stages) ran every stage but the
// baseline's.
func (x Rep) ran(key string) bool {
	if name, ok := strings.CutPrefix(key, "baseline/"); ok {
		return x.Baseline != nil && x.Baseline.ran(name)
	}
	return x.Ran == nil || slices.Contains(x.Ran, key)
}

// ran says whether every repetition of the profile ran every one of keys.
func (p Profile) ran(keys ...string) bool {
	if len(p.Reps) == 0 {
		return false
	}
	for _, x := range p.Reps {
		for _, k := range keys {
			if !x.ran(k) {
				return false
			}
		}
	}
	return true
}

// validateStages checks -stages, -baseline-exe and -stage-exe.
func (c RunConfig) validateStages() error {
	for _, s := range c.Stages {
		if !slices.Contains(Stages, s) {
			return fmt.Errorf("bench: Stages: unknown stage %q (stages: %s)", s, strings.Join(Stages, ", "))
		}
	}
	if err := executable("BaselineExe", c.BaselineExe); err != nil {
		return err
	}
	return executable("StageExe", c.StageExe)
}

// executable checks that path, if set, is an executable file; field names
// the setting in the error.
func executable(field, path string) error {
	if path == "" {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("bench: %s: %w", field, err)
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("bench: %s: %s is not an executable file", field, path)
	}
	return nil
}

// tailWriter keeps the last lines a stage process wrote on stderr, for
// the error when it fails (a baseline binary that cannot read this
// build's params or infra file says so there).
type tailWriter struct{ b []byte }

func (t *tailWriter) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = t.b[len(t.b)-4096:]
	}
	return len(p), nil
}

// says is ": " and the last non-empty stderr line, or "".
func (t *tailWriter) says() string {
	lines := strings.Split(strings.TrimSpace(string(t.b)), "\n")
	if last := strings.TrimSpace(lines[len(lines)-1]); last != "" {
		return ": " + last
	}
	return ""
}

// baselineRatioDefs are the "this build / baseline" rows (-baseline-exe),
// each over the repetitions' pairs run back to back.
func baselineRatioDefs() []ratioDef {
	div := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	base := func(x Rep) Rep {
		if x.Baseline == nil {
			return Rep{}
		}
		return *x.Baseline
	}
	return []ratioDef{
		{name: "this build / baseline: router CPU per started workflow (unique-heavy)", needs: []string{StageBacklog, baselineKey(StageBacklog)},
			of: func(x Rep) float64 { return div(x.Unique.CPUPerWorkflow(), base(x).Unique.CPUPerWorkflow()) }},
		{name: "this build / baseline: router records/s (all-duplicate replay)", needs: []string{StageReplay, baselineKey(StageReplay)},
			of: func(x Rep) float64 { return div(x.Replay.Records.PerSec, base(x).Replay.Records.PerSec) }},
		{name: "this build / baseline: router CPU per duplicate record (all-duplicate replay)", needs: []string{StageReplay, baselineKey(StageReplay)},
			of: func(x Rep) float64 { return div(x.Replay.CPUPerRecord(), base(x).Replay.CPUPerRecord()) }},
	}
}

// baselineCostRatioDefs are the cost stages' "this build / baseline" rows.
func baselineCostRatioDefs() []ratioDef {
	var defs []ratioDef
	for _, c := range []struct {
		label, stage string
		of           func(*CostRuns) RouterResult
	}{
		{"JSON, unique-heavy", StageSRJSON, func(c *CostRuns) RouterResult { return c.JSONUnique }},
		{"Avro through the registry, unique-heavy", StageSRAvro, func(c *CostRuns) RouterResult { return c.AvroUnique }},
		{"JSON, all-duplicate replay", StageSRJSON, func(c *CostRuns) RouterResult { return c.JSONReplay }},
		{"Avro through the registry, all-duplicate replay", StageSRAvro, func(c *CostRuns) RouterResult { return c.AvroReplay }},
		{"tracing off, unique-heavy", StageTracingOff, func(c *CostRuns) RouterResult { return c.TracingOff }},
		{"tracing on, unique-heavy", StageTracingOn, func(c *CostRuns) RouterResult { return c.TracingOn }},
	} {
		defs = append(defs, ratioDef{name: "this build / baseline: router CPU per record, cost stage " + c.label,
			needs: []string{c.stage, baselineKey(c.stage)},
			of: func(x Rep) float64 {
				if x.Costs == nil || x.Baseline == nil || x.Baseline.Costs == nil {
					return 0
				}
				b := c.of(x.Baseline.Costs).CPUPerRecord()
				if b == 0 {
					return 0
				}
				return c.of(x.Costs).CPUPerRecord() / b
			}})
	}
	return defs
}
