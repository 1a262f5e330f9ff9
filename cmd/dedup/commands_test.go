package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// dedup runs the command line args as the binary does and returns the
// exit code, stdout and stderr.
func dedup(args ...string) (code int, stdout, stderr string) {
	var out, errOut strings.Builder
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// Every command of the table answers --help on stdout with exit code 0,
// its usage and its example; so does `dedup help COMMAND`.
func TestEveryCommandHelpShowsItsExample(t *testing.T) {
	for _, c := range commands() {
		if c.Example == "" {
			t.Errorf("dedup %s has no example", c.Name)
			continue
		}
		first := strings.TrimSpace(strings.Split(c.Example, "\n")[0])
		for _, args := range [][]string{append(strings.Fields(c.Name), "--help"), append([]string{"help"}, strings.Fields(c.Name)...)} {
			code, out, errOut := dedup(args...)
			if code != 0 || !strings.Contains(out, "usage: dedup "+c.Name) || !strings.Contains(out, "Example:\n  "+first) || errOut != "" {
				t.Errorf("dedup %s: exit code %d, stdout %q, stderr %q; want 0, the usage and the example", strings.Join(args, " "), code, out, errOut)
			}
		}
	}
}

// `dedup help` lists every command of the table with its summary, and
// the exit codes; no arguments is a usage error.
func TestHelpListsEveryCommand(t *testing.T) {
	code, out, _ := dedup("help")
	if code != 0 || !strings.Contains(out, "exit codes:") {
		t.Fatalf("dedup help: %d %q", code, out)
	}
	for _, c := range commands() {
		if !strings.Contains(out, c.Name) || !strings.Contains(out, c.Summary) {
			t.Errorf("dedup help does not list %q", c.Name)
		}
	}
	if code, _, errOut := dedup(); code != 2 || !strings.Contains(errOut, "usage: dedup COMMAND") {
		t.Errorf("dedup alone: %d %q, want 2 and the usage", code, errOut)
	}
	if code, _, errOut := dedup("frobnicate"); code != 2 || !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Errorf("dedup frobnicate: %d %q, want 2 naming it", code, errOut)
	}
}

// A flag a command does not have is a usage error (exit code 2) that
// names the flag, for every command.
func TestUnknownFlagExitsTwoNamingIt(t *testing.T) {
	for _, c := range commands() {
		args := append(strings.Fields(c.Name), "--no-such-flag")
		code, out, errOut := dedup(args...)
		if code != 2 || !strings.Contains(errOut, "-no-such-flag") || out != "" {
			t.Errorf("dedup %s: exit code %d, stderr %q; want 2 naming -no-such-flag", strings.Join(args, " "), code, errOut)
		}
	}
}

// `dedup version --output json` is one JSON object with the version and
// commit dedup_build_info reports.
func TestVersionOutputJSONParses(t *testing.T) {
	code, out, errOut := dedup("version", "--output", "json")
	if code != 0 {
		t.Fatalf("dedup version --output json: %d %s", code, errOut)
	}
	var v struct{ Version, Commit, Go, OS, Arch string }
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.Version == "" || v.Commit == "" || v.Go == "" {
		t.Fatalf("dedup version --output json printed %q: %v", out, err)
	}
	if code, _, errOut := dedup("version", "--output", "yaml"); code != 2 || !strings.Contains(errOut, `--output "yaml"`) {
		t.Errorf("--output yaml: %d %q, want 2 naming it", code, errOut)
	}
}

// `dedup version` takes no arguments: one it was given is a usage error
// naming it (exit code 2), as for every other command that takes none,
// rather than an answer that ignored part of the command line.
func TestVersionRefusesArguments(t *testing.T) {
	code, out, errOut := dedup("version", "extra")
	if code != 2 || out != "" || !strings.Contains(errOut, `"extra"`) {
		t.Errorf("dedup version extra: exit code %d, stdout %q, stderr %q; want 2 naming \"extra\"", code, out, errOut)
	}
}
