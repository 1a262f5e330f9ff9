package peer_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/dedupio/dedup/integration/bench/peer"
	"github.com/dedupio/dedup/integration/devstack"
)

// TestWatermillStartsOncePerProcessAndAgainOnReplay runs Guarantees on a
// small backlog against the embedded stack (kfake, Temporal, PostgreSQL):
// the Watermill job starts one workflow per distinct workflow ID, and a
// replay after a restart calls Temporal for every one of them again, where
// dedup's ledger answers the replay without a call; and an outage of
// Temporal longer than a start's timeout loses events to the
// deduplicator (it recorded them before the handler failed), not to dedup.
func TestWatermillStartsOncePerProcessAndAgainOnReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Temporal, Kafka and PostgreSQL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	faults := &devstack.TemporalFaults{}
	stack, err := devstack.Start(ctx, devstack.Config{Namespace: "default", DatabaseURL: os.Getenv("DATABASE_URL"), TemporalFaults: faults})
	if err != nil {
		t.Fatal(err)
	}
	defer stack.Stop()
	quiet := slog.New(slog.DiscardHandler)
	tc, err := client.Dial(client.Options{HostPort: stack.Temporal.HostPort(), Namespace: "default", Logger: tlog.NewStructuredLogger(quiet)})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	res, err := peer.Guarantees(ctx, peer.GuaranteeParams{Stack: stack, Temporal: tc, Namespace: "default",
		Records: 120, Partitions: 4, DupRatio: 0.3, CrossPartition: 0.5, Window: time.Hour, Dedup: true,
		StartTimeout: 2 * time.Second, Faults: faults, Log: quiet})
	b, _ := json.MarshalIndent(res, "", "  ")
	t.Logf("%s", b)
	if err != nil {
		t.Fatal(err)
	}
	n := int64(res.Workflows)
	wm, dd := res.Watermill, res.Dedup
	// One process, one deduplicator: every duplicate, on any partition,
	// is dropped before Temporal.
	if wm.First.NewStarts != n || wm.First.TemporalCalls != n || wm.First.Errors != 0 {
		t.Errorf("watermill first pass: %+v, want %d calls, all new starts", wm.First, n)
	}
	// A new process remembers nothing: every workflow ID goes to Temporal
	// again, which rejects it.
	if wm.Restart.TemporalCalls != n || wm.Restart.AlreadyStarted != n || wm.Restart.NewStarts != 0 {
		t.Errorf("watermill replay after restart: %+v, want %d calls, all already started", wm.Restart, n)
	}
	// Once Temporal has forgotten the executions, the replay starts each
	// workflow a second time.
	if wm.AfterRetention.NewStarts != n || wm.ExecutionsPerWorkflow != 2 {
		t.Errorf("watermill replay after retention: %+v, %.2f executions per workflow ID, want %d new starts, 2",
			wm.AfterRetention, wm.ExecutionsPerWorkflow, n)
	}
	if dd == nil {
		t.Fatal("no dedup side")
	}
	if dd.First.NewStarts != n || dd.Restart.TemporalCalls != 0 || dd.AfterRetention.TemporalCalls != 0 || dd.ExecutionsPerWorkflow != 1 {
		t.Errorf("dedup: first %+v, replay %+v, after retention %+v (%.2f executions per workflow ID), want %d new starts, then no calls",
			dd.First, dd.Restart, dd.AfterRetention, dd.ExecutionsPerWorkflow, n)
	}
	// The outage: Watermill's redelivery of a failed message is dropped
	// as a duplicate, so its workflows never start; dedup retries.
	if wm.OutageMissing == 0 || wm.Outage.Lost == 0 || dd.OutageMissing != 0 {
		t.Errorf("outage: watermill %d of %d workflows missing (%+v), dedup %d missing; want some, then none",
			wm.OutageMissing, res.OutageWorkflows, wm.Outage, dd.OutageMissing)
	}
	// Two replicas: a running workflow's ID is rejected by Temporal, so
	// neither job starts one twice; how many extra calls Watermill makes
	// depends on which replica each partition lands on (not asserted).
	m := int64(res.TwoReplicaWorkflows)
	if wm.TwoReplicas.NewStarts != m || dd.TwoReplicas.NewStarts != m {
		t.Errorf("two replicas: watermill %+v, dedup %+v, want %d new starts each", wm.TwoReplicas, dd.TwoReplicas, m)
	}
}
