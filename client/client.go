package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"

	"github.com/dedupio/dedup/connect/dialguard"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/processor/tenantsig"
)

// Config is what a Client needs. EventID and Routes must be the routers'
// (the event_id and routes sections of their config file): they decide
// the event and workflow IDs.
type Config struct {
	// Topic is where events are written: one of the topics the routers
	// consume (kafka.topics).
	Topic   string
	EventID eventid.Config
	Routes  decide.Routes
	// Namespace is the Temporal namespace of routes that name none
	// (temporal.namespace).
	Namespace string
	// MaxValueBytes is the routers' kafka.max_value_bytes: a larger event
	// is refused (*InvalidEventError, reason oversized) rather than
	// written and dead-lettered. 0: 1 MiB.
	MaxValueBytes int
	// KafkaOpts say how to reach Kafka: the seed brokers
	// (kgo.SeedBrokers), TLS (kgo.DialTLSConfig) and SASL (kgo.SASL). The
	// client adds its producer settings (idempotent, acks from all
	// in-sync replicas, DefaultProduceTopic Topic), which override the
	// same options here.
	KafkaOpts []kgo.Opt
	// AllowInsecure lets SASL (kgo.SASL) reach a broker not on this
	// machine without TLS, or over TLS that does not verify it
	// (InsecureSkipVerify): anyone on the path could read or replay the
	// credentials. Without it, every broker the producer dials (the seeds
	// and every one their metadata advertises) is checked at the dial and
	// such a dial is refused (connect/dialguard), unless KafkaOpts has a
	// kgo.Dialer of its own, which is the caller's to check. dedup's
	// config calls it kafka.allow_insecure.
	AllowInsecure bool
	// Propagator, if set (tracing.Propagator()), writes the trace context
	// of Send's ctx into the record's headers (traceparent, tracestate,
	// baggage), where the routers continue it (docs/tracing.md); nil
	// writes none.
	Propagator propagation.TextMapPropagator
	// Ledger answers, at enqueue time, whether the routers hold the event
	// already (Handle.Repeat; a started repeat is not written again) or
	// hold its key with another payload (*ConflictError), and the ledger
	// part of Status and Result. nil: none of these; Enqueue always
	// writes. sink/ledger/ledgerread.Reader is PostgreSQL's, read-only.
	Ledger LedgerReader
	// LookupTimeout bounds each ledger lookup Send makes. A lookup that
	// fails or takes longer is logged, and the event is written without
	// the ledger's answer (no conflict known, Repeat false): Kafka is the
	// one dependency Enqueue needs. 0: 2s.
	LookupTimeout time.Duration
	// Runs answers the Temporal part of Status (the run, its outcome) and
	// Result. nil: Status has no Temporal part and Result returns
	// ErrNoRuns. client/temporalread reads them through a Temporal SDK
	// client.
	Runs   RunReader
	Logger *slog.Logger
	// TenantKeys is the tenant keyring (kafka.tenant_keys_file) of dedup
	// ingress: with it, Prepare signs a record that carries the tenant
	// header (eventid.TenantHeader) so that the routers take it as the
	// tenant's. nil (every producer but the ingress): Prepare refuses such
	// a record (*InvalidEventError, reason forged_tenant), as a router
	// would dead-letter it.
	TenantKeys *tenantsig.Keyring
	// OnClose, if set, runs when the Client is closed, after its producer:
	// for what the caller opened for it (the ledger's pool, the Temporal
	// client).
	OnClose func()
}

// DefaultLookupTimeout is Config.LookupTimeout's default.
const DefaultLookupTimeout = 2 * time.Second

// Client enqueues events and answers their status. It is safe for
// concurrent use.
type Client struct {
	cfg    Config
	dec    *decide.Decider
	kcl    *kgo.Client
	led    LedgerReader
	runs   RunReader
	log    *slog.Logger
	closer func()

	closeOnce sync.Once
	closed    atomic.Bool
}

