package processor_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/dedupio/dedup/connect/clienttls"
	"github.com/dedupio/dedup/connect/kafkasasl"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
)

// A stranger's router: processor.New with only the public Config's SASL
// set (no Kafka options of its own) logs in to a broker that requires
// SASL, reads the topic and commits. The settings Config validates are the
// settings the router's client uses (Config.ClientOpts), not left for
// dedup's own command to apply.
func TestNewAppliesTheConfigsSASL(t *testing.T) {
	const user, pass, group = "stranger", "stranger-secret-0123", "stranger-group"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser("PLAIN", user, pass),
		kfake.SeedTopics(1, "events", "events.dlq"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	admin, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// An event no route matches: the router skips it and commits past it.
	event := `{"specversion":"1.0","id":"evt-1","type":"nobody.routes.this","source":"s","data":{}}`
	if err := admin.ProduceSync(ctx, &kgo.Record{Topic: "events", Value: []byte(event)}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	cfg := processor.DefaultConfig()
	cfg.Brokers, cfg.Group, cfg.Topics, cfg.ResetOffset = c.ListenAddrs(), group, []string{"events"}, "earliest"
	cfg.Routes = decide.Routes{{ID: "a", Match: decide.Match{Type: "order.created"}, WorkflowType: "W", TaskQueue: "q"}}
	cfg.SASL = kafkasasl.Config{Mechanism: "PLAIN", Username: user, Password: pass}
	led, _ := processor.NewFakeLedger()
	r, err := processor.New(cfg, processor.Options{Ledger: led, DeadLetterLog: noDeadLetters{}, Starter: noStarts{}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("router: %v", err)
		}
	}()
	// Bound: a minute for a join, a poll and a commit that take well under
	// a second here; without SASL the broker answers nothing and the
	// commit never comes.
	adm := kadm.NewClient(admin)
	for {
		offs, err := adm.FetchOffsets(ctx, group)
		if o, ok := offs.Lookup("events", 0); err == nil && ok && o.At == 1 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the router committed nothing in a minute (SASL not applied?): %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// A stranger's Config.TLS is never silently dropped: a kgo.Dialer of
// Options.KafkaOpts (a timeout, a proxy) replaces the dial that does the
// config's TLS, so the router would speak plaintext to brokers the config
// says are reached over TLS. New refuses the pair, naming kafka.tls,
// rather than start a client whose TLS setting was validated and then
// ignored.
func TestNewRefusesADialerThatWouldDropTheConfigsTLS(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "events", "events.dlq"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg := processor.DefaultConfig()
	cfg.Brokers, cfg.Group, cfg.Topics, cfg.ResetOffset = c.ListenAddrs(), "stranger-group", []string{"events"}, "earliest"
	cfg.Routes = decide.Routes{{ID: "a", Match: decide.Match{Type: "order.created"}, WorkflowType: "W", TaskQueue: "q"}}
	cfg.TLS = clienttls.Config{Enabled: true}
	led, _ := processor.NewFakeLedger()
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	r, err := processor.New(cfg, processor.Options{Ledger: led, DeadLetterLog: noDeadLetters{}, Starter: noStarts{},
		KafkaOpts: []kgo.Opt{kgo.Dialer(dialer.DialContext)}})
	if err == nil {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = r.Run(ctx)
		t.Fatal("processor.New with kafka.tls on and a kgo.Dialer of KafkaOpts: no error, the client dials without the config's TLS")
	}
	if !strings.Contains(err.Error(), "kafka.tls") {
		t.Errorf("processor.New: %v, want an error naming kafka.tls", err)
	}
}

// A router holds what its Kafka client fetched, decompressed, until it
// has polled it: how much one fetch takes from a partition sets most of
// its memory (the benchmark's peak RSS halved from 1 MiB, the Kafka
// client's default, to 256 KiB). The router's client takes
// kafka.fetch_max_partition_bytes: over a 1.5 MiB backlog of one
// partition in 16 KiB batches, no fetch answer is larger than that bound
// and one batch, where the client's default would read 1 MiB at once.
func TestAFetchTakesAtMostFetchMaxPartitionBytesOfAPartition(t *testing.T) {
	const group = "fetch-bound"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "events", "events.dlq"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Uncompressed batches of 16 records of 1 KiB each.
	pr, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const batches, perBatch = 96, 16
	for b := range batches {
		recs := make([]*kgo.Record, perBatch)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: "events", Value: fmt.Appendf(nil,
				`{"specversion":"1.0","id":"e-%d-%d","type":"nobody.routes.this","source":"s","data":{"v":%q}}`, b, i, strings.Repeat("x", 1024))}
		}
		if err := pr.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	cfg := processor.DefaultConfig()
	cfg.Brokers, cfg.Group, cfg.Topics, cfg.ResetOffset = c.ListenAddrs(), group, []string{"events"}, "earliest"
	cfg.Routes = decide.Routes{{ID: "a", Match: decide.Match{Type: "order.created"}, WorkflowType: "W", TaskQueue: "q"}}
	cfg.CommitInterval = 50 * time.Millisecond
	reads := &fetchReads{}
	led, _ := processor.NewFakeLedger()
	r, err := processor.New(cfg, processor.Options{Ledger: led, DeadLetterLog: noDeadLetters{}, Starter: noStarts{},
		KafkaOpts: []kgo.Opt{kgo.WithHooks(reads)}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	adm := kadm.NewClient(pr)
	for {
		offs, err := adm.FetchOffsets(ctx, group)
		if o, ok := offs.Lookup("events", 0); err == nil && ok && o.At == batches*perBatch {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the router committed the backlog's end (%d) in no minute: %v", batches*perBatch, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("router: %v", err)
	}
	// A fetch answer carries its partition's batches and a few hundred
	// bytes of headers; the broker may add one batch over the bound.
	bound := cfg.FetchMaxPartitionBytes + 20<<10
	if n, most := reads.n.Load(), reads.most.Load(); n == 0 || most > int64(bound) {
		t.Errorf("%d fetch answers, the largest %d bytes: want at most %d (fetch_max_partition_bytes %d and one batch)",
			n, most, bound, cfg.FetchMaxPartitionBytes)
	}
}

// fetchReads is a Kafka client hook: how many fetch answers the client
// read, and the largest.
type fetchReads struct{ n, most atomic.Int64 }

func (f *fetchReads) OnBrokerRead(_ kgo.BrokerMetadata, key int16, bytesRead int, _, _ time.Duration, err error) {
	if key != kmsg.Fetch.Int16() || err != nil {
		return
	}
	f.n.Add(1)
	for {
		m := f.most.Load()
		if int64(bytesRead) <= m || f.most.CompareAndSwap(m, int64(bytesRead)) {
			return
		}
	}
}

type noDeadLetters struct{}

func (noDeadLetters) Written(_ context.Context, dls []processor.DeadLetter) ([]bool, error) {
	return make([]bool, len(dls)), nil
}
func (noDeadLetters) Record(context.Context, []processor.DeadLetter) error { return nil }

type noStarts struct{}

func (noStarts) Start(context.Context, decide.StartRequest) (processor.StartResult, error) {
	return processor.StartResult{}, nil
}
func (noStarts) LastRun(context.Context, string, string) (decide.Run, error) {
	return decide.Run{}, nil
}

// countingStarts is a Starter that counts the starts of each workflow ID.
type countingStarts struct {
	mu     sync.Mutex
	starts map[string]int
}

func (s *countingStarts) Start(_ context.Context, req decide.StartRequest) (processor.StartResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.starts[req.WorkflowID]++
	return processor.StartResult{RunID: "run-" + req.WorkflowID}, nil
}
func (s *countingStarts) LastRun(context.Context, string, string) (decide.Run, error) {
	return decide.Run{}, nil
}

// stallingLedger fails every claim from the third on while stall is set
// (the router's health then pauses fetching, and resumes it once a claim
// succeeds); failed counts the claims it failed.
type stallingLedger struct {
	processor.Ledger
	stall          atomic.Bool
	claims, failed atomic.Int32
}

func (l *stallingLedger) Claim(ctx context.Context, intents []decide.Intent) ([]decide.Claimed, error) {
	if l.claims.Add(1) > 2 && l.stall.Load() {
		l.failed.Add(1)
		return nil, errors.New("ledger down for a while")
	}
	return l.Ledger.Claim(ctx, intents)
}

// Every record of every partition is consumed, decided and committed
// whatever the fetch bound (1 byte, and the 256 KiB default) and the
// batches' sizes: two partitions of 32 KiB uncompressed batches, one of a
// single record of almost kafka.max_value_bytes (1 MiB, 4 times the
// default bound) between small ones, one of transactions (committed,
// aborted, committed: read_committed, control records) — while fetching is
// paused and resumed (the ledger down for a while) and a second router
// joins the group midway (a rebalance between fetches). Each event not of
// an aborted transaction is started, none of an aborted one, and every
// partition is committed to its end.
func TestTheRouterDrainsBatchesLargerThanTheFetchBoundOfSeveralPartitions(t *testing.T) {
	for _, bound := range []int{1, processor.DefaultConfig().FetchMaxPartitionBytes} {
		t.Run(fmt.Sprint(bound), func(t *testing.T) { drainsOversizedBatches(t, bound) })
	}
}

func drainsOversizedBatches(t *testing.T, bound int) {
	const group = "fetch-bound-progress"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "events", "events.dlq"),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pr, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(2<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	event := func(id string, size int) []byte {
		return fmt.Appendf(nil, `{"specversion":"1.0","id":%q,"type":"order.created","source":"s","data":{"v":%q}}`, id, strings.Repeat("x", size))
	}
	want := map[string]bool{} // event ID: started
	for p := int32(0); p < 2; p++ {
		for b := range 20 {
			recs := make([]*kgo.Record, 16)
			for i := range recs {
				id := fmt.Sprintf("p%d-%d-%d", p, b, i)
				recs[i], want[id] = &kgo.Record{Topic: "events", Partition: p, Value: event(id, 2<<10)}, true
			}
			if err := pr.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, size := range []int{100, 1000 << 10, 100} {
		id := fmt.Sprintf("p2-%d", i)
		want[id] = true
		if err := pr.ProduceSync(ctx, &kgo.Record{Topic: "events", Partition: 2, Value: event(id, size)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionalID("fetch-bound-tx"))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	for n, end := range []kgo.TransactionEndTry{kgo.TryCommit, kgo.TryAbort, kgo.TryCommit} {
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for b := range 4 {
			recs := make([]*kgo.Record, 8)
			for i := range recs {
				id := fmt.Sprintf("p3-%d-%d-%d", n, b, i)
				if end == kgo.TryAbort {
					id = "aborted-" + id
				} else {
					want[id] = true
				}
				recs[i] = &kgo.Record{Topic: "events", Partition: 3, Value: event(id, 2<<10)}
			}
			if err := tx.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.EndTransaction(ctx, end); err != nil {
			t.Fatal(err)
		}
	}

	cfg := processor.DefaultConfig()
	cfg.Brokers, cfg.Group, cfg.Topics, cfg.ResetOffset = c.ListenAddrs(), group, []string{"events"}, "earliest"
	cfg.Routes = decide.Routes{{ID: "a", Match: decide.Match{Type: "order.created"}, WorkflowType: "W", TaskQueue: "q"}}
	cfg.CommitInterval, cfg.SessionTimeout, cfg.RebalanceTimeout = 50*time.Millisecond, time.Second, time.Second
	cfg.Retry.Initial, cfg.Retry.Max = 5*time.Millisecond, 50*time.Millisecond
	cfg.RevokeTimeout, cfg.DrainTimeout, cfg.Starts.MarkInterval = 200*time.Millisecond, 2*time.Second, 5*time.Millisecond
	cfg.MaxPollRecords = 50
	cfg.FetchMaxPartitionBytes = bound
	fake, _ := processor.NewFakeLedger()
	led := &stallingLedger{Ledger: fake}
	led.stall.Store(true)
	starts := &countingStarts{starts: map[string]int{}}
	run := func() (stop func()) {
		r, err := processor.New(cfg, processor.Options{Ledger: led, DeadLetterLog: noDeadLetters{}, Starter: starts,
			KafkaOpts: []kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond)}})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancelRun := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx) }()
		return func() {
			cancelRun()
			if err := <-done; err != nil {
				t.Errorf("router: %v", err)
			}
		}
	}
	adm := kadm.NewClient(pr)
	ends, err := adm.ListEndOffsets(ctx, "events")
	if err != nil {
		t.Fatal(err)
	}
	committed := func() (total int64, atEnd bool, got string) {
		offs, err := adm.FetchOffsets(ctx, group)
		atEnd = err == nil
		ends.Each(func(e kadm.ListedOffset) {
			o, ok := offs.Lookup("events", e.Partition)
			if ok {
				total += o.At
			}
			got += fmt.Sprintf(" %d:%d/%d", e.Partition, o.At, e.Offset)
			atEnd = atEnd && ok && o.At == e.Offset
		})
		return total, atEnd, got
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-ctx.Done():
				_, _, got := committed()
				t.Fatalf("%s: not in 3 minutes; committed/end:%s", what, got)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	stopA := run()
	defer func() {
		if stopA != nil {
			stopA()
		}
	}()
	// The ledger down after two claims: fetching pauses. A second
	// router joins meanwhile (a rebalance between fetches); then the
	// ledger answers again.
	wait("claims failing", func() bool { return led.failed.Load() >= 5 })
	stopB := run()
	defer stopB()
	time.Sleep(500 * time.Millisecond)
	led.stall.Store(false)
	wait("every partition committed to its end", func() bool { _, atEnd, _ := committed(); return atEnd })
	starts.mu.Lock()
	defer starts.mu.Unlock()
	for id := range want {
		if starts.starts[decide.WorkflowID("a", id)] == 0 {
			t.Errorf("event %s committed and never started", id)
		}
	}
	for wid := range starts.starts {
		if strings.Contains(wid, "aborted") {
			t.Errorf("%s of an aborted transaction started", wid)
		}
	}
}

// fetchAsks records the largest fetch bound (MaxBytes) and partition
// bound (PartitionMaxBytes) of the fetch requests a kfake cluster gets,
// and how many.
type fetchAsks struct {
	mu             sync.Mutex
	n              int
	most, mostPart int32
}

func watchFetches(c *kfake.Cluster) *fetchAsks {
	fa := &fetchAsks{}
	c.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.FetchRequest)
		fa.mu.Lock()
		defer fa.mu.Unlock()
		fa.n++
		fa.most = max(fa.most, r.MaxBytes)
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				fa.mostPart = max(fa.mostPart, p.PartitionMaxBytes)
			}
		}
		return nil, nil, false
	})
	return fa
}

// Options precedence: a stranger's router (processor.New with
// DefaultConfig's bounds, no Kafka options) fetches with 256 KiB a
// partition and 16 MiB a fetch; a caller's own kgo.FetchMaxPartitionBytes
// and kgo.FetchMaxBytes in Options.KafkaOpts win, as Options.KafkaOpts
// says ("applied after the router's own").
func TestTheRoutersFetchBoundsAreTheConfigsUnlessTheCallersOptionsSetThem(t *testing.T) {
	for _, tc := range []struct {
		name           string
		opts           []kgo.Opt
		wantPart, want int32
	}{
		{"config", nil, 256 << 10, 16 << 20},
		{"caller", []kgo.Opt{kgo.FetchMaxPartitionBytes(64 << 10), kgo.FetchMaxBytes(1 << 20)}, 64 << 10, 1 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "events", "events.dlq"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fa := watchFetches(c)
			cfg := processor.DefaultConfig()
			cfg.Brokers, cfg.Group, cfg.Topics, cfg.ResetOffset = c.ListenAddrs(), "stranger", []string{"events"}, "earliest"
			cfg.Routes = decide.Routes{{ID: "a", Match: decide.Match{Type: "order.created"}, WorkflowType: "W", TaskQueue: "q"}}
			led, _ := processor.NewFakeLedger()
			r, err := processor.New(cfg, processor.Options{Ledger: led, DeadLetterLog: noDeadLetters{}, Starter: noStarts{}, KafkaOpts: tc.opts})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			rctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- r.Run(rctx) }()
			for {
				fa.mu.Lock()
				n := fa.n
				fa.mu.Unlock()
				if n >= 1 {
					break
				}
				select {
				case <-ctx.Done():
					t.Fatal("the router sent no fetch in a minute")
				case <-time.After(20 * time.Millisecond):
				}
			}
			stop()
			if err := <-done; err != nil {
				t.Errorf("router: %v", err)
			}
			fa.mu.Lock()
			defer fa.mu.Unlock()
			if fa.mostPart != tc.wantPart || fa.most != tc.want {
				t.Errorf("fetches asked for %d bytes a partition, %d a fetch; want %d and %d", fa.mostPart, fa.most, tc.wantPart, tc.want)
			}
		})
	}
}

// Every fetch bound Config.Validate accepts (up to Kafka's 32-bit bound,
// it says) builds a router, or New's error names the config key: a
// fetch_max_bytes over the Kafka client's 100 MiB read bound (the
// client's BrokerMaxReadBytes) must not pass Validate and then fail in
// the client with an error naming neither kafka.fetch_max_bytes nor what
// to set instead.
func TestNewBuildsARouterForEveryFetchBoundValidateAccepts(t *testing.T) {
	for _, tc := range []struct {
		key         string
		bytes, part int
	}{
		{"fetch_max_bytes", 200 << 20, 256 << 10},
		{"fetch_max_bytes", math.MaxInt32, 256 << 10},
		{"fetch_max_partition_bytes", 16 << 20, math.MaxInt32},
		{"fetch_max_partition_bytes", 16 << 20, 1},
	} {
		cfg := processor.DefaultConfig()
		cfg.Brokers, cfg.Group, cfg.Topics, cfg.ResetOffset = []string{"127.0.0.1:1"}, "g", []string{"events"}, "earliest"
		cfg.Routes = decide.Routes{{ID: "a", Match: decide.Match{Type: "order.created"}, WorkflowType: "W", TaskQueue: "q"}}
		cfg.FetchMaxBytes, cfg.FetchMaxPartitionBytes = tc.bytes, tc.part
		if err := cfg.Validate(); err != nil {
			if !strings.Contains(err.Error(), "kafka."+tc.key) {
				t.Errorf("%s %d/%d: Validate = %v, want it to name kafka.%s", tc.key, tc.bytes, tc.part, err, tc.key)
			}
			continue
		}
		led, _ := processor.NewFakeLedger()
		r, err := processor.New(cfg, processor.Options{Ledger: led, DeadLetterLog: noDeadLetters{}, Starter: noStarts{}})
		if err != nil {
			if !strings.Contains(err.Error(), "kafka."+tc.key) {
				t.Errorf("fetch_max_bytes %d, fetch_max_partition_bytes %d: Validate accepts, New = %v: want a router or an error naming kafka.%s",
					tc.bytes, tc.part, err, tc.key)
			}
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = r.Run(ctx)
	}
}
