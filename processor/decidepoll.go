package processor

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor/decide"
)

// polled is a record of a poll: its decision once decided, and its
// digest (knownDigest) when the router writes known records.
type polled struct {
	kr     *kgo.Record
	rec    *record
	d      decide.Decision
	digest [16]byte
}

// decideAll resolves the Schema Registry schemas of batch's records and
// decides them, as one step (lockValues), and returns the batch's intents
// for claim (intentsOf); nil if none, or if the resolve gave up (the
// context ended: the records were abandoned).
func (r *Router) decideAll(ctx context.Context, batch []polled) *claimBatch {
	unlock := r.lockValues()
	if !r.resolve(ctx, len(batch), func(i int) *kgo.Record { return batch[i].kr }, func(i int) *record { return batch[i].rec }) {
		unlock()
		return nil
	}
	r.decideRecords(batch)
	unlock()
	return r.intentsOf(ctx, batch)
}

// lockValues makes a resolve of Schema Registry schemas and the decisions
// that read them one step against every other goroutine's (the poll loop,
// the settler), until the returned unlock: the registry's cache is
// bounded, and a resolve makes room by forgetting the schemas of other
// batches, which another goroutine may be about to decode with. Without a
// registry it locks nothing.
func (r *Router) lockValues() (unlock func()) {
	if !r.decider.ReadsValues() {
		return func() {}
	}
	r.valuesMu.Lock()
	return r.valuesMu.Unlock
}

// decideRecords decides the records of batch (Decider.Decide: decode,
// route, workflow IDs), in parallel; a record with no digest yet gets one
// when the router writes known records.
func (r *Router) decideRecords(batch []polled) {
	parallel(len(batch), func(i int) {
		p := &batch[i]
		if r.known != nil && p.digest == ([16]byte{}) {
			p.digest = knownDigest(&r.print, p.kr)
		}
		if r.trace != nil {
			p.d = r.trace.decide(p.rec, p.kr, r.decider)
			return
		}
		p.d = r.decider.Decide(p.kr)
	})
}

// intentsOf dead-letters what of a decided batch can never succeed, ends
// what has nothing to start, and returns the batch's intents for claim
// (nil if none).
func (r *Router) intentsOf(ctx context.Context, batch []polled) *claimBatch {
	var dead []deadLetter
	n := 0
	for i := range batch {
		n += len(batch[i].d.Intents)
	}
	var (
		intents = make([]decide.Intent, 0, n)
		starts  = make([]startRef, 0, n)
		owners  = make([]*record, 0, n)
	)
	for i := range batch {
		kr, rec, d := batch[i].kr, batch[i].rec, &batch[i].d
		if d.Tombstone {
			r.m.tombstones.Inc()
			r.commits.end(rec, true)
			continue
		}
		if d.NoRoute {
			r.m.noRoute.Inc()
		}
		if d.DeadLetter != "" {
			dead = append(dead, deadLetter{rec: rec, reason: d.DeadLetter, err: d.Err, eventID: d.Event.ID, rule: string(d.Event.Rule)})
			continue
		}
		if d.Skipped() {
			logDecision(r.log, slog.LevelInfo, "skipped_no_route",
				decisionOf{eventID: d.Event.ID, rule: string(d.Event.Rule), topic: kr.Topic, partition: kr.Partition, offset: kr.Offset},
				"type", d.Event.Type, "source", d.Event.Source)
			r.commits.end(rec, true)
			continue
		}
		known := r.knownOf(d, batch[i].digest)
		for _, in := range d.Intents {
			in.Fence = rec.part.fence()
			in.Known = known
			intents = append(intents, in)
		}
		for j := range d.Intents {
			starts = append(starts, startRef{d: d, j: j})
		}
		for range d.Intents {
			owners = append(owners, rec)
		}
		r.commits.flight.setPending(rec, len(d.Intents))
	}
	if len(dead) > 0 {
		r.dlq.write(ctx, dead)
	}
	if len(intents) == 0 {
		return nil
	}
	return &claimBatch{intents: intents, starts: starts, owners: owners}
}
