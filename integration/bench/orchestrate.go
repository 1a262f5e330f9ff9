package bench

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
)

// RunConfig is one benchmark run: its sizes, the latency profiles, the
// repetitions and where the processes run.
type RunConfig struct {
	Params    Params
	Latencies []Latency
	// Reps is the repetitions per latency profile: in each, every
	// comparison's stages run back to back, so every ratio has Reps
	// samples taken under the same conditions.
	Reps int
	// Pin runs the infrastructure on CPU 0 and each stage on CPU 1
	// (taskset); without it nothing is pinned and the report says so.
	Pin bool
	// Exe is this program (re-run as `infra` and `stage NAME`).
	Exe string
	// Stages is the stages each repetition (and the one-off stages after
	// them) runs; nil runs every one.
	Stages StagePlan
	// BaselineExe, if set, is another dedup-bench binary (an older
	// commit's) whose runs of the compared router stages sit beside this
	// build's in each repetition (RepPlan).
	BaselineExe string
	// StageExe, if set, is the dedup-bench binary that runs this build's
	// stages instead of Exe (which still runs the infrastructure): with
	// BaselineExe, two older commits compared with each other in one run,
	// e.g. the commit that added a fence against the one before it.
	StageExe string
	// CPUProfileDir, if set, gets one CPU profile per stage process.
	CPUProfileDir string
	// Trace, with CPUProfileDir, gets each of this build's stage
	// processes' first measured window an execution trace beside its
	// profile.
	Trace bool
	Infra InfraConfig
	// Say reports progress.
	Say func(format string, args ...any)
}

const infraCPU, stageCPU = "0", "1"

// Validate says which field is wrong.
func (c RunConfig) Validate() error {
	switch {
	case c.Reps < 1:
		return fmt.Errorf("bench: Reps must be at least 1, not %d", c.Reps)
	case len(c.Latencies) == 0:
		return fmt.Errorf("bench: Latencies is empty")
	case len(c.Params.DupRatios) == 0:
		return fmt.Errorf("bench: Params.DupRatios is empty")
	case c.Exe == "":
		return fmt.Errorf("bench: Exe is empty")
	case c.Say == nil:
		return fmt.Errorf("bench: Say is nil")
	}
	if err := c.validateStages(); err != nil {
		return err
	}
	for _, l := range c.Latencies {
		if l.Name == "" || l.Temporal < 0 || l.Postgres < 0 || l.Kafka < 0 {
			return fmt.Errorf("bench: latency profile %+v: a name and round trips >= 0", l)
		}
	}
	return nil
}

