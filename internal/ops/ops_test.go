package ops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	namespacepb "go.temporal.io/api/namespace/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/sink/ledger"
)

// These tests run the commands against kfake and a real PostgreSQL, with
// the ledger's state made the way the router makes it (Claim, MarkStarted,
// Record) from the router's own decisions; Temporal is not in the root
// module's tests (the lab's TestOperatorTools runs them against all three,
// with a real router).

func TestMain(m *testing.M) { pgtest.Main(m) }

const topic = "events"

type fixture struct {
	t   *testing.T
	cl  *kgo.Client
	adm *kadm.Client
	cfg config.Config
	led *ledger.Postgres
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic, topic+".dlq"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	url := pgtest.NewDatabase(t)
	if err := ledger.Migrate(context.Background(), url); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Kafka.Brokers = c.ListenAddrs()
	cfg.Kafka.Group = "dedup-ops"
	cfg.Kafka.Topics = []string{topic}
	cfg.Kafka.ResetOffset = "earliest"
	cfg.Routes = decide.Routes{
		{ID: "confirm", Match: decide.Match{Type: "order.created"}, WorkflowType: "W", TaskQueue: "q"},
		{ID: "crm", Match: decide.Match{Type: "order.created"}, WorkflowType: "W", TaskQueue: "q", IDReusePolicy: decide.ReuseAllowDuplicate},
	}
	cfg.Postgres.URL = url
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	led, err := ledger.Open(context.Background(), cfg.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(led.Close)
	return &fixture{t: t, cl: cl, adm: kadm.NewClient(cl), cfg: cfg, led: led}
}

// tool is a Tool on the fixture, whose Temporal does not answer.
func (f *fixture) tool() *Tool {
	t := newTool(f.cfg, slog.New(slog.DiscardHandler))
	t.tcOnce.Do(func() { t.tcErr = errors.New("no Temporal in the root module's tests") })
	f.t.Cleanup(t.Close)
	return t
}

func (f *fixture) produce(p int32, value string) *kgo.Record {
	return f.produceValue(p, []byte(value))
}

// produceValue produces value as it is (nil: a tombstone).
func (f *fixture) produceValue(p int32, value []byte) *kgo.Record {
	f.t.Helper()
	r, err := f.cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Partition: p, Value: value}).First()
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

func order(id, v string) string {
	return fmt.Sprintf(`{"specversion":"1.0","id":%q,"type":"order.created","source":"shop","data":{"v":%q}}`, id, v)
}

// route does what the router does with kr, up to the ledger: claim its
// intents (and mark them started, as a start would), or log its dead
// letter after writing it to the dead-letter topic.
func (f *fixture) route(tl *Tool, kr *kgo.Record, start bool) {
	f.t.Helper()
	ctx := context.Background()
	d, err := tl.decide(ctx, kr)
	if err != nil {
		f.t.Fatal(err)
	}
	deadLetter := func(reason, wid, msg string) {
		dlq := &kgo.Record{Topic: topic + ".dlq", Partition: 1, Value: kr.Value, Headers: []kgo.RecordHeader{
			{Key: schemas.HeaderDLQReason, Value: []byte(reason)}, {Key: schemas.HeaderDLQTopic, Value: []byte(kr.Topic)},
			{Key: schemas.HeaderDLQPartition, Value: []byte(fmt.Sprint(kr.Partition))}, {Key: schemas.HeaderDLQOffset, Value: []byte(fmt.Sprint(kr.Offset))},
		}}
		if wid != "" {
			dlq.Headers = append(dlq.Headers, kgo.RecordHeader{Key: schemas.HeaderDLQWorkflow, Value: []byte(wid)})
		}
		if err := f.cl.ProduceSync(ctx, dlq).FirstErr(); err != nil {
			f.t.Fatal(err)
		}
		if err := f.led.Record(ctx, []processor.DeadLetter{{Topic: kr.Topic, Partition: kr.Partition, Offset: kr.Offset, WorkflowID: wid,
			Reason: reason, Error: msg, DLQTopic: topic + ".dlq"}}); err != nil {
			f.t.Fatal(err)
		}
	}
	if d.DeadLetter != "" {
		deadLetter(string(d.DeadLetter), "", d.Err.Error())
		return
	}
	if len(d.Intents) == 0 {
		return
	}
	verdicts, err := f.led.Claim(ctx, d.Intents)
	if err != nil {
		f.t.Fatal(err)
	}
	var started []processor.Started
	for i, v := range verdicts {
		switch v.Verdict {
		case decide.VerdictConflict:
			deadLetter("conflict", d.Intents[i].WorkflowID, "claimed with another payload")
		case decide.VerdictNew, decide.VerdictRedrive:
			started = append(started, processor.Started{WorkflowID: d.Intents[i].WorkflowID, RunID: "run-" + d.Intents[i].EventID, Generation: 1})
		}
	}
	if start {
		if err := f.led.MarkStarted(ctx, started); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *fixture) commit(p int32, at int64) {
	f.t.Helper()
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: topic, Partition: p, At: at, LeaderEpoch: -1})
	if err := f.adm.CommitAllOffsets(context.Background(), f.cfg.Kafka.Group, os); err != nil {
		f.t.Fatal(err)
	}
}

