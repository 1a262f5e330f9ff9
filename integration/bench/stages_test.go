package bench

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The rss stage waits for a `dedup run` process to consume its backlog.
// A process that exits first (a config it refuses, a binary of another
// version) ends the wait at once with its exit status, instead of the
// wait's 30 minutes with nothing consuming.
func TestAProcessThatExitsEndsTheWaitForIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := startProc(exec.Command("sh", "-c", "exit 3"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	began := time.Now()
	err = p.during(ctx, func(ctx context.Context) error {
		<-ctx.Done() // a wait that sees nothing consumed
		return ctx.Err()
	})
	if err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("during: %v, want the process's exit status 3", err)
	}
	if waited := time.Since(began); waited > 30*time.Second {
		t.Errorf("the wait ended %s after the process exited, want at once", waited)
	}

	// A process that runs on: the wait's own answer, and the process is
	// still there for what the stage reads from it afterwards.
	p2, err := startProc(exec.Command("sleep", "60"))
	if err != nil {
		t.Fatal(err)
	}
	defer p2.stop()
	if err := p2.during(ctx, func(context.Context) error { return nil }); err != nil {
		t.Errorf("during a process that runs on: %v, want the wait's nil", err)
	}
	select {
	case <-p2.exited:
		t.Error("the process exited after the wait, want it running until stop")
	default:
	}
}
