package replay

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// live produces a record to events/0 every 20 ms until the test ends: a
// source partition with traffic.
func (c *cluster) live(t *testing.T) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte("live")})
			time.Sleep(20 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait(); cl.Close() })
}

// twoBrokers is a cluster of two brokers with events/0 led by one and
// events/1 by the other, so that a fetch bounded to 1 byte a partition
// brings both a batch at once. kfake picks leaders at random, and with
// both on one broker it answers its session's changed partitions first:
// the partition that got a batch would get every batch (Kafka moves a
// partition that got data to the end of the session; kfake does not).
func twoBrokers(t *testing.T) *kfake.Cluster {
	t.Helper()
	kc, err := kfake.NewCluster(kfake.NumBrokers(2), kfake.SeedTopics(2, topic, dlq))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	for p := range int32(2) {
		if err := kc.MoveTopicPartition(topic, p, p); err != nil {
			t.Fatal(err)
		}
	}
	return kc
}

// A span past the partition's end (a dead letter's original offset in a
// source topic recreated since, or truncated by an unclean leader
// election) holds nothing to read: the client, out of range, reads the
// partition again from its start, and every record it reads lies below
// the span. While the partition takes new records (live traffic, far
// from reaching the span) the Reader must still end it as a Stall within
// a bounded time (Idle 1 s here: within 15 s), not wait, reading batches
// below the span, until the partition's end reaches it.
func TestReaderEndsASpanPastThePartitionsEndAsAStallUnderLiveTraffic(t *testing.T) {
	c := newCluster(t, 1)
	c.live(t)
	time.Sleep(200 * time.Millisecond)
	rd, err := NewReader([]kgo.Opt{kgo.SeedBrokers(c.addrs...), kgo.FetchIsolationLevel(kgo.ReadCommitted())},
		map[string]map[int32]Span{topic: {0: {From: 1_000_000, Until: 1_000_001}}})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	rd.Idle = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	start := time.Now()
	for !rd.Done() {
		recs, err := rd.Poll(ctx, 100)
		if err != nil {
			t.Fatalf("after %s: %v; want the span ended as a Stall", time.Since(start).Round(time.Millisecond), err)
		}
		if len(recs) > 0 {
			t.Fatalf("read %d records below the span", len(recs))
		}
	}
	if len(rd.Stalls) != 1 || rd.Stalls[0].Next != 1_000_000 {
		t.Errorf("after %s: stalls %v; want events/0 from 1000000", time.Since(start).Round(time.Millisecond), rd.Stalls)
	}
}

