package processor

import (
	"context"
	"maps"
	"time"

	"github.com/dedupio/dedup/processor/decide"
)

// A claim or mark the ledger's fence refused (FencedError) wrote nothing.
// committer.fenced answers which of its partitions the router took again
// (the group still assigns them to it); the write is sent again for the
// records of the assignment it took again, and never given up for the
// number of its refusals; its records of the partitions the router did
// not take again are abandoned (their new owner polls them).

// unfenced ends the pieces of b of the partitions f names (abandoned),
// except those of partitions taken again (again), and returns the rest in
// two batches, nil when empty: the pieces of the partitions f did not
// name, then those of the partitions taken again, each partition's pieces
// in one batch and in stream order (a claim of gathered polls may hold a
// partition under two fences, the older refused, the newer not: its
// pieces stay together, so its earlier copy of an event is still claimed
// first). A piece taken again is claimed again only when its record is of
// the assignment the router took again (retakenFor): a record of an
// earlier assignment (the partition moved away and came back) is
// abandoned, as the new assignment polls it again, so that its claim
// changes no row of the member between.
//
// A partition taken again is never given up for the number of its
// refusals: a late Own of a member the group dropped heals, and the
// router still owns the partition, so an abandoned record would hold its
// commit until a rebalance. The refusals are counted per partition, and
// refusedAgain waits on the count.
func (c *claimer) unfenced(b *claimBatch, f *FencedError, again map[PartitionRef]decide.Fence) [2]*claimBatch {
	refused := maps.Clone(b.refused)
	if refused == nil {
		refused = map[PartitionRef]int{}
	}
	named := map[PartitionRef]bool{}
	for i := range b.intents {
		if in := &b.intents[i]; f.Has(in.Topic, in.Partition, in.Fence) {
			named[PartitionRef{in.Topic, in.Partition}] = true
		}
	}
	for ref := range named {
		refused[ref]++
	}
	clean, retaken := claimBatch{refused: refused}, claimBatch{refused: refused}
	for i := range b.intents {
		in := b.intents[i]
		to := &clean
		if named[PartitionRef{in.Topic, in.Partition}] {
			if !retakenFor(again, b.owners[i]) {
				c.end(b.owners[i], false)
				continue
			}
			in.Fence, to = b.owners[i].part.fence(), &retaken
		}
		to.intents = append(to.intents, in)
		to.starts = append(to.starts, b.starts[i])
		to.owners = append(to.owners, b.owners[i])
	}
	var out [2]*claimBatch
	for i, rest := range []*claimBatch{&clean, &retaken} {
		if len(rest.intents) > 0 {
			out[i] = rest
		}
	}
	return out
}

// refusedAgain waits before b is claimed once one of its partitions was
// refused more than three times (a member the group dropped that keeps
// taking it in the ledger), so that the claimer does not spin against
// it (waitRefused).
func refusedAgain(ctx context.Context, b *claimBatch) {
	if len(b.refused) == 0 {
		return
	}
	n := 0
	for i := range b.intents {
		n = max(n, b.refused[PartitionRef{b.intents[i].Topic, b.intents[i].Partition}])
	}
	waitRefused(ctx, n)
}

// waitRefused waits, after the n-th refusal by the ledger's fence of a
// partition the router took again each time, 100 ms a refusal past the
// third, at most a second, or until ctx is done.
func waitRefused(ctx context.Context, n int) {
	if n <= 3 {
		return
	}
	t := time.NewTimer(min(time.Duration(n-3)*100*time.Millisecond, time.Second))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// retakenFor reports whether again (committer.fenced's answer to a
// refusal) took rec's assignment again: its partition's new fence is the
// one of rec's assignment. A record of an earlier assignment (its
// partition moved away and came back) is not: it is abandoned, and the
// new assignment polls it again.
func retakenFor(again map[PartitionRef]decide.Fence, rec *record) bool {
	nf, ok := again[PartitionRef{rec.part.tp.topic, rec.part.tp.partition}]
	return ok && nf == rec.part.fence()
}
