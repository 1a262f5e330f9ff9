package ops

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dedupio/dedup/internal/cli"
)

// run runs an ops command line (args[0] is the command) as dedup does,
// with an optional set-up of the tool, and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, setup func(*Tool)) int {
	return cli.Table(commandsWith(setup)).Main(ctx, args, stdout, stderr)
}

// An operators' command's answer names what it could not read (inspect's
// and explain's errors, beside what the other sources said), and the
// answer is printed as well as the error: a value a ${VAR} gave (here
// postgres.url's database) must be out of the printed answer too, not
// only out of the error (config.Redact), in text and in JSON.
func TestInspectDoesNotPrintAValueFromAVariableInItsAnswer(t *testing.T) {
	t.Setenv("DEDUP_TEST_DB", "s3cretdb")
	file := "kafka: {brokers: [\"127.0.0.1:1\"], group: g, topics: [t], reset_offset: earliest}\n" +
		"routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]\n" +
		"postgres: {url: \"postgres://u@127.0.0.1:1/${DEDUP_TEST_DB}\"}\n" +
		"temporal: {host_port: \"127.0.0.1:1\", namespace: default}\n"
	p := filepath.Join(t.TempDir(), "dedup.yaml")
	if err := os.WriteFile(p, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, output := range []string{"text", "json"} {
		var out, errOut strings.Builder
		code := run(context.Background(), []string{"inspect", "--config", p, "--output", output, "--timeout", "20s", "a:x"}, &out, &errOut, nil)
		if code != ExitError || !strings.Contains(out.String()+errOut.String(), "postgres") {
			t.Fatalf("dedup inspect (%s) with PostgreSQL away: %d %q %q, want exit code 2 naming postgres", output, code, out.String(), errOut.String())
		}
		if strings.Contains(out.String(), "s3cretdb") || strings.Contains(errOut.String(), "s3cretdb") {
			t.Errorf("dedup inspect (%s) shows the value a ${VAR} gave postgres.url:\nstdout %q\nstderr %q", output, out.String(), errOut.String())
		}
	}
}
