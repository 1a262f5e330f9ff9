package bench

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func steps(xs ...Step) []Step { return xs }

func TestRepPlanRunsOnlyTheFilteredStagesAtEveryBacklogRatio(t *testing.T) {
	p := Params{DupRatios: []float64{0, 0.9}, CostRecords: 300}
	plan, err := ParseStages("replay, backlog")
	if err != nil {
		t.Fatal(err)
	}
	want := steps(Step{Name: StageBacklog, Dup: 0}, Step{Name: StageReplay, Dup: 1}, Step{Name: StageBacklog, Dup: 0.9})
	for rep := 1; rep <= 2; rep++ {
		if got := RepPlan(p, plan, false, rep); !slices.Equal(got, want) {
			t.Errorf("rep %d: %v, want %v", rep, got, want)
		}
	}
	// No filter: every stage, in the order the full run has always had.
	all := RepPlan(p, nil, false, 1)
	var names []string
	for _, s := range all {
		names = append(names, s.Name)
	}
	wantNames := []string{StageSDKStarts, StageRawStarts, StageBacklog, StageNaiveUnique, StageWatermill, StageRawClaims, StageReplay, StageNaiveReplay,
		StageWatermillReplay, StageRawConsume, StageBacklog, StageSRJSON, StageSRAvro, StageSRJSON, StageSRAvro, StageTracingOff, StageTracingOn,
		StageLive, StageLive}
	if !slices.Equal(names, wantNames) {
		t.Errorf("unfiltered plan %v, want %v", names, wantNames)
	}
	if got := RepPlan(Params{DupRatios: []float64{0}, CostsOnly: true, CostRecords: 1}, nil, false, 2); len(got) != 6 || got[0].Name != StageSRAvro {
		t.Errorf("costs-only, rep 2: %v, want the 6 cost stages, the costed one of each pair first", got)
	}
}

func TestParseStagesRefusesAnUnknownNameListingTheValidOnes(t *testing.T) {
	_, err := ParseStages("backlog,replya")
	if err == nil || !strings.Contains(err.Error(), `"replya"`) || !strings.Contains(err.Error(), "raw-starts, sdk-starts, raw-claims") {
		t.Fatalf("err %v, want one naming replya and listing the stages", err)
	}
	if _, err := ParseStages("sr-avro"); err == nil || !strings.Contains(err.Error(), "sr-json") {
		t.Fatalf("a cost stage without its pair: err %v, want one naming sr-json", err)
	}
	if plan, err := ParseStages(""); err != nil || plan != nil || !plan.Runs(StageRSS) {
		t.Fatalf("empty -stages: %v, %v; want every stage", plan, err)
	}
}

// The baseline binary's run sits right after this build's in odd
// repetitions and right before it in even ones, for the compared router
// stages only.
func TestRepPlanPairsTheBaselineAfterInOddRepetitionsBeforeInEven(t *testing.T) {
	p := Params{DupRatios: []float64{0}, CostRecords: 300}
	plan, err := ParseStages("raw-starts,backlog,replay,tracing-off,tracing-on")
	if err != nil {
		t.Fatal(err)
	}
	b := func(name string, dup float64) Step { return Step{Name: name, Dup: dup, Baseline: true} }
	s := func(name string, dup float64) Step { return Step{Name: name, Dup: dup} }
	odd := steps(s(StageRawStarts, 0), s(StageBacklog, 0), b(StageBacklog, 0), s(StageReplay, 1), b(StageReplay, 1),
		s(StageTracingOff, 0), b(StageTracingOff, 0), s(StageTracingOn, 0), b(StageTracingOn, 0))
	even := steps(b(StageBacklog, 0), s(StageBacklog, 0), s(StageRawStarts, 0), b(StageReplay, 1), s(StageReplay, 1),
		b(StageTracingOn, 0), s(StageTracingOn, 0), b(StageTracingOff, 0), s(StageTracingOff, 0))
	for rep, want := range map[int][]Step{1: odd, 2: even, 3: odd, 4: even} {
		if got := RepPlan(p, plan, true, rep); !slices.Equal(got, want) {
			t.Errorf("rep %d:\n got %v\nwant %v", rep, got, want)
		}
	}
}