func TestExplainFromKafkaAndTheLedger(t *testing.T) {
	f := newFixture(t)
	tl := f.tool()
	rA := f.produce(0, order("a", "1"))                        // 0: claims a, started
	rDup := f.produce(0, order("a", "1"))                      // 1: duplicate
	rConf := f.produce(0, order("a", "other"))                 // 2: conflict
	rBad := f.produce(0, "not json")                           // 3: undecodable
	rAudit := f.produce(0, `{"id":"n","type":"audit.logged"}`) // 4: no route
	rPend := f.produce(0, order("p", "1"))                     // 5: claimed, not started
	rNew := f.produce(0, order("b", "1"))                      // 6: never read
	rTomb := f.produceValue(0, nil)                            // 7: a tombstone, never read
	for _, r := range []*kgo.Record{rA, rDup, rConf, rBad, rAudit} {
		f.route(tl, r, true)
	}
	f.route(tl, rPend, false)
	f.commit(0, rPend.Offset+1)
	ctx := context.Background()
	explain := func(q Query) *Explanation {
		t.Helper()
		ex, code, err := tl.Explain(ctx, q)
		// Temporal does not answer here: exit code 2 when it was asked
		// (there are workflows), with the rest of the answer.
		if ex == nil || (len(ex.Workflows) > 0) != (code == ExitError) || (code == ExitError) != (err != nil) {
			t.Fatalf("explain %+v: code %d, err %v", q, code, err)
		}
		for _, e := range ex.Errors {
			if !strings.HasPrefix(e, "temporal") {
				t.Fatalf("explain %+v: unexpected error %s", q, e)
			}
		}
		return ex
	}
	at := func(r *kgo.Record) Query { return Query{Topic: r.Topic, Partition: &r.Partition, Offset: &r.Offset} }
	verdicts := func(ex *Explanation) string {
		var v []string
		for _, w := range ex.Workflows {
			v = append(v, w.WorkflowID+"="+w.Verdict)
		}
		slices.Sort(v)
		return strings.Join(v, ",")
	}

	ex := explain(at(rA))
	if ex.Record.State != RecordRead || !ex.Group.Behind || ex.Decision.Envelope != "cloudevents-structured" || ex.Decision.Rule != "field" ||
		ex.Decision.IDFrom != "id" || ex.Decision.EventID != "a" || len(ex.Decision.Routes) != 2 {
		t.Fatalf("record a: %+v %+v %+v", ex.Record, ex.Group, ex.Decision)
	}
	if got := verdicts(ex); got != "activity-confirm:a=claimed,activity-crm:a=claimed" {
		t.Fatalf("record a: %s", got)
	}
	w := ex.Workflows[0]
	if w.Ledger == nil || w.Ledger.State != "started" || w.Ledger.RunID != "run-a" || w.SamePayload == nil || !*w.SamePayload ||
		len(w.Conflicts) != 1 || w.Conflicts[0].Record.Offset != rConf.Offset {
		t.Fatalf("record a, workflow: %+v", w)
	}
	if got := verdicts(explain(at(rDup))); got != "activity-confirm:a=duplicate,activity-crm:a=duplicate" {
		t.Fatalf("record 1: %s", got)
	}
	ex = explain(at(rConf))
	if got := verdicts(ex); got != "activity-confirm:a=conflict,activity-crm:a=conflict" {
		t.Fatalf("conflicting record: %s", got)
	}
	w = ex.Workflows[0]
	if *w.SamePayload || len(w.DeadLetters) != 1 || w.DeadLetters[0].Reason != "conflict" || w.DeadLetters[0].DLQ == nil ||
		w.DeadLetters[0].DLQ.Topic != topic+".dlq" || w.Conflicts[0].LedgerPayloadHash != w.Ledger.PayloadHash ||
		w.Conflicts[0].PayloadHash != ex.Decision.PayloadHash {
		t.Fatalf("conflicting record, workflow: %+v", w)
	}
	ex = explain(at(rBad))
	if ex.Decision.DeadLetter != "undecodable" || len(ex.DeadLetters) != 1 || ex.DeadLetters[0].DLQ == nil ||
		ex.DeadLetters[0].DLQ.Partition != 1 || len(ex.Workflows) != 0 {
		t.Fatalf("undecodable record: %+v %+v", ex.Decision, ex.DeadLetters)
	}
	ex = explain(at(rAudit))
	if !ex.Decision.NoRoute || ex.Decision.NoRoutePolicy != "skip" || len(ex.Workflows) != 0 || !ex.Found {
		t.Fatalf("no-route record: %+v", ex.Decision)
	}
	ex = explain(at(rPend))
	if got := verdicts(ex); got != "activity-confirm:p=claimed,activity-crm:p=claimed" || ex.Workflows[0].Ledger.State != "pending" {
		t.Fatalf("pending record: %s %+v", got, ex.Workflows[0].Ledger)
	}
	ex = explain(at(rNew))
	if got := verdicts(ex); got != "activity-confirm:b=not_read_yet,activity-crm:b=not_read_yet" || ex.Group.Behind {
		t.Fatalf("unread record: %s", got)
	}
	ex = explain(at(rTomb))
	if !ex.Decision.Tombstone || ex.Decision.DeadLetter != "" || ex.Decision.NoRoute || len(ex.Workflows) != 0 ||
		!strings.Contains(strings.Join(ex.Story, " "), "tombstone") {
		t.Fatalf("tombstone: %+v %q", ex.Decision, ex.Story)
	}
	// By workflow or event ID: the record that claimed it.
	for _, q := range []Query{{WorkflowID: "activity-crm:a"}, {EventID: "a"}, {EventID: "a", Scan: true}} {
		if ex := explain(q); ex.Record == nil || ex.Record.Offset != rA.Offset || verdicts(ex) != "activity-confirm:a=claimed,activity-crm:a=claimed" {
			t.Fatalf("%+v: %+v %s", q, ex.Record, verdicts(ex))
		}
	}
	// Past the log end: nothing is known (the workflows of an unknown
	// event cannot be named; Temporal would still be asked of named ones).
	off := int64(99)
	ex, code, _ := tl.Explain(ctx, Query{Topic: topic, Partition: &rA.Partition, Offset: &off})
	if code == ExitFound || ex.Found || ex.Record.State != RecordNotProduced {
		t.Fatalf("offset 99: code %d %+v", code, ex.Record)
	}
}

