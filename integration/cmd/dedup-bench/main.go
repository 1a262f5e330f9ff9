// Command dedup-bench measures dedup against its dependencies' limits and
// against a naive consumer, and writes report.md, report.json and
// throughput.png. It runs as three kinds of process:
//
//	dedup-bench [flags]                  the orchestrator: starts the others, writes the report
//	dedup-bench infra [-durable]         kfake, Temporal, PostgreSQL and toxiproxy (pinned to CPU 0)
//	dedup-bench stage -name NAME ...     one measured stage, alone (pinned to CPU 1); prints JSON
//
// From the repository root (the RSS stage runs bin/dedup):
//
//	make build && bin/dedup-bench -out bench-out      # the full run (minutes)
//	make bench-smoke                                  # seconds, for CI
//
// It is in the lab's module: `cd integration && go run ./cmd/dedup-bench`.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dedupio/dedup/integration/bench"
)

func main() {
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "infra":
		err = infra(os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "stage":
		err = stage(os.Args[2:])
	default:
		err = run()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dedup-bench:", err)
		os.Exit(1)
	}
}

func list[T any](s string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := parse(f)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", f, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// latency parses NAME=TEMPORAL/POSTGRES[/KAFKA] round trips, e.g. 20ms=20ms/1ms.
func latency(s string) (bench.Latency, error) {
	name, rest, ok := strings.Cut(s, "=")
	parts := strings.Split(rest, "/")
	if !ok || name == "" || len(parts) < 2 || len(parts) > 3 {
		return bench.Latency{}, fmt.Errorf("want NAME=TEMPORAL_RTT/POSTGRES_RTT[/KAFKA_RTT], such as 20ms=20ms/1ms")
	}
	l := bench.Latency{Name: name}
	for i, d := range []*time.Duration{&l.Temporal, &l.Postgres, &l.Kafka}[:len(parts)] {
		var err error
		if *d, err = time.ParseDuration(parts[i]); err != nil {
			return l, err
		}
	}
	return l, nil
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}

func logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func infra(args []string) (err error) {
	fs := flag.NewFlagSet("infra", flag.ExitOnError)
	durable := fs.Bool("durable", true, "PostgreSQL with fsync on")
	pgSettings := fs.String("pg-settings", "", "more PostgreSQL settings, comma-separated name=value")
	cpuprofile := fs.String("cpuprofile", "", "write this process's CPU profile here")
	_ = fs.Parse(args)
	ctx, stop := signalContext()
	defer stop()
	if *cpuprofile != "" {
		done, perr := bench.StartCPUProfile(*cpuprofile)
		if perr != nil {
			return perr
		}
		defer func() {
			if perr := done(); err == nil && perr != nil {
				err = fmt.Errorf("writing the CPU profile: %w", perr)
			}
		}()
	}
	return bench.ServeInfra(ctx, bench.InfraConfig{Durable: *durable, PGSettings: *pgSettings, DatabaseURL: os.Getenv("DATABASE_URL")}, os.Stdin, os.Stdout)
}

func stage(args []string) error {
	fs := flag.NewFlagSet("stage", flag.ExitOnError)
	var cfg bench.StageConfig
	fs.StringVar(&cfg.Name, "name", "", "the stage: "+strings.Join(bench.Stages, ", "))
	fs.Float64Var(&cfg.Dup, "dup", 0, "duplicate ratio (backlog, live)")
	infraPath := fs.String("infra", "", "the infra process's addresses (JSON, written by the orchestrator)")
	paramsPath := fs.String("params", "", "the run's sizes (JSON, written by the orchestrator)")
	fs.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write this stage process's CPU profile here")
	fs.BoolVar(&cfg.Trace, "trace", false, "with -cpuprofile: the first measured window's execution trace beside the profile (NAME.trace)")
	_ = fs.Parse(args)
	cfg.Infra = &bench.Infra{}
	if err := bench.ReadJSON(*infraPath, cfg.Infra); err != nil {
		return fmt.Errorf("reading -infra: %w", err)
	}
	if err := bench.ReadJSON(*paramsPath, &cfg.Params); err != nil {
		return fmt.Errorf("reading -params: %w", err)
	}
	ctx, stop := signalContext()
	defer stop()
	res, err := bench.RunStage(ctx, cfg, logger())
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

func run() error {
	var p bench.Params
	smoke := flag.Bool("smoke", false, "a seconds-long run with tiny sizes and one repetition (CI)")
	out := flag.String("out", "bench-out", "directory for report.md, report.json, throughput.png")
	dups := flag.String("dup", "0,0.3,0.9,1", "duplicate ratios of the backlog and live runs")
	sizes := flag.String("ledger-sizes", "100000,1000000,5000000", "ledger sizes for the claim-latency stage")
	lats := flag.String("latency", "0ms=0s/0s,20ms=20ms/1ms", "latency profiles the proxies add, NAME=TEMPORAL_RTT/POSTGRES_RTT[/KAFKA_RTT], comma-separated (Kafka: none unless given)")
	reps := flag.Int("reps", 3, "repetitions per latency profile")
	noPin := flag.Bool("no-pin", false, "do not pin the infrastructure to CPU 0 and the stages to CPU 1 (the report says so)")
	durable := flag.Bool("durable", true, "PostgreSQL with fsync on (off: faster, not what production runs)")
	pgSettings := flag.String("pg-settings", "", "more settings of the throwaway PostgreSQL, comma-separated name=value, e.g. shared_buffers=4GB,wal_compression=lz4 (default: shared_buffers=256MB, max_wal_size=2GB; a managed instance gives shared_buffers about a quarter of its memory)")
	flag.IntVar(&p.Records, "records", 2500, "records per backlog run")
	flag.IntVar(&p.Partitions, "partitions", 8, "partitions")
	flag.IntVar(&p.Concurrency, "concurrency", 32, "start concurrency")
	scaleSizes := flag.String("ledger-scale", "", "on demand: ledger sizes for claims as the ledger grows, e.g. 100000,1000000,10000000,50000000 (empty: skipped)")
	flag.IntVar(&p.ScaleClaims, "scale-claims", 20000, "claims each way at each -ledger-scale size")
	scaleIDs := flag.String("ledger-ids", "random", "event IDs of the -ledger-scale stage: random (UUIDv4, content hashes) or ordered (UUIDv7: time first, as producers can choose)")
	flag.IntVar(&p.RetentionRows, "retention-rows", 0, "on demand: ledger rows of the retention-cost stage (0: skipped)")
	flag.IntVar(&p.RetentionDays, "retention-days", 7, "days the retention-cost stage's rows span")
	flag.BoolVar(&p.LedgerOnly, "ledger-only", false, "run only the on-demand ledger stages (-ledger-scale, -retention-rows), no latency profiles")
	flag.DurationVar(&p.MarkInterval, "mark-interval", 0, "the router's starts.mark_interval (0: dedup's default, 250ms)")
	flag.StringVar(&p.Compression, "temporal-compression", "none", "gRPC compression of every stage's Temporal requests: none (dedup's default) or gzip (the SDK's)")
	flag.IntVar(&p.Batch, "batch", 1000, "poll batch = claim batch")
	flag.IntVar(&p.PayloadBytes, "payload", 256, "payload bytes")
	flag.IntVar(&p.RawStarts, "raw-starts", 3000, "starts in each raw Temporal stage (about the workflows of one unique-heavy backlog)")
	flag.IntVar(&p.RawClaims, "raw-claims", 100000, "rows in the raw claim stage")
	flag.IntVar(&p.ReplayN, "replay", 200000, "records of the all-duplicate replay (and of the raw consume)")
	flag.IntVar(&p.NaiveRecords, "naive", 500, "records the naive consumer gets, per workload (it is slow: ~25 ms a record at 20 ms RTT)")
	flag.IntVar(&p.LiveRate, "live-rate", 150, "records/s of the latency runs")
	flag.IntVar(&p.LiveSeconds, "live-seconds", 10, "seconds per latency run")
	flag.IntVar(&p.GuaranteeRecords, "guarantee-records", 300, "records per backlog of the guarantees stage (Watermill and dedup on restart, retention, two replicas, outage; 0 skips)")
	flag.IntVar(&p.RSSBacklog, "rss-backlog", 1000000, "records behind a dedup run process (0 skips)")
	flag.IntVar(&p.CostRecords, "cost-records", 2500, "records of each cost stage: Avro through a Schema Registry against the same records as JSON, tracing on against off (0 skips)")
	flag.BoolVar(&p.CostsOnly, "costs-only", false, "run only the cost stages (-cost-records), at each latency profile and repetition")
	flag.StringVar(&p.DedupBin, "dedup-bin", "bin/dedup", "the dedup binary, for the RSS stage")
	stages := flag.String("stages", "", "run only these stages in each repetition, comma-separated ("+strings.Join(bench.Stages, ", ")+"; empty: every one); -dup still sets the backlog ratios")
	baseline := flag.String("baseline-exe", "", "another dedup-bench binary (an older commit's): the unique-heavy backlog, the replay and the cost stages also run with it, beside this build's, for \"this build / baseline\" rows")
	stageExe := flag.String("stage-exe", "", "another dedup-bench binary that runs every stage in place of this build (this one runs the infrastructure): with -baseline-exe, two older commits in one run")
	cpuprofile := flag.String("cpuprofile", "", "a directory: one CPU profile per stage process (NN-PROFILE-repN-STAGE.pprof) and infra.pprof")
	trace := flag.Bool("trace", false, "with -cpuprofile: each of this build's stage processes also writes its first measured window's execution trace (NN-PROFILE-repN-STAGE.trace; go tool trace -pprof=net FILE says what the goroutines waited for)")
	flag.Parse()
	if *trace && *cpuprofile == "" {
		return errors.New("-trace: needs -cpuprofile, the directory the traces go to")
	}
	plan, err := bench.ParseStages(*stages)
	if err != nil {
		return err
	}
	if p.DupRatios, err = list(*dups, func(s string) (float64, error) { return strconv.ParseFloat(s, 64) }); err != nil {
		return err
	}
	switch *scaleIDs {
	case "random":
	case "ordered":
		p.ScaleOrdered = true
	default:
		return fmt.Errorf("-ledger-ids: %q is neither random nor ordered", *scaleIDs)
	}
	if p.ScaleSizes, err = list(*scaleSizes, strconv.Atoi); err != nil {
		return err
	}
	if p.LedgerSizes, err = list(*sizes, strconv.Atoi); err != nil {
		return err
	}
	for name, path := range map[string]*string{"-baseline-exe": baseline, "-stage-exe": stageExe} {
		if *path != "" {
			if *path, err = filepath.Abs(*path); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	cfg := bench.RunConfig{Reps: *reps, Pin: !*noPin, CPUProfileDir: *cpuprofile, Trace: *trace, Stages: plan, BaselineExe: *baseline, StageExe: *stageExe,
		Infra: bench.InfraConfig{Durable: *durable, PGSettings: *pgSettings, DatabaseURL: os.Getenv("DATABASE_URL")}}
	if cfg.Latencies, err = list(*lats, latency); err != nil {
		return fmt.Errorf("-latency: %w", err)
	}
	if *smoke {
		p.Records, p.RawStarts, p.RawClaims, p.ReplayN, p.NaiveRecords = 300, 200, 5000, 3000, 40
		p.LiveRate, p.LiveSeconds, p.RSSBacklog, p.LedgerSizes = 100, 1, 0, []int{1000, 20000}
		p.DupRatios, p.GuaranteeRecords, p.CostRecords = []float64{0, 0.9, 1}, 40, 300
		cfg.Reps, cfg.Infra.Durable = 1, false
	}
	cfg.Params = p
	ctx, stop := signalContext()
	defer stop()
	cfg.Say = func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
	}
	if cfg.Pin {
		if err := bench.CheckPinning(); err != nil && *smoke {
			// CI may have one CPU: a smoke run checks the harness, not figures.
			cfg.Say("not pinning: %v", err)
			cfg.Pin = false
		} else if err != nil {
			return err
		}
	}
	if cfg.Exe, err = os.Executable(); err != nil {
		return err
	}
	if *cpuprofile != "" {
		if err := os.MkdirAll(*cpuprofile, 0o755); err != nil {
			return err
		}
	}
	if abs, err := filepath.Abs(p.DedupBin); err == nil {
		cfg.Params.DedupBin = abs
	}
	r, err := bench.Run(ctx, cfg, logger())
	if err != nil {
		return err
	}
	if err := r.Write(*out); err != nil {
		return err
	}
	fmt.Println(r.Markdown())
	return nil
}
