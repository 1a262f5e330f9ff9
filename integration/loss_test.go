package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/internal/demo/workload"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
)

// TestPendingRowThenConflictOnOtherPartition: an event's claim is left
// pending by a crash between claim and start; when its record is
// redelivered, a conflicting copy (same event ID, other payload) read from
// another partition comes before it in the poll batch. The pending claim
// holds the original's payload, so the original must be re-driven (started
// once) and the copy dead-lettered as a conflict; the event must not be
// taken for done.
//
// Which partition a poll batch lists first is up to the client and broker,
// so the test uses two events laid out crosswise: X's original on
// partition 0 and its conflict on partition 1, Y's the other way round.
// Whichever partition comes first in the batch, one event's conflict comes
// before its original.
func TestPendingRowThenConflictOnOtherPartition(t *testing.T) {
	e := newEnv(t, 2)
	type event struct {
		id                     string
		orig, conflict         *kgo.Record
		origData, conflictData string
	}
	mk := func(id string, part int32, data string) *kgo.Record {
		return &kgo.Record{Topic: e.topic, Partition: part, Key: []byte(id),
			Value: []byte(fmt.Sprintf(`{"specversion":"1.0","id":%q,"type":%q,"source":"shop","data":%s}`, id, workload.TypeOrder, data))}
	}
	events := []*event{
		{id: "loss-x", origData: `{"amount":10,"copy":"original"}`, conflictData: `{"amount":11,"copy":"conflict"}`},
		{id: "loss-y", origData: `{"amount":20,"copy":"original"}`, conflictData: `{"amount":21,"copy":"conflict"}`},
	}
	for i, ev := range events {
		ev.orig = mk(ev.id, int32(i), ev.origData)
		ev.conflict = mk(ev.id, int32(1-i), ev.conflictData)
	}
	wid := func(ev *event) string { return decide.WorkflowID("order-confirmation", ev.id) }

	// 1. The originals, claimed by a router that dies before starting them.
	e.produce(&workload.Workload{Records: []*kgo.Record{events[0].orig, events[1].orig}})
	cfg := e.config()
	crashed := e.spawn("crash-after-claim", cfg, "DEDUP_FAILPOINT=after-claim:1")
	if code := crashed.wait(t, 2*time.Minute); code != 137 {
		t.Fatalf("failpoint router exited %d, want 137", code)
	}
	for _, ev := range events {
		if state := e.ledgerState(wid(ev)); state != "pending" {
			t.Fatalf("setup: after the crash the ledger row of %s is %q, want pending (both originals must be in the crashed router's first claim)", wid(ev), state)
		}
	}
	if _, n := e.listExecutions(); n != 0 {
		t.Fatalf("setup: %d executions after a crash before any start", n)
	}
	if ok, state := e.committedAtEnd(); ok {
		t.Fatalf("setup: offsets committed past unstarted claims: %s", state)
	}

	// 2. The conflicting copies, each on the other partition; a new router
	// reads all four records, most likely in one poll batch.
	e.produce(&workload.Workload{Records: []*kgo.Record{events[0].conflict, events[1].conflict}})
	r := e.startRouter(e.config())
	e.waitCommitted(2 * time.Minute)
	r.stop(t)
	t.Logf("restarted router: records=%v intents new=%v redrive=%v duplicate=%v conflict=%v; starts started=%v already_started=%v",
		counter(r.reg, "dedup_records_total", "", ""),
		counter(r.reg, "dedup_intents_total", "outcome", "new"), counter(r.reg, "dedup_intents_total", "outcome", "redrive"),
		counter(r.reg, "dedup_intents_total", "outcome", "duplicate"), counter(r.reg, "dedup_intents_total", "outcome", "conflict"),
		counter(r.reg, "dedup_workflow_starts_total", "result", "started"), counter(r.reg, "dedup_workflow_starts_total", "result", "already_started"))

	// 3. Each event: one execution, with the original's payload; its ledger
	// row started; its conflicting copy, and only that, dead-lettered.
	eventually(30*time.Second, func() bool { _, n := e.listExecutions(); return n >= len(events) })
	execs, total := e.listExecutions()
	for _, ev := range events {
		id := wid(ev)
		if execs[id] != 1 {
			t.Errorf("%s: %d executions, want 1 (the redelivered original was taken for done: event lost)", id, execs[id])
		} else if in := e.workflowInput(id); !sameJSON(in.Data, []byte(ev.origData)) {
			t.Errorf("%s started with data %s, want the original's %s", id, in.Data, ev.origData)
		}
		if state := e.ledgerState(id); state != "started" {
			t.Errorf("%s: ledger row %q, want started", id, state)
		}
	}
	if total != len(events) {
		t.Errorf("Temporal has %d executions (%v), want %d", total, execs, len(events))
	}
	var wantDLQ []string
	for _, ev := range events {
		wantDLQ = append(wantDLQ, fmt.Sprintf("conflict p%d %s", ev.conflict.Partition, ev.conflict.Value))
	}
	var gotDLQ []string
	for _, d := range e.deadLetters() {
		gotDLQ = append(gotDLQ, fmt.Sprintf("%s p%d %s", header(d, schemas.HeaderDLQReason), atoi(header(d, schemas.HeaderDLQPartition)), d.Value))
	}
	if !sameSet(gotDLQ, wantDLQ) {
		t.Errorf("dead letters:\n  %q\nwant exactly the conflicting copies:\n  %q", gotDLQ, wantDLQ)
	}
	counts, err := e.led.Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if counts.Started != 2 || counts.Pending != 0 || counts.Conflicts != 2 {
		t.Errorf("ledger %+v, want 2 started, 0 pending, 2 conflicts", counts)
	}
}

