package integration

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	enums "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/dedupio/dedup/internal/app"
	"github.com/dedupio/dedup/internal/demo/workload"
	"github.com/dedupio/dedup/internal/testsupport/pgbouncer"
	"github.com/dedupio/dedup/sink/ledger/pooler"
)

// TestExactlyOnceThroughPgBouncer runs the event path and the worker
// through a real PgBouncer (Debian's), in transaction pooling (two server
// sessions shared by every client) and in session pooling, with
// postgres.pooler naming the mode: two routers (one in-process, one an OS
// process killed with SIGKILL mid-way), every event re-sent after the
// kill, and the worker running the workflows. One workflow per event, each
// run to its end by the worker, and the ledger holds one started row each.
func TestExactlyOnceThroughPgBouncer(t *testing.T) {
	for _, mode := range []pgbouncer.Mode{pgbouncer.Transaction, pgbouncer.Session} {
		t.Run(string(mode), func(t *testing.T) { exactlyOnceThroughPgBouncer(t, mode) })
	}
}

func exactlyOnceThroughPgBouncer(t *testing.T, mode pgbouncer.Mode) {
	e := newEnv(t, 4) // migrated directly, as `dedup migrate` must be under transaction pooling
	b := pgbouncer.Start(t, e.dbURL, pgbouncer.Options{Mode: mode})
	w := workload.Generate(workload.Spec{Topic: e.topic, Partitions: 4, Records: 600, DupRatio: 0.3, Seed: 38, IDPrefix: "bouncer-"})
	want := expectedWorkflows(w)
	e.produce(w)
	cfg := e.config()
	cfg.Postgres.URL, cfg.Postgres.Pooler = b.URL(e.dbURL), pooler.Mode(mode)
	cfg.Kafka.MaxPollRecords = 100
	cfg.Worker.TaskQueue = "e2e"

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	workerDone := make(chan error, 1)
	go func() {
		workerDone <- app.RunWorker(ctx, cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	}()
	killed := e.process(e.writeConfig(cfg))
	r1 := e.startRouter(cfg)
	// Kill the process router once the routers have claimed a part of the
	// events: its claims in flight stay pending, its offsets uncommitted.
	if !eventually(2*time.Minute, func() bool {
		c, err := e.led.Count(context.Background())
		return err == nil && c.Pending+c.Started >= int64(want/4)
	}) {
		t.Fatal("the routers claimed nothing through the pooler in 2 minutes")
	}
	if err := killed.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = killed.Wait()
	counts, _ := e.led.Count(context.Background())
	t.Logf("killed a router: ledger %+v of %d workflows", counts, want)
	// Every event again, as its producer re-sends it (new records: kgo
	// keeps the first send's context in each).
	resent := *w
	resent.Records = make([]*kgo.Record, len(w.Records))
	for i, r := range w.Records {
		resent.Records[i] = &kgo.Record{Key: r.Key, Value: r.Value, Headers: r.Headers, Partition: r.Partition}
	}
	e.produce(&resent)
	e.waitCommitted(4 * time.Minute)
	r1.stop(t)
	if errs := counter(r1.reg, "dedup_ledger_errors_total", "", ""); errs > 0 {
		t.Logf("ledger errors (retried): %v", errs)
	}
	e.checkExactlyOnce(w, want)

	// The worker ran every workflow to its end through the pooler. Bound:
	// 5 minutes for ~500 workflows; measured at about 5 a second on the
	// shared 2-core machine, in either mode (the worker's own pace, not the
	// pooler's: no PostgreSQL error in its log).
	var left map[string]string
	if !eventually(5*time.Minute, func() bool {
		open, err := e.runsNotCompleted()
		if err != nil {
			return false // Temporal's visibility busy: asked again
		}
		left = open
		return len(left) == 0
	}) {
		n := 0
		for id, st := range left {
			if n++; n <= 5 {
				t.Errorf("%s: %s, want completed", id, st)
			}
		}
		t.Fatalf("%d of %d workflows not completed by the worker through the pooler", len(left), want)
	}
	cancel()
	select {
	case err := <-workerDone:
		if err != nil && !strings.Contains(err.Error(), "context canceled") {
			t.Errorf("worker: %v", err)
		}
	case <-time.After(time.Minute):
		t.Error("worker did not stop in a minute")
	}
}

// runsNotCompleted lists the namespace's workflows that have not completed, with
// their status; an error of the list (a busy server) is returned, not
// fatal, for a caller that polls.
func (e *env) runsNotCompleted() (map[string]string, error) {
	open := map[string][2]string{} // run ID -> workflow ID, status
	var token []byte
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		resp, err := e.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{PageSize: listPageSize, NextPageToken: token})
		cancel()
		if err != nil {
			return nil, err
		}
		for _, ex := range resp.Executions {
			// A run that closes while the pages are read is listed again,
			// further down: its last listing is its newest status.
			run := ex.GetExecution()
			if st := ex.GetStatus(); st != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
				open[run.GetRunId()] = [2]string{run.GetWorkflowId(), st.String()}
			} else {
				delete(open, run.GetRunId())
			}
		}
		if token = resp.NextPageToken; len(token) == 0 {
			break
		}
	}
	out := map[string]string{}
	for _, r := range open {
		out[r[0]] = r[1]
	}
	return out, nil
}