// Run starts the infra process, runs every stage in its own process per
// latency profile and repetition, and returns the report.
func Run(ctx context.Context, cfg RunConfig, log *slog.Logger) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	say := cfg.Say
	r := &Report{When: time.Now(), Machine: Machine(), Params: cfg.Params, Reps: cfg.Reps, Stages: cfg.Stages, BaselineExe: cfg.BaselineExe, StageExe: cfg.StageExe,
		Placement: Placement{Pinned: cfg.Pin}, Postgres: cfg.Infra.describe()}
	icpu, scpu := "", ""
	if cfg.Pin {
		icpu, scpu = infraCPU, stageCPU
		r.Placement.InfraCPU, r.Placement.StageCPU = infraCPU, stageCPU
	}
	dir, err := os.MkdirTemp("", "dedup-bench-run-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()

	say("starting the infrastructure (kfake, Temporal, PostgreSQL, toxiproxy)%s", map[bool]string{true: " on CPU " + infraCPU, false: ", unpinned"}[cfg.Pin])
	in, stopInfra, err := startInfraProcess(cfg, icpu)
	if err != nil {
		return nil, err
	}
	defer stopInfra()
	r.Placement.Infra = in.Affinity
	for _, a := range in.Affinity {
		say("  %s", a)
	}
	infraPath, paramsPath := filepath.Join(dir, "infra.json"), filepath.Join(dir, "params.json")
	if err := writeJSON(infraPath, in); err != nil {
		return nil, err
	}
	if err := writeJSON(paramsPath, cfg.Params); err != nil {
		return nil, err
	}
	tc, err := client.Dial(client.Options{HostPort: in.TemporalDirect, Namespace: in.Namespace,
		Logger: tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))})
	if err != nil {
		return nil, err
	}
	defer tc.Close()

	var workflows int64
	seq := 0
	step := func(st Step, tag string) (StageResult, error) {
		seq++
		exe, who, prof := cmp.Or(cfg.StageExe, cfg.Exe), "", st.Name
		if cfg.StageExe != "" {
			who = "the stage binary " + cfg.StageExe + ": "
		}
		if st.Baseline {
			exe, who, prof = cfg.BaselineExe, "the baseline binary "+cfg.BaselineExe+": ", "baseline-"+st.Name
		}
		args := []string{exe, "stage", "-name", st.Name, "-dup", strconv.FormatFloat(st.Dup, 'g', -1, 64), "-infra", infraPath, "-params", paramsPath}
		if cfg.CPUProfileDir != "" {
			args = append(args, "-cpuprofile", filepath.Join(cfg.CPUProfileDir, fmt.Sprintf("%02d-%s-%s.pprof", seq, tag, prof)))
			if cfg.Trace && exe == cfg.Exe { // an older binary (-baseline-exe, -stage-exe) has no -trace
				args = append(args, "-trace")
			}
		}
		cmd := Pinned(scpu, args...)
		var out bytes.Buffer
		var errTail tailWriter
		cmd.Stdout, cmd.Stderr = &out, io.MultiWriter(os.Stderr, &errTail)
		if err := cmd.Run(); err != nil {
			return StageResult{}, fmt.Errorf("%sstage %s (dup %.2f, %s): %w%s", who, st.Name, st.Dup, tag, err, errTail.says())
		}
		var res StageResult
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			return res, fmt.Errorf("%sreading stage %s's result: %w", who, st.Name, err)
		}
		if r.Placement.Stage == "" {
			r.Placement.Stage = res.Affinity
		}
		workflows += res.Workflows
		Settle(ctx, tc, workflows, log)
		return res, nil
	}
	stage := func(name string, dup float64, tag string) (StageResult, error) {
		return step(Step{Name: name, Dup: dup}, tag)
	}

	if cfg.Params.LedgerOnly {
		return r, ledgerStages(cfg.Params, cfg.Stages, r, stage, say)
	}
	for _, lat := range cfg.Latencies {
		say("latency profile %s: Temporal %s, PostgreSQL %s, Kafka %s round trip", lat.Name, lat.Temporal, lat.Postgres, lat.Kafka)
		if err := SetLatency(in.ProxyAPI, lat); err != nil {
			return nil, err
		}
		prof := Profile{Latency: lat}
		for rep := 1; rep <= cfg.Reps; rep++ {
			tag := fmt.Sprintf("%s-rep%d", lat.Name, rep)
			x, err := runRep(cfg.Params, RepPlan(cfg.Params, cfg.Stages, cfg.BaselineExe != "", rep), tag, step, say)
			if err != nil {
				return nil, err
			}
			prof.Reps = append(prof.Reps, x)
		}
		r.Profiles = append(r.Profiles, prof)
	}
	if err := SetLatency(in.ProxyAPI, Latency{}); err != nil {
		return nil, err
	}
	if cfg.Params.CostsOnly {
		r.Finish()
		return r, nil
	}
	if cfg.Params.GuaranteeRecords > 0 && cfg.Stages.Runs(StageGuarantees) {
		say("what Watermill and dedup guarantee (no added latency, proxies in the path): %d records per backlog", cfg.Params.GuaranteeRecords)
		x, err := stage(StageGuarantees, GuaranteeDupRatio, "nolat")
		if err != nil {
			return nil, err
		}
		r.Guarantees = x.Guarantees
		if g := x.Guarantees; g != nil && g.Dedup != nil {
			say("  replay after restart: Watermill %d Temporal calls, dedup %d; executions per workflow ID after retention: Watermill %.2f, dedup %.2f",
				g.Watermill.Restart.TemporalCalls, g.Dedup.Restart.TemporalCalls, g.Watermill.ExecutionsPerWorkflow, g.Dedup.ExecutionsPerWorkflow)
		}
	}
	if cfg.Stages.Runs(StageLedgerGrowth) {
		say("ledger growth (no added latency): %v", cfg.Params.LedgerSizes)
		lg, err := stage(StageLedgerGrowth, 0, "nolat")
		if err != nil {
			return nil, err
		}
		r.Ledger = lg.Ledger
	}
	if err := ledgerStages(cfg.Params, cfg.Stages, r, stage, say); err != nil {
		return nil, err
	}
	if cfg.Params.RSSBacklog > 0 && cfg.Stages.Runs(StageRSS) {
		say("dedup run process over %d records (no added latency)", cfg.Params.RSSBacklog)
		x, err := stage(StageRSS, 0, "nolat")
		if err != nil {
			return nil, err
		}
		r.RSS = x.RSS
		say("  peak RSS %.0f MiB, %.0f records/s", x.RSS.PeakRSSMiB, x.RSS.Records.PerSec)
	}
	r.Finish()
	return r, nil
}

