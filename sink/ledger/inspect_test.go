package ledger_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
)

// TestInspectReads: the operators' reads find rows by workflow ID, event
// ID and claiming record, conflicts and dead letters by record and by
// workflow ID, and the stats and the purge's dry run count what is there.
func TestInspectReads(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	a, b := intent("e1", "p"), intent("e2", "p")
	b.Offset, b.ActivityID, b.WorkflowID = 8, "b", "activity-b:e2"
	claim(t, l, a, b)
	if err := l.MarkStarted(ctx, []processor.Started{{WorkflowID: a.WorkflowID, RunID: "run-1", Generation: 1}}); err != nil {
		t.Fatal(err)
	}
	other := intent("e1", "other payload")
	other.Offset = 9
	want(t, claim(t, l, other), decide.VerdictConflict)
	dl := processor.DeadLetter{Topic: "events", Partition: 1, Offset: 9, WorkflowID: a.WorkflowID, Reason: "conflict", Error: "x", DLQTopic: "events.dlq"}
	if err := l.Record(ctx, []processor.DeadLetter{dl}); err != nil {
		t.Fatal(err)
	}

	rows, err := l.Rows(ctx, []string{b.WorkflowID, a.WorkflowID, "activity-a:absent"})
	if err != nil || len(rows) != 2 || rows[0].WorkflowID != a.WorkflowID || rows[1].WorkflowID != b.WorkflowID {
		t.Fatalf("rows %+v, %v", rows, err)
	}
	r := rows[0]
	if r.State != "started" || r.RunID != "run-1" || r.Attempts != 1 || r.Generation != 1 || r.StartedAt == nil ||
		r.Topic != "events" || r.Partition != 1 || r.Offset != 7 || r.EventID != "e1" || r.IDRule != "field" ||
		!bytes.Equal(r.PayloadHash, a.PayloadHash[:]) {
		t.Fatalf("row %+v", r)
	}
	if rows[1].State != "pending" || rows[1].RunID != "" || rows[1].StartedAt != nil {
		t.Fatalf("pending row %+v", rows[1])
	}
	if rows, err := l.RowsOfEvent(ctx, "e1"); err != nil || len(rows) != 1 || rows[0].WorkflowID != a.WorkflowID {
		t.Fatalf("rows of e1 %+v, %v", rows, err)
	}
	if rows, err := l.RowsClaimedAt(ctx, "events", 1, 8); err != nil || len(rows) != 1 || rows[0].WorkflowID != b.WorkflowID {
		t.Fatalf("rows claimed at offset 8 %+v, %v", rows, err)
	}
	if rows, err := l.RowsClaimedAt(ctx, "events", 1, 9); err != nil || len(rows) != 0 {
		t.Fatalf("the conflicting copy claimed %+v, %v", rows, err)
	}

	for _, q := range []struct {
		name  string
		topic string
		wids  []string
	}{{"by record", "events", nil}, {"by workflow", "", []string{a.WorkflowID}}} {
		cs, err := l.Conflicts(ctx, q.topic, 1, 9, q.wids)
		if err != nil || len(cs) != 1 || !bytes.Equal(cs[0].PayloadHash, other.PayloadHash[:]) ||
			!bytes.Equal(cs[0].LedgerPayloadHash, a.PayloadHash[:]) || cs[0].Offset != 9 {
			t.Fatalf("conflicts %s: %+v, %v", q.name, cs, err)
		}
		ds, err := l.DeadLetters(ctx, q.topic, 1, 9, q.wids)
		if err != nil || len(ds) != 1 || ds[0].Reason != "conflict" || ds[0].DeadLetterTopic != "events.dlq" {
			t.Fatalf("dead letters %s: %+v, %v", q.name, ds, err)
		}
	}
	if cs, err := l.Conflicts(ctx, "events", 1, 7, []string{b.WorkflowID}); err != nil || len(cs) != 0 {
		t.Fatalf("conflicts of the original: %+v, %v", cs, err)
	}

	st, err := l.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Rows) != 2 || st.Rows[0].ActivityID != "a" || st.Rows[0].State != "started" || st.Rows[0].Rows != 1 ||
		st.Rows[1].ActivityID != "b" || st.Rows[1].State != "pending" {
		t.Fatalf("rows by activity and state %+v", st.Rows)
	}
	if st.OldestPending == nil || st.OldestPending.WorkflowID != b.WorkflowID || st.Conflicts != 1 ||
		len(st.DeadLetters) != 1 || st.DeadLetters[0].Rows != 1 || len(st.Tables) != 3 || st.Tables[0].TotalBytes <= 0 {
		t.Fatalf("stats %+v", st)
	}

	// The dry run counts what Purge deletes: the old started row, not the
	// pending one.
	if _, err := l.Pool().Exec(ctx, `UPDATE dedup_ledger SET started_at = now() - interval '48 hours', updated_at = now() - interval '48 hours'`); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Pool().Exec(ctx, `UPDATE dedup_dead_letters SET written_at = now() - interval '48 hours'`); err != nil {
		t.Fatal(err)
	}
	rowsN, dls, err := l.PurgeCount(ctx, 24*time.Hour)
	if err != nil || rowsN != 1 || dls != 1 {
		t.Fatalf("purge count %d rows %d dead letters (%v), want 1 and 1", rowsN, dls, err)
	}
	n, err := l.Purge(ctx, 24*time.Hour, 100)
	if err != nil || n != rowsN {
		t.Fatalf("purged %d (%v), the dry run said %d", n, err, rowsN)
	}
}
