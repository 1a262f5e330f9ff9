package integration

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/api/serviceerror"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/schedule"
	"github.com/dedupio/dedup/sink/ledger"
	"github.com/dedupio/dedup/sink/starter"
)

// lockedBuffer is a log the test reads while the scheduler writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// observedScheduler is e.scheduler with its registry and log kept.
func (e *env) observedScheduler(cfg schedule.Config, clock schedule.Clock) (*schedule.Scheduler, *prometheus.Registry, *lockedBuffer) {
	e.t.Helper()
	lc := ledger.DefaultConfig()
	lc.URL = e.dbURL
	l, err := ledger.Open(context.Background(), lc)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(l.Close)
	reg, logs := prometheus.NewRegistry(), &lockedBuffer{}
	st := starter.New(e.tc, starter.Config{Namespace: e.namespace, StartTimeout: 10 * time.Second})
	s, err := schedule.New(cfg, schedule.Options{Store: l, Ledger: l, Starter: st, Clock: clock,
		Registerer: reg, Log: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		e.t.Fatal(err)
	}
	return s, reg, logs
}

// status is the workflow's state as Temporal has it (not visibility,
// which lags): running, terminated, ..., or "none" when it never started.
func (e *env) status(workflowID string) string {
	e.t.Helper()
	resp, err := e.tc.DescribeWorkflowExecution(context.Background(), workflowID, "")
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return "none"
	case err != nil:
		e.t.Fatal(err)
	}
	return strings.ToLower(strings.TrimPrefix(resp.GetWorkflowExecutionInfo().GetStatus().String(), "WORKFLOW_EXECUTION_STATUS_"))
}

// Two triggers on the real Temporal server with no worker on their task
// queue, so that their runs stay open: "report", misfire_policy skip with
// its default overlap (skip: Temporal's ScheduleOverlapPolicy.SKIP, the
// seed's skip), starts its 09:01 run and none of the slots that come due
// while it is open, each counted skipped_overlap and logged; once that run
// is closed (terminated here), its next slot runs. "report-all", the same
// with overlap allow_all, starts every slot (dedup's behaviour before
// overlap): four runs open at once.
func TestScheduleOverlapSkipHoldsOneRunOpen(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	clock := &fakeClock{}
	cfg := schedConfig(schedule.Skip)
	cfg.Triggers[0].TaskQueue = "sched-no-worker"
	all := cfg.Triggers[0]
	all.Name, all.ActivityID, all.Overlap = "report-all", "660e8400-e29b-41d4-a716-446655440000", schedule.OverlapAllowAll
	cfg.Triggers = append(cfg.Triggers, all)
	s, reg, logs := e.observedScheduler(cfg, clock)
	tick := func(at string) {
		clock.set(at)
		if err := s.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tick("2026-03-01T09:00:30Z")
	slots := []string{"09:01", "09:02", "09:03", "09:04"}
	for _, at := range slots {
		tick("2026-03-01T" + at + ":00.5Z")
	}
	id := func(activity, at string) string {
		return decide.WorkflowID(activity, "2026-03-01T"+at+":00+00:00")
	}
	for i, at := range slots {
		want := "none"
		if i == 0 {
			want = "running"
		}
		if got := e.status(id(schedActivity, at)); got != want {
			t.Errorf("skip: %s is %s, want %s", at, got, want)
		}
		if got := e.status(id(all.ActivityID, at)); got != "running" {
			t.Errorf("allow_all: %s is %s, want running", at, got)
		}
	}
	if n := skippedOverlap(reg, "report"); n != 3 {
		t.Errorf("report: skipped_overlap %v, want 3 (09:02 .. 09:04)", n)
	}
	if n := skippedOverlap(reg, "report-all"); n != 0 {
		t.Errorf("report-all: skipped_overlap %v, want 0", n)
	}
	if n := logs.count("previous run is still open"); n != 3 {
		t.Errorf("%d overlap log lines, want 3", n)
	}
	if err := e.tc.TerminateWorkflow(ctx, id(schedActivity, "09:01"), "", "test: the run is over"); err != nil {
		t.Fatal(err)
	}
	tick("2026-03-01T09:05:00.5Z")
	if got := e.status(id(schedActivity, "09:01")); got != "terminated" {
		t.Errorf("09:01 is %s", got)
	}
	if got := e.status(id(schedActivity, "09:05")); got != "running" {
		t.Errorf("09:05, after the open run closed: %s, want running", got)
	}
}

// skippedOverlap is dedup_schedule_fires_total{trigger, outcome="skipped_overlap"}.
func skippedOverlap(reg *prometheus.Registry, trigger string) float64 {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "dedup_schedule_fires_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelIs(m, "trigger", trigger) && labelIs(m, "outcome", "skipped_overlap") {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}
