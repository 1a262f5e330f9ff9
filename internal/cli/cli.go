// Package cli runs dedup's command table: it finds the command a command
// line names (one word, or two: "schedule pause", "ledger stats"), parses
// that command's own flags, answers --help with the command's usage and
// example, writes what the command returns as text or, with --output json,
// as JSON (a failure without an answer as {"ok": false, "error": ...,
// "exit_code": ...}, the error on stderr too), and turns the outcome into
// an exit code. `--` ends the flags.
//
// The table itself is cmd/dedup's; every usage text dedup prints is
// generated here from it, so a command's help exists once.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Exit codes every command shares. A command may use others of its own
// (the operators' commands: 1 when nothing is known of what was asked),
// named in its Help.
const (
	ExitOK     = 0 // done
	ExitFailed = 1 // the command ran and failed
	ExitUsage  = 2 // bad usage, a bad flag or a config that does not load or validate
)

// Run runs a command with its positional arguments. It returns what the
// command prints (nil: nothing), the exit code and an error. An error with
// ExitOK is reported as ExitFailed.
type Run func(ctx context.Context, inv Invocation) (result any, code int, err error)

// Invocation is what a command is run with.
type Invocation struct {
	Args           []string // the positional arguments, flags removed
	Stdout, Stderr io.Writer
}

// Command is one row of the command table.
type Command struct {
	Name    string   // "run", "schedule pause", "ledger stats"
	Aliases []string // other spellings of a one-word command ("--version")
	Summary string   // one line, for `dedup help`
	// Usage is the synopsis after "dedup NAME": "--config FILE NAME".
	Usage string
	// Help says what the command does and its exit codes, if other than
	// the shared ones.
	Help string
	// Example is one or more command lines, shown by --help.
	Example string
	// Output says the command prints data: it takes --output text|json.
	Output bool
	// Flags declares the command's own flags on fs and returns its run.
	Flags func(fs *flag.FlagSet) Run
}

// Texter is a result that writes itself as text; a result that is not
// one is printed with fmt (a string: as it is).
type Texter interface {
	WriteText(w io.Writer) error
}

// Table is the command table.
type Table []Command

// Find returns the command args names and the arguments after its name.
func (t Table) Find(args []string) (*Command, []string) {
	if len(args) == 0 {
		return nil, nil
	}
	if len(args) > 1 {
		for i := range t {
			if t[i].Name == args[0]+" "+args[1] {
				return &t[i], args[2:]
			}
		}
	}
	for i := range t {
		if t[i].Name == args[0] || slices.Contains(t[i].Aliases, args[0]) {
			return &t[i], args[1:]
		}
	}
	return nil, nil
}

// Main runs the command line args (without the program's name) and
// returns the exit code. `help`, `-h` and `--help` alone list the
// commands; `help CMD` is CMD's --help.
func (t Table) Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		t.WriteUsage(stderr)
		return ExitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) == 1 {
			t.WriteUsage(stdout)
			return ExitOK
		}
		c, rest := t.Find(args[1:])
		if g := t.group(args[1]); c == nil && len(args) == 2 && len(g) > 0 {
			g.writeList(stdout, "commands of dedup "+args[1]+":")
			return ExitOK
		}
		if c == nil || len(rest) > 0 {
			fprintf(stderr, "dedup help: unknown command %q\n\n", strings.Join(args[1:], " "))
			t.WriteUsage(stderr)
			return ExitUsage
		}
		fs, _, _ := c.flagSet(io.Discard)
		c.writeHelp(stdout, fs)
		return ExitOK
	}
	c, rest := t.Find(args)
	if g := t.group(args[0]); c == nil && len(g) > 0 {
		// A group word: its --help lists its commands; alone, or with a
		// word none of them has, it is a usage error naming them.
		if len(args) == 2 && slices.Contains([]string{"-h", "-help", "--help"}, args[1]) {
			g.writeList(stdout, "commands of dedup "+args[0]+":")
			return ExitOK
		}
		if len(args) == 1 || strings.HasPrefix(args[1], "-") {
			fprintf(stderr, "dedup %s: a command is needed\n\n", args[0])
		} else {
			fprintf(stderr, "dedup %s: unknown command %q\n\n", args[0], args[1])
		}
		g.writeList(stderr, "usage: dedup "+args[0]+" COMMAND [flags] [arguments]\n\ncommands:")
		return ExitUsage
	}
	if c == nil {
		fprintf(stderr, "dedup: unknown command %q\n\n", strings.Join(args[:min(len(args), 2)], " "))
		t.WriteUsage(stderr)
		return ExitUsage
	}
	return c.main(ctx, rest, stdout, stderr)
}

// WriteUsage lists the commands: the usage of dedup.
func (t Table) WriteUsage(w io.Writer) {
	var b strings.Builder
	b.WriteString("usage: dedup COMMAND [flags] [arguments]\n\ncommands:\n")
	width := 0
	for _, c := range t {
		width = max(width, len(c.Name))
	}
	for _, c := range t {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, c.Name, c.Summary)
	}
	b.WriteString("\n'dedup COMMAND --help' (or 'dedup help COMMAND') shows a command's flags and an example.\n")
	b.WriteString(ExitCodes)
	_, _ = io.WriteString(w, b.String())
}

