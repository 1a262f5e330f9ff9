package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/client"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
)

// exampleRoutes are the routers' routes section; the examples pass the
// routers' event_id section as eventid.DefaultConfig().
var exampleRoutes = decide.Routes{
	{ID: "order-confirmation", Match: decide.Match{Type: "order.created"}, WorkflowType: "ConfirmOrder", TaskQueue: "orders"},
}

// memLedger is an example of implementing client.LedgerReader: an
// in-memory ledger. In production, sink/ledger/ledgerread.Reader reads the
// routers' PostgreSQL ledger.
type memLedger struct {
	mu   sync.Mutex
	rows map[string]client.LedgerEntry
}

// Its entries hold every conflict hash, so it needs no payloadHashes.
func (l *memLedger) Lookup(_ context.Context, workflowIDs []string, _ ...[32]byte) (map[string]client.LedgerEntry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]client.LedgerEntry{}
	for _, id := range workflowIDs {
		if e, ok := l.rows[id]; ok {
			out[id] = e
		}
	}
	return out, nil
}

// memRuns is an example of implementing client.RunReader: in-memory
// Temporal runs whose results are JSON. In production,
// client/temporalread.Reader reads them from Temporal.
type memRuns struct {
	mu   sync.Mutex
	runs map[string]memRun // by workflow ID
}

type memRun struct {
	id     string
	result json.RawMessage
}

func (r *memRuns) Describe(_ context.Context, _, workflowID string) (client.Run, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	run, ok := r.runs[workflowID]
	if !ok {
		return client.Run{}, false, nil
	}
	return client.Run{ID: run.id, Status: "completed"}, true, nil
}

func (r *memRuns) Outcome(_ context.Context, _, workflowID, _ string, _ bool) (client.Outcome, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	run, ok := r.runs[workflowID]
	if !ok {
		return client.Outcome{}, false, nil
	}
	return client.Outcome{Status: "completed", Decode: func(out any) error { return json.Unmarshal(run.result, out) }}, true, nil
}

// exampleRouter plays the routers' part for the examples: it reads the
// records the client wrote, decides them with the routers' own code
// (decide.Decider), claims them in memLedger, records conflicts, and
// "runs" each new workflow at once in memRuns.
type exampleRouter struct {
	cl   *kgo.Client
	dec  *decide.Decider
	led  *memLedger
	runs *memRuns
}

// route handles the next n records.
func (r *exampleRouter) route(n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for n > 0 {
		fs := r.cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			log.Fatal(err)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			n--
			d := r.dec.Decide(rec)
			r.led.mu.Lock()
			defer r.led.mu.Unlock()
			for _, in := range d.Intents {
				e, ok := r.led.rows[in.WorkflowID]
				switch {
				case !ok:
					r.led.rows[in.WorkflowID] = client.LedgerEntry{WorkflowID: in.WorkflowID, EventID: in.EventID, State: decide.LedgerStarted,
						PayloadHash: in.PayloadHash, RunID: "run-1", Generation: 1}
					r.runs.mu.Lock()
					r.runs.runs[in.WorkflowID] = memRun{id: "run-1", result: json.RawMessage(`{"confirmed":true}`)}
					r.runs.mu.Unlock()
				case e.PayloadHash != in.PayloadHash:
					e.Conflicts++
					if !slices.Contains(e.ConflictHashes, in.PayloadHash) {
						e.ConflictHashes = append(e.ConflictHashes, in.PayloadHash)
					}
					r.led.rows[in.WorkflowID] = e
				}
			}
		})
	}
}

// exampleSetup starts an in-process Kafka (kfake), the example router, and
// a client with the in-memory readers.
func exampleSetup() (*client.Client, *exampleRouter, func()) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "events"))
	if err != nil {
		log.Fatal(err)
	}
	routes := slices.Clone(exampleRoutes)
	if err := routes.Validate(); err != nil {
		log.Fatal(err)
	}
	dec, err := decide.NewDecider(decide.Config{EventID: eventid.DefaultConfig(), Routes: routes, MaxValueBytes: 1 << 20, NoRoute: "skip"})
	if err != nil {
		log.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics("events"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		log.Fatal(err)
	}
	led, runs := &memLedger{rows: map[string]client.LedgerEntry{}}, &memRuns{runs: map[string]memRun{}}
	c, err := client.New(client.Config{
		Topic:     "events",
		EventID:   eventid.DefaultConfig(),
		Routes:    exampleRoutes,
		Namespace: "default",
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)},
		Ledger:    led,
		Runs:      runs,
	})
	if err != nil {
		log.Fatal(err)
	}
	return c, &exampleRouter{cl: cl, dec: dec, led: led, runs: runs}, func() { c.Close(); cl.Close(); cluster.Close() }
}

