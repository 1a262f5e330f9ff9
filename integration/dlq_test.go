package integration

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/internal/demo/workload"
	"github.com/dedupio/dedup/processor/decide"
)

// Records dead-lettered for having no route are replayed with
// `dedup dlq replay --execute` once a route exists (without --execute it
// prints its plan and writes nothing): each starts once, duplicates stay
// skipped, and replaying again starts nothing.
func TestDLQReplayAfterRouteAdded(t *testing.T) {
	e := newEnv(t, 2)
	var recs []*kgo.Record
	for i := 0; i < 50; i++ {
		v := fmt.Sprintf(`{"id":"audit-%d","type":"audit.logged","who":"u%d"}`, i, i)
		recs = append(recs, &kgo.Record{Partition: int32(i % 2), Key: []byte("k"), Value: []byte(v)})
		if i%5 == 0 { // an identical re-send
			recs = append(recs, &kgo.Record{Partition: int32(i % 2), Key: []byte("k"), Value: []byte(v)})
		}
	}
	e.produce(&workload.Workload{Records: recs})
	cfg := e.config()
	cfg.Kafka.NoRoute = "dead_letter"
	r := e.startRouter(cfg)
	e.waitCommitted(time.Minute)
	r.stop(t)
	if got := e.dlqReasons(); got["no_route"] != 60 || len(got) != 1 {
		t.Fatalf("dead letters %v, want 60 no_route", got)
	}

	cfg.Routes = append(cfg.Routes, decide.Route{ID: "audit-archive", Match: decide.Match{Type: "audit.logged"}, WorkflowType: "RunActivityWorkflow", TaskQueue: "e2e"})
	path := e.writeConfig(cfg)
	replay := func(args ...string) string {
		out, err := exec.Command(dedupBin, append([]string{"dlq", "replay", "--config", path}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("dlq replay %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	endOf := func() int64 {
		ends, err := e.adm.ListEndOffsets(context.Background(), e.topic)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
		return n
	}
	before := endOf()
	// Without --execute: the plan, nothing written.
	out := replay("--reason", "no_route")
	if !strings.Contains(out, "would replay 60: no_route 60") || !strings.Contains(out, "--execute") || endOf() != before {
		t.Fatalf("plan: %s (topic grew by %d)", out, endOf()-before)
	}
	if out := replay("--reason", "conflict", "--execute"); !strings.Contains(out, "replayed 0: none") {
		t.Fatalf("filtered replay: %s", out)
	}
	out = replay("--reason", "no_route", "--execute")
	t.Log(strings.TrimSpace(out))
	if endOf() != before+60 {
		t.Fatalf("replay sent %d records, want 60", endOf()-before)
	}
	r = e.startRouter(cfg)
	e.waitCommitted(time.Minute)
	if n := counter(r.reg, "dedup_workflow_starts_total", "result", "started"); n != 50 {
		t.Errorf("replay started %v workflows, want 50", n)
	}
	replay("--reason", "no_route", "--execute") // again: everything is already started
	e.waitCommitted(time.Minute)
	r.stop(t)
	if n := counter(r.reg, "dedup_workflow_starts_total", "", ""); n != 50 {
		t.Errorf("%v successful starts after the second replay, want still 50", n)
	}
	execs := e.executions(50)
	for i := 0; i < 50; i++ {
		if id := fmt.Sprintf("activity-audit-archive:audit-%d", i); execs[id] != 1 {
			t.Fatalf("%s: %d executions", id, execs[id])
		}
	}
}

// Records that retention deletes before the group reads them are logged
// and counted, not silently skipped.
func TestRetentionLossIsCounted(t *testing.T) {
	e := newEnv(t, 1)
	mk := func(from, n int) *workload.Workload {
		w := &workload.Workload{}
		for i := from; i < from+n; i++ {
			w.Records = append(w.Records, &kgo.Record{Value: []byte(fmt.Sprintf(`{"id":"r%d","type":"order.created"}`, i))})
		}
		return w
	}
	e.produce(mk(0, 100))
	r := e.startRouter(e.config())
	e.waitCommitted(time.Minute)
	r.stop(t)
	e.produce(mk(100, 100))
	// Retention: the log now starts at 150; 100..149 were never read.
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: e.topic, Partition: 0, At: 150})
	if _, err := e.adm.DeleteRecords(context.Background(), os); err != nil {
		t.Fatal(err)
	}
	r = e.startRouter(e.config())
	e.waitCommitted(time.Minute)
	time.Sleep(500 * time.Millisecond) // the gap check runs beside the poll loop
	lost := counter(r.reg, "dedup_records_lost_total", "", "")
	started := counter(r.reg, "dedup_workflow_starts_total", "result", "started")
	r.stop(t)
	if lost != 50 || started != 50 {
		t.Fatalf("lost %v, started %v: want 50 lost (100..149) and 50 started (150..199)", lost, started)
	}
}
