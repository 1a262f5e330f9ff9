package processor

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/connect/schemaregistry"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/srdecode"
)

// This file is the router's side of Schema Registry values
// (kafka.schema_registry): the I/O (Resolve, before a poll batch is
// decided) and the pure step of Decide that reads a framed value as its
// logical JSON (registryValue). What a value decodes to is srdecode's.

// NewDecider is the decider of a router's cfg (validated): its decide
// section, with the schema registry's reader when kafka.schema_registry
// is set. It does no network I/O; the registry's secret files are read.
// The operators' tools and dedup validate build theirs with it too.
func NewDecider(cfg Config) (*decide.Decider, error) {
	dc := cfg.Decide()
	if cfg.SchemaRegistry.On() {
		cl, err := schemaregistry.NewClient(cfg.SchemaRegistry, "kafka.schema_registry")
		if err != nil {
			return nil, err
		}
		dc.Values = registryValues{srdecode.New(cl)}
	}
	return decide.NewDecider(dc)
}

// registryValues is srdecode's registry as the decision's ValueReader.
type registryValues struct{ *srdecode.Registry }

func (registryValues) Framed(v []byte) bool { return srdecode.Framed(v) }

// resolve is the poll loop's Resolve of a batch of n records (kr(i),
// rec(i)), before they are decided: retried like the ledger (backoff,
// schema_registry down after retry.max, the fetch paused), so a registry
// that cannot answer holds the batch, uncommitted, and never dead-letters
// it. It returns false only when ctx ended first: the batch's records are
// then abandoned (never committed; the next owner reads them again).
func (r *Router) resolve(ctx context.Context, n int, kr func(int) *kgo.Record, rec func(int) *record) bool {
	if !r.decider.ReadsValues() {
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
