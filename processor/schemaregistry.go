package processor

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/connect/schemaregistry"
	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/processor/srdecode"
)

// This file is the router's side of Schema Registry values
// (kafka.schema_registry): the I/O (Resolve, before a poll batch is
// decided) and the pure step of Decide that reads a framed value as its
// logical JSON (registryValue). What a value decodes to is srdecode's.

// newSchemaRegistry is cfg's registry, nil when none is configured. It
// does no network I/O.
func newSchemaRegistry(cfg Config) (*srdecode.Registry, error) {
	if !cfg.SchemaRegistry.On() {
		return nil, nil
	}
	cl, err := schemaregistry.NewClient(cfg.SchemaRegistry, "kafka.schema_registry")
	if err != nil {
		return nil, err
	}
	return srdecode.New(cl), nil
}

// Resolve fetches the schemas that the framed values of krs name and the
// decider has not cached yet, so that Decide (pure) can read them. Its
// error is transient (the registry could not answer): call it again; a
// schema ID the registry does not have is no error here, Decide
// dead-letters its records (undecodable). Without a registry it does
// nothing.
func (d *Decider) Resolve(ctx context.Context, krs []*kgo.Record) error {
	if d.reg == nil {
		return nil
	}
	vs := make([][]byte, 0, len(krs))
	for _, kr := range krs {
		if srdecode.Framed(kr.Value) {
			vs = append(vs, kr.Value)
		}
	}
	if len(vs) == 0 {
		return nil
	}
	if err := d.reg.Resolve(ctx, vs); err != nil {
		return fmt.Errorf("resolving schemas: %w", err)
	}
	return nil
}

// registryValue is r with its logical value (Record.Decoded) when a
// registry is configured and r's value is in its wire format. A value that
// does not decode, or names a schema the registry does not have, is
// undecodable, with the schema ID in the reason; so is one whose schema
// was not resolved (a caller that skipped Resolve).
func (d *Decider) registryValue(r eventid.Record) (eventid.Record, error) {
	if d.reg == nil || !srdecode.Framed(r.Value) {
		return r, nil
	}
	v, err := d.reg.Decode(r.Value)
	if err != nil {
		return r, &eventid.Error{Reason: eventid.ReasonUndecodable, Err: fmt.Errorf("schema registry value: %w", err)}
	}
	r.Decoded = v
	return r, nil
}

// resolve is the poll loop's Resolve of a batch of n records (kr(i),
// rec(i)), before they are decided: retried like the ledger (backoff,
// schema_registry down after retry.max, the fetch paused), so a registry
// that cannot answer holds the batch, uncommitted, and never dead-letters
// it. It returns false only when ctx ended first: the batch's records are
// then abandoned (never committed; the next owner reads them again).
func (r *Router) resolve(ctx context.Context, n int, kr func(int) *kgo.Record, rec func(int) *record) bool {
	if r.decider.reg == nil {
		return true
	}
	krs := make([]*kgo.Record, n)
	for i := range n {
		krs[i] = kr(i)
	}
	err := r.health.retry(ctx, OpResolve, func(ctx context.Context) error { return r.decider.Resolve(ctx, krs) })
	if err == nil {
		return true
	}
	for i := range n {
		r.commits.end(rec(i), false)
	}
	return false
}
