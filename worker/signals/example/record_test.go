//go:build record

package example_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/dedupio/dedup/worker/signals"
	"github.com/dedupio/dedup/worker/signals/example"
)

// TestRecordHistories runs a chain of OrderTotalsWorkflow runs on a real
// Temporal server, as a signal route drives it (SignalWithStart, repeats,
// a burst at continue-as-new, a re-drive after it), checks that every
// event was applied once, and writes each run's history to
// testdata/order_totals_run<N>.json for TestReplayOrderTotals. Recording
// is not part of make test:
//
//	DEDUP_TEMPORAL_ADDRESS=127.0.0.1:7233 go test -tags record -run TestRecordHistories ./worker/signals/example/
//
// against any server with the default namespace (temporal server
// start-dev; the lab's devstack -infra-only).
func TestRecordHistories(t *testing.T) {
	addr := os.Getenv("DEDUP_TEMPORAL_ADDRESS")
	if addr == "" {
		t.Skip("DEDUP_TEMPORAL_ADDRESS not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.Dial(client.Options{HostPort: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	queue := fmt.Sprintf("signals-example-%d", time.Now().UnixNano())
	w := sdkworker.New(c, queue, sdkworker.Options{})
	example.Register(w)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	id := "entity-orders:o-1-" + queue
	var firstRun string
	send := func(evID string, cents int64) {
		t.Helper()
		run, err := c.SignalWithStartWorkflow(ctx, id, signals.DefaultSignal, order(evID, cents),
			client.StartWorkflowOptions{ID: id, TaskQueue: queue}, example.WorkflowName, example.Input{MaxSeen: 3})
		if err != nil {
			t.Fatal(err)
		}
		if firstRun == "" {
			firstRun = run.GetRunID()
		}
	}
	// Run 1: e1, its repeat and e2 fill MaxSeen; the burst e3, e4, e3
	// lands around the continue-as-new.
	send("e1", 100)
	send("e1", 100)
	send("e2", 200)
	send("e3", 300)
	send("e4", 400)
	send("e3", 300)
	time.Sleep(3 * time.Second)
	// A re-drive of e1 after the run that applied it continued as new, and
	// a new event.
	send("e1", 100)
	send("e5", 500)

	want := example.Totals{Events: 5, AmountCents: 1500}
	var got example.Totals
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		v, err := c.QueryWorkflow(ctx, id, "", example.QueryTotals)
		if err == nil {
			if err := v.Get(&got); err != nil {
				t.Fatal(err)
			}
			if got.Events >= want.Events && got.AmountCents >= want.AmountCents {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("totals %+v (query error %v), want %d events", got, err, want.Events)
		}
	}
	time.Sleep(example.FoldWindow + time.Second) // a late repeat would show now
	v, err := c.QueryWorkflow(ctx, id, "", example.QueryTotals)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Get(&got); err != nil {
		t.Fatal(err)
	}
	if got.Events != want.Events || got.AmountCents != want.AmountCents {
		t.Fatalf("totals %+v, want each of e1..e5 once: %d events, %d cents", got, want.Events, want.AmountCents)
	}
	if err := c.CancelWorkflow(ctx, id, ""); err != nil {
		t.Fatal(err)
	}
	if err := c.GetWorkflow(ctx, id, "").Get(ctx, nil); err == nil {
		t.Fatal("the chain's last run completed, want cancelled")
	}

	// Each run's history, following the chain from the first run.
	for n, runID := 1, firstRun; runID != ""; n++ {
		h := &historypb.History{}
		next := ""
		it := c.GetWorkflowHistory(ctx, id, runID, false, 0)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			h.Events = append(h.Events, ev)
			if a := ev.GetWorkflowExecutionContinuedAsNewEventAttributes(); a != nil {
				next = a.GetNewExecutionRunId()
			}
		}
		b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("testdata", fmt.Sprintf("order_totals_run%d.json", n))
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("run %d (%s): %d events to %s", n, runID, len(h.Events), path)
		runID = next
	}
}
