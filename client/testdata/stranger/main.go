// Command stranger is a program outside dedup's module (its own go.mod)
// that uses package client as any producer would: it reads the routers'
// event_id and routes sections from their config file (here a string),
// enqueues an event through an in-process Kafka (kfake), enqueues it
// again, reads the records back, and checks what the client promised. It
// exits non-zero when a promise does not hold. `make stranger` runs it and
// checks that it links neither goose nor gRPC nor the Temporal SDK.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.yaml.in/yaml/v3"

	"github.com/dedupio/dedup/client"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
)

// routersConfig is the part of the routers' config file a producer needs.
const routersConfig = `
event_id:
  chain: [header, field]
  headers: [ce_id, Idempotency-Key]
routes:
  - id: order-confirmation
    match: {type: order.created}
    workflow_type: ConfirmOrder
    task_queue: orders
`

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "stranger:", err)
		os.Exit(1)
	}
	fmt.Println("stranger: ok")
}

func run() error {
	var routers struct {
		EventID eventid.Config `yaml:"event_id"`
		Routes  decide.Routes  `yaml:"routes"`
	}
	routers.EventID = eventid.DefaultConfig()
	if err := yaml.Unmarshal([]byte(routersConfig), &routers); err != nil {
		return fmt.Errorf("reading the routers' sections: %w", err)
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "events"))
	if err != nil {
		return err
	}
	defer cluster.Close()
	c, err := client.New(client.Config{
		Topic:     "events",
		EventID:   routers.EventID,
		Routes:    routers.Routes,
		Namespace: "default",
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)},
	})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	ev := client.Event{Type: "order.created", Source: "shop", IdempotencyKey: "order-1", Data: map[string]any{"total": 12.5}}
	first, err := c.Enqueue(ctx, ev)
	if err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	again, err := c.Enqueue(ctx, ev)
	if err != nil {
		return fmt.Errorf("enqueue again: %w", err)
	}
	fmt.Printf("first: event %s, workflows %v, written %v at partition %d offset %d\n",
		first.EventID, first.WorkflowIDs(), first.Produced, first.Partition, first.Offset)
	fmt.Printf("again: event %s, workflows %v, written %v at partition %d offset %d\n",
		again.EventID, again.WorkflowIDs(), again.Produced, again.Partition, again.Offset)

	want := []string{"activity-order-confirmation:order-1"}
	switch {
	case first.EventID != "order-1" || again.EventID != first.EventID:
		return fmt.Errorf("event IDs %q and %q, want order-1 twice", first.EventID, again.EventID)
	case !slices.Equal(first.WorkflowIDs(), want) || !slices.Equal(again.WorkflowIDs(), want):
		return fmt.Errorf("workflow IDs %v and %v, want %v twice", first.WorkflowIDs(), again.WorkflowIDs(), want)
	case !first.Produced || !again.Produced || first.Repeat || again.Repeat:
		// Without a ledger reader the client cannot know the repeat:
		// both are written, and the routers deduplicate.
		return fmt.Errorf("without a ledger both copies are written, none known as a repeat: %+v %+v", first, again)
	case again.Partition != first.Partition:
		return fmt.Errorf("the copies are on partitions %d and %d, want one (the key's)", first.Partition, again.Partition)
	}

	// The records as a router reads them: CloudEvents binary mode, keyed
	// by the idempotency key.
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics("events"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cl.Close()
	var got []*kgo.Record
	for len(got) < 2 {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return fmt.Errorf("reading the records back: %w", err)
		}
		got = append(got, fs.Records()...)
	}
	for _, r := range got {
		ceID := ""
		for _, h := range r.Headers {
			if h.Key == "ce_id" {
				ceID = string(h.Value)
			}
		}
		fmt.Printf("record: key %s, ce_id %s, value %s\n", r.Key, ceID, r.Value)
		if string(r.Key) != "order-1" || ceID != "order-1" || string(r.Value) != `{"total":12.5}` {
			return fmt.Errorf("record %+v, want key and ce_id order-1 and the data as JSON", r)
		}
	}

	// A refusal is typed: an event without a type is refused before it
	// is written.
	_, err = c.Enqueue(ctx, client.Event{IdempotencyKey: "order-2"})
	var invalid *client.InvalidEventError
	if !errors.As(err, &invalid) || invalid.Reason != "missing_type" {
		return fmt.Errorf("an event without a type: %v, want *client.InvalidEventError missing_type", err)
	}
	fmt.Println("refused:", invalid.Reason)
	return nil
}