func TestLagAndOffsetsReset(t *testing.T) {
	f := newFixture(t)
	tl := f.tool()
	ctx := context.Background()
	if _, code, err := tl.Lag(ctx); code != ExitNotFound || err != nil {
		t.Fatalf("lag of a group that never ran: %d %v", code, err)
	}
	var recs []*kgo.Record
	for i := range 4 {
		recs = append(recs, f.produce(0, order(fmt.Sprint("e", i), "1")))
	}
	recs = append(recs, f.produce(0, "garbage"), f.produce(0, order("e0", "1")), f.produce(0, order("e3", "changed")))
	f.produce(1, order("x", "1"))
	for _, r := range recs[:5] {
		f.route(tl, r, true)
	}
	f.commit(0, 5)
	lag, code, err := tl.Lag(ctx)
	if err != nil || code != ExitFound || lag.Total != 3 || len(lag.Partitions) != 2 || *lag.Partitions[0].Committed != 5 ||
		lag.Partitions[0].Lag != 2 || lag.Partitions[1].Committed != nil || lag.Partitions[1].Lag != 1 {
		t.Fatalf("lag: %d %v %+v", code, err, lag)
	}

	// A live member: the reset is refused, and lag names the owner.
	member, err := kgo.NewClient(kgo.SeedBrokers(f.cfg.Kafka.Brokers...), kgo.ConsumerGroup(f.cfg.Kafka.Group), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.ClientID("replica-1"))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		member.PollFetches(pctx)
		cancel()
		lag, _, err = tl.Lag(ctx)
		if err == nil && lag.Members == 1 && strings.HasPrefix(lag.Partitions[0].Owner, "replica-1@") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the member never showed: %+v %v", lag, err)
		}
	}
	if _, code, err := tl.ResetOffsets(ctx, Target{Earliest: true}, []string{topic}, nil, true); code != ExitError || err == nil ||
		!strings.Contains(err.Error(), "live member") {
		t.Fatalf("reset with a live member: %d %v", code, err)
	}
	member.Close()
	eventually(t, func() bool { l, _, err := tl.Lag(ctx); return err == nil && l.Members == 0 })

	// Dry run back to 0 on partition 0: records 0..4 re-read. e0..e3 (2
	// routes each) are started: 8 duplicates, 4 of the allow_duplicate
	// route; the garbage is logged already.
	rep, code, err := tl.ResetOffsets(ctx, Target{Earliest: true}, []string{topic}, []int32{0}, true)
	if err != nil || code != ExitFound || len(rep.Partitions) != 1 || rep.Partitions[0].From != 5 || rep.Partitions[0].To != 0 ||
		rep.Partitions[0].Reread != 5 {
		t.Fatalf("dry run: %d %v %+v", code, err, rep)
	}
	if fc := *rep.Forecast; fc != (Forecast{Records: 5, Intents: 8, Duplicates: 8, MayRerun: 4, DeadLetters: 1, DeadLettersLogged: 1}) {
		t.Fatalf("forecast %+v", fc)
	}
	// Forget e1 (as a purge would): its two workflows are expected anew.
	if _, err := f.led.Pool().Exec(ctx, `DELETE FROM dedup_ledger WHERE event_id = 'e1'`); err != nil {
		t.Fatal(err)
	}
	rep, _, err = tl.ResetOffsets(ctx, Target{Earliest: true}, []string{topic}, []int32{0}, true)
	if err != nil || rep.Forecast.NewWorkflows != 2 || rep.Forecast.Duplicates != 6 {
		t.Fatalf("forecast after forgetting e1: %v %+v", err, rep.Forecast)
	}
	if c, _ := tl.committed(ctx); c[topic][0] != 5 {
		t.Fatalf("a dry run moved the offset: %v", c)
	}
	// Forward past the end of the log: clamped, and the skip is counted.
	rep, code, err = tl.ResetOffsets(ctx, Target{Offset: ptr(int64(100))}, []string{topic}, []int32{0}, true)
	if err != nil || code != ExitFound || rep.Partitions[0].To != 7 || rep.Partitions[0].Skipped != 2 || len(rep.Notes) != 2 {
		t.Fatalf("forward: %d %v %+v", code, err, rep)
	}
	// The real run to offset 2, and lag sees it.
	rep, code, err = tl.ResetOffsets(ctx, Target{Offset: ptr(int64(2))}, []string{topic}, []int32{0}, false)
	if err != nil || code != ExitFound || rep.Forecast != nil {
		t.Fatalf("reset: %d %v %+v", code, err, rep)
	}
	if c, _ := tl.committed(ctx); c[topic][0] != 2 {
		t.Fatalf("committed after the reset: %v", c)
	}
	// A time: the first record at or after it.
	rep, _, err = tl.ResetOffsets(ctx, Target{Time: &recs[3].Timestamp}, []string{topic}, []int32{0}, true)
	if err != nil || rep.Partitions[0].To > 3 {
		t.Fatalf("to a time: %v %+v", err, rep)
	}
	// A tombstone is named in the forecast, not counted as anything else.
	f.produceValue(1, nil)
	f.commit(1, 2)
	rep, _, err = tl.ResetOffsets(ctx, Target{Earliest: true}, []string{topic}, []int32{1}, true)
	if err != nil || rep.Forecast == nil || *rep.Forecast != (Forecast{Records: 2, Intents: 2, NewWorkflows: 2, Tombstones: 1}) {
		t.Fatalf("forecast with a tombstone: %v %+v", err, rep.Forecast)
	}
}

