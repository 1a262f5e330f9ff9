package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/schemas"
)

const (
	topic = "events"
	dlq   = "events.dlq"
)

type cluster struct {
	t     *testing.T
	addrs []string
}

func newCluster(t *testing.T, partitions int32) *cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic, dlq))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &cluster{t: t, addrs: c.ListenAddrs()}
}

// deadLetter is a dead letter of reason for the record at events/0/offset.
func deadLetter(p int32, reason string, offset int) *kgo.Record {
	return &kgo.Record{Topic: dlq, Partition: p, Value: fmt.Appendf(nil, `{"n":%d}`, offset), Headers: []kgo.RecordHeader{
		{Key: schemas.HeaderDLQReason, Value: []byte(reason)}, {Key: schemas.HeaderDLQTopic, Value: []byte(topic)},
		{Key: schemas.HeaderDLQPartition, Value: []byte("0")}, {Key: schemas.HeaderDLQOffset, Value: fmt.Appendf(nil, "%d", offset)},
	}}
}

// begin produces rs in a transaction of the transactional ID id, left
// open; the client is closed when the test ends.
func (c *cluster) begin(id string, rs ...*kgo.Record) *kgo.Client {
	c.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...), kgo.TransactionalID(id),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(5*time.Minute))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(cl.Close)
	if err := cl.BeginTransaction(); err != nil {
		c.t.Fatal(err)
	}
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		c.t.Fatal(err)
	}
	return cl
}

// txn produces rs in one transaction of the transactional ID id,
// committed or aborted (end nil: left open until the test ends).
func (c *cluster) txn(id string, end *kgo.TransactionEndTry, rs ...*kgo.Record) {
	c.t.Helper()
	cl := c.begin(id, rs...)
	if end == nil {
		return
	}
	if err := cl.EndTransaction(context.Background(), *end); err != nil {
		c.t.Fatal(err)
	}
	cl.Close()
}

// produced reads the records of topic (read_uncommitted: everything):
// at least want of them, waited for (a minute at most: on a loaded machine
// the consumer's first fetch alone has taken 3 s), then whatever else the
// next second brings (a record too many).
func (c *cluster) produced(want int) []*kgo.Record {
	c.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		c.t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	read := func(d time.Duration, enough func() bool) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		for !enough() && ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { out = append(out, r) })
		}
	}
	read(time.Minute, func() bool { return len(out) >= want })
	read(time.Second, func() bool { return false })
	return out
}

var (
	commit = ptrTo(kgo.TryCommit)
	abort  = ptrTo(kgo.TryAbort)
)

func ptrTo[T any](v T) *T { return &v }

// TestReplayReadsCommittedRecordsOnly: a dead-letter topic written by
// transactional producers is replayed as a read_committed consumer reads
// it: the committed dead letters, not the aborted ones; and the replay
// ends at the last stable offset instead of waiting for a transaction
// still open. The isolation level is the caller's to say
// (kafka.isolation_level): the replay assumes none, and the client options
// cannot contradict it.
func TestReplayReadsCommittedRecordsOnly(t *testing.T) {
	for _, tc := range []struct {
		name      string
		isolation string
		opts      []kgo.Opt
		want      string // the dead letters replayed
	}{
		{"read_committed", ReadCommitted, nil, "0 1 3"},
		{"read_committed, client options say otherwise", ReadCommitted, []kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadUncommitted())}, "0 1 3"},
		// read_uncommitted reads every record as soon as it is written,
		// aborted and still open ones too, up to the high watermark.
		{"read_uncommitted", ReadUncommitted, nil, "0 1 2 3 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 2)
			c.txn("t1", commit, deadLetter(0, "conflict", 0), deadLetter(0, "temporal_permanent", 1)) // 0, 1; marker 2
			c.txn("t1", abort, deadLetter(0, "conflict", 2))                                          // 3; marker 4
			c.txn("t1", commit, deadLetter(1, "conflict", 3))                                         // partition 1: 0; marker 1
			c.txn("t2", nil, deadLetter(0, "conflict", 4))                                            // 5, open
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			res, err := Run(ctx, Options{Brokers: c.addrs, ClientOpts: tc.opts, IsolationLevel: tc.isolation, DeadLetterTopics: []string{dlq}, Execute: true}, slog.New(slog.DiscardHandler))
			n := len(strings.Fields(tc.want))
			if err != nil || res.Read != n || res.Replayed["conflict"] != n-1 || res.Replayed["temporal_permanent"] != 1 {
				t.Fatalf("replay, after %s: %v %+v, want the dead letters %s", time.Since(start).Round(time.Millisecond), err, res, tc.want)
			}
			var got []string
			for _, r := range c.produced(n) {
				var v struct{ N int }
				if err := json.Unmarshal(r.Value, &v); err != nil {
					t.Fatal(err)
				}
				got = append(got, strconv.Itoa(v.N))
			}
			slices.Sort(got)
			if strings.Join(got, " ") != tc.want {
				t.Errorf("replayed to %s: %v, want %s", topic, got, tc.want)
			}
		})
	}
}

