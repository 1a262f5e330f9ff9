package ops

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/replay"
	"github.com/dedupio/dedup/schemas"
)

// TestDLQReplayPrintsItsPlanAndWritesOnlyWithExecute: dedup dlq replay is
// safe by default, as offsets reset: without --execute (or with
// --dry-run) it prints its plan, in text and JSON (how many records per
// reason, how many read back from the source topic because their dead
// letter lacks the value, which it refuses and why) and writes nothing;
// --dry-run with --execute is a usage error; with --execute it writes
// what it planned.
func TestDLQReplayPrintsItsPlanAndWritesOnlyWithExecute(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	orig := f.produce(0, order("o1", "1"))
	dl := func(reason string, of *kgo.Record, extra ...kgo.RecordHeader) *kgo.Record {
		return &kgo.Record{Topic: topic + ".dlq", Partition: 0, Headers: append([]kgo.RecordHeader{
			{Key: schemas.HeaderDLQReason, Value: []byte(reason)}, {Key: schemas.HeaderDLQTopic, Value: []byte(topic)},
			{Key: schemas.HeaderDLQPartition, Value: fmt.Appendf(nil, "%d", of.Partition)},
			{Key: schemas.HeaderDLQOffset, Value: fmt.Appendf(nil, "%d", of.Offset)}}, extra...)}
	}
	whole := dl("conflict", orig)
	whole.Value = orig.Value
	if err := f.cl.ProduceSync(ctx, whole,
		// As the router writes a dead letter without the value: with the
		// digest of the original that the replay checks the source against.
		dl("temporal_permanent", orig, kgo.RecordHeader{Key: schemas.HeaderDLQValueDropped, Value: fmt.Appendf(nil, "%d", len(orig.Value))},
			kgo.RecordHeader{Key: schemas.HeaderDLQOriginalSHA256, Value: []byte(schemas.OriginalSHA256(orig.Key, orig.Value, func(yield func(string, []byte) bool) {
				for _, h := range orig.Headers {
					if !yield(h.Key, h.Value) {
						return
					}
				}
			}))}),
		&kgo.Record{Topic: topic + ".dlq", Partition: 0, Value: []byte("{}")}, // not dedup's
	).FirstErr(); err != nil {
		t.Fatal(err)
	}
	end := func() int64 {
		t.Helper()
		l, err := f.adm.ListEndOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		n := int64(0)
		l.Each(func(o kadm.ListedOffset) { n += o.Offset })
		return n
	}
	before := end()
	cfg := f.configFile()
	cmd := []string{"dlq", "replay", "--config", cfg, "--timeout", "30s"}
	for _, extra := range [][]string{nil, {"--dry-run"}} {
		var out, errOut strings.Builder
		code := run(ctx, append(slices.Clone(cmd), extra...), &out, &errOut, func(tl *Tool) { tl.idle = time.Second })
		text := out.String()
		for _, want := range []string{"read 3 dead letters", "would replay 2: conflict 1, temporal_permanent 1",
			"1 from the source topic", "refused 1", "events.dlq/0/2", "not written by dedup", "--execute"} {
			if !strings.Contains(text, want) {
				t.Errorf("dlq replay %v: %d, output lacks %q:\n%s%s", extra, code, want, text, errOut.String())
			}
		}
		if code != ExitFound || end() != before {
			t.Fatalf("dlq replay %v: exit %d, wrote %d records, want the plan and nothing written", extra, code, end()-before)
		}
	}
	var out, errOut strings.Builder
	if code := run(ctx, append(slices.Clone(cmd), "--output", "json"), &out, &errOut, func(tl *Tool) { tl.idle = time.Second }); code != ExitFound {
		t.Fatalf("--output json: %d %s", code, errOut.String())
	}
	var rep ReplayReport
	if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
		t.Fatalf("--output json: %v\n%s", err, out.String())
	}
	if rep.Executed || rep.Read != 3 || rep.Replayed["conflict"] != 1 || rep.Replayed["temporal_permanent"] != 1 ||
		rep.FromSource["temporal_permanent"] != 1 || len(rep.Refused) != 1 || rep.Refused[0].DeadLetter != "events.dlq/0/2" ||
		!slices.Equal(rep.DeadLetterTopics, []string{"events.dlq"}) || end() != before {
		t.Fatalf("--output json: %+v (wrote %d)", rep, end()-before)
	}
	out.Reset()
	errOut.Reset()
	if code := run(ctx, append(slices.Clone(cmd), "--dry-run", "--execute"), &out, &errOut, nil); code != ExitError ||
		!strings.Contains(errOut.String(), "--execute") || end() != before {
		t.Fatalf("--dry-run --execute: %d %q, want a usage error", code, errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if code := run(ctx, append(slices.Clone(cmd), "--execute"), &out, &errOut, func(tl *Tool) { tl.idle = time.Second }); code != ExitFound ||
		!strings.Contains(out.String(), "replayed 2: conflict 1, temporal_permanent 1") || strings.Contains(out.String(), "would") ||
		!strings.Contains(errOut.String(), "dlq replay") || end() != before+2 {
		t.Fatalf("dlq replay --execute: %d %q %q, wrote %d", code, out.String(), errOut.String(), end()-before)
	}
}

// The rule: dlq replay sends a record back "through the dedup gate
// again", so it replays only to topics the config's routers read
// (kafka.topics) and refuses, naming the original's coordinates, a dead
// letter whose dedup-topic is another (a shared dead-letter topic after
// a topic left the config, or a dead letter whose headers name any topic
// at all). Today it plans "would replay" and, with --execute, writes the
// event to that topic, which no router reads, and reports it replayed.
func TestDLQReplayRefusesADeadLetterOfATopicTheRoutersDoNotRead(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.adm.CreateTopic(ctx, 1, 1, nil, "legacy"); err != nil {
		t.Fatal(err)
	}
	if err := f.cl.ProduceSync(ctx, &kgo.Record{Topic: topic + ".dlq", Partition: 0, Value: []byte(order("o1", "1")), Headers: []kgo.RecordHeader{
		{Key: schemas.HeaderDLQReason, Value: []byte("no_route")}, {Key: schemas.HeaderDLQTopic, Value: []byte("legacy")},
		{Key: schemas.HeaderDLQPartition, Value: []byte("0")}, {Key: schemas.HeaderDLQOffset, Value: []byte("4")}}}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	code := run(ctx, []string{"dlq", "replay", "--config", f.configFile(), "--timeout", "30s", "--execute", "--output", "json"}, &out, &errOut,
		func(tl *Tool) { tl.idle = time.Second })
	var rep ReplayReport
	if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
		t.Fatalf("dlq replay: %d %v\n%s%s", code, err, out.String(), errOut.String())
	}
	l, err := f.adm.ListEndOffsets(ctx, "legacy")
	if err != nil {
		t.Fatal(err)
	}
	legacy, _ := l.Lookup("legacy", 0)
	if rep.Replayed["no_route"] != 0 || len(rep.Refused) != 1 || rep.Refused[0].Original != "legacy/0/4" || legacy.Offset != 0 {
		t.Errorf("dlq replay --execute: exit %d, %+v, wrote %d records to legacy; want the dead letter of legacy/0/4 refused, nothing written",
			code, rep, legacy.Offset)
	}
}

// fetchBounds records, over every fetch request a kfake cluster gets, the
// largest fetch bound (MaxBytes) and partition bound (PartitionMaxBytes)
// asked for.
type fetchBounds struct {
	mu        sync.Mutex
	n         int
	most      int32
	mostPart  int32
	partCount int
}

func watchFetchBounds(c *kfake.Cluster) *fetchBounds {
	fb := &fetchBounds{}
	c.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.FetchRequest)
		fb.mu.Lock()
		defer fb.mu.Unlock()
		fb.n++
		fb.most = max(fb.most, r.MaxBytes)
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				fb.partCount++
				fb.mostPart = max(fb.mostPart, p.PartitionMaxBytes)
			}
		}
		return nil, nil, false
	})
	return fb
}

