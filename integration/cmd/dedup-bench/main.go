// Command dedup-bench measures dedup against its dependencies' limits and
// against a naive consumer, in one run on one machine, on the embedded
// stack; it writes report.md, report.json and throughput.png.
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
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/dedupio/dedup/integration/bench"
	"github.com/dedupio/dedup/integration/devstack"
	"github.com/dedupio/dedup/processor"
)

func main() {
	if err := run(); err != nil {
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

// labelled runs a stage under a pprof label, so that a -cpuprofile can be
// focused on the work a stage started (pprof -tagfocus stage=replay): the
// embedded stack's own goroutines predate it and carry no label.
func labelled[T any](ctx context.Context, stage string, fn func(context.Context) (T, error)) (T, error) {
	var v T
	var err error
	pprof.Do(ctx, pprof.Labels("stage", stage), func(ctx context.Context) { v, err = fn(ctx) })
	return v, err
}

func run() error {
	var p bench.Params
	smoke := flag.Bool("smoke", false, "a seconds-long run with tiny sizes (CI)")
	out := flag.String("out", "bench-out", "directory for report.md, report.json, throughput.png")
	dups := flag.String("dup", "0,0.3,0.9,1", "duplicate ratios of the backlog and live runs")
	sizes := flag.String("ledger-sizes", "100000,1000000,5000000", "ledger sizes for the claim-latency stage")
	durable := flag.Bool("durable", true, "PostgreSQL with fsync on (off: faster, not what production runs)")
	flag.IntVar(&p.Records, "records", 2500, "records per backlog run")
	flag.IntVar(&p.Rounds, "rounds", 3, "unique-heavy backlogs, each between two raw Temporal start runs")
	flag.IntVar(&p.Partitions, "partitions", 8, "partitions")
	flag.IntVar(&p.Concurrency, "concurrency", 32, "start concurrency")
	flag.IntVar(&p.Batch, "batch", 1000, "poll batch = claim batch")
	flag.IntVar(&p.PayloadBytes, "payload", 256, "payload bytes")
	flag.IntVar(&p.RawStarts, "raw-starts", 3000, "starts in each raw Temporal stage (about the workflows of one unique-heavy backlog)")
	flag.IntVar(&p.RawClaims, "raw-claims", 100000, "rows in the raw claim stage")
	flag.IntVar(&p.ReplayN, "replay", 200000, "records of the all-duplicate replay")
	flag.IntVar(&p.NaiveRecords, "naive", 2000, "records the naive consumer gets, per workload")
	flag.IntVar(&p.LiveRate, "live-rate", 150, "records/s of the latency runs")
	flag.IntVar(&p.LiveSeconds, "live-seconds", 10, "seconds per latency run")
	flag.IntVar(&p.RSSBacklog, "rss-backlog", 1000000, "records behind a dedup run process (0 skips)")
	flag.StringVar(&p.DedupBin, "dedup-bin", "bin/dedup", "the dedup binary, for the RSS stage")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (stack included) here")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var err error
	if p.DupRatios, err = list(*dups, func(s string) (float64, error) { return strconv.ParseFloat(s, 64) }); err != nil {
		return err
	}
	if p.LedgerSizes, err = list(*sizes, strconv.Atoi); err != nil {
		return err
	}
	if *smoke {
		p.Records, p.RawStarts, p.RawClaims, p.ReplayN, p.NaiveRecords, p.Rounds = 300, 200, 5000, 3000, 150, 1
		p.LiveRate, p.LiveSeconds, p.RSSBacklog, p.LedgerSizes = 100, 2, 0, []int{1000, 20000}
		*durable = false
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	say := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
	}

	say("starting the embedded stack")
	stack, err := devstack.Start(ctx, devstack.Config{Namespace: "default", DurablePostgres: *durable, DatabaseURL: os.Getenv("DATABASE_URL")})
	if err != nil {
		return err
	}
	defer stack.Stop()
	tc, err := client.Dial(client.Options{HostPort: stack.Temporal.HostPort(), Namespace: "default",
		Logger: tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))})
	if err != nil {
		return err
	}
	defer tc.Close()
	env, err := bench.NewEnv(stack, tc, p, log)
	if err != nil {
		return err
	}
	defer env.Close()
	r := &bench.Report{When: time.Now(), Machine: bench.Machine(), Params: p}

	say("raw ledger claims: %d rows in batches of %d", p.RawClaims, p.Batch)
	if r.RawClaims, err = env.RawClaims(ctx); err != nil {
		return err
	}
	say("  new %.0f rows/s, duplicate %.0f rows/s", r.RawClaims.New.PerSec, r.RawClaims.Duplicate.PerSec)
	say("raw consume: %d records", p.ReplayN)
	if r.RawConsume, err = env.RawConsume(ctx, p.ReplayN); err != nil {
		return err
	}
	say("  %.0f records/s", r.RawConsume.PerSec)
	// The all-duplicate stages run before any workflow is started: the
	// in-process Temporal server keeps working on open workflows for a
	// while after each start-heavy stage, and a replay does not involve
	// Temporal at all (nor, in production, share its cores).
	say("dedup replay: %d records, all duplicates", p.ReplayN)
	var recs []*kgo.Record
	var pre []processor.Intent
	replay, err := labelled(ctx, "replay", func(ctx context.Context) (bench.RouterResult, error) {
		var x bench.RouterResult
		var err error
		x, recs, pre, err = env.Replay(ctx, p.ReplayN, &r.ReplayRawClaim)
		return x, err
	})
	if err != nil {
		return err
	}
	r.Replay = replay
	say("  %.0f records/s, %.0f intents/s, %d Temporal calls, %.4f PG round trips/record, claim in flight %.0f%% of the time; the claim alone over its IDs: %.0f rows/s",
		replay.Records.PerSec, replay.Intents.PerSec, replay.TemporalCalls, replay.PGPerRecord, replay.ClaimBusy*100, r.ReplayRawClaim.PerSec)
	say("naive consumer, replay: %d records", p.NaiveRecords)
	if r.NaiveReplay, err = env.Naive(ctx, recs[:min(p.NaiveRecords, len(recs))], pre); err != nil {
		return err
	}
	say("  %.0f records/s", r.NaiveReplay.Records.PerSec)
	recs, pre = nil, nil
	if err := env.DropTopics(ctx); err != nil {
		return err
	}
	for i, d := range p.DupRatios {
		env.Settle(ctx)
		if i == 0 {
			// The unique-heavy comparison: raw starts and dedup backlogs
			// interleaved, each backlog compared with the raw runs either
			// side of it (the in-process server slows as workflows pile
			// up, and a single pair is within its noise).
			say("raw Temporal starts: %d at concurrency %d", p.RawStarts, p.Concurrency)
			raw, err := labelled(ctx, "raw-starts", env.RawStarts)
			if err != nil {
				return err
			}
			say("  %.0f starts/s", raw.PerSec)
			r.RawStartRuns = append(r.RawStartRuns, raw)
			var runs []bench.RouterResult
			for round := 0; round < p.Rounds; round++ {
				env.Settle(ctx)
				say("dedup backlog, %.0f%% duplicates, %d records (round %d of %d)", d*100, p.Records, round+1, p.Rounds)
				x, err := labelled(ctx, "unique-heavy", func(ctx context.Context) (bench.RouterResult, error) { return env.Backlog(ctx, d) })
				if err != nil {
					return err
				}
				say("  %.0f records/s, %.0f workflows/s, %.2f Temporal calls/workflow, %.3f PG round trips/record", x.Records.PerSec, x.Workflows.PerSec, x.TemporalPerUnique, x.PGPerRecord)
				runs = append(runs, x)
				env.Settle(ctx)
				say("raw Temporal starts: %d", p.RawStarts)
				if raw, err = labelled(ctx, "raw-starts", env.RawStarts); err != nil {
					return err
				}
				say("  %.0f starts/s", raw.PerSec)
				r.RawStartRuns = append(r.RawStartRuns, raw)
			}
			r.UniqueRuns = runs
			r.Backlogs = append(r.Backlogs, bench.Combine(runs))
			continue
		}
		say("dedup backlog, %.0f%% duplicates, %d records", d*100, p.Records)
		x, err := env.Backlog(ctx, d)
		if err != nil {
			return err
		}
		say("  %.0f records/s, %.0f workflows/s, %.2f Temporal calls/workflow, %.3f PG round trips/record", x.Records.PerSec, x.Workflows.PerSec, x.TemporalPerUnique, x.PGPerRecord)
		r.Backlogs = append(r.Backlogs, x)
	}
	for _, d := range p.DupRatios {
		env.Settle(ctx)
		say("dedup live, %.0f%% duplicates, %d rec/s for %ds", d*100, p.LiveRate, p.LiveSeconds)
		x, err := env.Live(ctx, d)
		if err != nil {
			return err
		}
		say("  latency p50 %.0f p95 %.0f p99 %.0f ms over %d workflows", x.LatencyMs.P50, x.LatencyMs.P95, x.LatencyMs.P99, x.LatencyMs.N)
		r.Live = append(r.Live, x)
	}
	env.Settle(ctx)
	say("naive consumer, unique-heavy: %d records, %.0f%% duplicates", p.NaiveRecords, p.DupRatios[0]*100)
	uw := bench.UniqueRecords(p, p.NaiveRecords)
	if r.NaiveUnique, err = env.Naive(ctx, uw, nil); err != nil {
		return err
	}
	say("  %.0f records/s, %.0f workflows/s", r.NaiveUnique.Records.PerSec, r.NaiveUnique.Workflows.PerSec)
	say("ledger growth: %v", p.LedgerSizes)
	if r.Ledger, err = env.LedgerGrowth(ctx); err != nil {
		return err
	}
	if p.RSSBacklog > 0 {
		say("dedup run process over %d records", p.RSSBacklog)
		rss, err := env.RSS(ctx)
		if err != nil {
			return err
		}
		r.RSS = &rss
		say("  peak RSS %.0f MiB, %.0f records/s", rss.PeakRSSMiB, rss.Records.PerSec)
	}
	if err := r.Write(*out); err != nil {
		return err
	}
	fmt.Println(r.Markdown())
	return nil
}
