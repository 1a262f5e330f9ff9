package example_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/dedupio/dedup/worker/signals/example"
)

// Recorded histories of a real chain of OrderTotalsWorkflow runs
// (TestRecordHistories, build tag record, on a real server) must replay
// against the current code: the Receiver's reads, its one timer per
// batch, the timer's cancel and the continue-as-new. A change to that
// sequence breaks running workflows and fails here first.
//
//   - run 1: e1, its repeat, e2 (MaxSeen 3), and the burst e3, e4, e3
//     buffered when the run continued as new: drained, carried pending;
//   - run 2: delivers e3, e4 first, drops the re-driven e1, and decides
//     to continue as new while e5 arrives: the server rejected that
//     completion (UnhandledCommand), the task ran again and drained e5;
//   - run 3: delivers e5, then is cancelled.
func TestReplayOrderTotals(t *testing.T) {
	var all []string
	for n := 1; n <= 3; n++ {
		file := fmt.Sprintf("testdata/order_totals_run%d.json", n)
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, string(b))
		h, err := client.HistoryFromJSON(bytes.NewReader(b), client.HistoryJSONOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r := sdkworker.NewWorkflowReplayer()
		example.Register(r)
		if err := r.ReplayWorkflowHistory(nil, h); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if n == 1 {
			// The file is the history it should be: the continue-as-new
			// carries drained events.
			var in example.Input
			for _, ev := range h.Events {
				if a := ev.GetWorkflowExecutionContinuedAsNewEventAttributes(); a != nil {
					if err := json.Unmarshal(a.GetInput().GetPayloads()[0].GetData(), &in); err != nil {
						t.Fatal(err)
					}
				}
			}
			if len(in.Signals.Pending) == 0 || len(in.Signals.Seen) == 0 {
				t.Fatalf("%s: continue-as-new input %+v, want carried IDs and pending events (re-record)", file, in.Signals)
			}
		}
	}
	if !strings.Contains(strings.Join(all, ""), "WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND") {
		t.Fatal("no recorded continue-as-new was rejected for a signal that arrived meanwhile (re-record)")
	}
}
