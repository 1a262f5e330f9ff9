package ops

import (
	"context"
	"io"

	"github.com/dedupio/dedup/internal/cli"
)

// run runs an ops command line (args[0] is the command) as dedup does,
// with an optional set-up of the tool, and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, setup func(*Tool)) int {
	return cli.Table(commandsWith(setup)).Main(ctx, args, stdout, stderr)
}
