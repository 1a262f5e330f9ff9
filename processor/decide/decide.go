package decide

import (
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/processor/tenantsig"
	"github.com/dedupio/dedup/schemas"
)

// Decision is what the router decides for one record before it asks the
// ledger: the decoded event, and either one intent per matching route (its
// start request built on demand, Start), or why the record goes no
// further: dead-lettered before any claim (DeadLetter), or skipped because
// no route matches (NoRoute under kafka.no_route: skip).
//
// It is the one implementation of that step: the router's poll loop and
// the operators' dedup explain and dedup offsets reset's plan all call
// Decider.Decide, so what they print is what the router does.
type Decision struct {
	// Event is the decoded event; its zero value when decoding failed.
	Event eventid.Event
	// DeadLetter, when set, is why the record is dead-lettered without a
	// claim (undecodable, missing_type, invalid_id, no_id, forged_tenant, oversized,
	// no_route under kafka.no_route: dead_letter), and Err what was wrong.
	DeadLetter Reason
	Err        error
	// NoRoute: no route matches the event. Under kafka.no_route: skip the
	// record is skipped (committed, nothing else); under dead_letter,
	// DeadLetter is ReasonNoRoute.
	NoRoute bool
	// Tombstone: a null value without CloudEvents headers (log
	// compaction's delete marker) is no event: the record is skipped and
	// counted (dedup_records_tombstone_total), never dead-lettered.
	Tombstone bool
	// Routes are the matching routes, in table order; Intents hold one
	// intent per route, in the same order (none when the record is
	// dead-lettered: a route keyed by scheduled_for whose event has no
	// usable data.scheduled_for dead-letters the record as undecodable).
	// Start(j) is intent j's start request.
	Routes  []*Route
	Intents []Intent
	// Entities[j] is intent j's entity workflow ID when route j is a
	// signal route (the intent's WorkflowID is then the delivery key,
	// signal-{route}:{event_id}), else "".
	Entities []string
}

// Start builds the start request of Intents[j]. It is built on demand,
// not by Decide: a duplicate (most records of a replay) never needs one.
func (d *Decision) Start(j int) StartRequest {
	rt, wid := d.Routes[j], d.Intents[j].WorkflowID
	in := &d.Intents[j]
	if rt.Mode == ModeSignal {
		req := NewSignalRequest(rt, &d.Event, d.Entities[j])
		req.Record = &RecordRef{Topic: in.Topic, Partition: in.Partition, Offset: in.Offset}
		return req
	}
	req := NewStartRequest(rt, &d.Event, wid)
	req.Record = &RecordRef{Topic: in.Topic, Partition: in.Partition, Offset: in.Offset}
	if rt.Key == KeyScheduledFor {
		p, _ := ParseWorkflowID(wid) // WorkflowID(rt.ID, slot key)
		req.Input.TriggerKind, req.Input.ScheduledFor = schemas.TriggerCron, p.Key
	}
	return req
}

// Skipped reports whether the record ends without a claim or a dead
// letter: no route matches and kafka.no_route is skip.
func (d *Decision) Skipped() bool { return d.NoRoute && d.DeadLetter == "" }

// Decider decides records under one router config. It is pure (no I/O,
// no clock) and safe for concurrent use.
type Decider struct {
	cfg    Config
	dec    *eventid.Decoder
	values ValueReader // nil: no values in a registry's wire format (values.go)
}

// NewDecider builds the decider of cfg. It validates a copy of the
// routes (Routes.Validate fills their defaults, as the router's config
// does), and takes the routers' defaults for the fields left zero
// (MaxValueBytes: DefaultMaxValueBytes; NoRoute: "skip"), so that a
// Decider built from the routers' sections decides as the router does; a
// bad field is an error naming it. It reads the tenant keyring
// (TenantKeysFile, unless TenantKeys is given): the one file a Decider
// reads, again when it changes.
func NewDecider(cfg Config) (*Decider, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	dec, err := eventid.NewDecoder(cfg.EventID)
	if err != nil {
		return nil, err
	}
	if cfg.TenantKeys == nil && cfg.TenantKeysFile != "" {
		if cfg.TenantKeys, err = tenantsig.Load("kafka.tenant_keys_file", cfg.TenantKeysFile); err != nil {
			return nil, err
		}
	}
	if cfg.TenantKeys != nil {
		dec = dec.WithTenantKeys(cfg.TenantKeys)
	}
	return &Decider{cfg: cfg, dec: dec, values: cfg.Values}, nil
}

