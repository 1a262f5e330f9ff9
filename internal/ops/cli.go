package ops

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/dedupio/dedup/internal/cli"
	"github.com/dedupio/dedup/internal/config"
)

// Exit codes. They are dedup's shared ones (internal/cli), read as an
// answer: 1 is "not found" rather than "failed", and any error is 2.
const (
	ExitFound    = cli.ExitOK     // found, or done
	ExitNotFound = cli.ExitFailed // nothing is known of what was asked
	ExitError    = cli.ExitUsage  // an error, a refusal, or bad usage
)

// command is one subcommand: its flags, its help and what it runs.
type command struct {
	name    string // "explain", "offsets reset", ...
	summary string // one line, for dedup help
	usage   string // the synopsis after the name
	help    string // what it does and its exit codes
	example string
	// timeout is the --timeout default (2 minutes when 0).
	timeout time.Duration
	// flags declares the command's own flags; run runs it with the
	// positional arguments.
	flags func(fs *flag.FlagSet) func(ctx context.Context, t *Tool, args []string) (any, int, error)
}

func commands() []command {
	return []command{explainCommand(), inspectCommand(), lagCommand(), offsetsResetCommand(), ledgerStatsCommand(), ledgerPurgeCommand(), dlqReplayCommand()}
}

// Commands are the operators' commands, as rows of dedup's command table
// (cmd/dedup). Each takes --config, --timeout and --output; logs and
// errors go to stderr.
func Commands() []cli.Command { return commandsWith(nil) }

// commandsWith is Commands with an optional set-up of the tool (tests
// inject a logger or a shorter idle wait).
func commandsWith(setup func(*Tool)) []cli.Command {
	var cs []cli.Command
	for _, c := range commands() {
		cs = append(cs, cli.Command{
			Name: c.name, Summary: c.summary, Usage: c.usage, Help: c.help, Example: c.example,
			Output: true,
			Flags: func(fs *flag.FlagSet) cli.Run {
				path := fs.String("config", "dedup.yaml", "config file (YAML), as for dedup run")
				timeout := fs.Duration("timeout", cmp.Or(c.timeout, 2*time.Minute), "give up after this long")
				runCmd := c.flags(fs)
				return func(ctx context.Context, inv cli.Invocation) (any, int, error) {
					cfg, err := config.Load(*path)
					if err != nil {
						return nil, ExitError, err
					}
					ctx, cancel := context.WithTimeout(ctx, *timeout)
					defer cancel()
					t := newTool(cfg, toolLogger(cfg.Log, inv.Stderr))
					if setup != nil {
						setup(t)
					}
					defer t.Close()
					res, code, err := runCmd(ctx, t, inv.Args)
					err = cfg.Redact(err) // no value a ${VAR} gave, as dedup validate
					if err != nil && code == ExitFound {
						code = ExitError
					}
					if res == nil {
						return nil, code, err
					}
					return answer{res}, code, err
				}
			},
		})
	}
	return cs
}

// answer is a command's result: JSON as it is, text as its text method
// writes it.
type answer struct{ v any }

func (a answer) MarshalJSON() ([]byte, error) { return json.Marshal(a.v) }

func (a answer) WriteText(w io.Writer) error {
	r, ok := a.v.(interface{ text(w *strings.Builder) })
	if !ok {
		return nil
	}
	var b strings.Builder
	r.text(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

// planFlags declares --execute and --dry-run, the flags of a command that
// changes something (offsets reset, ledger purge, dlq replay). As kafka-consumer-groups
// --reset-offsets, it prints its plan and changes nothing unless --execute.
// --dry-run is the default's explicit spelling, kept so that a script
// written for the old default (change unless --dry-run) stays safe; with
// --execute it is a usage error. The answer is whether to change nothing.
func planFlags(fs *flag.FlagSet) func() (dryRun bool, err error) {
	execute := fs.Bool("execute", false, "make the change (without it: print the plan, change nothing)")
	dryRun := fs.Bool("dry-run", false, "print the plan, change nothing (the default, spelt out)")
	return func() (bool, error) {
		if *execute && *dryRun {
			return false, errors.New("--dry-run and --execute together: choose one (without --execute nothing changes)")
		}
		return !*execute, nil
	}
}

// toolLogger logs to stderr in the config's format, at info at least:
// what a command changes is always logged.
func toolLogger(c config.LogConfig, stderr io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: min(lvl, slog.LevelInfo)}
	if stderr == nil {
		stderr = os.Stderr
	}
	if c.Format == "text" {
		return slog.New(slog.NewTextHandler(stderr, opts))
	}
	return slog.New(slog.NewJSONHandler(stderr, opts))
}
