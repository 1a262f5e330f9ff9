package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/sdk/client"

	"github.com/dedupio/dedup/internal/demo/workload"
	"github.com/dedupio/dedup/internal/ops"
)

// opsRun runs `dedup ARGS --config CONFIG --output json` and returns its
// exit code, stdout and stderr.
func (e *env) opsRun(config string, args ...string) (int, []byte, string) {
	e.t.Helper()
	cmd := exec.Command(dedupBin, append(args, "--config", config, "--output", "json")...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, out.Bytes(), errOut.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), out.Bytes(), errOut.String()
	}
	e.t.Fatalf("dedup %v: %v", args, err)
	return 0, nil, ""
}

// opsJSON is opsRun that wants exit code want and decodes stdout into v.
func (e *env) opsJSON(want int, v any, config string, args ...string) string {
	e.t.Helper()
	code, out, errOut := e.opsRun(config, args...)
	if code != want {
		e.t.Fatalf("dedup %v: exit code %d, want %d\nstdout: %s\nstderr: %s", args, code, want, out, errOut)
	}
	if v != nil {
		if err := json.Unmarshal(out, v); err != nil {
			e.t.Fatalf("dedup %v: %v\n%s", args, err, out)
		}
	}
	return errOut
}

func cloudEvent(id, typ, v string) []byte {
	return fmt.Appendf(nil, `{"specversion":"1.0","id":%q,"type":%q,"source":"shop","data":{"v":%q}}`, id, typ, v)
}

