package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/dedupio/dedup/internal/app"
	"github.com/dedupio/dedup/internal/cli"
	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/internal/ingress"
	"github.com/dedupio/dedup/internal/ops"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/sink/ledger"
)

// commands is dedup's command table: every subcommand, its flags, its help
// and example, and what it runs. `dedup help` and every --help are
// generated from it (internal/cli).
func commands() cli.Table {
	t := cli.Table{
		{
			Name:    "run",
			Summary: "consume, claim, start, commit: the router (and the scheduler, with schedules.triggers)",
			Usage:   "--config FILE",
			Example: "dedup run --config dedup.yaml",
			Flags: func(fs *flag.FlagSet) cli.Run {
				path := fs.String("config", "dedup.yaml", "config file (YAML)")
				return func(ctx context.Context, inv cli.Invocation) (any, int, error) {
					// Test-only crash points (failpoints.go): before anything
					// else, so that a binary built without them refuses
					// DEDUP_FAILPOINT at once.
					hooks, err := failpoints(os.Getenv("DEDUP_FAILPOINT"))
					if err != nil {
						return nil, cli.ExitUsage, err
					}
					cfg, err := loadConfig(*path, inv.Args)
					if err != nil {
						return nil, cli.ExitUsage, err
					}
					return nil, 0, cfg.Redact(stopped(ctx, app.Run(withCrashPoints(ctx, hooks), cfg, app.Options{})))
				}
			},
		},
		{
			Name:    "worker",
			Summary: "run RunActivityWorkflow and its activities (docs/worker.md)",
			Usage:   "--config FILE",
			Example: "dedup worker --config dedup.yaml",
			// The worker's sections only (config.LoadWorker): no kafka needed.
			Flags: withLoadedConfig(config.LoadWorker, func(ctx context.Context, cfg config.Config, _ cli.Invocation) (any, int, error) {
				return nil, 0, stopped(ctx, app.RunWorker(ctx, cfg, nil))
			}),
		},
		{
			Name:    "ingress",
			Summary: "the HTTP ingress: POST /v1/events, GET /v1/workflows/{id}",
			Usage:   "--config FILE",
			Example: "dedup ingress --config dedup.yaml",
			Flags: withConfig(func(ctx context.Context, cfg config.Config, _ cli.Invocation) (any, int, error) {
				return nil, 0, stopped(ctx, ingress.Run(ctx, cfg, ingress.RunOptions{}))
			}),
		},
		{
			Name:    "migrate",
			Summary: "apply the ledger migrations and exit",
			Usage:   "--config FILE",
			Example: "dedup migrate --config dedup.yaml",
			Flags: withConfig(func(ctx context.Context, cfg config.Config, _ cli.Invocation) (any, int, error) {
				return nil, 0, ledger.MigrateCommand(ctx, cfg.Postgres)
			}),
		},
		scheduleCommand("pause"),
		scheduleCommand("resume"),
		{
			Name:    "validate",
			Summary: "check a config file (and what dedup ingress checks at start) and exit",
			Usage:   "--config FILE [--worker] [--output json]",
			Help:    "Exit code 0 when the config is valid, 2 when it is not (the error names the setting), 1 when a namespace Temporal answers for lacks the search attributes runs carry (the error names each and the command that creates it). With --worker, the file is checked as dedup worker reads it (no kafka section or routes needed).",
			Example: "dedup validate --config dedup.yaml --output json\ndedup validate --worker --config worker.yaml",
			Output:  true,
			Flags:   validateFlags,
		},
		{
			Name:    "version",
			Aliases: []string{"--version", "-version"},
			Summary: "print the version and commit (as dedup_build_info)",
			Usage:   "[--output json]",
			Example: "dedup version --output json",
			Output:  true,
			Flags: func(*flag.FlagSet) cli.Run {
				return func(_ context.Context, inv cli.Invocation) (any, int, error) {
					if len(inv.Args) > 0 {
						return nil, cli.ExitUsage, fmt.Errorf("unexpected arguments %q (flags only)", inv.Args)
					}
					v, c := app.BuildVersion()
					return versionAnswer{Version: v, Commit: c, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}, 0, nil
				}
			},
		},
	}
	return append(t, ops.Commands()...)
}

