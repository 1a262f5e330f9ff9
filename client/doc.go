// Package client is the producer's side of dedup: a Go program enqueues an
// event with an idempotency key and learns which workflows dedup's routes
// give it, then asks what became of them.
//
//	c, err := client.New(client.Config{
//		Topic:     "events",
//		EventID:   eventID, // the routers' event_id and routes sections
//		Routes:    routes,
//		KafkaOpts: []kgo.Opt{kgo.SeedBrokers("kafka:9092")},
//		Ledger:    led, // optional: repeats and conflicts at enqueue time
//		Temporal:  tc,  // optional: Status's run and Result
//	})
//	h, err := c.Enqueue(ctx, client.Event{Type: "order.created", Source: "shop",
//		IdempotencyKey: "order-123", Data: order})
//	st, err := h.Status(ctx)           // ledger state, Temporal run ID and status
//	err = h.Result(ctx, &out)          // waits for the workflow's result
//
// What it guarantees:
//
//   - Enqueue returns after Kafka acknowledged the record (an idempotent
//     producer, acks from all in-sync replicas): an enqueued event is not
//     lost. It writes one CloudEvents binary-mode record: ce_id is the
//     idempotency key, which is the event ID, and the Kafka record key (one
//     key, one partition).
//   - The workflow IDs of the handle are computed by the routers' own code:
//     the record Enqueue writes is decided by processor.Decider (eventid,
//     then Routes.Targets), as a router decides it, under the same event_id
//     and routes config: pass the routers' sections (dedup ingress reads
//     them from the routers' config file).
//   - Enqueue with one key twice gives the same event ID and workflow IDs,
//     and once started the same run: the ledger and Temporal keep one
//     execution per workflow ID. A repeat whose workflows the ledger holds
//     started with the same payload writes nothing, unless a route's
//     id_reuse_policy is allow_*: there the repeat is written, and the
//     router runs a failed (or closed) run again as the policy says.
//   - Enqueue with one key and another payload returns a *ConflictError
//     when the ledger already holds the key's first payload. The record is
//     written all the same, so that the router records the conflict
//     (dedup_conflicts, the dead-letter topic, the conflict metric) as it
//     does for every producer; it never starts a workflow. While the first
//     record still waits in Kafka (not claimed yet, usually well under a
//     second), the ledger cannot know: Enqueue succeeds, and the router
//     finds the conflict; Status then says Conflict.
//   - Kafka is the only dependency Enqueue needs: with PostgreSQL down it
//     still writes the record (without the conflict answer).
//
// It does not deduplicate by itself: the routers do, by event ID. Two keys
// for one business fact are two events.
package client
