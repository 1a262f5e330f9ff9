package integration

import (
	"testing"
	"time"

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
