package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"strings"
	"testing"
)

// Flags after a positional argument parse as the help says
// (`dedup inspect WORKFLOW_ID --output json`); a boolean flag takes no value.
func TestInterleaveMovesFlagsBeforePositionalArguments(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.String("output", "", "")
	fs.Bool("dry-run", false, "")
	if got := strings.Join(Interleave(fs, []string{"wid", "--output", "json", "--dry-run", "x"}), " "); got != "--output json --dry-run wid x" {
		t.Fatalf("interleave: %s", got)
	}
}

// Two-word commands are found before one-word ones, and an alias finds
// its command.
func TestFindPrefersTheTwoWordCommand(t *testing.T) {
	tab := Table{{Name: "ledger"}, {Name: "ledger stats"}, {Name: "version", Aliases: []string{"--version"}}}
	for _, c := range []struct {
		args []string
		want string
		rest int
	}{
		{[]string{"ledger", "stats", "--x"}, "ledger stats", 1},
		{[]string{"ledger", "purge"}, "ledger", 1},
		{[]string{"--version"}, "version", 0},
	} {
		got, rest := tab.Find(c.args)
		if got == nil || got.Name != c.want || len(rest) != c.rest {
			t.Errorf("Find(%v) = %v %v, want %s and %d arguments", c.args, got, rest, c.want, c.rest)
		}
	}
	if got, _ := tab.Find([]string{"nope"}); got != nil {
		t.Errorf("Find(nope) = %v", got)
	}
}

// An error with no code of its own exits 1; --help exits 0 on stdout.
func TestMainExitCodes(t *testing.T) {
	tab := Table{{Name: "fail", Summary: "fails", Example: "dedup fail", Flags: func(*flag.FlagSet) Run {
		return func(context.Context, Invocation) (any, int, error) { return nil, ExitOK, context.Canceled }
	}}}
	var out, errOut strings.Builder
	if code := tab.Main(context.Background(), []string{"fail"}, &out, &errOut); code != ExitFailed || !strings.Contains(errOut.String(), "dedup fail: context canceled") {
		t.Errorf("fail: %d %q", code, errOut.String())
	}
	out.Reset()
	if code := tab.Main(context.Background(), []string{"fail", "--help"}, &out, &errOut); code != ExitOK || !strings.Contains(out.String(), "Example:\n  dedup fail\n") {
		t.Errorf("--help: %d %q", code, out.String())
	}
}

// `--` ends the flags, as it does for package flag and every POSIX tool:
// what follows is positional even when it looks like a flag, so that a
// workflow ID or trigger name starting with "-" can be given, and
// `-- --execute` is an argument (refused by a command that takes none),
// never the flag that makes a command change something.
func TestDoubleDashEndsTheFlags(t *testing.T) {
	var gotArgs []string
	var executed bool
	tab := Table{{Name: "purge", Summary: "purges", Example: "dedup purge", Flags: func(fs *flag.FlagSet) Run {
		execute := fs.Bool("execute", false, "")
		fs.String("config", "", "")
		return func(_ context.Context, inv Invocation) (any, int, error) {
			gotArgs, executed = inv.Args, *execute
			return nil, ExitOK, nil
		}
	}}}
	var out, errOut strings.Builder
	code := tab.Main(context.Background(), []string{"purge", "--config", "c.yaml", "--", "--execute", "-weird-id"}, &out, &errOut)
	if code != ExitOK || executed || strings.Join(gotArgs, " ") != "--execute -weird-id" {
		t.Fatalf("dedup purge --config c.yaml -- --execute -weird-id: exit %d, execute %v, arguments %q (stderr %q); want 0, false and both as arguments",
			code, executed, gotArgs, errOut.String())
	}
	executed = false
	if code := tab.Main(context.Background(), []string{"purge", "--", "--execute"}, &out, &errOut); code != ExitOK || executed {
		t.Errorf("dedup purge -- --execute: exit %d, execute %v; want --execute as an argument, not the flag", code, executed)
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.String("output", "", "")
	if got := strings.Join(Interleave(fs, []string{"wid", "--output", "json", "--", "--output"}), " "); got != "--output json -- wid --output" {
		t.Errorf("interleave: %s", got)
	}
}

// With --output json, what a command prints on stdout is JSON also when
// it fails without an answer (a config that does not load, a refusal):
// one object naming the error and the exit code, so that a script reading
// stdout (`dedup validate --output json | jq .ok`) reads a failure, not
// an empty stream that jq takes for success. The text on stderr stays.
func TestOutputJSONIsJSONAlsoOnError(t *testing.T) {
	tab := Table{{Name: "check", Summary: "checks", Example: "dedup check", Output: true, Flags: func(*flag.FlagSet) Run {
		return func(context.Context, Invocation) (any, int, error) {
			return nil, ExitUsage, errors.New("kafka.brokers: empty")
		}
	}}}
	var out, errOut strings.Builder
	code := tab.Main(context.Background(), []string{"check", "--output", "json"}, &out, &errOut)
	var got struct {
		OK       *bool  `json:"ok"`
		Error    string `json:"error"`
		ExitCode int    `json:"exit_code"`
	}
	if err := json.Unmarshal([]byte(out.String()), &got); err != nil || got.OK == nil || *got.OK || got.Error != "kafka.brokers: empty" || got.ExitCode != ExitUsage {
		t.Errorf("dedup check --output json failing: stdout %q (%v), want {\"ok\": false, \"error\": \"kafka.brokers: empty\", \"exit_code\": 2}", out.String(), err)
	}
	if code != ExitUsage || !strings.Contains(errOut.String(), "dedup check: kafka.brokers: empty") {
		t.Errorf("exit code %d, stderr %q; want 2 and the error", code, errOut.String())
	}
	out.Reset()
	if tab.Main(context.Background(), []string{"check"}, &out, &errOut); out.String() != "" {
		t.Errorf("dedup check (text) failing printed %q on stdout, want nothing", out.String())
	}
}

// The first word of two-word commands ("schedule", "ledger") is not a
// command, but `dedup help` lists it: `dedup help schedule` and `dedup
// schedule --help` list its commands (exit code 0), and `dedup schedule`
// alone names them in a usage error (2), rather than calling a word the
// usage shows an unknown command.
func TestGroupWordListsItsCommands(t *testing.T) {
	tab := Table{{Name: "schedule pause", Summary: "pause a trigger"}, {Name: "schedule resume", Summary: "resume a trigger"}, {Name: "run", Summary: "run"}}
	for _, args := range [][]string{{"help", "schedule"}, {"schedule", "--help"}} {
		var out, errOut strings.Builder
		code := tab.Main(context.Background(), args, &out, &errOut)
		if code != ExitOK || !strings.Contains(out.String(), "schedule pause") || !strings.Contains(out.String(), "schedule resume") || strings.Contains(out.String(), "  run ") {
			t.Errorf("dedup %s: exit code %d, stdout %q, stderr %q; want 0 and the two schedule commands only", strings.Join(args, " "), code, out.String(), errOut.String())
		}
	}
	var out, errOut strings.Builder
	if code := tab.Main(context.Background(), []string{"schedule"}, &out, &errOut); code != ExitUsage || strings.Contains(errOut.String(), "unknown command") ||
		!strings.Contains(errOut.String(), "schedule pause") {
		t.Errorf("dedup schedule: exit code %d, stderr %q; want 2 naming the schedule commands", code, errOut.String())
	}
	if code := tab.Main(context.Background(), []string{"schedule", "frobnicate"}, &out, &errOut); code != ExitUsage {
		t.Errorf("dedup schedule frobnicate: exit code %d, want 2", code)
	}
}
