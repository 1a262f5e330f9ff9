package ledger_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

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

// Two routers logging the same dead letters (a record redelivered to the
// partition's new owner while the old one still writes it: what the log
// is for), each batch in an order of its own (records of two partitions
// interleaved as each fetch returned them). Record's INSERT ... ON
// CONFLICT DO NOTHING inserts in the batch's order, and an insert waits
// for another transaction's uncommitted insert of the same key, so two
// batches in opposite orders can each hold a key the other waits for
// (40P01), unlike the ledger's and the conflicts' writes, which go in key
// order. X and Y are the two routers' shared dead letters; uncommitted
// inserts of M1 and M2 (a third writer) pace them: A logs X, M1, Y; B
// logs Y, M2, X.
func TestRoutersLoggingTheSameDeadLettersInOppositeOrdersDoNotDeadlock(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	dl := func(part int32, off int64) processor.DeadLetter {
		return processor.DeadLetter{Topic: "events", Partition: part, Offset: off, Reason: "undecodable", Error: "x", DLQTopic: "events.dlq"}
	}
	x, y, m1, m2 := dl(1, 10), dl(2, 20), dl(1, 11), dl(2, 21)
	side := sidePool(t, l.Pool().Config().ConnString())
	insert := func(d processor.DeadLetter) pgx.Tx {
		tx := held(t, side, pgx.TxOptions{})
		if _, err := tx.Exec(ctx, `INSERT INTO dedup_dead_letters (topic, kafka_partition, kafka_offset, workflow_id, reason, error, dead_letter_topic)
VALUES ($1, $2, $3, '', 'undecodable', 'x', 'events.dlq')`, d.Topic, d.Partition, d.Offset); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	t1, t2 := insert(m1), insert(m2)
	var wg sync.WaitGroup
	var aErr, bErr error
	wg.Add(2)
	aDone := make(chan struct{})
	go func() { // logs X, waits for M1
		defer wg.Done()
		defer close(aDone)
		aErr = l.Record(ctx, []processor.DeadLetter{x, m1, y})
	}()
	waitBlocked(t, side, "INSERT INTO dedup_dead_letters")
	a := waiterOf(t, side, t1)
	go func() { // logs Y, waits for M2
		defer wg.Done()
		bErr = l.Record(ctx, []processor.DeadLetter{y, m2, x})
	}()
	waitLockQueue(t, side, "INSERT INTO dedup_dead_letters", `SELECT (count(*) >= 2)::int FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()`)
	_ = t1.Rollback(ctx) // A logs M1, then waits for Y (B's)
	// (In key order, B waits for A's X: A ends. Record's statement alone
	// reads its rows from unnest; the side's inserts are VALUES.)
	waitMovedOn(t, side, a, "FROM unnest($1::text[], $2::int4[], $3::int8[], $4::text[], $5::text[]", aDone)
	_ = t2.Rollback(ctx) // B logs M2, then waits for X (A's)
	wg.Wait()
	if aErr != nil || bErr != nil {
		t.Fatalf("two routers logging the same dead letters in opposite orders: A: %v; B: %v", aErr, bErr)
	}
	got, err := l.Written(ctx, []processor.DeadLetter{x, y, m1, m2})
	if err != nil || fmt.Sprint(got) != "[true true true true]" {
		t.Fatalf("written after both: %v %v", got, err)
	}
}