// New validates cfg (a *ConfigError names the field) and creates the
// Kafka producer, which connects on first use: New does not wait for
// Kafka, PostgreSQL or Temporal. Close closes the producer and runs
// cfg.OnClose.
func New(cfg Config) (*Client, error) {
	if cfg.Topic == "" {
		return nil, &ConfigError{Field: "Topic", Err: errors.New("empty")}
	}
	if cfg.MaxValueBytes <= 0 {
		cfg.MaxValueBytes = 1 << 20
	}
	switch {
	case cfg.LookupTimeout < 0:
		return nil, &ConfigError{Field: "LookupTimeout", Err: fmt.Errorf("%s, want > 0 (0: %s)", cfg.LookupTimeout, DefaultLookupTimeout)}
	case cfg.LookupTimeout == 0:
		cfg.LookupTimeout = DefaultLookupTimeout
	}
	cfg.Routes = slices.Clone(cfg.Routes)
	if err := cfg.Routes.Validate(); err != nil {
		return nil, &ConfigError{Field: "Routes", Err: err}
	}
	if err := cfg.EventID.Validate(); err != nil {
		return nil, &ConfigError{Field: "EventID", Err: err}
	}
	// The router's own decision, under the routers' event_id, routes and
	// max_value_bytes (no_route skip: the client refuses such an event
	// either way).
	dec, err := decide.NewDecider(decide.Config{EventID: cfg.EventID, Routes: cfg.Routes, MaxValueBytes: cfg.MaxValueBytes, NoRoute: "skip",
		TenantKeys: cfg.TenantKeys, Values: registryFramed{}})
	if err != nil {
		return nil, &ConfigError{Field: "EventID", Err: err}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	// Idempotent writes (franz-go's default) with acks from every in-sync
	// replica: a retried batch is written once, and an acknowledged record
	// survives a broker's loss. No linger: Enqueue waits for each record.
	kopts, err := dialguard.GuardKafka(cfg.KafkaOpts, cfg.AllowInsecure)
	if err != nil {
		return nil, &ConfigError{Field: "KafkaOpts", Err: err}
	}
	kcl, err := kgo.NewClient(append(slices.Clone(kopts),
		kgo.DefaultProduceTopic(cfg.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		kgo.ProducerBatchMaxBytes(int32(cfg.MaxValueBytes)+64<<10),
	)...)
	if err != nil {
		return nil, &ConfigError{Field: "KafkaOpts", Err: err}
	}
	return &Client{cfg: cfg, dec: dec, kcl: kcl, led: cfg.Ledger, runs: cfg.Runs, log: cfg.Logger, closer: cfg.OnClose}, nil
}

// Close flushes nothing (every Enqueue waited for its record) and closes
// the producer, then runs Config.OnClose.
func (c *Client) Close() {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		c.kcl.Close()
		if c.closer != nil {
			c.closer()
		}
	})
}

// ErrClosed is returned by a Client's calls after Close.
var ErrClosed = errors.New("client: closed")

// Ready says whether Kafka answers (a metadata request): the one
// dependency Enqueue needs.
func (c *Client) Ready(ctx context.Context) error {
	if err := c.kcl.Ping(ctx); err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	return nil
}

// Topic is where the client writes.
func (c *Client) Topic() string { return c.cfg.Topic }

// Enqueue decides ev as a router will (Prepare) and sends it (Send): it
// writes ev to Kafka, waits for the acknowledgement, and returns its
// handle: the event ID (the key) and the workflow IDs the routes give it.
// A key the routers' event_id config would not take as the ID is a
// *KeyMismatchError, nothing written. With a *ConflictError it returns the
// handle too (see Send).
func (c *Client) Enqueue(ctx context.Context, ev Event) (*Handle, error) {
	r, err := ev.Record()
	if err != nil {
		return nil, err
	}
	p, err := c.Prepare(r)
	if err != nil {
		return nil, err
	}
	if p.Event.ID != ev.IdempotencyKey {
		return nil, &KeyMismatchError{Key: ev.IdempotencyKey, EventID: p.Event.ID, Rule: p.Event.Rule}
	}
	return c.Send(ctx, p)
}

// Prepared is a record decided as a router will: its event and
// workflows, before it is written.
type Prepared struct {
	rec     *kgo.Record
	Event   eventid.Event
	Targets []decide.Target
	hashes  [][32]byte // each workflow's payload hash, as the router claims it
}

