package processor

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
)

// Every batch the router fetched goes back to its pools once its records
// ended, whichever way they ended: started, a duplicate, a dead letter, a
// record no route matches, a tombstone (a run without rebalances: the
// records of a partition revoked since their fetch are left to the
// collector).
func TestEveryBatchTheRouterFetchedGoesBackToThePoolsOnceItsRecordsEnded(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for round := range 3 {
		var recs []*kgo.Record
		for i := range 10 {
			id := fmt.Sprintf("e-%d", (round*10+i)%16) // copies from the second round on
			recs = append(recs, &kgo.Record{Topic: testTopic, Partition: int32(i % 2), Value: value(id, "v")})
		}
		recs = append(recs,
			&kgo.Record{Topic: testTopic, Partition: 0, Value: []byte("{not json")},
			&kgo.Record{Topic: testTopic, Partition: 1, Value: []byte(`{"id":"x","type":"nobody.routes","data":{}}`)},
			&kgo.Record{Topic: testTopic, Partition: 0, Key: []byte("k"), Value: nil})
		if err := e.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	rn := e.start("a", e.config())
	e.waitCommittedToEnd(30 * time.Second)
	for i := range 16 { // each started once, with its own data
		id := fmt.Sprintf("e-%d", i)
		if x := e.starter.executionsOf(wid(id)); len(x) != 1 || !bytes.Equal(x[0].req.Input.Data, value(id, "v")) {
			t.Fatalf("%s: executions %+v", id, x)
		}
	}
	allBatchesBack(t, rn)
}

// A start request's data is its own, not its record's value: the value
// goes back to the fetch pools when the record ends, and a request may
// outlive it (a waiter taking the start over, a retry). JSON data,
// binary data and a signal route's data alike.
func TestAStartRequestsDataIsItsOwnNotItsRecordsValue(t *testing.T) {
	decider := func(rt decide.Route) *decide.Decider {
		cfg := DefaultConfig()
		cfg.Brokers, cfg.Group, cfg.Topics, cfg.ResetOffset = []string{"x:1"}, "g", []string{testTopic}, "earliest"
		cfg.Routes = decide.Routes{rt}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		d, err := decide.NewDecider(cfg.Decide())
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	starts := decider(decide.Route{ID: testRoute, Match: decide.Match{Type: testType}, WorkflowType: "W", TaskQueue: "q"})
	signals := decider(decide.Route{ID: "orders", Mode: decide.ModeSignal, Match: decide.Match{Type: "order.*"}, WorkflowType: "Order",
		TaskQueue: "q", WorkflowIDTemplate: "order-{data.order_id}"})
	binary := []kgo.RecordHeader{{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_id", Value: []byte("b-1")},
		{Key: "ce_type", Value: []byte(testType)}, {Key: "ce_source", Value: []byte("shop")},
		{Key: "ce_datacontenttype", Value: []byte("text/plain")}}
	for _, tc := range []struct {
		name string
		d    *decide.Decider
		kr   *kgo.Record
		data func(decide.StartRequest) []byte
	}{
		{"json", starts, &kgo.Record{Topic: testTopic, Value: value("e-1", "payload")},
			func(r decide.StartRequest) []byte { return r.Input.Data }},
		{"binary", starts, &kgo.Record{Topic: testTopic, Value: []byte("hello, world"), Headers: binary},
			func(r decide.StartRequest) []byte { return r.Input.DataBase64 }},
		{"signal", signals, &kgo.Record{Topic: testTopic, Value: orderEvent("o-1", "A", "payload")},
			func(r decide.StartRequest) []byte { return r.Signal.Input.Data }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dec := tc.d.Decide(tc.kr)
			if dec.DeadLetter != "" || len(dec.Intents) != 1 {
				t.Fatalf("decided %+v", dec)
			}
			req := startRef{d: &dec, j: 0}.request()
			want := bytes.Clone(tc.data(req))
			if len(want) == 0 {
				t.Fatal("the request carries no data")
			}
			for i := range tc.kr.Value { // the pools lend the value to the next fetch
				tc.kr.Value[i] = 'X'
			}
			if got := tc.data(req); !bytes.Equal(got, want) {
				t.Fatalf("the request's data changed with its record's value: %q, was %q", got, want)
			}
		})
	}
}

// Adversary 68: the fetch pools (kgo.WithPools, fetchpools.go). A batch's
// decompressed bytes are zeroed and lent to the next fetch once its
// records' last pieces ended; these tests produce compressed batches
// (each codec), split them across polls (max_poll_records 3), fan each
// record out to two routes, copy events within and across batches, and
// check that what outlives a record (a started workflow's data, a dead
// letter's key, value and headers) is still what was produced.

// compressedProducer is a producer on e's cluster whose batches are
// compressed with codec.
func (e *testEnv) compressedProducer(codec kgo.CompressionCodec) *kgo.Client {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.cluster.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(codec), kgo.ProducerLinger(50*time.Millisecond))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(cl.Close)
	return cl
}

// compressedBatches counts the compressed batches a router's client read
// (a broker hook, added to the router's KafkaOpts by startOpts).
type compressedBatches struct{ n atomic.Int64 }

func (c *compressedBatches) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	if m.CompressionType != 0 {
		c.n.Add(1)
	}
}