// A replay without an isolation level is refused, naming the field,
// before it reads anything: the caller says which records a dead-letter
// topic written in transactions holds.
func TestReplayRefusesOptionsWithoutIsolationLevel(t *testing.T) {
	for _, level := range []string{"", "committed"} {
		_, err := Run(context.Background(), Options{Brokers: []string{"127.0.0.1:1"}, IsolationLevel: level, DeadLetterTopics: []string{dlq}},
			slog.New(slog.DiscardHandler))
		if err == nil || !strings.Contains(err.Error(), "replay.Options.IsolationLevel") {
			t.Errorf("IsolationLevel %q: %v, want an error naming replay.Options.IsolationLevel", level, err)
		}
	}
}

// TestReplayEndsWhereOnlyAbortedRecordsAreLeft: a partition whose last
// records below the last stable offset are of an aborted transaction whose
// abort marker lies past it (a transaction opened before the abort) gives
// a read_committed consumer nothing more: the replay ends it once idle,
// rather than wait for the open transaction, and replays the rest.
func TestReplayEndsWhereOnlyAbortedRecordsAreLeft(t *testing.T) {
	c := newCluster(t, 2)
	c.txn("t0", commit, deadLetter(1, "conflict", 9))
	a := c.begin("t1", deadLetter(0, "conflict", 0)) // partition 0: 0, aborted below
	c.begin("t2", deadLetter(0, "conflict", 1))      // 1, open: the last stable offset
	if err := a.EndTransaction(context.Background(), kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	res, err := Run(ctx, Options{Brokers: c.addrs, IsolationLevel: ReadCommitted, DeadLetterTopics: []string{dlq}, Idle: time.Second, Execute: true}, slog.New(slog.DiscardHandler))
	if err != nil || res.Read != 1 || res.Replayed["conflict"] != 1 || time.Since(start) > 10*time.Second {
		t.Fatalf("replay, after %s: %v %+v, want the one committed dead letter", time.Since(start).Round(time.Millisecond), err, res)
	}
}

// TestReplaySkipsPartitionsEmptiedByRetention: a dead-letter partition
// whose records all left retention (log start = end > 0) has nothing to
// replay: the replay does not wait for it.
func TestReplaySkipsPartitionsEmptiedByRetention(t *testing.T) {
	c := newCluster(t, 2)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, deadLetter(0, "conflict", 0), deadLetter(0, "conflict", 1), deadLetter(1, "conflict", 2)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if _, err := kadm.NewClient(cl).DeleteRecords(ctx, kadm.Offsets{dlq: {0: {Topic: dlq, Partition: 0, At: 2}}}); err != nil {
		t.Fatal(err)
	}
	res, err := Run(ctx, Options{Brokers: c.addrs, IsolationLevel: ReadCommitted, DeadLetterTopics: []string{dlq}, Execute: true}, slog.New(slog.DiscardHandler))
	if err != nil || res.Read != 1 || res.Replayed["conflict"] != 1 {
		t.Fatalf("replay: %v %+v, want the one dead letter left", err, res)
	}
}

// produceOriginal writes a binary-mode CloudEvent to events/0 and returns
// it as written (offset, timestamp).
func (c *cluster) produceOriginal(id string) *kgo.Record {
	c.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		c.t.Fatal(err)
	}
	defer cl.Close()
	r := &kgo.Record{Topic: topic, Partition: 0, Key: []byte("order-key"), Value: []byte(`{"total":12}`), Headers: []kgo.RecordHeader{
		{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_id", Value: []byte(id)},
		{Key: "ce_type", Value: []byte("order.created")}, {Key: "ce_source", Value: []byte("shop")},
		{Key: "content-type", Value: []byte("application/json")}}}
	out, err := cl.ProduceSync(context.Background(), r).First()
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// reducedDeadLetter is the router's dead letter of orig when the
// dead-letter topic refused it whole: without its value (and, summarised,
// its key and headers), flagged, with its reason and coordinates.
func reducedDeadLetter(orig *kgo.Record, summarised bool) *kgo.Record {
	dl := &kgo.Record{Topic: dlq, Partition: 0}
	if !summarised {
		dl.Key, dl.Headers = orig.Key, append(dl.Headers, orig.Headers...)
	}
	dl.Headers = append(dl.Headers,
		kgo.RecordHeader{Key: schemas.HeaderDLQReason, Value: []byte("temporal_permanent")},
		kgo.RecordHeader{Key: schemas.HeaderDLQTopic, Value: []byte(orig.Topic)},
		kgo.RecordHeader{Key: schemas.HeaderDLQPartition, Value: fmt.Appendf(nil, "%d", orig.Partition)},
		kgo.RecordHeader{Key: schemas.HeaderDLQOffset, Value: fmt.Appendf(nil, "%d", orig.Offset)},
		kgo.RecordHeader{Key: schemas.HeaderDLQTimestamp, Value: []byte(orig.Timestamp.UTC().Format("2006-01-02T15:04:05.000Z07:00"))},
		kgo.RecordHeader{Key: schemas.HeaderDLQValueDropped, Value: fmt.Appendf(nil, "%d", len(orig.Value))},
		// The digest the router takes of the original whenever it drops
		// the value (added with it: the replay checks the record at the
		// coordinates against it).
		kgo.RecordHeader{Key: schemas.HeaderDLQOriginalSHA256, Value: []byte(schemas.OriginalSHA256(orig.Key, orig.Value, headerSeq(orig.Headers)))})
	if summarised {
		dl.Headers = append(dl.Headers, kgo.RecordHeader{Key: schemas.HeaderDLQKeyDropped, Value: fmt.Appendf(nil, "%d", len(orig.Key))},
			kgo.RecordHeader{Key: schemas.HeaderDLQHeadersDropped, Value: fmt.Appendf(nil, "%d", len(orig.Headers))})
	}
	return dl
}

// replayedCopies are the records of topic after the first n (the
// originals).
func (c *cluster) replayedCopies(n int) []*kgo.Record {
	c.t.Helper()
	var out []*kgo.Record
	for _, r := range c.produced(n + 1) {
		if r.Offset >= int64(n) {
			out = append(out, r)
		}
	}
	return out
}

// A dead letter without the original's value (or key and headers: the
// dead-letter topic refused it whole) is replayed whole: the original is
// read from the source topic, where it still is, and sent back with its
// value, key and headers, under its first coordinates. (Before: the value
// went back null: a binary CloudEvent started with data null under the
// real event ID, and a record without ce_* headers was a tombstone.)
func TestReplayTakesWhatTheDeadLetterLacksFromTheSourceTopic(t *testing.T) {
	for _, summarised := range []bool{false, true} {
		t.Run(fmt.Sprintf("summarised=%v", summarised), func(t *testing.T) {
			c := newCluster(t, 1)
			orig := c.produceOriginal("order-1")
			c.txn("router", commit, reducedDeadLetter(orig, summarised))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res, err := Run(ctx, Options{Brokers: c.addrs, IsolationLevel: ReadCommitted, DeadLetterTopics: []string{dlq}, Idle: time.Second, Execute: true}, slog.New(slog.DiscardHandler))
			if err != nil || res.Replayed["temporal_permanent"] != 1 || res.FromSource["temporal_permanent"] != 1 || len(res.Refused) != 0 {
				t.Fatalf("replay: %v %+v", err, res)
			}
			got := c.replayedCopies(1)
			if len(got) != 1 {
				t.Fatalf("%d records replayed, want 1", len(got))
			}
			r := got[0]
			if string(r.Value) != string(orig.Value) || string(r.Key) != string(orig.Key) || header(r, "ce_id") != "order-1" ||
				header(r, "ce_type") != "order.created" || header(r, "content-type") != "application/json" {
				t.Errorf("replayed key %q value %q headers %v, want the original's", r.Key, r.Value, r.Headers)
			}
			if o := header(r, schemas.HeaderOriginTopic) + "/" + header(r, schemas.HeaderOriginPartition) + "/" + header(r, schemas.HeaderOriginOffset); o != "events/0/0" {
				t.Errorf("replayed origin %s, want events/0/0", o)
			}
			if _, ok := lookup(r, schemas.HeaderDLQValueDropped); ok {
				t.Errorf("replayed record carries %s", schemas.HeaderDLQValueDropped)
			}
		})
	}
}

// A dead letter without the original's value whose original left the
// source topic (retention) is refused, even with Execute: the refusal names
// the original's coordinates and why; nothing is sent. The dead letters
// that are whole are replayed.
func TestReplayRefusesADeadLetterWithoutItsValueWhenTheOriginalIsGone(t *testing.T) {
	c := newCluster(t, 1)
	orig := c.produceOriginal("order-1")
	c.produceOriginal("order-2")
	c.txn("router", commit, reducedDeadLetter(orig, false), deadLetter(0, "conflict", 1))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).DeleteRecords(ctx, kadm.Offsets{topic: {0: {Topic: topic, Partition: 0, At: 1}}}); err != nil {
		t.Fatal(err)
	}
	res, err := Run(ctx, Options{Brokers: c.addrs, IsolationLevel: ReadCommitted, DeadLetterTopics: []string{dlq}, Idle: time.Second, Execute: true}, slog.New(slog.DiscardHandler))
	if err != nil || res.Replayed["conflict"] != 1 || res.Replayed["temporal_permanent"] != 0 || len(res.Refused) != 1 {
		t.Fatalf("replay: %v %+v, want the conflict replayed and the temporal_permanent refused", err, res)
	}
	ref := res.Refused[0]
	if ref.Original != "events/0/0" || ref.DeadLetter != "events.dlq/0/0" || ref.Reason != "temporal_permanent" ||
		!strings.Contains(ref.Why, "value") || !strings.Contains(ref.Why, "starts at offset 1") {
		t.Errorf("refusal %+v, want the original events/0/0, gone (the partition starts at offset 1)", ref)
	}
	if got := c.replayedCopies(2); len(got) != 1 || header(got[0], "ce_id") != "" {
		t.Errorf("replayed %d records, want the conflict's only", len(got))
	}
}

// Without Execute a replay is its plan: it reads everything (the source
// topic too, for a dead letter without its value), counts what it would
// replay and refuse, by reason, and writes nothing.
func TestReplayWithoutExecuteWritesNothing(t *testing.T) {
	c := newCluster(t, 1)
	orig := c.produceOriginal("order-1")
	c.txn("router", commit, reducedDeadLetter(orig, true), deadLetter(0, "conflict", 0), deadLetter(0, "no_route", 0),
		&kgo.Record{Topic: dlq, Partition: 0, Value: []byte("{}")}) // not dedup's
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := Run(ctx, Options{Brokers: c.addrs, IsolationLevel: ReadCommitted, DeadLetterTopics: []string{dlq}, Reasons: []string{"conflict", "temporal_permanent", ""},
		Idle: time.Second}, slog.New(slog.DiscardHandler))
	if err != nil || res.Executed || res.Read != 4 || res.Replayed["conflict"] != 1 || res.Replayed["temporal_permanent"] != 1 ||
		res.FromSource["temporal_permanent"] != 1 || res.Skipped["no_route"] != 1 || len(res.Refused) != 1 || !strings.Contains(res.Refused[0].Why, "not written by dedup") {
		t.Fatalf("plan: %v %+v", err, res)
	}
	if got := c.replayedCopies(1); len(got) != 0 {
		t.Errorf("the plan wrote %d records", len(got))
	}
}

// The rule: a dead letter the replay cannot send back is refused, naming
// the original's coordinates, and the plan says so; the others are
// replayed. A whole dead letter whose source topic no longer exists (the
// topic deleted, or renamed, since) is planned as "would replay", and with
// Execute its produce fails the whole run (exit 2) instead of being
// refused like a reduced dead letter whose source is gone. Fails today:
// the plan counts it as replayed and the execution returns an error.
func TestReplayRefusesADeadLetterWhoseSourceTopicIsGone(t *testing.T) {
	for _, execute := range []bool{false, true} {
		t.Run(fmt.Sprintf("execute=%v", execute), func(t *testing.T) {
			c := newCluster(t, 1)
			gone := deadLetter(0, "conflict", 7)
			gone.Headers[1].Value = []byte("orders-deleted") // dedup-topic: a topic that is not there
			c.txn("router", commit, gone, deadLetter(0, "conflict", 8))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := Run(ctx, Options{Brokers: c.addrs, IsolationLevel: ReadCommitted, DeadLetterTopics: []string{dlq}, Idle: time.Second, Execute: execute},
				slog.New(slog.DiscardHandler))
			if err != nil || res.Replayed["conflict"] != 1 || len(res.Refused) != 1 || res.Refused[0].Original != "orders-deleted/0/7" {
				t.Fatalf("replay: %v %+v, want the dead letter of events replayed and that of orders-deleted/0/7 refused", err, res)
			}
		})
	}
}

// The rule: a dead letter that lacks part of the original is completed
// only from the original itself; a recreated source topic is refused
// (runbook, Replaying dead letters). The only check is the timestamp at
// millisecond precision, and the timestamp is the producer's (CreateTime,
// set by many producers from the event's own time, often whole seconds):
// another event in the recreated topic at the same offset with the same
// timestamp passes it, and the replay sends that event under the first
// one's origin (dedup-origin-*: the coordinates rule gives it the first
// event's ID). Fails today: it is replayed from the source.
func TestReplayRefusesAnotherEventAtTheOriginalsCoordinatesWithItsTimestamp(t *testing.T) {
	c := newCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) // the event's time, set by its producer
	event := func(id string) *kgo.Record {
		return &kgo.Record{Topic: topic, Partition: 0, Timestamp: at, Key: []byte("k"), Value: []byte(`{"total":12}`), Headers: []kgo.RecordHeader{
			{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_id", Value: []byte(id)},
			{Key: "ce_type", Value: []byte("order.created")}, {Key: "ce_source", Value: []byte("shop")}}}
	}
	orig, err := cl.ProduceSync(ctx, event("order-1")).First()
	if err != nil {
		t.Fatal(err)
	}
	c.txn("router", commit, reducedDeadLetter(orig, true))
	adm := kadm.NewClient(cl)
	if _, err := adm.DeleteTopics(ctx, topic); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	cl2, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner())) // the recreated topic's ID
	if err != nil {
		t.Fatal(err)
	}
	defer cl2.Close()
	if err := cl2.ProduceSync(ctx, event("order-2")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	res, err := Run(ctx, Options{Brokers: c.addrs, IsolationLevel: ReadCommitted, DeadLetterTopics: []string{dlq}, Idle: time.Second}, slog.New(slog.DiscardHandler))
	if err != nil || res.Replayed["temporal_permanent"] != 0 || len(res.Refused) != 1 || res.Refused[0].Original != "events/0/0" {
		t.Fatalf("plan: %v %+v, want the dead letter of order-1 refused (events/0/0 now holds order-2)", err, res)
	}
}