func TestLedgerStats(t *testing.T) {
	f := newFixture(t)
	tl := f.tool()
	f.route(tl, f.produce(0, order("a", "1")), true)
	f.route(tl, f.produce(0, order("b", "1")), false)
	f.route(tl, f.produce(0, "x"), false)
	st, code, err := tl.LedgerStats(context.Background())
	if err != nil || code != ExitFound || st.Total != 4 || st.ByState["started"] != 2 || st.ByState["pending"] != 2 ||
		st.OldestPending == nil || st.OldestPending.EventID != "b" || len(st.DeadLetters) != 1 || len(st.Tables) != 3 {
		t.Fatalf("stats: %d %v %+v", code, err, st)
	}
}

// TestCommandLine: flags after a positional argument, help on stdout with
// exit code 0, bad usage and a missing config with exit code 2.
func TestCommandLine(t *testing.T) {
	var out, errOut strings.Builder
	if code := run(context.Background(), []string{"inspect", "--help"}, &out, &errOut, nil); code != ExitFound ||
		!strings.Contains(out.String(), "Example:") || errOut.Len() != 0 {
		t.Fatalf("--help: %d %q %q", code, out.String(), errOut.String())
	}
	for _, args := range [][]string{{"explain", "--bogus"}, {"offsets"}, {"inspect", "x", "--config", "/nonexistent"}, {"lag", "--output", "yaml"}} {
		if code := run(context.Background(), args, io.Discard, io.Discard, nil); code != ExitError {
			t.Errorf("%v: exit code %d, want 2", args, code)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 20s")
		}
	}
}