// payload is a compressible payload of id's, different for each id.
func payload(id string) string { return strings.Repeat("payload of "+id+"; ", 40) }

// Every started workflow's data is its event's, byte for byte, while the
// batches it came from are zeroed and lent to the next fetches: records
// fanned out to two routes (two pieces each), copies of an event on both
// partitions in one batch (waiters) and in later batches (duplicates),
// batches split across polls, for each codec.
func TestStartedWorkflowsKeepTheirEventsDataWhileTheirBatchesGoBackToThePools(t *testing.T) {
	for _, codec := range []kgo.CompressionCodec{kgo.SnappyCompression(), kgo.ZstdCompression(), kgo.GzipCompression(), kgo.Lz4Compression()} {
		t.Run(fmt.Sprint(codec), func(t *testing.T) {
			e := newTestEnv(t, 2, envOpt{})
			cfg := e.config()
			cfg.MaxPollRecords = 3
			cfg.Routes = decide.Routes{
				{ID: testRoute, Match: decide.Match{Type: testType}, WorkflowType: "W", TaskQueue: "q"},
				{ID: "r2", Match: decide.Match{Type: testType}, WorkflowType: "W2", TaskQueue: "q"},
			}
			pr := e.compressedProducer(codec)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			const n = 24
			for round := range 3 {
				var recs []*kgo.Record
				for i := range n {
					id := fmt.Sprintf("e-%d", (round*n/2+i)%(2*n))
					recs = append(recs, &kgo.Record{Topic: testTopic, Partition: int32(i % 2), Value: value(id, payload(id))})
					if i%4 == 0 { // a copy on the other partition, in the same produce
						recs = append(recs, &kgo.Record{Topic: testTopic, Partition: int32(1 - i%2), Value: value(id, payload(id))})
					}
				}
				if err := pr.ProduceSync(ctx, recs...).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			var batches compressedBatches
			rn := e.startOpts("a", cfg, kgo.WithHooks(&batches))
			e.waitCommittedToEnd(30 * time.Second)
			if batches.n.Load() == 0 {
				t.Fatal("no compressed batch was read: the test proves nothing")
			}
			seen := 0
			for i := range 2 * n {
				id := fmt.Sprintf("e-%d", i)
				for _, w := range []string{wid(id), decide.WorkflowID("r2", id)} {
					x := e.starter.executionsOf(w)
					if len(x) == 0 {
						continue
					}
					seen++
					if len(x) != 1 || !bytes.Equal(x[0].req.Input.Data, value(id, payload(id))) {
						t.Fatalf("%s: %d executions, data %q, want %q", w, len(x), x[0].req.Input.Data, value(id, payload(id)))
					}
				}
			}
			if seen == 0 {
				t.Fatal("nothing started")
			}
			allBatchesBack(t, rn)
		})
	}
}

// A dead letter carries its record's key, value and headers as produced,
// whether it is written from the poll loop (undecodable), from the
// claimer (a conflict) or from a start worker (temporal_permanent), while
// the batches around it are zeroed and lent to the next fetches.
func TestDeadLettersCarryTheirRecordsBytesWhileTheirBatchesGoBackToThePools(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	cfg.MaxPollRecords = 3
	pr := e.compressedProducer(kgo.SnappyCompression())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type sent struct {
		key, value []byte
		headers    []kgo.RecordHeader
	}
	want := map[string]sent{} // by the "which" header
	var recs []*kgo.Record
	add := func(p int32, which string, v []byte) {
		kr := &kgo.Record{Topic: testTopic, Partition: p, Key: []byte("key of " + which + strings.Repeat(".", 50)), Value: v,
			Headers: []kgo.RecordHeader{{Key: "which", Value: []byte(which)}, {Key: "h", Value: []byte(strings.Repeat("header of "+which, 10))}}}
		want[which] = sent{slices.Clone(kr.Key), slices.Clone(kr.Value), slices.Clone(kr.Headers)}
		recs = append(recs, kr)
	}
	for i := range 12 {
		p := int32(i % 2)
		id := fmt.Sprintf("ok-%d", i)
		add(p, "ok-"+fmt.Sprint(i), value(id, payload(id)))
		add(p, "bad-"+fmt.Sprint(i), []byte("{not json "+payload(id)))
	}
	for i := range 4 {
		id := fmt.Sprintf("perm-%d", i)
		e.starter.failPermanent(wid(id))
		add(int32(i%2), id, value(id, payload(id)))
	}
	if err := pr.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	recs = nil
	for i := range 4 { // conflicts: ok-i again, with another payload
		id := fmt.Sprintf("ok-%d", i)
		add(int32(i%2), "conflict-"+fmt.Sprint(i), value(id, payload("other "+id)))
	}
	for i := range 12 {
		id := fmt.Sprintf("more-%d", i)
		add(int32(i%2), id, value(id, payload(id)))
	}
	if err := pr.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var batches compressedBatches
	e.startOpts("a", cfg, kgo.WithHooks(&batches))
	e.waitCommittedToEnd(30 * time.Second)
	if batches.n.Load() == 0 {
		t.Fatal("no compressed batch was read: the test proves nothing")
	}
	dls := e.dlqRecords()
	got := map[string]bool{}
	for _, d := range dls {
		var which string
		var own []kgo.RecordHeader
		for _, h := range d.Headers {
			if h.Key == "which" {
				which = string(h.Value)
			}
			if !slices.Contains(schemas.DeadLetterHeaders, h.Key) {
				own = append(own, h)
			}
		}
		w, ok := want[which]
		if !ok {
			t.Fatalf("a dead letter of no record produced: which %q, key %q, value %q, headers %q", which, d.Key, d.Value, d.Headers)
		}
		got[which] = true
		if !bytes.Equal(d.Key, w.key) || !bytes.Equal(d.Value, w.value) ||
			!slices.EqualFunc(own, w.headers, func(a, b kgo.RecordHeader) bool { return a.Key == b.Key && bytes.Equal(a.Value, b.Value) }) {
			t.Fatalf("%s: dead letter key %q value %q headers %q, produced %q %q %q", which, d.Key, d.Value, own, w.key, w.value, w.headers)
		}
	}
	for _, which := range []string{"bad-0", "bad-11", "perm-0", "perm-3", "conflict-0", "conflict-3"} {
		if !got[which] {
			t.Fatalf("no dead letter of %s (got %v)", which, got)
		}
	}
}

// Transactions read committed, compressed: the aborted batches (none of
// whose records the router sees) and the markers (control records, which
// end at once) go back to the pools as the committed events' batches do,
// and the committed events start with their data.
func TestCompressedTransactionsBatchesGoBackToThePoolsAndStartWithTheirData(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.cluster.ListenAddrs()...), kgo.TransactionalID("tx-pools"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for round := range 6 {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for i := range 8 {
			id := fmt.Sprintf("t%d-%d", round, i)
			recs = append(recs, &kgo.Record{Topic: testTopic, Partition: int32(i % 2), Value: value(id, payload(id))})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(round%2 == 0)); err != nil {
			t.Fatal(err)
		}
	}
	cfg := e.config()
	cfg.MaxPollRecords = 3
	rn := e.start("a", cfg)
	e.waitCommittedToEnd(30 * time.Second)
	for round := range 6 {
		for i := range 8 {
			id := fmt.Sprintf("t%d-%d", round, i)
			x := e.starter.executionsOf(wid(id))
			switch {
			case round%2 == 1 && len(x) != 0:
				t.Fatalf("%s of an aborted transaction started", id)
			case round%2 == 0 && (len(x) != 1 || !bytes.Equal(x[0].req.Input.Data, value(id, payload(id)))):
				t.Fatalf("%s: executions %+v", id, x)
			}
		}
	}
	allBatchesBack(t, rn)
}

// The owner of a start (partition 0) hangs in the starter, a copy on
// partition 1 waits on it, and partition 0 is revoked: the owner's record
// ends (abandoned) and its compressed batch goes back to the pools, zeroed
// and lent to the fetches that follow; the waiter takes the start over
// with the owner's request, whose data is still the event's.
func TestAWaiterTakingAStartOverStartsItWithTheEventsDataAfterTheOwnersBatchWentBackToThePools(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	pr := e.compressedProducer(kgo.SnappyCompression())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	produce := func(p int32, id string) {
		t.Helper()
		if err := pr.ProduceSync(ctx, &kgo.Record{Topic: testTopic, Partition: p, Value: value(id, payload(id))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	w := wid("x")
	release := e.starter.block(w)
	defer release()
	produce(0, "x")
	var batches compressedBatches
	rn := e.startOpts("r1", e.config(), kgo.WithHooks(&batches))
	eventually(t, 10*time.Second, func() bool { return e.starter.heldCount(w) == 1 },
		func() string { return "owner's start not in flight" })
	produce(1, "x")
	eventually(t, 10*time.Second, func() bool { return waitersOf(rn.r, w) == 1 },
		func() string { return fmt.Sprintf("waiters %d", waitersOf(rn.r, w)) })
	back := rn.r.pools.back.Load()
	rn.r.commits.revoked(t.Context(), nil, map[string][]int32{testTopic: {0}})
	eventually(t, 5*time.Second, func() bool { return e.starter.callCount(w) == 2 && e.starter.heldCount(w) == 1 },
		func() string {
			return fmt.Sprintf("calls %d held %d: the waiter did not take over", e.starter.callCount(w), e.starter.heldCount(w))
		})
	if rn.r.pools.back.Load() == back {
		t.Fatal("the owner's batch did not go back to the pools")
	}
	for i := range 8 { // the pools lend the owner's memory to these fetches
		produce(1, fmt.Sprintf("y-%d", i))
	}
	eventually(t, 10*time.Second, func() bool { return len(e.starter.executionsOf(wid("y-7"))) == 1 },
		func() string { return "y-7 not started" })
	release()
	eventually(t, 10*time.Second, func() bool { return len(e.starter.executionsOf(w)) == 1 },
		func() string { return "x not started" })
	if batches.n.Load() == 0 {
		t.Fatal("no compressed batch was read: the test proves nothing")
	}
	if x := e.starter.executionsOf(w); !bytes.Equal(x[0].req.Input.Data, value("x", payload("x"))) {
		t.Fatalf("x started with data %q, want %q", x[0].req.Input.Data, value("x", payload("x")))
	}
}

// A batch gets a buffer of the smallest class that holds its decompressed
// size, never a larger one (franz-go zeroes a buffer's whole capacity when
// it comes back), and a batch over the largest class gets none: its codec
// makes its own.
func TestABatchGetsABufferOfTheSmallestClassThatHoldsIt(t *testing.T) {
	p := &fetchPools{}
	big := p.GetDecompressBytes(snappyOf(make([]byte, 1<<20)), kgo.CodecSnappy)
	if cap(big) != 1<<20 {
		t.Fatalf("a batch of 1 MiB got a buffer of %d bytes", cap(big))
	}
	p.PutDecompressBytes(big[:cap(big)])
	for _, n := range []int{1, 4096, 4097, 100 << 10} {
		b := p.GetDecompressBytes(snappyOf(make([]byte, n)), kgo.CodecSnappy)
		if cap(b) < n || cap(b) > max(n+n/4, 4096) {
			t.Fatalf("a batch of %d bytes got a buffer of %d", n, cap(b))
		}
	}
	if b := p.GetDecompressBytes(snappyOf(make([]byte, 9<<20)), kgo.CodecSnappy); b != nil {
		t.Fatalf("a batch of 9 MiB got a buffer of %d bytes", cap(b))
	}
	if r := p.GetRecords(100); cap(r) < 100 || cap(r) > 125 {
		t.Fatalf("100 records got room for %d", cap(r))
	}
}

// A size class holds its sizes and is at most a quarter over them, and a
// buffer of a class's size goes back into that class, one byte less into
// a smaller one.
func TestASizeClassHoldsItsSizesAtMostAQuarterOver(t *testing.T) {
	for n := 1; n <= 8<<20; n += 1 + n/4096 {
		k, size, ok := sizeClass(n, minBytes, bytesClasses)
		if !ok || size < n || size > max(n+n/4, 4096) {
			t.Fatalf("%d bytes: class %d of %d bytes (%v)", n, k, size, ok)
		}
		if held, ok := heldClass(size, minBytes, bytesClasses); !ok || held != k {
			t.Fatalf("a buffer of %d bytes goes back into class %d, not its own %d", size, held, k)
		}
		if held, ok := heldClass(size-1, minBytes, bytesClasses); ok && held >= k {
			t.Fatalf("a buffer of %d bytes goes back into class %d, of %d bytes", size-1, held, size)
		}
	}
	if _, _, ok := sizeClass(8<<20+1, minBytes, bytesClasses); ok {
		t.Fatal("a batch over 8 MiB has a class")
	}
}

// The decompressed size is what each codec's header states: snappy's
// length, zstd's frame content size, gzip's ISIZE, lz4's content size
// when its frame declares one; else four times the compressed size.
func TestABatchsDecompressedSizeIsWhatItsCodecsHeaderStates(t *testing.T) {
	raw := bytes.Repeat([]byte(`{"id":"e-1","type":"order.created","data":{"v":"payload"}}`), 100)
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	_, _ = w.Write(raw)
	_ = w.Close()
	zw, _ := zstd.NewWriter(nil)
	var lz, lzSized bytes.Buffer
	for _, c := range []struct {
		buf  *bytes.Buffer
		opts []lz4.Option
	}{{&lz, nil}, {&lzSized, []lz4.Option{lz4.SizeOption(uint64(len(raw)))}}} {
		lw := lz4.NewWriter(c.buf)
		if err := lw.Apply(c.opts...); err != nil {
			t.Fatal(err)
		}
		_, _ = lw.Write(raw)
		_ = lw.Close()
	}
	for _, c := range []struct {
		name       string
		compressed []byte
		codec      kgo.CompressionCodecType
		want       int
	}{
		{"snappy", snappyOf(raw), kgo.CodecSnappy, len(raw)},
		{"snappy in xerial's framing", append(slices.Clone(xerialMagic), 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 9), kgo.CodecSnappy, 4 * 20},
		{"zstd", zw.EncodeAll(raw, nil), kgo.CodecZstd, len(raw)},
		{"gzip", gz.Bytes(), kgo.CodecGzip, len(raw)},
		{"lz4 with its content size", lzSized.Bytes(), kgo.CodecLz4, len(raw)},
		{"lz4 without", lz.Bytes(), kgo.CodecLz4, 4 * lz.Len()},
	} {
		if got := decompressedSize(c.compressed, c.codec); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

func snappyOf(b []byte) []byte { return s2.EncodeSnappy(nil, b) }

// allBatchesBack waits until the router has given back every batch's
// Records it was lent (at least one).
func allBatchesBack(t *testing.T, rn *runner) {
	t.Helper()
	p := rn.r.pools
	eventually(t, 10*time.Second, func() bool { return p.lent.Load() > 0 && p.back.Load() == p.lent.Load() },
		func() string {
			return fmt.Sprintf("%d batches' records lent, %d given back", p.lent.Load(), p.back.Load())
		})
}