// deadLetterCluster is a kfake cluster of events and events.dlq holding
// one dead letter, and a config of it whose fetch bounds are 64 KiB a
// partition and 1 MiB a fetch (the Kafka client's defaults: 1 MiB and 50
// MiB).
func deadLetterCluster(t *testing.T) (*kfake.Cluster, config.Config) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic, topic+".dlq"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	orig, err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(order("o1", "1"))}).First()
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic + ".dlq", Value: orig.Value, Headers: []kgo.RecordHeader{
		{Key: schemas.HeaderDLQReason, Value: []byte("conflict")}, {Key: schemas.HeaderDLQTopic, Value: []byte(topic)},
		{Key: schemas.HeaderDLQPartition, Value: []byte("0")}, {Key: schemas.HeaderDLQOffset, Value: fmt.Appendf(nil, "%d", orig.Offset)}}}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Kafka.Brokers, cfg.Kafka.Group, cfg.Kafka.Topics, cfg.Kafka.ResetOffset = c.ListenAddrs(), "dedup-ops", []string{topic}, "earliest"
	cfg.Routes = decide.Routes{{ID: "confirm", Match: decide.Match{Type: "order.created"}, WorkflowType: "W", TaskQueue: "q"}}
	cfg.Postgres.URL = "postgres://nobody@127.0.0.1:1/none"
	cfg.Kafka.FetchMaxPartitionBytes, cfg.Kafka.FetchMaxBytes = 64<<10, 1<<20
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return c, cfg
}

