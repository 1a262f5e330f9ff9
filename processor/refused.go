package processor

import (
	"context"
	"maps"
	"sync"
	"time"
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
// commit until a rebalance. The refusals are counted per partition; past
// the third, the partition's pieces wait (refusedWaits) while the claimer
// claims the other partitions'.
func (c *claimer) unfenced(b *claimBatch, f *FencedError, again map[PartitionRef]*partition) [2]*claimBatch {
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

// refusedWaits are the claimer's pieces whose partition the ledger's
// fence refused more than three times, taken again each time (a member the
// group dropped that keeps taking it in the ledger): each partition's
// pieces wait in a queue of its own, in stream order, so that the claimer
// claims the other partitions' polls meanwhile. A poll's records of a
// waiting partition join its queue (behindWaiting); the queue's first
// piece is claimed again once its wait (waitRefused's) is over
// (dueWaiting), the next one once it was claimed. While a partition
// waits, the client fetches nothing more of it (hold): its backlog would
// fill max_in_flight and stop the polls of every other partition.
type refusedWaits struct {
	queues map[PartitionRef]*refusedQueue
	// holds: a queue holds its partition (fenceHolds) for each assignment
	// one of its records is of (a poll of the partition's next assignment
	// may join the queue of the one before), while it exists; nil: none.
	holds *fenceHolds
	held  map[PartitionRef]map[*partition]bool // what holds was told, per queue
}

type refusedQueue struct {
	pieces []*claimBatch // in stream order; one partition each
	due    time.Time     // when pieces[0] is claimed again
	busy   bool          // pieces[0] is being claimed
}

// wait queues b, one partition's piece refused n times, not from a queue,
// in front of its partition's queue, until its wait is over.
func (w *refusedWaits) wait(ref PartitionRef, b *claimBatch, n int) {
	q := w.queues[ref]
	if q == nil {
		if w.queues == nil {
			w.queues = map[PartitionRef]*refusedQueue{}
		}
		q = &refusedQueue{}
		w.queues[ref] = q
	}
	w.holdFor(ref, b)
	q.pieces = append([]*claimBatch{b}, q.pieces...)
	q.due, q.busy = time.Now().Add(refusedWait(n)), false
}

// requeue puts b2, b re-cut (unfenced) and refused n times, in the place
// of b, the first of ref's queue, until its wait is over.
func (w *refusedWaits) requeue(ref PartitionRef, b, b2 *claimBatch, n int) {
	if q := w.queues[ref]; q != nil && len(q.pieces) > 0 && q.pieces[0] == b {
		q.pieces[0] = b2
		q.due, q.busy = time.Now().Add(refusedWait(n)), false
	}
}

// behindWaiting moves b's pieces of the waiting partitions to the end of
// their queues, and returns the rest (nil when empty).
func (w *refusedWaits) behindWaiting(b *claimBatch) *claimBatch {
	if b == nil || len(w.queues) == 0 {
		return b
	}
	rest := &claimBatch{}
	pieces := map[PartitionRef]*claimBatch{}
	for i := range b.intents {
		ref := PartitionRef{b.intents[i].Topic, b.intents[i].Partition}
		to := rest
		if q := w.queues[ref]; q != nil {
			if to = pieces[ref]; to == nil {
				to = &claimBatch{}
				pieces[ref] = to
				q.pieces = append(q.pieces, to)
			}
		}
		to.intents = append(to.intents, b.intents[i])
		to.starts = append(to.starts, b.starts[i])
		to.owners = append(to.owners, b.owners[i])
	}
	if len(pieces) == 0 {
		return b
	}
	for ref, p := range pieces {
		w.holdFor(ref, p)
	}
	if len(rest.intents) == 0 {
		return nil
	}
	return rest
}

// dueWaiting takes the first piece of each queue whose wait is over (at
// now) and not already being claimed.
func (w *refusedWaits) dueWaiting(now time.Time) []*claimBatch {
	var due []*claimBatch
	for _, q := range w.queues {
		if !q.busy && !now.Before(q.due) {
			q.busy = true
			due = append(due, q.pieces[0])
		}
	}
	return due
}

// claimed ends the claim of b, the first piece of ref's queue, when it did
// not wait again: the queue's next piece is returned, to be claimed now;
// an empty queue is removed, and its partition fetched again.
func (w *refusedWaits) claimed(ref PartitionRef, b *claimBatch) *claimBatch {
	q := w.queues[ref]
	if q == nil || len(q.pieces) == 0 || q.pieces[0] != b {
		return nil
	}
	q.pieces = q.pieces[1:]
	if len(q.pieces) == 0 {
		w.remove(ref)
		return nil
	}
	return q.pieces[0]
}

// replaceFirst puts b2, b re-cut (unfenced), in b's place, the first of
// ref's queue, still being claimed.
func (w *refusedWaits) replaceFirst(ref PartitionRef, b, b2 *claimBatch) {
	if q := w.queues[ref]; q != nil && len(q.pieces) > 0 && q.pieces[0] == b {
		q.pieces[0] = b2
	}
}

// next is when the first queue not being claimed is due; ok is false when
// there is none.
func (w *refusedWaits) next() (at time.Time, ok bool) {
	for _, q := range w.queues {
		if !q.busy && (!ok || q.due.Before(at)) {
			at, ok = q.due, true
		}
	}
	return at, ok
}

// all empties the queues and returns their records.
func (w *refusedWaits) all() []*record {
	var recs []*record
	for ref, q := range w.queues {
		for _, b := range q.pieces {
			recs = append(recs, b.owners...)
		}
		w.remove(ref)
	}
	return recs
}

func (w *refusedWaits) remove(ref PartitionRef) {
	delete(w.queues, ref)
	for part := range w.held[ref] {
		w.holds.hold(part, false)
	}
	delete(w.held, ref)
}

// holdFor makes ref's queue hold the assignments of b's records it does
// not hold yet.
func (w *refusedWaits) holdFor(ref PartitionRef, b *claimBatch) {
	if w.holds == nil {
		return
	}
	for _, rec := range b.owners {
		if w.held[ref][rec.part] {
			continue
		}
		if w.held == nil {
			w.held = map[PartitionRef]map[*partition]bool{}
		}
		if w.held[ref] == nil {
			w.held[ref] = map[*partition]bool{}
		}
		w.held[ref][rec.part] = true
		w.holds.hold(rec.part, true)
	}
}

// refusedMost is the most refusals of one of b's partitions.
func refusedMost(b *claimBatch) int {
	n := 0
	for i := range b.intents {
		n = max(n, b.refused[PartitionRef{b.intents[i].Topic, b.intents[i].Partition}])
	}
	return n
}

// byPartition splits b into one piece per partition, each in b's order.
func byPartition(b *claimBatch) map[PartitionRef]*claimBatch {
	out := map[PartitionRef]*claimBatch{}
	for i := range b.intents {
		ref := PartitionRef{b.intents[i].Topic, b.intents[i].Partition}
		p := out[ref]
		if p == nil {
			p = &claimBatch{refused: b.refused}
			out[ref] = p
		}
		p.intents = append(p.intents, b.intents[i])
		p.starts = append(p.starts, b.starts[i])
		p.owners = append(p.owners, b.owners[i])
	}
	return out
}

// waitRefused waits, after the n-th refusal by the ledger's fence of a
// partition the router took again each time, 100 ms a refusal past the
// third, at most a second, or until ctx is done.
func waitRefused(ctx context.Context, n int) {
	if n <= 3 {
		return
	}
	t := time.NewTimer(refusedWait(n))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// refusedWait is waitRefused's wait after the n-th refusal.
func refusedWait(n int) time.Duration {
	if n <= 3 {
		return 0
	}
	return min(time.Duration(n-3)*100*time.Millisecond, time.Second)
}

// retakenFor reports whether again (committer.fenced's answer to a
// refusal) kept rec's assignment: the assignment it answers for rec's
// partition is rec's, whose fence the write then carries, the one it has
// now (another refusal's answer may have taken the partition again since:
// its fence then is newer than the one this answer saw; adversary 29f).
// A record of an earlier assignment (its partition moved away and came
// back) is not kept: it is abandoned, and the new assignment polls it
// again.
func retakenFor(again map[PartitionRef]*partition, rec *record) bool {
	return again[PartitionRef{rec.part.tp.topic, rec.part.tp.partition}] == rec.part
}

// fenceHolds counts the waits for the ledger's fence that hold each
// partition: a claimer's queue (refusedWaits), a mark waiting in the
// marker, a dead-letter mark sent again, and the records waiting on such
// a mark's job. While one holds it, a partition is not fetched (pause) and
// the records in flight of the held assignment are lent out of
// max_in_flight (lend), so that what it holds does not stop the polls of
// the other partitions. A hold is an assignment's: once the assignment is
// gone (revoked, lost, forgotten: its context is done) its holds pause
// nothing, so that they never pause the partition's next assignment, but
// they still lend its records until released, as records waiting on
// another partition's held job stay in flight after their own assignment
// is gone (nothing of a gone assignment is fetched: they are bounded).
type fenceHolds struct {
	pause func(ref PartitionRef, paused bool) // nil: none (tests of parts)
	lend  func(part *partition, lent bool)
	// gone, if set, is told of a held assignment once it is gone (not
	// under mu): startPool.dropWaitersOf.
	gone func(part *partition)

	mu    sync.Mutex
	refs  map[PartitionRef]int // pausing holds per partition (of live assignments)
	parts map[*partition]*assignmentHolds
}

type assignmentHolds struct {
	n    int
	gone bool        // the assignment's context is done: its holds pause nothing
	stop func() bool // stops the context.AfterFunc that marks it gone; nil once gone
}

// hold adds (true) or drops (false) one hold of assignment part.
func (h *fenceHolds) hold(part *partition, held bool) {
	if h == nil || h.pause == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refs == nil {
		h.refs, h.parts = map[PartitionRef]int{}, map[*partition]*assignmentHolds{}
	}
	a := h.parts[part]
	if a == nil {
		if !held {
			return
		}
		a = &assignmentHolds{gone: part.ctx.Err() != nil}
		if !a.gone {
			a.stop = context.AfterFunc(part.ctx, func() { h.goneNow(part) })
		}
		h.parts[part] = a
		h.lend(part, true)
	}
	ref := PartitionRef{part.tp.topic, part.tp.partition}
	if held {
		a.n++
		if !a.gone {
			if h.refs[ref]++; h.refs[ref] == 1 {
				h.pause(ref, true)
			}
		}
		return
	}
	a.n--
	if !a.gone {
		h.unpause(ref, 1)
	}
	if a.n == 0 {
		if a.stop != nil {
			a.stop()
		}
		delete(h.parts, part)
		h.lend(part, false)
	}
}

// goneNow makes the holds of an assignment that is gone pause nothing,
// and tells gone.
func (h *fenceHolds) goneNow(part *partition) {
	h.mu.Lock()
	a := h.parts[part]
	if a == nil || a.gone {
		h.mu.Unlock()
		return
	}
	a.gone, a.stop = true, nil
	h.unpause(PartitionRef{part.tp.topic, part.tp.partition}, a.n)
	h.mu.Unlock()
	if h.gone != nil {
		h.gone(part)
	}
}

// unpause drops n pausing holds of ref, and resumes it when none is
// left. Called with mu held.
func (h *fenceHolds) unpause(ref PartitionRef, n int) {
	if h.refs[ref] -= n; h.refs[ref] <= 0 {
		delete(h.refs, ref)
		h.pause(ref, false)
	}
}
