package integration

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/dedupio/dedup/internal/app"

	"go.temporal.io/sdk/client"
)

// Temporal's retention shorter than the ledger's horizon: Temporal has
// forgotten every workflow (deleted, as its retention would), and the
// topic is replayed from its start. The ledger still remembers the IDs:
// nothing is started again, not one Temporal call is made.
func TestFaultTemporalForgotBeforeTheLedger(t *testing.T) {
	s, res := runScenario(t, scenario{spec: baseSpec(22), routers: 2})
	e := s.e
	// From dedup's side, a Temporal whose retention passed for every
	// workflow is a namespace that has none of them: point the routers at
	// an empty one. (Deleting the executions one by one is asynchronous in
	// the in-process server and not observable in bounded time.)
	nsMu.Lock()
	if nsCounter == len(namespaces) {
		nsMu.Unlock()
		t.Fatal("out of namespaces: add one to the list")
	}
	s.cfg.Temporal.Namespace = namespaces[nsCounter]
	nsCounter++
	nsMu.Unlock()
	forgetful, err := client.Dial(client.Options{HostPort: stack.Temporal.HostPort(), Namespace: s.cfg.Temporal.Namespace, Logger: quietTemporalLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer forgetful.Close()
	e.tc, e.namespace = forgetful, s.cfg.Temporal.Namespace
	e.resetToEarliest()
	a, b := s.spawn(), s.spawn()
	e.waitCommitted(3 * time.Minute)
	calls := 0.0
	for _, p := range []*proc{a, b} {
		calls += p.metric("dedup_workflow_starts_total", "", "") + p.metric("dedup_workflow_start_errors_total", "", "")
	}
	a.stop(t)
	b.stop(t)
	_, total := e.listExecutions()
	t.Logf("replay after Temporal forgot %d workflows: %v Temporal calls, %d executions", res.executions, calls, total)
	if calls != 0 || total != 0 {
		t.Errorf("replay made %v Temporal calls and %d executions, want none: the ledger is the guard", calls, total)
	}
}

// The replay horizon is checked at start: with postgres.retention shorter
// than both the topic's retention.ms and the namespace's retention, a
// replay from the log start could start workflows again; dedup refuses to
// start and names the settings, unless the operator accepts it.
func TestShortHorizonIsAStartupError(t *testing.T) {
	e := newEnv(t, 1)
	cfg := e.config()
	cfg.Postgres.Retention = time.Hour // the topic keeps records for 7 days (kfake's default), the namespace for a day
	err := app.Run(context.Background(), cfg, app.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), "postgres.retention") || !strings.Contains(err.Error(), e.topic) ||
		!strings.Contains(err.Error(), "accept_short_horizon") {
		t.Fatalf("start with a short horizon: %v, want an error naming postgres.retention, the topic and accept_short_horizon", err)
	}
	cfg.Postgres.AcceptShortHorizon = true
	r := e.startRouter(cfg)
	r.stop(t)
}