// TestJudge: each disagreement between a ledger row and Temporal's latest
// run is named, and agreement names none.
func TestJudge(t *testing.T) {
	now := time.Now()
	row := func(state ledger.State, run string, gen int, age time.Duration) *ledger.Row {
		return &ledger.Row{State: state, RunID: run, Generation: gen, UpdatedAt: now.Add(-age)}
	}
	run := func(id string, gen int) *Execution {
		return &Execution{Found: true, RunID: id, Status: "Running", Generation: gen}
	}
	none := &Execution{}
	cases := []struct {
		name string
		row  *ledger.Row
		ex   *Execution
		want string
	}{
		{"started, same run", row("started", "r1", 1, 0), run("r1", 1), ""},
		{"started, run not recorded", row("started", "", 1, 0), run("r1", 1), ""},
		{"started, no execution", row("started", "r1", 1, 0), none, TemporalForgot},
		{"started, newer generation", row("started", "r1", 1, 0), run("r2", 2), RerunNotRecorded},
		{"started, another run", row("started", "r1", 1, 0), run("r9", 1), RunMismatch},
		{"pending, a run", row("pending", "", 1, 0), run("r1", 1), MarkNotLanded},
		{"pending, none", row("pending", "", 1, 0), none, ""},
		{"pending for long", row("pending", "", 1, time.Hour), none, PendingStale},
		{"dead_lettered, none", row("dead_lettered", "", 1, 0), none, ""},
		{"dead_lettered, a run", row("dead_lettered", "", 1, 0), run("r1", 1), DeadLetteredButStarted},
		{"no row, a run", nil, run("r1", 1), TemporalOnly},
		{"no row, none", nil, none, ""},
		{"Temporal not asked", row("started", "r1", 1, 0), nil, ""},
	}
	for _, c := range cases {
		var kinds []string
		for _, d := range judge(c.row, c.ex, now, 10*time.Minute) {
			kinds = append(kinds, d.Kind)
		}
		if got := strings.Join(kinds, ","); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// withRoute adds a route to the fixture's config (before f.tool()).
func (f *fixture) withRoute(rt decide.Route) {
	f.t.Helper()
	f.cfg.Routes = append(f.cfg.Routes, rt)
	if err := f.cfg.Validate(); err != nil {
		f.t.Fatal(err)
	}
}

// workflowVerdicts are an explanation's workflows as "id=verdict", sorted.
func workflowVerdicts(ex *Explanation) string {
	var v []string
	for _, w := range ex.Workflows {
		v = append(v, w.WorkflowID+"="+w.Verdict)
	}
	slices.Sort(v)
	return strings.Join(v, ",")
}

// TestExplainEventIDListsOnlyMatchedRoutes: --event-id looks up the
// workflow IDs of every route keyed by event ID, but a route the record
// does not match is not one of its workflows: it is not listed (least of
// all as forgotten), unless some source has a trace of it.
func TestExplainEventIDListsOnlyMatchedRoutes(t *testing.T) {
	f := newFixture(t)
	f.withRoute(decide.Route{ID: "welcome", Match: decide.Match{Type: "user.signed_up"}, WorkflowType: "W", TaskQueue: "q"})
	tl := f.tool()
	ctx := context.Background()
	rA := f.produce(0, order("a", "1"))
	f.route(tl, rA, true)
	f.commit(0, rA.Offset+1)
	for _, q := range []Query{{EventID: "a"}, {EventID: "a", Scan: true}, {WorkflowID: "activity-confirm:a"}, {Topic: topic, Partition: &rA.Partition, Offset: &rA.Offset}} {
		ex, _, _ := tl.Explain(ctx, q)
		if got := workflowVerdicts(ex); got != "activity-confirm:a=claimed,activity-crm:a=claimed" {
			t.Errorf("explain %+v: %s, want only the two routes order.created matches, claimed", q, got)
		}
	}
	// Another record, of another type, with the same event ID claims the
	// welcome route: explained from the order, that row is listed as
	// another record's, not as a conflict or a duplicate of this one.
	rU := f.produce(0, `{"specversion":"1.0","id":"a","type":"user.signed_up","source":"shop"}`)
	f.route(tl, rU, true)
	f.commit(0, rU.Offset+1)
	ex, _, _ := tl.Explain(ctx, Query{EventID: "a"})
	if got := workflowVerdicts(ex); ex.Record == nil || ex.Record.Offset != rA.Offset ||
		got != "activity-confirm:a=claimed,activity-crm:a=claimed,activity-welcome:a=not_matched" {
		t.Errorf("event a under two types: %+v %s", ex.Record, got)
	}
	for _, w := range ex.Workflows {
		if w.Verdict == "not_matched" && !strings.Contains(w.Why, fmt.Sprintf("claimed by %s/0/%d", topic, rU.Offset)) {
			t.Errorf("not_matched: %s", w.Why)
		}
	}
	ex, _, _ = tl.Explain(ctx, Query{Topic: topic, Partition: &rU.Partition, Offset: &rU.Offset})
	if got := workflowVerdicts(ex); got != "activity-welcome:a=claimed" {
		t.Errorf("the user record: %s", got)
	}
	// An event ID nothing knows: no record, no row, no workflow to name
	// (Temporal, not answering here, is the one source asked).
	ex, code, _ := tl.Explain(ctx, Query{EventID: "zzz"})
	if ex.Found || code == ExitFound || len(ex.Workflows) != 0 {
		t.Errorf("unknown event: code %d, found %v, workflows %s", code, ex.Found, workflowVerdicts(ex))
	}
}

// TestExplainForgotten: a workflow the record matches, behind the
// committed offset, whose ledger row is gone (purged) is forgotten: a
// replay starts it again. Its sibling route keeps its row.
func TestExplainForgotten(t *testing.T) {
	f := newFixture(t)
	f.withRoute(decide.Route{ID: "welcome", Match: decide.Match{Type: "user.signed_up"}, WorkflowType: "W", TaskQueue: "q"})
	tl := f.tool()
	ctx := context.Background()
	rA := f.produce(0, order("a", "1"))
	rB := f.produce(0, order("b", "1"))
	f.route(tl, rA, true)
	f.route(tl, rB, true)
	f.commit(0, rB.Offset+1)
	// As a purge would: a's crm row, and both of b's rows.
	if _, err := f.led.Pool().Exec(ctx, `DELETE FROM dedup_ledger WHERE workflow_id IN ('activity-crm:a', 'activity-confirm:b', 'activity-crm:b')`); err != nil {
		t.Fatal(err)
	}
	want := "activity-confirm:a=claimed,activity-crm:a=forgotten"
	for _, q := range []Query{{EventID: "a"}, {Topic: topic, Partition: &rA.Partition, Offset: &rA.Offset}} {
		ex, _, _ := tl.Explain(ctx, q)
		if got := workflowVerdicts(ex); got != want {
			t.Errorf("explain %+v: %s, want %s", q, got, want)
		}
		for _, w := range ex.Workflows {
			if w.Verdict == "forgotten" && (w.Ledger != nil || !strings.Contains(w.Why, "replay of this record starts the workflow again")) {
				t.Errorf("forgotten workflow: %+v", w)
			}
		}
	}
	// Every row of b is gone: the record, named by its coordinates, still
	// says which workflows it has, both forgotten.
	ex, _, _ := tl.Explain(ctx, Query{Topic: topic, Partition: &rB.Partition, Offset: &rB.Offset})
	if got := workflowVerdicts(ex); got != "activity-confirm:b=forgotten,activity-crm:b=forgotten" {
		t.Errorf("record b: %s", got)
	}
	// Not yet behind the committed offset: not forgotten, not read yet.
	f.commit(0, rB.Offset)
	ex, _, _ = tl.Explain(ctx, Query{Topic: topic, Partition: &rB.Partition, Offset: &rB.Offset})
	if got := workflowVerdicts(ex); got != "activity-confirm:b=not_read_yet,activity-crm:b=not_read_yet" {
		t.Errorf("record b before the committed offset: %s", got)
	}
}

// begin produces values to partition p of topic in a transaction of the
// transactional ID id, left open; the client is closed at the test's end.
func (f *fixture) begin(id string, p int32, values ...string) (*kgo.Client, []*kgo.Record) {
	f.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.cfg.Kafka.Brokers...), kgo.TransactionalID(id),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(5*time.Minute))
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(cl.Close)
	if err := cl.BeginTransaction(); err != nil {
		f.t.Fatal(err)
	}
	var out []*kgo.Record
	for _, v := range values {
		r, err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Partition: p, Value: []byte(v)}).First()
		if err != nil {
			f.t.Fatal(err)
		}
		out = append(out, r)
	}
	return cl, out
}