// Two stages' results (this build's and the baseline's) give the
// "this build / baseline" rows; rows needing a stage that did not run
// are left out, not shown as 0 or NaN.
func TestFinishGivesThisBuildOverBaselineRowsAndLeavesOutStagesNotRun(t *testing.T) {
	p := Params{DupRatios: []float64{0}, Records: 100, ReplayN: 1000}
	router := func(records, workflows int, cpu, perSec float64) StageResult {
		return StageResult{Router: &RouterResult{Records: Rate{N: records, PerSec: perSec}, Workflows: Rate{N: workflows}, CPUSeconds: cpu}}
	}
	rep := func(thisCPU float64) Rep {
		x := Rep{Ran: []string{}}
		for _, r := range []struct {
			st  Step
			res StageResult
		}{
			{Step{Name: StageBacklog}, router(100, 100, thisCPU*100e-6, 500)},             // thisCPU µs per workflow
			{Step{Name: StageBacklog, Baseline: true}, router(100, 100, 200e-6*100, 400)}, // 200 µs per workflow
			{Step{Name: StageReplay, Baseline: true}, router(1000, 0, 1000*10e-6, 8000)},  // 10 µs per record
			{Step{Name: StageReplay, Dup: 1}, router(1000, 0, 1000*5e-6, 10000)},          // 5 µs per record
		} {
			if err := x.record(p, r.st, r.res); err != nil {
				t.Fatal(err)
			}
		}
		return x
	}
	r := &Report{Params: p, Reps: 3, Stages: []string{StageBacklog, StageReplay}, BaselineExe: "/tmp/dedup-bench-base",
		Profiles: []Profile{{Latency: Latency{Name: "0ms"}, Reps: []Rep{rep(100), rep(150), rep(300)}}}}
	r.Finish()
	got := map[string]Spread{}
	for _, row := range r.Ratios {
		got[row.Name] = row.Spread
		if math.IsNaN(row.Spread.Median) {
			t.Errorf("%s: NaN", row.Name)
		}
		for _, needless := range []string{"raw", "naive", "Watermill", "Avro", "tracing"} {
			if strings.Contains(row.Name, needless) {
				t.Errorf("row %q shown though its stages did not run", row.Name)
			}
		}
	}
	for name, want := range map[string]Spread{
		"this build / baseline: router CPU per started workflow (unique-heavy)":         {0.5, 0.75, 1.5, 3},
		"this build / baseline: router records/s (all-duplicate replay)":                {1.25, 1.25, 1.25, 3},
		"this build / baseline: router CPU per duplicate record (all-duplicate replay)": {0.5, 0.5, 0.5, 3},
	} {
		if s, ok := got[name]; !ok || math.Abs(s.Min-want.Min) > 1e-9 || math.Abs(s.Median-want.Median) > 1e-9 || math.Abs(s.Max-want.Max) > 1e-9 || s.N != 3 {
			t.Errorf("%s: %+v (shown %v), want %+v", name, s, ok, want)
		}
	}
	md := r.Markdown()
	for _, absent := range []string{"raw Temporal starts", "naive, unique-heavy", "Watermill peer", "Live at", "guarantees"} {
		if strings.Contains(md, absent) {
			t.Errorf("report shows %q though its stage did not run:\n%s", absent, md)
		}
	}
	for _, want := range []string{"| baseline binary, backlog, 0% duplicates |", "| dedup, all-duplicate replay (1000 records) |", "Stages run (-stages): backlog, replay", "`/tmp/dedup-bench-base`"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

// A baseline binary that fails (one that cannot read this build's params
// file) is reported with its own last stderr line; one that is not an
// executable file is refused before the infrastructure starts.
func TestBaselineFailureSaysWhatTheBinaryPrinted(t *testing.T) {
	var w tailWriter
	_, _ = w.Write([]byte("starting\n"))
	_, _ = w.Write([]byte("dedup-bench: reading -params: json: cannot unmarshal string into Go struct field Params.Records of type int\n\n"))
	if got := w.says(); got != ": dedup-bench: reading -params: json: cannot unmarshal string into Go struct field Params.Records of type int" {
		t.Fatalf("says %q", got)
	}
	if got := (&tailWriter{}).says(); got != "" {
		t.Fatalf("nothing written: says %q", got)
	}
	cfg := RunConfig{Reps: 1, Latencies: []Latency{{Name: "0ms"}}, Params: Params{DupRatios: []float64{0}}, Exe: "x",
		Say: func(string, ...any) {}, BaselineExe: t.TempDir()}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "BaselineExe") {
		t.Fatalf("a directory as the baseline: err %v, want one naming BaselineExe", err)
	}
}

// A -stage-exe that is not an executable file is refused by name before
// the infrastructure starts, and the report says which binary ran the
// stages it calls this build's.
func TestStageExeIsCheckedAndNamedInTheReport(t *testing.T) {
	cfg := RunConfig{Reps: 1, Latencies: []Latency{{Name: "0ms"}}, Params: Params{DupRatios: []float64{0}}, Exe: "x",
		Say: func(string, ...any) {}, StageExe: filepath.Join(t.TempDir(), "missing")}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "StageExe") {
		t.Fatalf("a missing stage binary: err %v, want one naming StageExe", err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg.StageExe = exe
	if err := cfg.Validate(); err != nil {
		t.Fatalf("an executable stage binary: %v", err)
	}
	r := &Report{Params: Params{DupRatios: []float64{0}}, Reps: 3, StageExe: "/tmp/dedup-bench-after"}
	if md := r.Markdown(); !strings.Contains(md, "Stage binary (-stage-exe): `/tmp/dedup-bench-after`") {
		t.Fatalf("the report does not name the stage binary:\n%s", md)
	}
}
