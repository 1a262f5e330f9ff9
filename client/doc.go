// Package client is the producer's side of dedup: a Go program enqueues an
// event with an idempotency key and learns which workflows dedup's routes
// give it, then asks what became of them.
//
// # Configuration
//
// EventID and Routes must be the routers' own: they decide the event and
// workflow IDs. Both types carry the yaml tags of the routers' config
// file, so a program can read the event_id and routes sections of that
// file with a YAML library that honours yaml tags (go.yaml.in/yaml/v3,
// gopkg.in/yaml.v3). Start from eventid.DefaultConfig(), as the routers
// do; New fills the routes' defaults. (dedup's own loader also expands
// ${VAR} references, which a plain yaml.Unmarshal does not.)
//
//	var routers struct {
//		EventID eventid.Config   `yaml:"event_id"`
//		Routes  decide.Routes `yaml:"routes"`
//	}
//	routers.EventID = eventid.DefaultConfig()
//	if err := yaml.Unmarshal(routersConfigFile, &routers); err != nil { ... }
//
//	c, err := client.New(client.Config{
//		Topic:     "events",  // one of the routers' kafka.topics
//		EventID:   routers.EventID,
//		Routes:    routers.Routes,
//		Namespace: "default", // temporal.namespace
//		KafkaOpts: []kgo.Opt{kgo.SeedBrokers("kafka:9092")}, // and kgo.DialTLSConfig, kgo.SASL
//		// Optional: repeats and conflicts at enqueue time, and Status.
//		Ledger: ledgerReader, // ledgerread.Open(ctx, url, ledgerread.Options{})
//		// Optional: Status's run and Result.
//		Runs: temporalread.New(temporalClient, nil),
//	})
//	h, err := c.Enqueue(ctx, client.Event{Type: "order.created", Source: "shop",
//		IdempotencyKey: "order-123", Data: order})
//	st, err := h.Status(ctx)  // ledger state, Temporal run ID and status
//	err = h.Result(ctx, &out) // waits for the workflow's result
//
// The readers are interfaces of this package (LedgerReader, RunReader),
// so that a program that only enqueues links Kafka's client and the
// routers' decision code (processor/decide, processor/eventid) and
// nothing else: no PostgreSQL driver, no Temporal SDK, no gRPC, no router,
// no Prometheus (client/deps_test.go holds the list). sink/ledger/ledgerread
// reads the routers' PostgreSQL ledger over read-only sessions;
// client/temporalread reads Temporal through an SDK client
// (sdkclient.NewLazyClient connects on the first read). Importing the
// package has no side effects: nothing is registered, nothing global is
// set.
//
// # What it guarantees
//
//   - Enqueue returns after Kafka acknowledged the record (an idempotent
//     producer, acks from all in-sync replicas): an enqueued event is not
//     lost. It writes one CloudEvents binary-mode record: ce_id is the
//     idempotency key, which is the event ID, and the Kafka record key (one
//     key, one partition). Without an acknowledgement it returns a
//     *ProduceError: the record may or may not be written, and a retry
//     with the same key is safe.
//   - The workflow IDs of the handle are computed by the routers' own code:
//     the record Enqueue writes is decided by decide.Decider (eventid,
//     then Routes.Targets), as a router decides it, under the same event_id
//     and routes config.
//   - Enqueue with one key twice gives the same event ID and workflow IDs,
//     and once started the same run: the ledger and Temporal keep one
//     execution per workflow ID. Handle.Repeat says the ledger holds every
//     workflow of the event with this payload. A repeat whose workflows the
//     ledger holds started writes nothing, unless a route's
//     id_reuse_policy is allow_*: there the repeat is written, and the
//     router runs a failed (or closed) run again as the policy says.
//   - Enqueue with one key and another payload returns a *ConflictError
//     when the ledger already holds the key's first payload; it never
//     starts a workflow. The first such record is written, so that the
//     router records the conflict (dedup_conflicts, the dead-letter topic,
//     the conflict metric) as it does for every producer; once the ledger
//     shows the conflict recorded (the same other payload), sending it
//     again writes nothing (Handle.Produced false). While the first record
//     still waits in Kafka (not claimed yet, usually well under a second),
//     the ledger cannot know: Enqueue succeeds, and the router finds the
//     conflict; Status then says Conflict.
//   - Kafka is the only dependency Enqueue needs: a ledger lookup that
//     fails or takes longer than Config.LookupTimeout (2s) is logged and
//     the record is written without the ledger's answer.
//
// # Errors
//
// Every error a caller may act on is typed: ErrNoKey, *InvalidEventError
// and *KeyMismatchError (refused, nothing written; sending it again fails
// again), *ConflictError (errors.Is ErrConflict), *ProduceError (retry
// with the same key), *ConfigError (New; names the field), and for Status
// and Result: ErrUnknownWorkflow, ErrNotStarted, *WorkflowError,
// ErrSeveralWorkflows, ErrNoRuns and ErrNoLedger (a reader the call needs
// is not configured).
//
// It does not deduplicate by itself: the routers do, by event ID. Two keys
// for one business fact are two events.
//
// # Why a top-level folder
//
// It is a library for producers, imported by their programs: not part of
// the event path (processor → sink reads what producers wrote) but the
// other end of the contract, the side that writes an event and asks what
// became of it. It never decides anything the router decides: it calls
// the router's Decider on the record it is about to write. It imports no
// internal/ package; its readers are implemented read-only by
// sink/ledger/ledgerread (the one copy of the lookup query, which
// sink/ledger's Lookup runs too; no migrations) and client/temporalread
// (the Temporal SDK). client/deps_test.go and make stranger (a module of
// its own, client/testdata/stranger) hold what it links. dedup ingress
// (internal/ingress) is the same client behind HTTP; dedup's own commands
// open it from the config file (internal/app/client.go).
package client
