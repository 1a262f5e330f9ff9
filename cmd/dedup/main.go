// Command dedup turns an at-least-once Kafka stream into exactly-once
// Temporal workflow starts.
//
// Its subcommands (dedup run, worker, ingress, migrate, validate, version,
// schedule pause|resume and the operators' commands of internal/ops) are
// rows of one command table (commands.go); `dedup help` lists them and
// `dedup COMMAND --help` shows a command's flags and an example.
//
// Exit codes: 0 done; 1 failed (the operators' commands: nothing is known
// of what was asked); 2 bad usage, a bad flag, or a config that does not
// load or validate (the operators' commands: any error).
package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command line args and returns the exit code. SIGINT and
// SIGTERM cancel the command's context.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return commands().Main(ctx, args, stdout, stderr)
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
