// Command dedup turns an at-least-once Kafka stream into exactly-once
// Temporal workflow starts.
//
//	dedup run --config dedup.yaml       consume, claim, start, commit
//	dedup migrate --config dedup.yaml   apply the ledger migrations and exit
//	dedup validate --config dedup.yaml  check a config file and exit
//	dedup worker --config dedup.yaml    run RunActivityWorkflow and its activities
//	dedup dlq replay --config dedup.yaml [--reason R,...] [--dry-run] [--limit N]
//	                                    send dead-lettered records back through the dedup gate
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/dedupio/dedup/internal/app"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/replay"
	"github.com/dedupio/dedup/sink/ledger"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "dedup:", err)
		os.Exit(1)
	}
}

func usage() error {
	return errors.New("usage: dedup run|worker|migrate|validate --config FILE, or dedup dlq replay --config FILE [--reason R,...] [--dry-run] [--limit N]")
}

func run(args []string) error {
	if len(args) == 0 {
		return usage()
	}
	cmd := args[0]
	if cmd == "dlq" {
		if len(args) < 2 || args[1] != "replay" {
			return usage()
		}
		cmd, args = "dlq replay", args[1:]
	}
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	path := fs.String("config", "dedup.yaml", "config file (YAML)")
	reasons := fs.String("reason", "", "dlq replay: comma-separated reasons to replay (default: all)")
	dryRun := fs.Bool("dry-run", false, "dlq replay: count what would be replayed, send nothing")
	limit := fs.Int("limit", 0, "dlq replay: replay at most this many records (0: all)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	cfg, err := app.LoadConfig(*path)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	switch cmd {
	case "dlq replay":
		o := replay.Options{Brokers: cfg.Kafka.Brokers, DryRun: *dryRun, Limit: *limit}
		for _, t := range cfg.Kafka.Topics {
			o.DeadLetterTopics = append(o.DeadLetterTopics, cfg.Kafka.DeadLetterTopicFor(t))
		}
		if *reasons != "" {
			o.Reasons = strings.Split(*reasons, ",")
		}
		res, err := replay.Run(ctx, o, app.NewLogger(cfg.Log))
		verb := "replayed"
		if *dryRun {
			verb = "would replay"
		}
		fmt.Printf("read %d dead letters; %s %v; left %v\n", res.Read, verb, res.Replayed, res.Skipped)
		return err
	case "run":
		hooks, err := failpoints(os.Getenv("DEDUP_FAILPOINT"))
		if err != nil {
			return err
		}
		return app.Run(ctx, cfg, app.Options{Hooks: hooks})
	case "worker":
		return app.RunWorker(ctx, cfg, nil)
	case "migrate":
		return ledger.Migrate(ctx, cfg.Postgres.URL)
	case "validate":
		fmt.Printf("%s: ok (%d routes, topics %s)\n", *path, len(cfg.Routes), strings.Join(cfg.Kafka.Topics, ","))
		return nil
	}
	return usage()
}

// failpoints reads DEDUP_FAILPOINT, which the crash tests set: the process
// exits abruptly (as SIGKILL would leave it: nothing flushed, nothing
// committed) at the named point, on its Nth visit. Values:
// "after-claim[:N]" (claims committed, nothing started) and
// "after-start[:N]" (a workflow started, not marked, offset not committed).
func failpoints(spec string) (processor.Hooks, error) {
	var h processor.Hooks
	if spec == "" {
		return h, nil
	}
	name, nth, _ := strings.Cut(spec, ":")
	n := int64(1)
	if nth != "" {
		v, err := strconv.ParseInt(nth, 10, 64)
		if err != nil || v < 1 {
			return h, fmt.Errorf("DEDUP_FAILPOINT %q: count must be a positive integer", spec)
		}
		n = v
	}
	var seen atomic.Int64
	crash := func() {
		if seen.Add(1) == n {
			fmt.Fprintf(os.Stderr, "dedup: failpoint %s hit, exiting\n", spec)
			os.Exit(137)
		}
	}
	switch name {
	case "after-claim":
		h.AfterClaim = crash
	case "after-start":
		h.AfterStart = crash
	default:
		return h, fmt.Errorf("DEDUP_FAILPOINT %q: unknown failpoint (after-claim, after-start)", spec)
	}
	return h, nil
}