// txn produces values to partition p of topic in one transaction of the
// transactional ID id, committed or aborted (end nil: left open until the
// test's end).
func (f *fixture) txn(id string, p int32, end *kgo.TransactionEndTry, values ...string) []*kgo.Record {
	f.t.Helper()
	cl, out := f.begin(id, p, values...)
	if end != nil {
		if err := cl.EndTransaction(context.Background(), *end); err != nil {
			f.t.Fatal(err)
		}
	}
	return out
}

var (
	commit = ptr(kgo.TryCommit)
	abort  = ptr(kgo.TryAbort)
)

// TestReadCommittedOnly: under kafka.isolation_level read_committed (the
// default) the forecast of offsets reset and explain read what the router
// reads: committed records, never an aborted one, and they stop at the last
// stable offset rather than wait for a transaction still open to end.
// Partition 0 holds: a committed transaction (0, 1; marker 2), an aborted
// one (3, 4; marker 5), a committed one (6; marker 7), and one still open
// (8): the log ends at 9, the last stable offset is 8.
func TestReadCommittedOnly(t *testing.T) {
	f := newFixture(t)
	c := f.txn("t1", 0, commit, order("c1", "1"), order("c2", "1"))
	x := f.txn("t1", 0, abort, order("x1", "1"), order("x2", "1"))
	c = append(c, f.txn("t1", 0, commit, order("c3", "1"))...)
	o := f.txn("t2", 0, nil, order("o1", "1"))
	if c[2].Offset != 6 || x[0].Offset != 3 || o[0].Offset != 8 {
		t.Fatalf("offsets: %d %d %d", c[2].Offset, x[0].Offset, o[0].Offset)
	}
	tl := f.tool()
	// Each step has 15 s: a read that waits for the open transaction
	// never ends.
	step := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	// The group read every committed record and committed the log end as
	// it stands (as kafka-consumer-groups --to-latest does).
	f.commit(0, 9)
	start := time.Now()
	rep, code, err := tl.ResetOffsets(step(), Target{Earliest: true}, []string{topic}, []int32{0}, true)
	if err != nil || code != ExitFound || rep.Forecast == nil || *rep.Forecast != (Forecast{Records: 3, Intents: 6, NewWorkflows: 6}) {
		t.Errorf("dry run from the log end, after %s: %d %v %+v, want a forecast of the 3 committed records only",
			time.Since(start).Round(time.Millisecond), code, err, rep)
	}
	// Committed at the last stable offset, past the last commit marker.
	f.commit(0, 8)
	rep, code, err = tl.ResetOffsets(step(), Target{Earliest: true}, []string{topic}, []int32{0}, true)
	if err != nil || code != ExitFound || rep.Forecast == nil || *rep.Forecast != (Forecast{Records: 3, Intents: 6, NewWorkflows: 6}) {
		t.Errorf("dry run from the last stable offset: %d %v %+v", code, err, rep)
	}
	// latest is where a read_committed consumer ends: the last stable
	// offset, not past the open transaction (which would skip it).
	rep, _, err = tl.ResetOffsets(step(), Target{Latest: true}, []string{topic}, []int32{0}, true)
	if err != nil || rep.Partitions[0].To != 8 {
		t.Errorf("to latest with a transaction open: %v %+v, want 8", err, rep.Partitions)
	}
	// lag says why the group does not get past offset 8.
	if lag, _, err := tl.Lag(step()); err != nil || len(lag.Partitions) != 2 || !strings.Contains(lag.Partitions[0].Note, "a transaction is open from offset 8") {
		t.Errorf("lag with a transaction open: %v %+v", err, lag)
	}
	// explain: the aborted record is not there for the router; the open
	// one is not yet.
	at := func(off int64) Query { p := int32(0); return Query{Topic: topic, Partition: &p, Offset: &off} }
	ex, _, err := tl.Explain(step(), at(3))
	if ex == nil || ex.Record.State != RecordAbsent || ex.Decision != nil {
		t.Errorf("explain the aborted record: %v %+v", err, ex)
	}
	start = time.Now()
	ex, _, err = tl.Explain(step(), at(8))
	if ex == nil || ex.Record.State != RecordUncommitted || ex.Decision != nil || time.Since(start) > 10*time.Second {
		t.Errorf("explain the open transaction's record, after %s: %v %+v", time.Since(start).Round(time.Millisecond), err, ex)
	}
	if ex, _, err := tl.Explain(step(), at(6)); ex == nil || ex.Record.State != RecordRead || ex.Decision.EventID != "c3" {
		t.Errorf("explain a committed record: %v %+v", err, ex)
	}

	// Partition 1: a transaction aborted (0; marker 2) after another one
	// opened (1): below the last stable offset (1) only an aborted record,
	// which a read_committed consumer never gets. The forecast ends the
	// partition once idle, and says so.
	tl.idle = time.Second
	a, _ := f.begin("t3", 1, order("y1", "1"))
	f.begin("t4", 1, order("o2", "1"))
	if err := a.EndTransaction(context.Background(), kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	f.commit(1, 1)
	start = time.Now()
	rep, code, err = tl.ResetOffsets(step(), Target{Earliest: true}, []string{topic}, []int32{1}, true)
	if err != nil || code != ExitFound || rep.Forecast == nil || *rep.Forecast != (Forecast{}) || time.Since(start) > 10*time.Second ||
		!strings.Contains(strings.Join(rep.Notes, " "), "events/1: offsets 0..0 gave no record to read") {
		t.Errorf("dry run over an aborted record below an open transaction, after %s: %d %v %+v", time.Since(start).Round(time.Millisecond), code, err, rep)
	}
	if ex, _, err := tl.Explain(step(), Query{Topic: topic, Partition: ptr(int32(1)), Offset: ptr(int64(0))}); ex == nil || ex.Record.State != RecordAbsent {
		t.Errorf("explain the aborted record below an open transaction: %v %+v", err, ex)
	}
}

// retainingTemporal is a Temporal client whose namespaces keep closed runs
// for retention (DescribeNamespace is all the purge's horizon asks).
type retainingTemporal struct {
	client.Client
	retention time.Duration
}

func (retainingTemporal) Close() {}

func (r retainingTemporal) WorkflowService() workflowservice.WorkflowServiceClient {
	return describeNamespace{retention: r.retention}
}

type describeNamespace struct {
	workflowservice.WorkflowServiceClient
	retention time.Duration
}

func (d describeNamespace) DescribeNamespace(context.Context, *workflowservice.DescribeNamespaceRequest, ...grpc.CallOption) (*workflowservice.DescribeNamespaceResponse, error) {
	return &workflowservice.DescribeNamespaceResponse{Config: &namespacepb.NamespaceConfig{WorkflowExecutionRetentionTtl: durationpb.New(d.retention)}}, nil
}

// TestPurgeHorizon: dedup ledger purge refuses to forget rows a replay
// from the log start may still meet. The topic keeps records 7 days
// (retention.ms) in segments of up to 7 days (segment.ms, kfake's
// defaults): a record may stay 14 days, so a purge of rows older than
// 200 h is refused, naming the settings, and one of 400 h is done.
func TestPurgeHorizon(t *testing.T) {
	f := newFixture(t)
	tl := f.tool()
	tl.tc = retainingTemporal{retention: 24 * time.Hour}
	tl.tcErr = nil
	ctx := context.Background()
	f.route(tl, f.produce(0, order("a", "1")), true)
	if _, err := f.led.Pool().Exec(ctx, `UPDATE dedup_ledger SET started_at = now() - interval '500 hours'`); err != nil {
		t.Fatal(err)
	}
	refused, code, err := tl.Purge(ctx, 200*time.Hour, true)
	if code != ExitError || err == nil || !strings.Contains(err.Error(), "refusing to purge") || !strings.Contains(err.Error(), "--older-than") ||
		!strings.Contains(err.Error(), topic+" (retention.ms 168h0m0s + segment.ms 168h0m0s") {
		t.Errorf("purge of rows older than 200h: %d %v, want a refusal naming --older-than, the topic, retention.ms and segment.ms", code, err)
	}
	// The refusal's report counts nothing: it does not say "would purge 0".
	var out strings.Builder
	refused.text(&out)
	if !refused.Refused || strings.Contains(out.String(), "would purge") || !strings.Contains(out.String(), "not purged") {
		t.Errorf("the refused purge's report: %+v %q", refused, out.String())
	}
	rep, code, err := tl.Purge(ctx, 400*time.Hour, true)
	if code != ExitFound || err != nil || rep.Rows != 2 {
		t.Errorf("purge of rows older than 400h: %d %v %+v", code, err, rep)
	}
}

// configFile writes the fixture's config as a file for the command line.
func (f *fixture) configFile() string {
	f.t.Helper()
	path := filepath.Join(f.t.TempDir(), "dedup.yaml")
	y := fmt.Sprintf(`kafka:
  brokers: [%s]
  group: %s
  topics: [%s]
  reset_offset: earliest
routes:
  - {id: confirm, match: {type: order.created}, workflow_type: W, task_queue: q}
  - {id: crm, match: {type: order.created}, workflow_type: W, task_queue: q, id_reuse_policy: allow_duplicate}
postgres:
  url: %q
log:
  format: text
`, strings.Join(f.cfg.Kafka.Brokers, ", "), f.cfg.Kafka.Group, topic, f.cfg.Postgres.URL)
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		f.t.Fatal(err)
	}
	return path
}