// Prepare decides r as a router will (decide.Decider: eventid under
// the routers' event_id config, then the routes). An event a router would
// dead-letter or skip is refused here: *InvalidEventError (undecodable,
// missing_type, invalid_id, forged_tenant, oversized, no_route) or
// ErrNoKey (no ID, or one known only once written: the coordinates rule).
// A record that carries the tenant header is signed when the client has
// Config.TenantKeys, and refused (forged_tenant) when it has not.
func (c *Client) Prepare(r *kgo.Record) (*Prepared, error) {
	r.Topic = c.cfg.Topic
	signed := c.cfg.TenantKeys != nil && slices.ContainsFunc(r.Headers, func(h kgo.RecordHeader) bool { return h.Key == eventid.TenantHeader })
	if signed {
		if err := c.dec.SignTenant(r); err != nil {
			return nil, &InvalidEventError{Reason: string(decide.ReasonForgedTenant), Err: err}
		}
	}
	probe := *r
	probe.Partition, probe.Offset = -1, -1 // not written yet
	d := c.dec.Decide(&probe)
	switch {
	case d.Tombstone:
		return nil, &InvalidEventError{Reason: string(eventid.ReasonTombstone), Err: d.Err}
	case d.DeadLetter == decide.Reason(eventid.ReasonNoID):
		return nil, fmt.Errorf("%w: %v", ErrNoKey, d.Err)
	case d.DeadLetter != "":
		return nil, &InvalidEventError{Reason: string(d.DeadLetter), Err: d.Err}
	case d.NoRoute:
		return nil, &InvalidEventError{Reason: string(decide.ReasonNoRoute),
			Err: fmt.Errorf("no route matches type %q source %q: no workflow would start", d.Event.Type, d.Event.Source)}
	case d.Event.Rule == eventid.RuleCoordinates:
		return nil, fmt.Errorf("%w: event_id.chain gives this event the ID of where it will be written (coordinates), which no retry repeats", ErrNoKey)
	}
	ev := d.Event
	targets := make([]decide.Target, len(d.Intents))
	hashes := make([][32]byte, len(d.Intents))
	for i, in := range d.Intents {
		targets[i] = decide.Target{Route: d.Routes[i], WorkflowID: in.WorkflowID}
		hashes[i] = in.PayloadHash // the ledger's per workflow (a schedule slot's is the slot's)
	}
	if r.Key == nil && ev.Rule != eventid.RuleContent {
		// Every copy of one event on one partition (the record key is not
		// part of header and field IDs, nor of the payload hash).
		r.Key = []byte(ev.ID)
		if signed {
			// The signature covers the key: signed again, the decision
			// unchanged (the key is not part of this rule's ID).
			if err := c.dec.SignTenant(r); err != nil {
				return nil, &InvalidEventError{Reason: string(decide.ReasonForgedTenant), Err: err}
			}
		}
	}
	return &Prepared{rec: r, Event: ev, Targets: targets, hashes: hashes}, nil
}

// Send asks the ledger (Config.Ledger, within Config.LookupTimeout) what
// it holds for the prepared event's workflows, writes the record unless
// the routers need it for none of them, and waits for Kafka's
// acknowledgement. The routers need the record for a workflow
// (needsRecord) unless the ledger holds it started with the same payload
// under a reject_duplicate route (a repeat: the router would skip it; an
// allow_* route may run a closed run again, and the router decides), or
// holds it with another payload whose conflict the routers have recorded
// already (a copy of that payload again).
//
// Errors:
//   - *ConflictError (with the handle): the ledger holds the key with
//     another payload for some workflows; they never start for this
//     event. The record was written (Handle.Produced) when the conflict
//     was not recorded yet, so that the router records it (dedup_conflicts,
//     the dead-letter topic, the conflict metric), and not when it was.
//   - *ProduceError: Kafka did not acknowledge the record (ctx ended, or
//     the producer gave up): it may or may not be written; a retry with
//     the same key is safe.
func (c *Client) Send(ctx context.Context, p *Prepared) (*Handle, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	if p == nil || p.rec == nil {
		return nil, errors.New("client: Send takes a *Prepared from Prepare")
	}
	h := c.handle(p)
	write, conflicts := true, []string(nil)
	if c.led != nil {
		lctx, cancel := context.WithTimeout(ctx, c.cfg.LookupTimeout)
		entries, err := c.led.Lookup(lctx, h.WorkflowIDs(), p.hashes...) // each copy's hash: a recorded conflict is known whatever the others
		cancel()
		if err != nil {
			c.log.Warn("ledger lookup failed; writing the event without the ledger's answer", "event_id", p.Event.ID, "err", err)
		} else {
			write, h.Repeat = false, true
			for i, tg := range p.Targets {
				e, ok := entries[tg.WorkflowID]
				needed, conflict := needsRecord(tg.Route, e, ok, &p.hashes[i])
				write = write || needed
				h.Repeat = h.Repeat && ok && e.PayloadHash == p.hashes[i]
				if conflict {
					conflicts = append(conflicts, tg.WorkflowID)
				}
			}
		}
	}
	if write {
		rec := *p.rec
		c.traced(ctx, &rec)
		res, err := c.kcl.ProduceSync(ctx, &rec).First()
		switch {
		case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
			// The broker (or the producer, against its batch limit)
			// refuses the record as it is: a retry would be refused
			// alike, so it is no *ProduceError (which says retry).
			return nil, &InvalidEventError{Reason: string(decide.ReasonOversized),
				Err: fmt.Errorf("the Kafka cluster refuses the record of event %s as too large (value %d bytes, %d headers): %w; send less data or fewer attributes", p.Event.ID, len(rec.Value), len(rec.Headers), err)}
		case err != nil:
			return nil, &ProduceError{EventID: p.Event.ID, Topic: c.cfg.Topic, Err: err}
		}
		h.Produced, h.Topic, h.Partition, h.Offset = true, res.Topic, res.Partition, res.Offset
	}
	if len(conflicts) > 0 {
		return h, &ConflictError{EventID: p.Event.ID, WorkflowIDs: conflicts}
	}
	return h, nil
}