// SignTenant signs kr, which carries the tenant header
// (eventid.TenantHeader), with the decider's tenant keyring: it sets the
// tenantsig.Header header (replacing one kr had). Only dedup ingress
// holds the keyring; without it, SignTenant is an error, and Decide
// dead-letters every record that carries the tenant header
// (ReasonForgedTenant).
func (d *Decider) SignTenant(kr *kgo.Record) error {
	kr.Headers = slices.DeleteFunc(kr.Headers, func(h kgo.RecordHeader) bool { return h.Key == tenantsig.Header })
	sig, err := d.dec.SignTenant(eventid.FromKafka(kr))
	if err != nil {
		return err
	}
	kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: tenantsig.Header, Value: []byte(sig)})
	return nil
}

// Decide decodes kr, derives its event ID, matches the routes and builds
// their workflow IDs.
func (d *Decider) Decide(kr *kgo.Record) Decision {
	if len(kr.Value) > d.cfg.MaxValueBytes {
		return Decision{DeadLetter: ReasonOversized,
			Err: fmt.Errorf("value is %d bytes, over max_value_bytes %d", len(kr.Value), d.cfg.MaxValueBytes)}
	}
	er, err := d.readValue(eventid.ReadKafka(kr)) // read only: no copy of the headers
	var ev eventid.Event
	if err == nil {
		ev, err = d.dec.Decode(er)
	}
	if eventid.ReasonOf(err) == eventid.ReasonTombstone {
		return Decision{Tombstone: true, Err: err}
	}
	if err != nil {
		return Decision{DeadLetter: Reason(eventid.ReasonOf(err)), Err: err}
	}
	var buf [8]*Route // on the stack: routesAndIntents copies what matched
	matched := d.cfg.Routes.appendMatch(buf[:0], &ev)
	out := Decision{Event: ev}
	if len(matched) == 0 {
		out.NoRoute = true
		if d.cfg.NoRoute == "dead_letter" {
			out.DeadLetter, out.Err = ReasonNoRoute, fmt.Errorf("no route matches type %q source %q", ev.Type, ev.Source)
		}
		return out
	}
	// Routes.Targets, on the routes matched once, without its slice: each
	// target goes straight into its intent.
	out.Routes, out.Intents = routesAndIntents(matched)
	for j, rt := range out.Routes {
		tg, err := targetOf(rt, &ev)
		if err != nil {
			out.Intents, out.Entities = nil, nil
			out.DeadLetter, out.Err = ReasonUndecodable, err
			if errors.Is(err, ErrWorkflowIDTooLong) || errors.Is(err, ErrWorkflowIDReserved) {
				out.DeadLetter = ReasonInvalidID
			}
			return out
		}
		if tg.Entity != "" {
			if out.Entities == nil {
				out.Entities = make([]string, len(out.Routes))
			}
			out.Entities[j] = tg.Entity
		}
		hash := ev.PayloadHash
		if rt.Key == KeyScheduledFor {
			// A slot is one run whoever fires it: every fire of it hashes
			// equal, so a second fire (another scheduler's, a retry, dedup's
			// own scheduler's) is a duplicate, never a conflict.
			hash = SlotPayloadHash(rt.ID, tg.Key)
		}
		out.Intents[j] = Intent{
			WorkflowID: tg.WorkflowID, ActivityID: rt.ID, EventID: ev.ID, IDRule: string(ev.Rule),
			PayloadHash: hash, Topic: kr.Topic, Partition: kr.Partition, Offset: kr.Offset,
		}
	}
	return out
}

// routesAndIntents returns a copy of matched and as many zero intents, in
// one allocation for the one or two routes most records match: every
// record that reaches the ledger pays it, a replay's duplicates included.
// Each slice is capped at its length, so that an append to one cannot
// write into the other.
func routesAndIntents(matched []*Route) ([]*Route, []Intent) {
	switch len(matched) {
	case 1:
		b := new(struct {
			r [1]*Route
			i [1]Intent
		})
		b.r[0] = matched[0]
		return b.r[:], b.i[:]
	case 2:
		b := new(struct {
			r [2]*Route
			i [2]Intent
		})
		copy(b.r[:], matched)
		return b.r[:], b.i[:]
	}
	return slices.Clone(matched), make([]Intent, len(matched))
}
