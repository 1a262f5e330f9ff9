package ops

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/dedupio/dedup/internal/app"
)

// Exit codes.
const (
	ExitFound    = 0 // found, or done
	ExitNotFound = 1 // nothing is known of what was asked
	ExitError    = 2 // an error, a refusal, or bad usage
)

// Commands are the first words ops handles.
var Commands = []string{"explain", "inspect", "lag", "offsets", "ledger", "dlq"}

// Handles reports whether the command line's first word is an ops command.
func Handles(cmd string) bool {
	for _, c := range Commands {
		if c == cmd {
			return true
		}
	}
	return false
}

// command is one subcommand: its flags, its help and what it runs.
type command struct {
	name  string // "explain", "offsets reset", ...
	usage string // the synopsis
	help  string // what it does, with an example
	// timeout is the --timeout default (2 minutes when 0).
	timeout time.Duration
	// flags declares the command's own flags; run runs it with the
	// positional arguments.
	flags func(fs *flag.FlagSet) func(ctx context.Context, t *Tool, args []string) (any, int, error)
}

func commands() []command {
	return []command{explainCommand(), inspectCommand(), lagCommand(), offsetsResetCommand(), ledgerStatsCommand(), ledgerPurgeCommand(), dlqReplayCommand()}
}

// Main runs an ops command line (args[0] is the command) and returns the
// exit code. Output goes to stdout; logs and errors to stderr.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return run(ctx, args, stdout, stderr, nil)
}

// run is Main with an optional set-up of the tool (tests inject a logger).
func run(ctx context.Context, args []string, stdout, stderr io.Writer, setup func(*Tool)) int {
	name, rest := commandName(args)
	var cmd *command
	for _, c := range commands() {
		if c.name == name {
			cmd = &c
			break
		}
	}
	if cmd == nil {
		_, _ = fmt.Fprintf(stderr, "dedup: unknown command %q; one of:\n", strings.Join(args[:min(len(args), 2)], " "))
		for _, c := range commands() {
			_, _ = fmt.Fprintf(stderr, "  %s\n", c.usage)
		}
		return ExitError
	}
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "dedup.yaml", "config file (YAML), as for dedup run")
	output := fs.String("output", "text", "text or json")
	timeout := fs.Duration("timeout", cmp.Or(cmd.timeout, 2*time.Minute), "give up after this long")
	runCmd := cmd.flags(fs)
	// The flag package prints a bad flag's error itself; the help goes to
	// stdout, and only when asked for.
	fs.Usage = func() {}
	if err := fs.Parse(interleave(fs, rest)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, _ = fmt.Fprintf(stdout, "usage: %s\n\n%s\n\nflags:\n", cmd.usage, strings.TrimSpace(cmd.help))
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return ExitFound
		}
		_, _ = fmt.Fprintf(stderr, "usage: %s (--help for more)\n", cmd.usage)
		return ExitError
	}
	if *output != "text" && *output != "json" {
		_, _ = fmt.Fprintf(stderr, "dedup %s: --output %q, want text or json\n", cmd.name, *output)
		return ExitError
	}
	cfg, err := app.LoadConfig(*path)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "dedup %s: %v\n", cmd.name, err)
		return ExitError
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	t := newTool(cfg, toolLogger(cfg.Log, stderr))
	if setup != nil {
		setup(t)
	}
	defer t.Close()
	res, code, err := runCmd(ctx, t, fs.Args())
	if res != nil {
		if *output == "json" {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(res); err != nil {
				_, _ = fmt.Fprintf(stderr, "dedup %s: writing the answer: %v\n", cmd.name, err)
				return ExitError
			}
		} else if r, ok := res.(interface{ text(w *strings.Builder) }); ok {
			var b strings.Builder
			r.text(&b)
			if _, err := io.WriteString(stdout, b.String()); err != nil {
				_, _ = fmt.Fprintf(stderr, "dedup %s: writing the answer: %v\n", cmd.name, err)
				return ExitError
			}
		}
	}
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "dedup %s: %v\n", cmd.name, err)
		if code == ExitFound {
			code = ExitError
		}
	}
	return code
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

// commandName splits "offsets reset ...", "ledger stats ..." and "dlq replay ..." into the
// two-word name and the rest.
func commandName(args []string) (string, []string) {
	if len(args) == 0 {
		return "", nil
	}
	if (args[0] == "offsets" || args[0] == "ledger" || args[0] == "dlq") && len(args) > 1 && !strings.HasPrefix(args[1], "-") {
		return args[0] + " " + args[1], args[2:]
	}
	return args[0], args[1:]
}

// interleave moves flags after a positional argument to the front, so
// that `dedup inspect WORKFLOW_ID --output json` parses as the help says.
func interleave(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		// A flag that is not boolean takes the next argument as its value.
		if f := fs.Lookup(name); f != nil && i+1 < len(args) {
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
				i++
				flags = append(flags, args[i])
			}
		}
	}
	return append(flags, pos...)
}

// toolLogger logs to stderr in the config's format, at info at least:
// what a command changes is always logged.
func toolLogger(c app.LogConfig, stderr io.Writer) *slog.Logger {
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