// group is the commands whose name is word and one more word ("schedule":
// "schedule pause", "schedule resume"); none for a word that is no
// group's.
func (t Table) group(word string) Table {
	var g Table
	for _, c := range t {
		if strings.HasPrefix(c.Name, word+" ") {
			g = append(g, c)
		}
	}
	return g
}

// writeList lists t's commands under title, with their summaries.
func (t Table) writeList(w io.Writer, title string) {
	var b strings.Builder
	b.WriteString(title + "\n")
	width := 0
	for _, c := range t {
		width = max(width, len(c.Name))
	}
	for _, c := range t {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, c.Name, c.Summary)
	}
	b.WriteString("\n'dedup COMMAND --help' shows a command's flags and an example.\n")
	_, _ = io.WriteString(w, b.String())
}

// ExitCodes is the exit codes' documentation, as `dedup help` prints it.
const ExitCodes = `
exit codes: 0 done; 1 failed (the operators' commands: nothing is known of what was asked);
2 bad usage, a bad flag, or a config that does not load or validate (the operators' commands:
any error).
`

func (c *Command) flagSet(out io.Writer) (*flag.FlagSet, Run, *string) {
	fs := flag.NewFlagSet("dedup "+c.Name, flag.ContinueOnError)
	fs.SetOutput(out)
	var output *string
	if c.Output {
		output = fs.String("output", "text", "text or json")
	}
	var run Run
	if c.Flags != nil {
		run = c.Flags(fs)
	}
	// The flag package prints a bad flag's error itself; the help goes to
	// stdout, and only when asked for.
	fs.Usage = func() {}
	return fs, run, output
}

func (c *Command) synopsis() string {
	return strings.TrimSpace("dedup " + c.Name + " " + c.Usage)
}

func (c *Command) writeHelp(w io.Writer, fs *flag.FlagSet) {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: %s\n\n%s\n", c.synopsis(), c.Summary)
	if h := strings.TrimSpace(c.Help); h != "" {
		fmt.Fprintf(&b, "\n%s\n", h)
	}
	if c.Example != "" {
		b.WriteString("\nExample:\n")
		for _, l := range strings.Split(strings.TrimSpace(c.Example), "\n") {
			fmt.Fprintf(&b, "  %s\n", strings.TrimSpace(l))
		}
	}
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		b.WriteString("\nflags:\n")
	}
	_, _ = io.WriteString(w, b.String())
	fs.SetOutput(w)
	fs.PrintDefaults()
}

func (c *Command) main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, run, output := c.flagSet(stderr)
	if err := fs.Parse(Interleave(fs, args)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.writeHelp(stdout, fs)
			return ExitOK
		}
		fprintf(stderr, "usage: %s (--help for more)\n", c.synopsis())
		return ExitUsage
	}
	if output != nil && *output != "text" && *output != "json" {
		fprintf(stderr, "dedup %s: --output %q, want text or json\n", c.Name, *output)
		return ExitUsage
	}
	res, code, err := run(ctx, Invocation{Args: fs.Args(), Stdout: stdout, Stderr: stderr})
	if err != nil && code == ExitOK {
		code = ExitFailed
	}
	asJSON := output != nil && *output == "json"
	if res == nil && err != nil && asJSON {
		// A script reading stdout reads the failure, not an empty stream.
		res = failure{OK: false, Error: err.Error(), ExitCode: code}
	}
	if res != nil {
		if werr := write(stdout, res, asJSON); werr != nil {
			fprintf(stderr, "dedup %s: writing the answer: %v\n", c.Name, werr)
			return max(code, ExitFailed)
		}
	}
	if err != nil {
		fprintf(stderr, "dedup %s: %v\n", c.Name, err)
	}
	return code
}

// failure is what a command that prints data writes with --output json
// when it fails without an answer: the error (also on stderr) and the
// exit code.
type failure struct {
	OK       bool   `json:"ok"`
	Error    string `json:"error"`
	ExitCode int    `json:"exit_code"`
}

func write(w io.Writer, res any, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	switch r := res.(type) {
	case Texter:
		return r.WriteText(w)
	case string:
		_, err := io.WriteString(w, r)
		return err
	default:
		_, err := fmt.Fprintln(w, r)
		return err
	}
}

// Interleave moves flags after a positional argument to the front, so
// that `dedup inspect WORKFLOW_ID --output json` parses as the help says.
// `--` ends the flags: it stays between them and the positional
// arguments, so that what follows it is never parsed as a flag.
func Interleave(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	end := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos, end = append(pos, args[i+1:]...), true
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
	if end {
		flags = append(flags, "--")
	}
	return append(flags, pos...)
}

func fprintf(w io.Writer, format string, a ...any) {
	_, _ = fmt.Fprintf(w, format, a...)
}