// TestOperatorTools runs the operators' commands, as the shipped binary,
// against a real router's work over kfake, PostgreSQL and Temporal: a
// record that started a workflow, its duplicate, a conflicting copy, an
// undecodable record (dead-lettered), one no route matches, one that
// triggers two workflows, and one never read; then inspect's
// disagreements, lag and its owner, an offsets reset (refused while a
// replica runs, planned and forecast without --execute, done with it), the
// ledger's stats and a purge refused across the horizon, planned within it
// (nothing deleted) and done with --execute; and a record gone from the log,
// explained from the ledger alone.
func TestOperatorTools(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	cfg := e.config()
	// crm-sync starts its workflows in a namespace of its own: the tools
	// look for each workflow in its route's namespace.
	nsMu.Lock()
	if nsCounter == len(namespaces) {
		nsMu.Unlock()
		t.Fatal("out of namespaces: add one to the list")
	}
	crmNamespace := namespaces[nsCounter]
	nsCounter++
	nsMu.Unlock()
	cfg.Routes[2].Namespace = crmNamespace
	config := e.writeConfig(cfg)
	records := []*kgo.Record{
		{Value: cloudEvent("ord-a", workload.TypeOrder, "1")},        // 0: new
		{Value: cloudEvent("ord-a", workload.TypeOrder, "1")},        // 1: duplicate
		{Value: cloudEvent("ord-a", workload.TypeOrder, "changed")},  // 2: conflict
		{Value: []byte("not json")},                                  // 3: dead-lettered, undecodable
		{Value: cloudEvent("aud-1", workload.TypeUnrouted, "1")},     // 4: no route: skipped
		{Value: cloudEvent("usr-u", workload.TypeSignup, "1")},       // 5: two workflows
		{Value: cloudEvent("ord-b", workload.TypeOrder, "not read")}, // 6: produced after the router stopped
	}
	for _, r := range records[:6] {
		r.Topic = e.topic
		if err := e.kcl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	r := e.startRouter(cfg)
	e.waitCommitted(time.Minute)
	r.stop(t)
	records[6].Topic = e.topic
	if err := e.kcl.ProduceSync(ctx, records[6]).FirstErr(); err != nil {
		t.Fatal(err)
	}

	explain := func(want int, offset int) ops.Explanation {
		t.Helper()
		var ex ops.Explanation
		e.opsJSON(want, &ex, config, "explain", "--topic", e.topic, "--partition", "0", "--offset", fmt.Sprint(offset))
		return ex
	}
	verdicts := func(ex ops.Explanation) map[string]string {
		out := map[string]string{}
		for _, w := range ex.Workflows {
			out[w.WorkflowID] = w.Verdict
		}
		return out
	}
	orderA, orderB := "activity-order-confirmation:ord-a", "activity-order-confirmation:ord-b"

	// 0: it claimed the workflow, which Temporal runs as the ledger says.
	ex := explain(0, 0)
	w := ex.Workflows[0]
	if ex.Record.State != ops.RecordRead || !ex.Group.Behind || *ex.Group.Committed != 6 || ex.Decision.Rule != "field" ||
		ex.Decision.Envelope != "cloudevents-structured" || ex.Decision.EventID != "ord-a" || len(ex.Workflows) != 1 ||
		w.WorkflowID != orderA || w.Verdict != "claimed" || w.Ledger.State != "started" || !*w.SamePayload ||
		!w.Temporal.Found || w.Temporal.RunID != w.Ledger.RunID || w.Temporal.Status != "Running" || w.Temporal.StartTime == nil ||
		len(w.Disagreements) != 0 || len(w.Conflicts) != 1 {
		t.Fatalf("record 0: %+v %+v %+v %+v", ex.Record, ex.Group, ex.Decision, ex.Workflows)
	}
	// 1: a duplicate of 0.
	if ex := explain(0, 1); verdicts(ex)[orderA] != "duplicate" || ex.Workflows[0].Ledger.ClaimedBy.Offset != 0 {
		t.Fatalf("record 1: %+v", ex.Workflows)
	}
	// 2: the conflicting copy: both hashes, and its dead letter in the DLQ.
	ex = explain(0, 2)
	w = ex.Workflows[0]
	if w.Verdict != "conflict" || *w.SamePayload || len(w.Conflicts) != 1 || w.Conflicts[0].PayloadHash != ex.Decision.PayloadHash ||
		w.Conflicts[0].LedgerPayloadHash != w.Ledger.PayloadHash || w.Conflicts[0].PayloadHash == w.Conflicts[0].LedgerPayloadHash ||
		len(w.DeadLetters) != 1 || w.DeadLetters[0].Reason != "conflict" || w.DeadLetters[0].DLQ == nil ||
		w.DeadLetters[0].DLQ.Topic != e.topic+".dlq" {
		t.Fatalf("record 2: %+v", w)
	}
	// 3: dead-lettered before any claim, with where the dead letter is.
	ex = explain(0, 3)
	if ex.Decision.DeadLetter != "undecodable" || len(ex.DeadLetters) != 1 || ex.DeadLetters[0].DLQ == nil || len(ex.Workflows) != 0 {
		t.Fatalf("record 3: %+v %+v", ex.Decision, ex.DeadLetters)
	}
	dlq := ex.DeadLetters[0].DLQ
	var found bool
	for _, d := range e.deadLetters() {
		if d.Partition == dlq.Partition && d.Offset == dlq.Offset && string(d.Value) == "not json" {
			found = true
		}
	}
	if !found {
		t.Fatalf("record 3's dead letter is not at %+v", dlq)
	}
	// 4: skipped, no route.
	if ex := explain(0, 4); !ex.Decision.NoRoute || ex.Decision.NoRoutePolicy != "skip" || len(ex.Workflows) != 0 || !ex.Found {
		t.Fatalf("record 4: %+v", ex.Decision)
	}
	// 5: two workflows, both claimed and running.
	ex = explain(0, 5)
	if v := verdicts(ex); len(v) != 2 || v["activity-welcome-email:usr-u"] != "claimed" || v["activity-crm-sync:usr-u"] != "claimed" {
		t.Fatalf("record 5: %v", v)
	}
	for _, w := range ex.Workflows {
		ns := e.namespace
		if w.Route.ID == "crm-sync" {
			ns = crmNamespace
		}
		if !w.Temporal.Found || w.Temporal.Namespace != ns || w.Temporal.RunID != w.Ledger.RunID || w.Temporal.Generation != 1 {
			t.Fatalf("record 5, %s: %+v %+v", w.WorkflowID, w.Ledger, w.Temporal)
		}
	}
	// 6: never read: ahead of the committed offset, no row, no execution.
	ex = explain(0, 6)
	if ex.Group.Behind || verdicts(ex)[orderB] != "not_read_yet" || ex.Workflows[0].Ledger != nil || ex.Workflows[0].Temporal.Found {
		t.Fatalf("record 6: %+v %+v", ex.Group, ex.Workflows)
	}
	// 7: not produced: nothing is known.
	if ex := explain(1, 7); ex.Found || ex.Record.State != ops.RecordNotProduced {
		t.Fatalf("record 7: %+v", ex.Record)
	}
	// By event ID and by workflow ID: the record that claimed it.
	for _, args := range [][]string{{"--event-id", "ord-a"}, {"--workflow-id", orderA}, {"--event-id", "usr-u", "--scan"}} {
		var ex ops.Explanation
		e.opsJSON(0, &ex, config, append([]string{"explain"}, args...)...)
		want := int64(0)
		if args[1] == "usr-u" {
			want = 5
		}
		if ex.Record == nil || ex.Record.Offset != want {
			t.Fatalf("explain %v: %+v", args, ex.Record)
		}
	}
	if code, _, _ := e.opsRun(config, "explain", "--event-id", "never-seen"); code != 1 {
		t.Fatalf("explain of an unknown event: exit code %d, want 1", code)
	}
	// The text form reads, too.
	cmd := exec.Command(dedupBin, "explain", "--config", config, "--topic", e.topic, "--partition", "0", "--offset", "2")
	if out, err := cmd.Output(); err != nil || !strings.Contains(string(out), "verdict  conflict") {
		t.Fatalf("text explain: %v\n%s", err, out)
	}

	// inspect: agreement, and each disagreement named.
	var in ops.Inspection
	e.opsJSON(0, &in, config, "inspect", orderA)
	if in.Ledger == nil || !in.Temporal.Found || len(in.Disagreements) != 0 || !strings.HasPrefix(in.Summary, "they agree") {
		t.Fatalf("inspect %s: %+v", orderA, in)
	}
	kind := func(in ops.Inspection) string {
		if len(in.Disagreements) == 0 {
			return ""
		}
		return in.Disagreements[0].Kind
	}
	manual := "activity-order-confirmation:manual"
	if _, err := e.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: manual, TaskQueue: "e2e"}, "RunActivityWorkflow"); err != nil {
		t.Fatal(err)
	}
	in = ops.Inspection{}
	e.opsJSON(0, &in, config, "inspect", manual)
	if in.Ledger != nil || kind(in) != ops.TemporalOnly {
		t.Fatalf("inspect a workflow started outside dedup: %+v", in)
	}
	pool := e.led.Pool()
	if _, err := pool.Exec(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset, state, run_id, started_at)