// Every consumer dedup runs over its topics takes the config's fetch
// bounds (processor.Config.FetchLimits): dedup dlq replay reads the
// dead-letter topics, and the source topic for a dead letter without its
// value, with kafka.fetch_max_partition_bytes and kafka.fetch_max_bytes,
// not the Kafka client's 1 MiB a partition and 50 MiB a fetch.
func TestDLQReplayFetchesWithinTheConfigsFetchBounds(t *testing.T) {
	c, cfg := deadLetterCluster(t)
	fb := watchFetchBounds(c)
	tl := newTool(cfg, slog.New(slog.DiscardHandler))
	tl.idle = time.Second
	defer tl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, _, err := tl.ReplayDeadLetters(ctx, "", 0, false)
	if err != nil || rep.Read != 1 {
		t.Fatalf("dlq replay: %+v, %v; want 1 dead letter read", rep, err)
	}
	fb.mu.Lock()
	defer fb.mu.Unlock()
	if fb.n == 0 || fb.mostPart > int32(cfg.Kafka.FetchMaxPartitionBytes) || fb.most > int32(cfg.Kafka.FetchMaxBytes) {
		t.Errorf("%d fetches asked for up to %d bytes a partition and %d a fetch: want at most kafka.fetch_max_partition_bytes %d and kafka.fetch_max_bytes %d",
			fb.n, fb.mostPart, fb.most, cfg.Kafka.FetchMaxPartitionBytes, cfg.Kafka.FetchMaxBytes)
	}
}

