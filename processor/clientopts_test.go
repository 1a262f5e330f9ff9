package processor_test

import (
	"context"
	"fmt"
	"net"
	"strings"
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