// withConfig declares --config and runs do with the config it names. A
// config that does not load is a usage error (exit code 2); an error of
// do, a failure (1), with every value a ${VAR} gave taken out of its
// text (config.Redact), as the loader's errors are. It takes no
// positional arguments.
func withConfig(do func(ctx context.Context, cfg config.Config, inv cli.Invocation) (any, int, error)) func(fs *flag.FlagSet) cli.Run {
	return withLoadedConfig(config.Load, do)
}

// withLoadedConfig is withConfig with the config read by load.
func withLoadedConfig(load func(string) (config.Config, error), do func(ctx context.Context, cfg config.Config, inv cli.Invocation) (any, int, error)) func(fs *flag.FlagSet) cli.Run {
	return func(fs *flag.FlagSet) cli.Run {
		path := fs.String("config", "dedup.yaml", "config file (YAML)")
		return func(ctx context.Context, inv cli.Invocation) (any, int, error) {
			if len(inv.Args) > 0 {
				return nil, cli.ExitUsage, fmt.Errorf("unexpected arguments %q (flags only)", inv.Args)
			}
			cfg, err := load(*path)
			if err != nil {
				return nil, cli.ExitUsage, err
			}
			v, code, err := do(ctx, cfg, inv)
			return v, code, cfg.Redact(err)
		}
	}
}

// loadConfig loads the config of a command that takes no positional
// arguments.
func loadConfig(path string, args []string) (config.Config, error) {
	if len(args) > 0 {
		return config.Config{}, fmt.Errorf("unexpected arguments %q (flags only)", args)
	}
	return config.Load(path)
}

func scheduleCommand(verb string) cli.Command {
	return cli.Command{
		Name:    "schedule " + verb,
		Summary: verb + " a scheduled trigger (docs/schedules.md)",
		Usage:   "--config FILE NAME",
		Example: "dedup schedule " + verb + " nightly-report --config dedup.yaml",
		Flags: func(fs *flag.FlagSet) cli.Run {
			path := fs.String("config", "dedup.yaml", "config file (YAML)")
			return func(ctx context.Context, inv cli.Invocation) (any, int, error) {
				if len(inv.Args) != 1 || inv.Args[0] == "" {
					return nil, cli.ExitUsage, errors.New("usage: dedup schedule " + verb + " --config FILE NAME (one trigger name)")
				}
				cfg, err := config.Load(*path)
				if err != nil {
					return nil, cli.ExitUsage, err
				}
				return nil, 0, cfg.Redact(app.SetSchedulePaused(ctx, cfg, inv.Args[0], verb == "pause", inv.Stdout))
			}
		},
	}
}

// validateAnswer is what `dedup validate` prints.
type validateAnswer struct {
	Config   string   `json:"config"`
	OK       bool     `json:"ok"`
	Routes   int      `json:"routes"`
	Topics   []string `json:"topics"`
	Triggers string   `json:"triggers"`
	// SearchAttributes says whether Temporal's namespaces have the search
	// attributes the runs carry (app.CheckSearchAttributes).
	SearchAttributes string `json:"search_attributes"`
}

func (a validateAnswer) WriteText(w io.Writer) error {
	_, err := fmt.Fprintf(w, "%s: ok (%d routes, topics %s; %s; %s)\n", a.Config, a.Routes, strings.Join(a.Topics, ","), a.Triggers, a.SearchAttributes)
	return err
}

// workerValidateAnswer is what `dedup validate --worker` prints.
type workerValidateAnswer struct {
	Config    string `json:"config"`
	OK        bool   `json:"ok"`
	For       string `json:"for"` // "worker": the file was checked as dedup worker reads it
	TaskQueue string `json:"task_queue"`
	Namespace string `json:"namespace"`
}

