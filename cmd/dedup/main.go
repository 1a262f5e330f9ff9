// Command dedup turns an at-least-once Kafka stream into exactly-once
// Temporal workflow starts.
//
//	dedup run --config dedup.yaml       consume, claim, start, commit
//	dedup migrate --config dedup.yaml   apply the ledger migrations and exit
//	dedup validate --config dedup.yaml  check a config file and exit
//	dedup worker --config dedup.yaml    run RunActivityWorkflow and its activities
//	dedup ingress --config dedup.yaml   the HTTP ingress: POST /v1/events, GET /v1/workflows/{id}
//	dedup schedule pause|resume NAME --config dedup.yaml
//	                                    pause or resume a scheduled trigger (docs/schedules.md)
//	dedup version                       print the version and commit (as dedup_build_info)
//
// The operators' commands (internal/ops; each has --help with an example):
//
//	dedup explain --config F --topic T --partition P --offset O   what dedup decided for a record, and why
//	dedup inspect --config F WORKFLOW_ID                          the ledger's and Temporal's view of a workflow
//	dedup lag --config F                                          committed offset, end, lag and owner per partition
//	dedup offsets reset --config F --to earliest|latest|TIME|OFFSET [--execute]
//	dedup ledger stats --config F | dedup ledger purge --config F --older-than D [--execute]
//	dedup dlq replay --config F [--reason R,...] [--limit N] [--execute]   dead letters back through the dedup gate
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/dedupio/dedup/internal/app"
	"github.com/dedupio/dedup/internal/ingress"
	"github.com/dedupio/dedup/internal/ops"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/sink/ledger"
)

func main() {
	if len(os.Args) > 1 && ops.Handles(os.Args[1]) {
		os.Exit(ops.Main(os.Args[1:], os.Stdout, os.Stderr)) // exit codes 0 found, 1 not found, 2 error
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "dedup:", err)
		os.Exit(1)
	}
}

// stopped treats a run ended by SIGTERM or SIGINT as a clean exit, even
// when the signal came while it was still starting (waiting for the
// migration lock or a dependency).
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func usage() error {
	return errors.New("usage: dedup run|worker|ingress|migrate|validate --config FILE, " +
		"dedup explain|inspect|lag|offsets reset|ledger stats|ledger purge|dlq replay (--help for each), dedup schedule pause|resume NAME --config FILE, or dedup version")
}

func run(args []string) error {
	if len(args) == 0 {
		return usage()
	}
	cmd := args[0]
	switch cmd {
	case "version", "--version", "-version":
		fmt.Println(app.VersionLine())
		return nil
	}
	var trigger string
	if cmd == "schedule" { // dedup schedule pause|resume NAME --config FILE
		if len(args) < 3 || (args[1] != "pause" && args[1] != "resume") || strings.HasPrefix(args[2], "-") {
			return usage()
		}
		cmd, trigger, args = "schedule "+args[1], args[2], args[2:]
	}
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	path := fs.String("config", "dedup.yaml", "config file (YAML)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	// Test-only crash points (failpoints.go): before anything else, so that
	// a binary built without them refuses DEDUP_FAILPOINT at once.
	var hooks processor.Hooks
	if cmd == "run" {
		h, err := failpoints(os.Getenv("DEDUP_FAILPOINT"))
		if err != nil {
			return err
		}
		hooks = h
	}
	cfg, err := app.LoadConfig(*path)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	switch cmd {
	case "run":
		return stopped(ctx, app.Run(ctx, cfg, app.Options{Hooks: hooks}))
	case "worker":
		return stopped(ctx, app.RunWorker(ctx, cfg, nil))
	case "ingress":
		return stopped(ctx, ingress.Run(ctx, cfg, ingress.RunOptions{}))
	case "migrate":
		return ledger.MigrateCommand(ctx, cfg.Postgres)
	case "schedule pause", "schedule resume":
		return app.SetSchedulePaused(ctx, cfg, trigger, cmd == "schedule pause", os.Stdout)
	case "validate":
		// What dedup ingress checks at start, too: the routers share the
		// file, and an ingress that would not start is found here.
		if _, err := ingress.CheckConfig(cfg, nil); err != nil {
			return err
		}
		// The routers' decider: its files (the schema registry's secrets).
		if _, err := processor.NewDecider(cfg.Kafka); err != nil {
			return err
		}
		fmt.Printf("%s: ok (%d routes, topics %s; %s)\n", *path, len(cfg.Routes), strings.Join(cfg.Kafka.Topics, ","), app.CheckedTriggers(cfg))
		return nil
	}
	return usage()
}