// A partition whose span holds only an aborted record whose abort marker
// lies past the last stable offset ends as a Stall within a bounded time
// (within 25 s, Idle 500 ms) while another partition crosses a long
// aborted transaction one batch a fetch (a 1-byte fetch bound, 20 ms a
// fetch): the batches the other partition reads put the stall off, not
// for ever, and the committed record after the aborted transaction is
// read. Run with -race: the batch count is shared with the client.
func TestReaderStallsAStuckPartitionWhileAnotherCrossesALongAbortedTransaction(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic, dlq))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	c := &cluster{t: t, addrs: kc.ListenAddrs()}
	a := c.begin("t1", deadLetter(0, "conflict", 0)) // dlq/0: 0, aborted below
	c.begin("t2", deadLetter(0, "conflict", 1))      // 1, open: the last stable offset
	if err := a.EndTransaction(context.Background(), kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	long := c.begin("t3")
	for i := range 80 { // dlq/1: 80 batches, aborted
		if err := long.ProduceSync(context.Background(), deadLetter(1, "conflict", i)).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := long.EndTransaction(context.Background(), kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	c.txn("t4", commit, deadLetter(1, "conflict", 99))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ends, err := Ends(ctx, kadm.NewClient(adm), true, dlq)
	if err != nil {
		t.Fatal(err)
	}
	spans := map[string]map[int32]Span{dlq: {}}
	ends.Each(func(o kadm.ListedOffset) { spans[dlq][o.Partition] = Span{From: 0, Until: o.Offset} })
	kc.ControlKey(kmsg.Fetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		time.Sleep(20 * time.Millisecond)
		return nil, nil, false
	})
	rd, err := NewReader([]kgo.Opt{kgo.SeedBrokers(c.addrs...), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxPartitionBytes(1)}, spans)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	rd.Idle = 500 * time.Millisecond
	start := time.Now()
	var read []string
	for !rd.Done() {
		recs, err := rd.Poll(ctx, 10)
		if err != nil {
			t.Fatalf("after %s: %v (spans %v)", time.Since(start).Round(time.Millisecond), err, spans)
		}
		for _, r := range recs {
			read = append(read, string(r.Value))
		}
	}
	if len(read) != 1 || read[0] != `{"n":99}` || len(rd.Stalls) != 1 || rd.Stalls[0].Partition != 0 || time.Since(start) > 25*time.Second {
		t.Errorf("after %s: read %v, stalls %v; want the committed record of dlq/1 and dlq/0 as a Stall", time.Since(start).Round(time.Millisecond), read, rd.Stalls)
	}
}

// A partition crossing a long aborted transaction one batch a fetch (a
// 1-byte fetch bound, 20 ms a fetch) is not ended as a Stall early while
// ANOTHER partition's span lies past its end under live traffic (the
// client, out of range, reads that partition from its start again: every
// record it brings was read already): the other partition's stale records
// make its own batches no progress, not the batches of the partition that
// is still crossing the transaction. The committed record after the
// aborted transaction is read, and only events/0 ends as a Stall (Idle
// 500 ms, within 25 s). Each partition on a broker of its own
// (twoBrokers), so that both are fetched at once: a fetch bounded to 1
// byte a partition gives a batch to the first partition that has one only
// (kfake, as Kafka).
func TestReaderReadsPastALongAbortedTransactionWhileAnotherPartitionBringsStaleRecords(t *testing.T) {
	kc := twoBrokers(t)
	c := &cluster{t: t, addrs: kc.ListenAddrs()}
	c.live(t) // events/0: a record every 20 ms
	long := c.begin("t1")
	for range 80 { // events/1: 80 batches, aborted
		if err := long.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Partition: 1, Value: []byte("aborted")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := long.EndTransaction(context.Background(), kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	c.txn("t2", commit, &kgo.Record{Topic: topic, Partition: 1, Value: []byte("committed")})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ends, err := Ends(ctx, kadm.NewClient(adm), true, topic)
	if err != nil {
		t.Fatal(err)
	}
	end1, ok := ends.Lookup(topic, 1)
	if !ok || end1.Err != nil {
		t.Fatalf("end of events/1: %v %v", end1, end1.Err)
	}
	spans := map[string]map[int32]Span{topic: {0: {From: 1_000_000, Until: 1_000_001}, 1: {From: 0, Until: end1.Offset}}}
	kc.ControlKey(kmsg.Fetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		time.Sleep(20 * time.Millisecond)
		return nil, nil, false
	})
	rd, err := NewReader([]kgo.Opt{kgo.SeedBrokers(c.addrs...), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxPartitionBytes(1)}, spans)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	rd.Idle = 500 * time.Millisecond
	start := time.Now()
	var read []string
	for !rd.Done() {
		recs, err := rd.Poll(ctx, 10)
		if err != nil {
			t.Fatalf("after %s: %v (spans %v)", time.Since(start).Round(time.Millisecond), err, spans)
		}
		for _, r := range recs {
			read = append(read, fmt.Sprintf("%d/%d %s", r.Partition, r.Offset, r.Value))
		}
	}
	if len(read) != 1 || !strings.HasSuffix(read[0], " committed") || len(rd.Stalls) != 1 || rd.Stalls[0].Partition != 0 || time.Since(start) > 25*time.Second {
		t.Errorf("after %s: read %v, stalls %v (events/1 until %d); want the committed record of events/1 and only events/0 as a Stall",
			time.Since(start).Round(time.Millisecond), read, rd.Stalls, end1.Offset)
	}
}

// A partition crossing a long aborted transaction (one batch a fetch, 20
// ms a fetch) is not ended as a Stall early when the records buffered of
// a partition just finished (events/0: a span of one record, read in a
// batch of 30, polled 10 at a time) come after it finished: they are no
// records of an unfinished span, yet the other partition's batches are
// still progress. Both spans are read to their ends, no Stall (Idle
// 500 ms, within 25 s; each partition on a broker of its own, so that
// both are fetched at once).
func TestReaderReadsPastALongAbortedTransactionWhileAFinishedPartitionsBufferedRecordsArrive(t *testing.T) {
	kc := twoBrokers(t)
	c := &cluster{t: t, addrs: kc.ListenAddrs()}
	pr, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 { // events/0: one batch of 30
		pr.Produce(context.Background(), &kgo.Record{Topic: topic, Partition: 0, Value: fmt.Appendf(nil, "r%d", i)}, nil)
	}
	if err := pr.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	pr.Close()
	long := c.begin("t1")
	for range 80 { // events/1: 80 batches, aborted
		if err := long.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Partition: 1, Value: []byte("aborted")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := long.EndTransaction(context.Background(), kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	c.txn("t2", commit, &kgo.Record{Topic: topic, Partition: 1, Value: []byte("committed")})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ends, err := Ends(ctx, kadm.NewClient(adm), true, topic)
	if err != nil {
		t.Fatal(err)
	}
	end1, ok := ends.Lookup(topic, 1)
	if !ok || end1.Err != nil {
		t.Fatalf("end of events/1: %v %v", end1, end1.Err)
	}
	spans := map[string]map[int32]Span{topic: {0: {From: 0, Until: 1}, 1: {From: 0, Until: end1.Offset}}}
	kc.ControlKey(kmsg.Fetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		time.Sleep(20 * time.Millisecond)
		return nil, nil, false
	})
	rd, err := NewReader([]kgo.Opt{kgo.SeedBrokers(c.addrs...), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxPartitionBytes(1)}, spans)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	rd.Idle = 500 * time.Millisecond
	start := time.Now()
	var read []string
	for !rd.Done() {
		recs, err := rd.Poll(ctx, 10)
		if err != nil {
			t.Fatalf("after %s: %v (spans %v)", time.Since(start).Round(time.Millisecond), err, spans)
		}
		for _, r := range recs {
			read = append(read, fmt.Sprintf("%d/%d %s", r.Partition, r.Offset, r.Value))
		}
	}
	if all := strings.Join(read, ";"); len(read) != 2 || !strings.Contains(all, "0/0 r0") || !strings.Contains(all, " committed") || len(rd.Stalls) != 0 || time.Since(start) > 25*time.Second {
		t.Errorf("after %s: read %v, stalls %v (events/1 until %d); want events/0's first record and the committed record of events/1, no Stall",
			time.Since(start).Round(time.Millisecond), read, rd.Stalls, end1.Offset)
	}
}
