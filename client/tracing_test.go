package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/dedupio/dedup/client"
	"github.com/dedupio/dedup/connect/tracing"
	"github.com/dedupio/dedup/connect/tracing/kafkaheaders"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/processor/tenantsig"
)

// Send writes the trace context of its ctx into the record's headers
// (Config.Propagator), where a router reads it; a tenant's record is
// signed over them, so a router still takes it as the tenant's. Without
// a Propagator the record carries no trace header.
func TestSendWritesTheTraceContextIntoTheRecord(t *testing.T) {
	keys, err := tenantsig.Parse("kafka.tenant_keys_file", []byte("keys: [{id: k1, secret: dGVzdC10ZW5hbnQta2V5LTAxMjM0NTY3ODlhYmNkZWY=}]"))
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	send := func(prop bool, id string) *kgo.Record {
		t.Helper()
		cfg := client.Config{Topic: topic, EventID: eventid.DefaultConfig(), Routes: routes, TenantKeys: keys,
			KafkaOpts: []kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}}
		if prop {
			cfg.Propagator = tracing.Propagator()
		}
		c, err := client.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		p, err := c.Prepare(&kgo.Record{Value: []byte(`{"total":1}`), Headers: []kgo.RecordHeader{
			{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_id", Value: []byte(id)}, {Key: "ce_type", Value: []byte("order.created")},
			{Key: eventid.TenantHeader, Value: []byte("acme")}}})
		if err != nil {
			t.Fatal(err)
		}
		tp := sdktrace.NewTracerProvider()
		defer func() { _ = tp.Shutdown(context.Background()) }()
		ctx, span := tp.Tracer("test").Start(context.Background(), "producer")
		defer span.End()
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		h, err := c.Send(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {h.Partition: kgo.NewOffset().At(h.Offset)}}))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		fs := cl.PollRecords(ctx, 1)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		rec := fs.Records()[0]
		want := "00-" + span.SpanContext().TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-01"
		if got := (kafkaheaders.Carrier{R: rec}).Get("traceparent"); prop && got != want {
			t.Errorf("traceparent %q, want the producer span's %q", got, want)
		}
		return rec
	}
	router, err := processor.NewDecider(processor.Config{EventID: eventid.DefaultConfig(), Routes: routes, MaxValueBytes: 1 << 20, TenantKeys: keys})
	if err != nil {
		t.Fatal(err)
	}
	traced := send(true, "k-1")
	if d := router.Decide(traced); d.DeadLetter != "" || d.Event.Tenant != "acme" {
		t.Errorf("a router decides the traced tenant record: %s %v (tenant %q), want acme's", d.DeadLetter, d.Err, d.Event.Tenant)
	}
	if plain := send(false, "k-2"); (kafkaheaders.Carrier{R: plain}).Get("traceparent") != "" {
		t.Errorf("without a Propagator: traceparent %q", kafkaheaders.Carrier{R: plain}.Get("traceparent"))
	}
}