// TestChangesOnlyWithExecute: offsets reset and ledger purge print their
// plan and change nothing unless --execute, as kafka-consumer-groups
// --reset-offsets; --dry-run is the default's explicit spelling, and with
// --execute a usage error. The plan and the change's report use the same
// words and table ("would reset" / "reset").
func TestChangesOnlyWithExecute(t *testing.T) {
	f := newFixture(t)
	tl := f.tool()
	ctx := context.Background()
	for i := range 4 {
		f.route(tl, f.produce(0, order(fmt.Sprint("e", i), "1")), true)
	}
	f.commit(0, 4)
	cfg := f.configFile()
	committed := func() int64 {
		t.Helper()
		c, err := tl.committed(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return c[topic][0]
	}
	reset := []string{"offsets", "reset", "--config", cfg, "--to", "earliest", "--partition", "0"}
	for _, extra := range [][]string{nil, {"--dry-run"}} {
		var out, errOut strings.Builder
		code := run(ctx, append(slices.Clone(reset), extra...), &out, &errOut, nil)
		if code != ExitFound || !strings.Contains(out.String(), "would reset to earliest") ||
			!strings.Contains(out.String(), "--execute") || committed() != 4 {
			t.Fatalf("offsets reset %v: %d %q %q, committed %d: want the plan, naming --execute, and no change", extra, code, out.String(), errOut.String(), committed())
		}
	}
	var out, errOut strings.Builder
	if code := run(ctx, append(slices.Clone(reset), "--dry-run", "--execute"), &out, &errOut, nil); code != ExitError ||
		!strings.Contains(errOut.String(), "--execute") || committed() != 4 {
		t.Fatalf("--dry-run --execute: %d %q, want a usage error", code, errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if code := run(ctx, append(slices.Clone(reset), "--execute"), &out, &errOut, nil); code != ExitFound ||
		!strings.Contains(out.String(), "group dedup-ops: reset to earliest") || strings.Contains(out.String(), "would") ||
		!strings.Contains(errOut.String(), "offsets reset") || committed() != 0 {
		t.Fatalf("offsets reset --execute: %d %q %q, committed %d", code, out.String(), errOut.String(), committed())
	}

	// ledger purge: the same pair, before Temporal or the ledger is asked.
	if _, err := f.led.Pool().Exec(ctx, `UPDATE dedup_ledger SET started_at = now() - interval '500 hours'`); err != nil {
		t.Fatal(err)
	}
	temporal := func(tl *Tool) {
		tl.tcOnce.Do(func() {})
		tl.tc = retainingTemporal{retention: 24 * time.Hour}
	}
	rows := func() int {
		t.Helper()
		var n int
		if err := f.led.Pool().QueryRow(ctx, `SELECT count(*) FROM dedup_ledger`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	purge := []string{"ledger", "purge", "--config", cfg, "--older-than", "400h"}
	for _, extra := range [][]string{nil, {"--dry-run"}} {
		out.Reset()
		errOut.Reset()
		code := run(ctx, append(slices.Clone(purge), extra...), &out, &errOut, temporal)
		if code != ExitFound || !strings.Contains(out.String(), "would purge 8 ledger rows") ||
			!strings.Contains(out.String(), "--execute") || rows() != 8 {
			t.Fatalf("ledger purge %v: %d %q %q, %d rows: want the plan, naming --execute, and no change", extra, code, out.String(), errOut.String(), rows())
		}
	}
	out.Reset()
	errOut.Reset()
	if code := run(ctx, append(slices.Clone(purge), "--execute", "--dry-run"), &out, &errOut, temporal); code != ExitError ||
		!strings.Contains(errOut.String(), "--execute") || rows() != 8 {
		t.Fatalf("ledger purge --execute --dry-run: %d %q, want a usage error", code, errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if code := run(ctx, append(slices.Clone(purge), "--execute"), &out, &errOut, temporal); code != ExitFound ||
		!strings.Contains(out.String(), "purged 8 ledger rows") || strings.Contains(out.String(), "would") || rows() != 0 {
		t.Fatalf("ledger purge --execute: %d %q %q, %d rows", code, out.String(), errOut.String(), rows())
	}
}
