package processor

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor/decide"
)

// polled is a record of a poll, and its decision once decided.
type polled struct {
	kr  *kgo.Record
	rec *record
	d   decide.Decision
}

// decideRecords decides the records of batch (Decider.Decide: decode,
// route, workflow IDs), in parallel.
func (r *Router) decideRecords(batch []polled) {
	parallel(len(batch), func(i int) {
		p := &batch[i]
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
		for _, in := range d.Intents {
			in.Fence = rec.part.fence()
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