VALUES ('activity-order-confirmation:gone', 'order-confirmation', 'gone', 'field', '\x00', $1, 0, 0, 'started', 'run-gone', now())`, e.topic); err != nil {
		t.Fatal(err)
	}
	in = ops.Inspection{}
	e.opsJSON(0, &in, config, "inspect", "activity-order-confirmation:gone")
	if kind(in) != ops.TemporalForgot || in.Temporal.Found {
		t.Fatalf("inspect a workflow Temporal forgot: %+v", in)
	}
	if _, err := pool.Exec(ctx, `UPDATE dedup_ledger SET state = 'pending' WHERE workflow_id = $1`, orderA); err != nil {
		t.Fatal(err)
	}
	in = ops.Inspection{}
	e.opsJSON(0, &in, config, "inspect", orderA)
	if kind(in) != ops.MarkNotLanded {
		t.Fatalf("inspect a pending row with a run: %+v", in)
	}
	if _, err := pool.Exec(ctx, `UPDATE dedup_ledger SET state = 'started' WHERE workflow_id = $1`, orderA); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := e.opsRun(config, "inspect", "activity-order-confirmation:nobody"); code != 1 {
		t.Fatalf("inspect of an unknown workflow: exit code %d, want 1", code)
	}

	// lag: one record behind, no owner while no replica runs.
	var lag ops.LagReport
	e.opsJSON(0, &lag, config, "lag")
	if lag.Total != 1 || len(lag.Partitions) != 1 || *lag.Partitions[0].Committed != 6 || lag.Partitions[0].End != 7 || lag.Partitions[0].Owner != "" {
		t.Fatalf("lag: %+v", lag)
	}
	// A replica runs: lag names it, and a reset is refused.
	r = e.startRouter(cfg)
	deadline := time.Now().Add(time.Minute)
	for lag = (ops.LagReport{}); lag.Members == 0 || lag.Partitions[0].Owner == ""; {
		if time.Now().After(deadline) {
			t.Fatalf("the running router never showed as the owner: %+v", lag)
		}
		time.Sleep(200 * time.Millisecond)
		e.opsJSON(0, &lag, config, "lag")
	}
	if stderr := e.opsJSON(2, nil, config, "offsets", "reset", "--to", "earliest", "--execute"); !strings.Contains(stderr, "live member") {
		t.Fatalf("reset with a live replica: %s", stderr)
	}
	e.waitCommitted(time.Minute) // it reads record 6
	r.stop(t)
	eventuallyEmpty := time.Now().Add(time.Minute)
	for {
		lag = ops.LagReport{}
		e.opsJSON(0, &lag, config, "lag")
		if lag.Members == 0 {
			break
		}
		if time.Now().After(eventuallyEmpty) {
			t.Fatalf("the group still has members after the router stopped: %+v", lag)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// offsets reset without --execute: the plan, what a replay from the
	// start would do, and no change.
	var rep ops.ResetReport
	e.opsJSON(0, &rep, config, "offsets", "reset", "--to", "earliest")
	want := ops.Forecast{Records: 7, Intents: 6, Duplicates: 5, MayRerun: 1, Conflicts: 1, DeadLetters: 1, DeadLettersLogged: 1, NoRoute: 1}
	if !rep.DryRun || len(rep.Partitions) != 1 || rep.Partitions[0].From != 7 || rep.Partitions[0].Reread != 7 || rep.Forecast == nil || *rep.Forecast != want {
		t.Fatalf("the plan: %+v %+v, want %+v", rep.Partitions, rep.Forecast, want)
	}
	lag = ops.LagReport{}
	e.opsJSON(0, &lag, config, "lag")
	if *lag.Partitions[0].Committed != 7 {
		t.Fatalf("offsets reset without --execute moved the offset: %+v", lag)
	}
	// Forget ord-b, as a purge would: one new workflow expected.
	if _, err := pool.Exec(ctx, `DELETE FROM dedup_ledger WHERE workflow_id = $1`, orderB); err != nil {
		t.Fatal(err)
	}
	rep = ops.ResetReport{}
	e.opsJSON(0, &rep, config, "offsets", "reset", "--to", "earliest", "--dry-run") // the default, spelt out
	if rep.Forecast.NewWorkflows != 1 || rep.Forecast.Duplicates != 4 {
		t.Fatalf("dry run after forgetting ord-b: %+v", rep.Forecast)
	}
	// The real reset, logged.
	rep = ops.ResetReport{}
	stderr := e.opsJSON(0, &rep, config, "offsets", "reset", "--to", "5", "--execute")
	if rep.DryRun || rep.Partitions[0].To != 5 || !strings.Contains(stderr, `"msg":"offsets reset"`) || !strings.Contains(stderr, `"to":5`) {
		t.Fatalf("reset: %+v\n%s", rep, stderr)
	}
	lag = ops.LagReport{}
	e.opsJSON(0, &lag, config, "lag")
	if *lag.Partitions[0].Committed != 5 || lag.Total != 2 {
		t.Fatalf("lag after the reset: %+v", lag)
	}
	// ord-b (offset 6) is now behind nothing and has no row: not read yet.
	if ex := explain(0, 6); verdicts(ex)[orderB] != "not_read_yet" || ex.Workflows[0].Temporal == nil || !ex.Workflows[0].Temporal.Found {
		t.Fatalf("record 6 after the reset: %+v", ex.Workflows)
	}

	// ledger stats.
	var st ops.StatsReport
	e.opsJSON(0, &st, config, "ledger", "stats")
	if st.ByState["started"] != 4 || st.Conflicts != 1 || len(st.DeadLetters) != 2 || len(st.Tables) != 3 || st.Tables[0].TotalBytes == 0 {
		t.Fatalf("ledger stats: %+v", st)
	}
	// ledger purge: the topic keeps records 7 days (kfake), and crm-sync
	// is allow_duplicate_failed_only: only the ledger guards a replay, so
	// a purge of rows older than an hour is refused...
	if stderr := e.opsJSON(2, nil, config, "ledger", "purge", "--older-than", "1h", "--execute"); !strings.Contains(stderr, "refusing to purge") ||
		!strings.Contains(stderr, e.topic) {
		t.Fatalf("purge across the horizon: %s", stderr)
	}
	// ... and one of rows older than 400h (past retention.ms + segment.ms, 7 days each in kfake) is done: the old row goes.
	if _, err := pool.Exec(ctx, `UPDATE dedup_ledger SET started_at = now() - interval '500 hours' WHERE workflow_id = $1`, orderA); err != nil {
		t.Fatal(err)
	}
	rowsOfA := func() int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM dedup_ledger WHERE workflow_id = $1`, orderA).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Without --execute: the plan, and nothing deleted.
	var pr ops.PurgeReport
	e.opsJSON(0, &pr, config, "ledger", "purge", "--older-than", "400h")
	if !pr.DryRun || pr.Rows != 1 || rowsOfA() != 1 {
		t.Fatalf("the purge's plan: %+v (rows of %s left: %d)", pr, orderA, rowsOfA())
	}
	pr = ops.PurgeReport{}
	if stderr := e.opsJSON(0, &pr, config, "ledger", "purge", "--older-than", "400h", "--execute"); pr.DryRun || pr.Rows != 1 ||
		!strings.Contains(stderr, "ledger purged") || rowsOfA() != 0 {
		t.Fatalf("purge: %+v %s", pr, stderr)
	}

	// Records 0..5 leave the log: explained from the ledger alone.
	if _, err := e.adm.DeleteRecords(ctx, kadm.Offsets{e.topic: {0: {Topic: e.topic, Partition: 0, At: 6}}}); err != nil {
		t.Fatal(err)
	}
	ex = explain(0, 5) // it claimed two workflows, which the ledger still names
	if ex.Record.State != ops.RecordOutOfRetention || ex.Decision != nil || ex.Record.LogStart != 6 ||
		len(ex.Workflows) != 2 || ex.Workflows[0].Verdict != "claimed" || !ex.Workflows[0].Temporal.Found {
		t.Fatalf("record 5 out of retention: %+v %+v", ex.Record, ex.Workflows)
	}
	ex = explain(0, 2) // its conflict is recorded
	if ex.Record.State != ops.RecordOutOfRetention || verdicts(ex)[orderA] != "conflict" {
		t.Fatalf("record 2 out of retention: %+v", ex.Workflows)
	}
	ex = explain(0, 3) // its dead letter is logged
	if len(ex.DeadLetters) != 1 || ex.DeadLetters[0].Reason != "undecodable" {
		t.Fatalf("record 3 out of retention: %+v", ex.DeadLetters)
	}
	explain(1, 1) // a duplicate leaves no trace in the ledger: nothing is known
	// Record 0's row is purged: only Temporal remembers its workflow.
	in = ops.Inspection{}
	e.opsJSON(0, &in, config, "inspect", orderA)
	if in.Ledger != nil || kind(in) != ops.TemporalOnly {
		t.Fatalf("inspect after the purge: %+v", in)
	}
}
