package client_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/client"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
)

// kafkaOnly is a client over kfake with the given ledger reader and no
// run reader.
func kafkaOnly(t *testing.T, led client.LedgerReader, mod func(*client.Config)) (*client.Client, *kfake.Cluster) {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	cfg := client.Config{Topic: topic, EventID: eventid.DefaultConfig(), Routes: routes, Namespace: "default",
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}, Ledger: led}
	if mod != nil {
		mod(&cfg)
	}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, cluster
}

// New names the field it refuses.
func TestNewNamesTheField(t *testing.T) {
	for field, mod := range map[string]func(*client.Config){
		"Topic":         func(c *client.Config) { c.Topic = "" },
		"LookupTimeout": func(c *client.Config) { c.LookupTimeout = -time.Second },
		"Routes":        func(c *client.Config) { c.Routes = decide.Routes{{ID: "a"}} },
		"EventID":       func(c *client.Config) { c.EventID.Chain = nil },
		"KafkaOpts":     func(c *client.Config) { c.KafkaOpts = append(c.KafkaOpts, kgo.MaxProduceRequestsInflightPerBroker(5)) }, // idempotency wants 1
	} {
		cfg := client.Config{Topic: topic, EventID: eventid.DefaultConfig(), Routes: routes, KafkaOpts: []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}}
		mod(&cfg)
		_, err := client.New(cfg)
		var ce *client.ConfigError
		if !errors.As(err, &ce) || ce.Field != field {
			t.Errorf("%s: %v, want a *ConfigError naming it", field, err)
		}
	}
}

// blockingLedger answers no lookup before its context ends.
type blockingLedger struct{ calls atomic.Int64 }

func (b *blockingLedger) Lookup(ctx context.Context, _ []string, _ ...[32]byte) (map[string]client.LedgerEntry, error) {
	b.calls.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

// A ledger that does not answer within LookupTimeout delays Enqueue by
// that much and no more: the event is written without the ledger's answer
// (Repeat false, no conflict known).
func TestSlowLedgerIsBoundedByLookupTimeout(t *testing.T) {
	led := &blockingLedger{}
	c, _ := kafkaOnly(t, led, func(cfg *client.Config) { cfg.LookupTimeout = 100 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t0 := time.Now()
	h, err := c.Enqueue(ctx, client.Event{Type: "order.created", IdempotencyKey: "k1"})
	if err != nil || !h.Produced || h.Repeat {
		t.Fatalf("Enqueue with a ledger that hangs: %+v %v, want it written", h, err)
	}
	if d := time.Since(t0); d > 5*time.Second || led.calls.Load() != 1 {
		t.Errorf("Enqueue took %s (%d lookups), want about LookupTimeout (100ms) and one lookup", d, led.calls.Load())
	}
}

// Kafka that does not acknowledge: a *ProduceError wrapping the cause
// (here the context's deadline), and no handle.
func TestUnacknowledgedIsProduceError(t *testing.T) {
	c, cluster := kafkaOnly(t, nil, nil)
	cluster.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	h, err := c.Enqueue(ctx, client.Event{Type: "order.created", IdempotencyKey: "k1"})
	var pe *client.ProduceError
	if !errors.As(err, &pe) || pe.EventID != "k1" || pe.Topic != topic || !errors.Is(err, context.DeadlineExceeded) || h != nil {
		t.Fatalf("Enqueue with Kafka gone: %+v %v, want a *ProduceError wrapping the deadline", h, err)
	}
}

// Status and Result name the reader they miss.
func TestMissingReaders(t *testing.T) {
	c, _ := kafkaOnly(t, nil, nil)
	ctx := context.Background()
	_, err := c.Status(ctx, "activity-order-confirmation:k1")
	if !errors.Is(err, client.ErrNoLedger) || !errors.Is(err, client.ErrNoRuns) {
		t.Errorf("Status with neither reader: %v, want ErrNoLedger and ErrNoRuns", err)
	}
	if err := c.Result(ctx, "activity-order-confirmation:k1", nil); !errors.Is(err, client.ErrNoRuns) {
		t.Errorf("Result without a run reader: %v, want ErrNoRuns", err)
	}
	if _, err := c.Status(ctx, "activity-nope:k1"); !errors.Is(err, client.ErrNoLedger) {
		t.Errorf("Status of an unknown workflow without readers: %v", err)
	}
}