// ledgerState is the state of the workflow ID's ledger row ("" if none).
func (e *env) ledgerState(workflowID string) string {
	e.t.Helper()
	var state string
	err := e.led.Pool().QueryRow(context.Background(), `SELECT state FROM dedup_ledger WHERE workflow_id = $1`, workflowID).Scan(&state)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		e.t.Fatal(err)
	}
	return state
}

// workflowInput is the input the workflow ID's (only or latest) execution
// was started with.
func (e *env) workflowInput(workflowID string) schemas.WorkflowInput {
	e.t.Helper()
	it := e.tc.GetWorkflowHistory(context.Background(), workflowID, "", false, 0)
	var in schemas.WorkflowInput
	if !it.HasNext() {
		e.t.Fatalf("%s: empty history", workflowID)
	}
	ev, err := it.Next()
	if err != nil {
		e.t.Fatalf("%s: reading history: %v", workflowID, err)
	}
	attrs := ev.GetWorkflowExecutionStartedEventAttributes()
	if attrs == nil || len(attrs.GetInput().GetPayloads()) != 1 {
		e.t.Fatalf("%s: first history event %v has no single input", workflowID, ev.GetEventType())
	}
	if err := json.Unmarshal(attrs.GetInput().GetPayloads()[0].GetData(), &in); err != nil {
		e.t.Fatalf("%s: decoding input: %v", workflowID, err)
	}
	return in
}

// deadLetters reads every record of the dead-letter topic.
func (e *env) deadLetters() []*kgo.Record {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := e.adm.ListEndOffsets(ctx, e.topic+".dlq")
	if err != nil {
		e.t.Fatal(err)
	}
	total := int64(0)
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	var out []*kgo.Record
	if total == 0 {
		return out
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(stack.Brokers()...), kgo.ConsumeTopics(e.topic+".dlq"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	for int64(len(out)) < total {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			e.t.Fatalf("read %d of %d dead letters", len(out), total)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

// workflowsWithConflicts checks w's conflict sets the way a correct
// consumer guarantees them whatever the order it read the copies in: one
// execution per conflicted workflow ID, started with the payload of one of
// the ID's variants (the winner), and the ID's dead letters exactly the
// records of the other variants. It returns the conflicts to expect in
// total (dead letters and ledger conflict rows; the sets' IDs have one
// route each) and how many sets were won by another copy than the
// original.
func (e *env) workflowsWithConflicts(w *workload.Workload, dead []*kgo.Record) (conflicts, flipped int) {
	e.t.Helper()
	type pos struct {
		p int32
		o int64
	}
	dlq := map[pos]bool{}
	for _, d := range dead {
		if header(d, schemas.HeaderDLQReason) == "conflict" {
			dlq[pos{int32(atoi(header(d, schemas.HeaderDLQPartition))), int64(atoi(header(d, schemas.HeaderDLQOffset)))}] = true
		}
	}
	bad := 0
	for _, c := range w.ConflictSets {
		id := decide.WorkflowID("order-confirmation", c.Event.ID)
		in := e.workflowInput(id)
		winner := c.VariantOf(in.Data)
		if winner < 0 {
			e.t.Errorf("%s started with data %s, which is none of its %d payloads", id, in.Data, len(c.Variants))
			bad++
			continue
		}
		if c.Fixed && winner != 0 {
			e.t.Errorf("%s: variant %d won, but every conflict was after the original in its partition", id, winner)
		}
		if winner != 0 {
			flipped++
		}
		conflicts += c.DeadLetters(winner)
		for i, v := range c.Variants {
			for _, r := range v.Records {
				if got := dlq[pos{r.Partition, r.Offset}]; got != (i != winner) {
					e.t.Errorf("%s: record p%d@%d of variant %d (winner %d): dead-lettered as conflict=%v", id, r.Partition, r.Offset, i, winner, got)
					bad++
				}
			}
		}
		if bad > 10 {
			e.t.Fatal("too many conflict errors")
		}
	}
	return conflicts, flipped
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}

func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	n := map[string]int{}
	for _, s := range a {
		n[s]++
	}
	for _, s := range b {
		n[s]--
	}
	for _, v := range n {
		if v != 0 {
			return false
		}
	}
	return true
}
