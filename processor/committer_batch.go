package processor

import "github.com/twmb/franz-go/pkg/kgo"

// The committer's batch paths: the poll loop tracks a whole poll, and the
// claimer ends a batch's duplicates, each under one committer.mu and one
// inFlight.mu (plus one lagWatch.mu for a poll) instead of a round trip of
// each per record. An all-duplicate replay is nothing but these two steps
// per record, and the poll goroutine's track contends with the claimer's
// end on committer.mu. They keep track's and end's rules record by record
// (committer.go): the same steps in the same order, done for many records
// under each lock; track and end stay for the paths that end one record at
// a time (the start pool, the dead-letter writer).

// recordSlab is how many records trackAll allocates at once. A record
// still in flight keeps the others of its slab in memory (64 bytes each:
// ended records drop their Kafka record), so a record stuck in the start
// pool holds at most recordSlab records' worth, not its poll's.
const recordSlab = 16

// trackAll registers a poll's records with their partitions, in poll
// order (the tracker needs each partition's offsets in order), as track
// does for each: recs[i] is krs[i]'s record, or nil if its partition is no
// longer ours (or is being revoked). Under one committer.mu, so a revoke
// that marks a partition sees either none or all of the poll's records of
// it counted in flight. fetches is the poll krs came from (for the lag
// watch's gap check; nil: unknown).
func (c *committer) trackAll(krs []*kgo.Record, fetches kgo.Fetches) []*record {
	recs := make([]*record, len(krs))
	var slab []record
	c.mu.Lock()
	defer c.mu.Unlock()
	var p *partition // the partition of the previous record: a poll comes partition by partition
	for i, kr := range krs {
		if p == nil || p.tp.topic != kr.Topic || p.tp.partition != kr.Partition {
			p = c.parts[topicPartition{kr.Topic, kr.Partition}]
		}
		if p == nil || p.revoking {
			continue
		}
		if len(slab) == 0 {
			slab = make([]record, min(recordSlab, len(krs)-i))
		}
		rec := &slab[0]
		slab = slab[1:]
		*rec = record{part: p, kr: kr, offset: kr.Offset, epoch: kr.LeaderEpoch, pending: 1}
		p.tr.add(rec)
		recs[i] = rec
	}
	c.lag.polledAll(recs, fetches)
	c.flight.addAll(recs)
	return recs
}

// endAll ends one piece of work of each of recs (a record may appear once
// per piece), as end does for each: ok=false abandons them. The records
// whose last piece this was are finished in their partitions' trackers
// (under committer.mu, only those of a partition still this assignment and
// none abandoned), then counted out of flight together, still under
// committer.mu: a wait that sees a partition with nothing in flight finds
// every one of them in its tracker. recs is the caller's scratch: endAll
// overwrites and clears it.
func (c *committer) endAll(recs []*record, ok bool) {
	last := c.flight.endPieces(recs, ok)
	if len(last) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var p *partition // the partition of the previous record, and whether it is still this assignment
	owned := false
	for _, rec := range last {
		if rec.part != p {
			p = rec.part
			owned = c.parts[p.tp] == p
		}
		if owned && !rec.failed {
			p.tr.finish(rec)
		}
		letGo(rec)
	}
	c.flight.doneAll(last)
	clear(last)
}
