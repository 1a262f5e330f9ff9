package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/client"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
)

// Guards against: Client.Result on a signal route's delivery key waits
// forever (Handle.Result likewise, for an event of one signal route).
//
// Send/Enqueue hand back the delivery key signal-orders:{event_id} as the
// event's "workflow" (Handle.Workflows, the ingress's status_url). Result
// reads the ledger (started: fine), then polls Temporal for a workflow of
// that ID, which never exists: the entity is order-42. It backs off and
// polls until ctx ends: a caller without a deadline (the doc only says
// "give ctx a deadline to bound it", for a run that is slow) hangs
// forever, with no error saying why. docs/signals.md says only the ledger
// half of Status/Result "means anything"; Result should fail at once for
// a delivery key (an ErrSignalDelivery, say), not wait. Status, beside it,
// answers WorkflowID signal-orders:e1 with the ledger's RunID, which is the
// run of another workflow (order-42) that Status never names.
func TestResultOfASignalDeliveryKeyAnswersAtOnce(t *testing.T) {
	rs := decide.Routes{{ID: "orders", Mode: decide.ModeSignal, Match: decide.Match{Type: "order.*"}, WorkflowType: "Order",
		TaskQueue: "q", WorkflowIDTemplate: "order-{data.order_id}"}}
	key := decide.DeliveryKey("orders", "e1")
	led := &memLedger{rows: map[string]client.LedgerEntry{key: {WorkflowID: key, EventID: "e1", State: decide.LedgerStarted,
		RunID: "run-order-42", Generation: 1}}}
	runs := &memRuns{runs: map[string]memRun{"order-42": {id: "run-order-42", result: json.RawMessage(`{"total":9}`)}}}
	c, err := client.New(client.Config{Topic: topic, EventID: eventid.DefaultConfig(), Routes: rs, Namespace: "default",
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, Ledger: led, Runs: runs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	t0 := time.Now()
	var out any
	err = c.Result(ctx, key, &out)
	if !errors.Is(err, client.ErrSignalDelivery) {
		t.Errorf("Client.Result(%s): %v, want ErrSignalDelivery at once", key, err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Client.Result(%s) (a delivered event of a signal route) waited %s until the caller's deadline: %v; "+
			"it polls Temporal for a workflow that cannot exist", key, time.Since(t0).Round(100*time.Millisecond), err)
	}
}