func ExampleClient_Enqueue() {
	c, _, done := exampleSetup()
	defer done()
	h, err := c.Enqueue(context.Background(), client.Event{Type: "order.created", Source: "shop",
		IdempotencyKey: "order-123", Data: map[string]any{"total": 12.5}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("event", h.EventID, "by rule", h.IDRule)
	fmt.Println("workflows", h.WorkflowIDs())
	fmt.Println("written", h.Produced, "at offset", h.Offset)
	// Output:
	// event order-123 by rule header
	// workflows [activity-order-confirmation:order-123]
	// written true at offset 0
}

// The same key twice: the same event and workflow IDs. Once a router has
// started the workflow, the repeat writes nothing and says it is one.
func ExampleClient_Enqueue_sameKeyTwice() {
	c, router, done := exampleSetup()
	defer done()
	ctx := context.Background()
	ev := client.Event{Type: "order.created", IdempotencyKey: "order-7", Data: map[string]int{"total": 7}}
	first, err := c.Enqueue(ctx, ev)
	if err != nil {
		log.Fatal(err)
	}
	router.route(1)
	again, err := c.Enqueue(ctx, ev)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("same workflows:", slices.Equal(first.WorkflowIDs(), again.WorkflowIDs()))
	fmt.Println("first: written", first.Produced, "repeat", first.Repeat)
	fmt.Println("again: written", again.Produced, "repeat", again.Repeat)
	// Output:
	// same workflows: true
	// first: written true repeat false
	// again: written false repeat true
}

// The same key with another payload is a conflict: the first payload's
// workflow keeps its run. The first conflict is written, so that the
// routers record it; once recorded, the same conflict is not written
// again.
func ExampleClient_Enqueue_conflict() {
	c, router, done := exampleSetup()
	defer done()
	ctx := context.Background()
	if _, err := c.Enqueue(ctx, client.Event{Type: "order.created", IdempotencyKey: "order-9", Data: map[string]int{"total": 9}}); err != nil {
		log.Fatal(err)
	}
	router.route(1)
	other := client.Event{Type: "order.created", IdempotencyKey: "order-9", Data: map[string]int{"total": 99}}
	for range 2 {
		h, err := c.Enqueue(ctx, other)
		var conflict *client.ConflictError
		if !errors.As(err, &conflict) {
			log.Fatalf("want a conflict, got %v", err)
		}
		fmt.Println("conflict on", conflict.WorkflowIDs, "written", h.Produced)
		if h.Produced {
			router.route(1) // the router records the conflict
		}
	}
	// Output:
	// conflict on [activity-order-confirmation:order-9] written true
	// conflict on [activity-order-confirmation:order-9] written false
}

func ExampleClient_Status() {
	c, router, done := exampleSetup()
	defer done()
	ctx := context.Background()
	h, err := c.Enqueue(ctx, client.Event{Type: "order.created", IdempotencyKey: "order-5"})
	if err != nil {
		log.Fatal(err)
	}
	st, err := c.Status(ctx, h.WorkflowIDs()[0])
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("before a router: ledger %q, temporal %q\n", st.Ledger, st.Temporal)
	router.route(1)
	st, err = c.Status(ctx, h.WorkflowIDs()[0])
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("after: ledger %q, run %s %s, result %s\n", st.Ledger, st.RunID, st.Temporal, st.Result)
	// Output:
	// before a router: ledger "", temporal ""
	// after: ledger "started", run run-1 completed, result {"confirmed":true}
}

func ExampleHandle_Result() {
	c, router, done := exampleSetup()
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := c.Enqueue(ctx, client.Event{Type: "order.created", IdempotencyKey: "order-6"})
	if err != nil {
		log.Fatal(err)
	}
	go router.route(1)
	var out struct {
		Confirmed bool `json:"confirmed"`
	}
	if err := h.Result(ctx, &out); err != nil { // waits for the router, then the run
		log.Fatal(err)
	}
	fmt.Println("confirmed:", out.Confirmed)
	// Output:
	// confirmed: true
}