// The reads of dedup explain and of the offsets reset's forecast (the
// Tool's reader) take the config's fetch bounds.
func TestToolReaderFetchesWithinTheConfigsFetchBounds(t *testing.T) {
	c, cfg := deadLetterCluster(t)
	fb := watchFetchBounds(c)
	tl := newTool(cfg, slog.New(slog.DiscardHandler))
	tl.idle = time.Second
	defer tl.Close()
	rd, err := tl.reader(map[string]map[int32]replay.Span{topic: {0: {From: 0, Until: 1}}, topic + ".dlq": {0: {From: 0, Until: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	read := 0
	for !rd.Done() {
		recs, err := rd.Poll(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		read += len(recs)
	}
	fb.mu.Lock()
	defer fb.mu.Unlock()
	if read != 2 || fb.n == 0 || fb.mostPart > int32(cfg.Kafka.FetchMaxPartitionBytes) || fb.most > int32(cfg.Kafka.FetchMaxBytes) {
		t.Errorf("read %d of 2; %d fetches asked for up to %d bytes a partition and %d a fetch: want at most %d and %d",
			read, fb.n, fb.mostPart, fb.most, cfg.Kafka.FetchMaxPartitionBytes, cfg.Kafka.FetchMaxBytes)
	}
}

// The tools' reader (dedup explain, the offsets reset's forecast) under
// read_committed with kafka.fetch_max_partition_bytes of 1 byte (a bound
// Validate accepts) reads a partition whose committed record follows an
// aborted transaction of 150 batches: with one batch a fetch, and 20 ms a
// fetch round trip, the reader crosses the aborted records in 150 fetches
// that return nothing it can read, longer than its idle wait (1 s here,
// 10 s by default: 500 such fetches of 20 ms). It must not end the
// partition as a Stall ("gave no record to read") before the committed
// record that follows. With the Kafka client's 1 MiB a partition the
// whole transaction and its marker come in one fetch.
func TestToolReaderReadsPastALongAbortedTransactionUnderASmallFetchBound(t *testing.T) {
	c, cfg := deadLetterCluster(t)
	cfg.Kafka.FetchMaxPartitionBytes = 1
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tx, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionalID("long-abort"))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	ends := func() kadm.ListedOffsets {
		l, err := kadm.NewClient(tx).ListEndOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	from, _ := ends().Lookup(topic, 0)
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := range 150 {
		if err := tx.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(order(fmt.Sprintf("aborted-%d", i), "1"))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	committed, err := tx.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(order("after", "1"))}).First()
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	until, _ := ends().Lookup(topic, 0)
	// 20 ms a fetch round trip, as to a broker over a network.
	c.ControlKey(kmsg.Fetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		time.Sleep(20 * time.Millisecond)
		return nil, nil, false
	})
	tl := newTool(cfg, slog.New(slog.DiscardHandler))
	tl.idle = time.Second
	defer tl.Close()
	rd, err := tl.reader(map[string]map[int32]replay.Span{topic: {0: {From: from.Offset, Until: until.Offset}}})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var read []int64
	for !rd.Done() {
		recs, err := rd.Poll(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			read = append(read, r.Offset)
		}
	}
	if !slices.Equal(read, []int64{committed.Offset}) || len(rd.Stalls) > 0 {
		t.Errorf("read offsets %v, stalls %v: want the committed record at %d and no stall", read, rd.Stalls, committed.Offset)
	}
}

// dedup dlq replay of a dead letter without its value whose original
// offset lies past its source partition's end (the source topic recreated
// since, or truncated by an unclean leader election), while the source
// partition takes live traffic far below that offset: the replay finds
// nothing there to read and finishes within a bounded time (idle 1 s:
// within 20 s), refusing that dead letter, rather than wait, reading the
// source's new records, until its end reaches the offset.
func TestDLQReplayFinishesWhenAnOriginalLiesPastALiveSourcesEnd(t *testing.T) {
	c, cfg := deadLetterCluster(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic + ".dlq", Headers: []kgo.RecordHeader{
		{Key: schemas.HeaderDLQReason, Value: []byte("conflict")}, {Key: schemas.HeaderDLQTopic, Value: []byte(topic)},
		{Key: schemas.HeaderDLQPartition, Value: []byte("0")}, {Key: schemas.HeaderDLQOffset, Value: []byte("1000000")},
		{Key: schemas.HeaderDLQValueDropped, Value: []byte("20")}, {Key: schemas.HeaderDLQOriginalSHA256, Value: []byte("00")}}}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	liveCtx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // live traffic on the source partition
		defer wg.Done()
		for liveCtx.Err() == nil {
			cl.ProduceSync(liveCtx, &kgo.Record{Topic: topic, Value: []byte(order("live", "1"))})
			time.Sleep(20 * time.Millisecond)
		}
	}()
	defer wg.Wait()
	defer stop()
	tl := newTool(cfg, slog.New(slog.DiscardHandler))
	tl.idle = time.Second
	defer tl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	rep, _, err := tl.ReplayDeadLetters(ctx, "", 0, false)
	if err != nil || rep.Read != 2 {
		t.Fatalf("dlq replay, after %s: %+v, %v; want both dead letters read and the one past the source's end refused",
			time.Since(start).Round(time.Millisecond), rep, err)
	}
}
