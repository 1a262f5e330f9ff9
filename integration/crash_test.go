package integration

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/dedupio/dedup/internal/demo/workload"
)

// TestCrashBetweenClaimAndStart runs the router as a real process that
// exits abruptly right after its third batch of claims is committed in the
// ledger and before any of that batch is started (DEDUP_FAILPOINT). The
// claims stay pending, the offsets uncommitted. A restarted router must
// start every workflow exactly once.
func TestCrashBetweenClaimAndStart(t *testing.T) {
	e := newEnv(t, 4)
	w := workload.Generate(workload.Spec{Topic: e.topic, Partitions: 4, Records: 3000, DupRatio: 0.3, Seed: 2, IDPrefix: "crash-"})
	want := expectedWorkflows(w)
	e.produce(w)
	cfg := e.config()
	cfg.Kafka.MaxPollRecords = 200
	cfg.Admin.Listen = "127.0.0.1:0"
	path := e.writeConfig(cfg)

	crashed := e.process(path, "DEDUP_FAILPOINT=after-claim:3")
	err := waitExit(crashed, 2*time.Minute)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 137 {
		t.Fatalf("router did not crash at the failpoint: %v", err)
	}
	counts, err := e.led.Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, before := e.listExecutions()
	t.Logf("after the crash: ledger %+v, %d executions in Temporal, want %d in the end", counts, before, want)
	if counts.Pending == 0 {
		t.Fatal("no pending claims after a crash between claim and start: the failpoint did not fire where it should")
	}
	if ok, state := e.committedAtEnd(); ok {
		t.Fatalf("offsets committed past unstarted claims: %s", state)
	}

	restarted := e.process(path)
	e.waitCommitted(3 * time.Minute)
	if err := restarted.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(restarted, time.Minute); err != nil {
		t.Fatalf("router did not stop cleanly on SIGTERM: %v", err)
	}
	var redriven int
	if err := e.led.Pool().QueryRow(context.Background(), `SELECT count(*) FROM dedup_ledger WHERE attempts > 1`).Scan(&redriven); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d pending claims were re-driven after the restart", redriven)
	if redriven < int(counts.Pending) {
		t.Errorf("%d rows re-driven, want at least the %d left pending", redriven, counts.Pending)
	}
	e.checkExactlyOnce(w, want)
}

func waitExit(cmd *exec.Cmd, timeout time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		werr := <-done
		return fmt.Errorf("timed out; killed (%v)", werr)
	}
}