// needsRecord is the rule of Send for one workflow of an event: whether a
// router needs the event's record for it, given the ledger's entry (ok: the
// ledger has one) and the payload hash the router would claim it with, and
// whether the copy conflicts with the entry.
func needsRecord(rt *decide.Route, e LedgerEntry, ok bool, hash *[32]byte) (needed, conflict bool) {
	switch claimVerdict(e, ok, hash).Verdict {
	case decide.VerdictDuplicate:
		// Started with this payload: the router skips the record, unless
		// the route's reuse policy may run a closed run again (the router
		// asks Temporal).
		return rt.MayRerun(), false
	case decide.VerdictConflict:
		// Another payload: the router records the conflict, once per
		// payload; a conflict recorded already needs no second record.
		return !slices.Contains(e.ConflictHashes, *hash), true
	default:
		// New: no router has claimed it yet. Re-drive of a pending row: a
		// router starts it from its record, which is normally still in
		// Kafka; written again all the same, since a stale pending row
		// needs its record again (the runbook's re-drive). Re-claim of a
		// dead-lettered row: the router claims it again. A second record
		// costs a duplicate verdict.
		return true, false
	}
}

func (c *Client) handle(p *Prepared) *Handle {
	h := &Handle{c: c, EventID: p.Event.ID, IDRule: p.Event.Rule, Offset: -1, Partition: -1}
	for i, tg := range p.Targets {
		h.Workflows = append(h.Workflows, Workflow{ID: tg.WorkflowID, ActivityID: tg.Route.ID, Namespace: c.namespace(tg.Route), hash: p.hashes[i]})
	}
	return h
}

func (c *Client) namespace(rt *decide.Route) string {
	if rt.Namespace != "" {
		return rt.Namespace
	}
	return c.cfg.Namespace
}

// Handle is an enqueued event: its ID and the workflows it starts.
type Handle struct {
	EventID string
	IDRule  eventid.Rule
	// Workflows are the workflows the routes give the event, in route
	// table order.
	Workflows []Workflow
	// Produced says this call wrote a record (at Topic, Partition,
	// Offset); false: the routers needed none (see Send).
	Produced bool
	// Repeat says the ledger holds every workflow of the event with this
	// event's payload: the same request was accepted before, whether or
	// not this call wrote a record (under an allow_* route it does). False
	// when the ledger could not say: no Config.Ledger, a failed lookup, or
	// the first copy still waiting in Kafka for a router.
	Repeat    bool
	Topic     string
	Partition int32
	Offset    int64

	c *Client
}

// Workflow is one workflow of an event.
type Workflow struct {
	ID         string
	ActivityID string
	Namespace  string

	hash [32]byte // the payload hash the router claims it with (zero: unknown)
}

// WorkflowIDs are the handle's workflow IDs, in route table order.
func (h *Handle) WorkflowIDs() []string {
	ids := make([]string, len(h.Workflows))
	for i, w := range h.Workflows {
		ids[i] = w.ID
	}
	return ids
}
