package ledger_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/dedupio/dedup/processor"
)

func TestDeadLetterLog(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	a := processor.DeadLetter{Topic: "events", Partition: 1, Offset: 10, Reason: "undecodable", Error: "x", DLQTopic: "events.dlq"}
	b := a
	b.WorkflowID, b.Reason = "activity-a:e1", "conflict" // same record, another workflow: another entry
	c := a
	c.Offset = 11
	got, err := l.Written(ctx, []processor.DeadLetter{a, b, c})
	if err != nil || fmt.Sprint(got) != "[false false false]" {
		t.Fatalf("before: %v %v", got, err)
	}
	if err := l.Record(ctx, []processor.DeadLetter{a, b}); err != nil {
		t.Fatal(err)
	}
	if err := l.Record(ctx, []processor.DeadLetter{a}); err != nil { // a redelivery records again: no-op
		t.Fatal(err)
	}
	got, err = l.Written(ctx, []processor.DeadLetter{c, b, a})
	if err != nil || fmt.Sprint(got) != "[false true true]" {
		t.Fatalf("after: %v %v", got, err)
	}
}