func (a workerValidateAnswer) WriteText(w io.Writer) error {
	_, err := fmt.Fprintf(w, "%s: ok for dedup worker (task queue %s, namespace %s)\n", a.Config, a.TaskQueue, a.Namespace)
	return err
}

// checkWorker loads the file at path as `dedup worker` does
// (config.LoadWorker: its worker, postgres, temporal and log sections) and
// checks what the worker checks at start before it listens and dials
// (app.CheckWorker).
func checkWorker(ctx context.Context, path string) (config.Config, error) {
	cfg, err := config.LoadWorker(path)
	if err != nil {
		return config.Config{}, err
	}
	return cfg, cfg.Redact(app.CheckWorker(ctx, cfg))
}

// validateWorker is `dedup validate --worker`.
func validateWorker(ctx context.Context, path string, args []string) (any, int, error) {
	if len(args) > 0 {
		return nil, cli.ExitUsage, fmt.Errorf("unexpected arguments %q (flags only)", args)
	}
	cfg, err := checkWorker(ctx, path)
	if err != nil {
		return nil, cli.ExitUsage, err
	}
	return workerValidateAnswer{Config: path, OK: true, For: "worker", TaskQueue: cfg.Worker.TaskQueue, Namespace: cfg.Temporal.Namespace}, 0, nil
}

// workerOnly is whether the file at path is one written for `dedup
// worker` alone: one validate --worker accepts, with no routes and no
// Kafka brokers or topics. A router's file with a bad kafka setting is not
// (its error is the router's alone).
func workerOnly(ctx context.Context, path string) bool {
	cfg, err := checkWorker(ctx, path)
	return err == nil && len(cfg.Routes) == 0 && len(cfg.Kafka.Brokers) == 0 && len(cfg.Kafka.Topics) == 0
}

func validateFlags(fs *flag.FlagSet) cli.Run {
	path := fs.String("config", "dedup.yaml", "config file (YAML)")
	worker := fs.Bool("worker", false, "check the file as dedup worker reads it: its worker, postgres, temporal and log sections only (a file for the worker alone needs no kafka section or routes)")
	return func(ctx context.Context, inv cli.Invocation) (any, int, error) {
		if *worker {
			return validateWorker(ctx, *path, inv.Args)
		}
		cfg, err := loadConfig(*path, inv.Args)
		if err != nil {
			if len(inv.Args) == 0 && workerOnly(ctx, *path) {
				err = fmt.Errorf("%w (the file is valid for dedup worker: check it as the worker reads it with dedup validate --worker)", err)
			}
			return nil, cli.ExitUsage, err
		}
		// What dedup ingress checks at start, too: the routers share the
		// file, and an ingress that would not start is found here.
		if _, err := ingress.CheckConfig(cfg, nil); err != nil {
			return nil, cli.ExitUsage, cfg.Redact(err)
		}
		// The routers' decider: its files (the schema registry's secrets).
		if _, err := processor.NewDecider(cfg.Kafka); err != nil {
			return nil, cli.ExitUsage, cfg.Redact(err)
		}
		// The namespaces' search attributes, when Temporal answers
		// (searchattrs.go): a missing one is named with its command.
		attrs, err := app.CheckSearchAttributes(ctx, cfg)
		if err != nil {
			return nil, cli.ExitFailed, cfg.Redact(err)
		}
		return validateAnswer{Config: *path, OK: true, Routes: len(cfg.Routes), Topics: cfg.Kafka.Topics, Triggers: app.CheckedTriggers(cfg),
			SearchAttributes: attrs}, 0, nil
	}
}

// versionAnswer is what `dedup version` prints: the same values as
// dedup_build_info.
type versionAnswer struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	Go      string `json:"go"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
}

func (a versionAnswer) WriteText(w io.Writer) error {
	_, err := fmt.Fprintln(w, app.VersionLine())
	return err
}
