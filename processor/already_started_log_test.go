package processor

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A start that Temporal answers "already started" is success; the router
// logs it at debug with the workflow ID and the run that holds it, and
// moves on (the seed's "the router logs it and moves on"). Here the first
// start creates the run and its answer is lost; the retry is told the
// workflow is already started.
func TestAlreadyStartedLoggedAtDebug(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	cfg := e.config()
	e.starter.loseAnswer(wid("a"), 1)
	e.produce(0, "a", "1")
	var buf syncBuffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r, err := New(cfg, Options{Ledger: e.led, DeadLetterLog: e.dlq, Starter: e.starter.as("r"), Registerer: prometheus.NewRegistry(), Log: log, KafkaOpts: []kgo.Opt{
		kgo.HeartbeatInterval(100 * time.Millisecond), kgo.MetadataMinAge(50 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	e.waitCommittedToEnd(10 * time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	runs := e.starter.executionsOf(wid("a"))
	if len(runs) != 1 {
		t.Fatalf("%d executions, want 1", len(runs))
	}
	var found []map[string]any
	for _, l := range buf.lines(t) {
		if l["msg"] == "workflow already started" {
			found = append(found, l)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d \"workflow already started\" lines, want 1: %v", len(found), found)
	}
	if l := found[0]; l["level"] != "DEBUG" || l["workflow_id"] != wid("a") || l["run_id"] != runs[0].runID {
		t.Fatalf("line %v; want level DEBUG, workflow_id %s, run_id %s", l, wid("a"), runs[0].runID)
	}
}