// ledgerStages runs the on-demand ledger stages p asks for: claims as the
// ledger grows to its ScaleSizes, and the retention cost at RetentionRows.
func ledgerStages(p Params, stages StagePlan, r *Report, stage func(string, float64, string) (StageResult, error), say func(string, ...any)) error {
	if len(p.ScaleSizes) > 0 && stages.Runs(StageLedgerScale) {
		say("ledger scale (no added latency): %v rows, %d claims each way at each", p.ScaleSizes, p.ScaleClaims)
		x, err := stage(StageLedgerScale, 0, "nolat")
		if err != nil {
			return err
		}
		r.Scale = x.Scale
		for _, pt := range x.Scale {
			say("  %d rows: new %.0f/s (%.2f of the first size), duplicate %.0f/s (%.2f), known %.0f/s (%.2f), scattered %.0f/s (%.2f), retry %.0f/s (%.2f)", pt.Rows, pt.New.PerSec, pt.NewVsFirst, pt.Duplicate.PerSec, pt.DupVsFirst, pt.Known.PerSec, pt.KnownVsFirst, pt.Scattered.PerSec, pt.ScatteredVsFirst, pt.Retry.PerSec, pt.RetryVsFirst)
		}
	}
	if p.RetentionRows > 0 && stages.Runs(StageRetention) {
		say("retention cost (no added latency): %d rows over %d days", p.RetentionRows, p.RetentionDays)
		x, err := stage(StageRetention, 0, "nolat")
		if err != nil {
			return err
		}
		r.Retention = x.Retention
		say("  ledger.Purge: %d rows in %.2f s; dropping a partition: %.3f s", x.Retention.Delete.Rows, x.Retention.Delete.Seconds, x.Retention.DropPartition.Seconds)
	}
	r.Finish()
	return nil
}

// runRep runs one repetition at one latency profile: RepPlan's steps, in
// its order. The unique-heavy comparison alternates its order (raw first
// in odd repetitions, dedup first in even ones): with no worker, every
// started workflow stays open and the server slows a little as they pile
// up; a baseline binary's run sits beside this build's for the same reason.
func runRep(p Params, plan []Step, tag string, stage func(Step, string) (StageResult, error), say func(string, ...any)) (Rep, error) {
	x := Rep{Ran: []string{}}
	for _, st := range plan {
		res, err := stage(st, tag)
		if err != nil {
			return x, err
		}
		who := ""
		if st.Baseline {
			who = " (baseline)"
		}
		switch {
		case res.Rate != nil:
			say("  %s %s%s: %.0f/s, CPU %.1f µs each", tag, st.Name, who, res.Rate.PerSec, res.Rate.CPUPer())
		case res.Claims != nil:
			say("  %s %s%s: new %.0f rows/s (%.1f µs CPU/row), duplicate %.0f rows/s (%.1f µs CPU/row)", tag, st.Name, who,
				res.Claims.New.PerSec, res.Claims.New.CPUPer(), res.Claims.Duplicate.PerSec, res.Claims.Duplicate.CPUPer())
		case res.Router != nil:
			rr := res.Router
			say("  %s %s%s dup %.0f%%: %.0f records/s, %.0f workflows/s, CPU %.1f µs/record %.1f µs/workflow, %d Temporal calls, p99 %.0f ms",
				tag, st.Name, who, st.Dup*100, rr.Records.PerSec, rr.Workflows.PerSec, rr.CPUPerRecord(), rr.CPUPerWorkflow(), rr.TemporalCalls, rr.LatencyMs.P99)
		}
		if err := x.record(p, st, res); err != nil {
			return x, err
		}
	}
	return x, nil
}

// startInfraProcess runs `Exe infra` (pinned to cpus) and reads the
// addresses it prints; the returned func stops it (closing its stdin).
func startInfraProcess(cfg RunConfig, cpus string) (*Infra, func(), error) {
	args := []string{cfg.Exe, "infra", "-durable=" + strconv.FormatBool(cfg.Infra.Durable), "-pg-settings=" + cfg.Infra.PGSettings}
	if cfg.CPUProfileDir != "" {
		args = append(args, "-cpuprofile", filepath.Join(cfg.CPUProfileDir, "infra.pprof"))
	}
	cmd := Pinned(cpus, args...)
	cmd.Stderr = os.Stderr
	if cfg.Infra.DatabaseURL != "" {
		cmd.Env = append(os.Environ(), "DATABASE_URL="+cfg.Infra.DatabaseURL)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("starting the infra process: %w", err)
	}
	stop := func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("the infra process did not start: %w", err)
	}
	var in Infra
	if err := json.Unmarshal(line, &in); err != nil {
		stop()
		return nil, nil, fmt.Errorf("reading the infra process's addresses: %w", err)
	}
	return &in, stop, nil
}

// ServeInfra is the infra process: it starts the infrastructure, prints
// its addresses as one JSON line on stdout, and runs until stdin closes
// (the orchestrator exits) or ctx ends.
func ServeInfra(ctx context.Context, cfg InfraConfig, stdin io.Reader, stdout io.Writer) error {
	in, stop, err := StartInfra(ctx, cfg)
	if err != nil {
		return err
	}
	defer stop()
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(stdout, "%s\n", b); err != nil {
		return err
	}
	closed := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, stdin); close(closed) }()
	select {
	case <-closed:
	case <-ctx.Done():
	}
	return nil
}

// ReadJSON reads a file written by the orchestrator (infra.json,
// params.json).
func ReadJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}
