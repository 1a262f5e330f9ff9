package processor

import (
	"context"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor/decide"
)

// assigned takes on new partitions (kgo.OnPartitionsAssigned). It first
// takes them in the ledger's fence (a new epoch each), before any of their
// records is polled: from then on, a claim or mark that a previous owner
// still sends for them changes no row. The ledger refuses a partition a
// later group generation took (this member was dropped, and its Own comes
// late): then the group coordinator decides (a group made anew starts its
// generations again), and a partition it does not assign to this member
// is not taken. A partition not taken (that, or the router is stopping) is
// not tracked: its records are never claimed or committed here.
func (c *committer) assigned(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
	var refs []PartitionRef
	for t, ps := range assigned {
		for _, p := range ps {
			refs = append(refs, PartitionRef{Topic: t, Partition: p})
		}
	}
	var member string
	var gen int32
	if cl != nil {
		member, gen = cl.GroupMetadata()
	}
	c.mu.Lock()
	c.owning += len(refs)
	c.mu.Unlock()
	// The Owns of the callback give up when the router stops polling: a
	// slow ledger does not hold the stop past drain_timeout (the
	// partitions are then not taken, nor tracked).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.stopping, cancel)()
	epochs, err := c.own(ctx, Ownership{Group: c.cfg.Group, Member: member, Generation: gen, Parts: refs})
	c.mu.Lock()
	c.owning -= len(refs)
	c.mu.Unlock()
	if err != nil {
		c.log.Warn("partitions assigned but not taken in the ledger's fence; their records are left for the next owner",
			"partitions", assigned, "err", err)
		return
	}
	fences := make(map[topicPartition]decide.Fence, len(refs))
	var refused []PartitionRef
	for i, ref := range refs {
		if epochs[i] == 0 {
			refused = append(refused, ref)
			continue
		}
		fences[topicPartition{ref.Topic, ref.Partition}] = decide.Fence{Group: c.cfg.Group, Epoch: epochs[i]}
	}
	if len(refused) > 0 {
		c.confirm(ctx, member, gen, refused, fences)
	}
	// Where the group left each partition, to notice records that retention
	// deleted before anyone read them (the client then resumes at the log
	// start without an error).
	committed := map[topicPartition]int64{}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	var topics []string
	for t := range assigned {
		topics = append(topics, t)
	}
	if resp, err := c.adm.FetchOffsetsForTopics(fctx, c.cfg.Group, topics...); err == nil {
		resp.Each(func(o kadm.OffsetResponse) {
			if o.Err == nil && o.At >= 0 {
				committed[topicPartition{o.Topic, o.Partition}] = o.At
			}
		})
	}
	cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	for t, ps := range assigned {
		for _, p := range ps {
			tp := topicPartition{t, p}
			if _, taken := fences[tp]; !taken {
				continue
			}
			ctx, cancel := context.WithCancel(c.parent)
			expect, ok := committed[tp]
			if !ok {
				expect = -1
			}
			part := &partition{tp: tp, ctx: ctx, cancel: cancel, tr: newTracker(), committed: -1, assignedAt: expect,
				watch: c.lag.assign(tp, ctx, expect), group: c.cfg.Group}
			part.epoch.Store(fences[tp].Epoch)
			c.parts[tp] = part
		}
	}
	if c.paused() {
		c.m.pausedPartitions.Set(float64(len(c.parts)))
	}
	c.joined = true
	c.log.Info("partitions assigned", "partitions", assigned, "fence", fences)
}

// revoked gives in-flight records of revoked partitions RevokeTimeout to
// finish, commits what finished (once the router stopped, with what
// finished on the partitions it keeps), and forgets the partitions
// (kgo.OnPartitionsRevoked). Whatever did not finish is abandoned,
// uncommitted, for the new owner.
func (c *committer) revoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	only := map[topicPartition]bool{}
	var parts []*partition
	c.mu.Lock()
	for t, ps := range revoked {
		for _, p := range ps {
			tp := topicPartition{t, p}
			if part := c.parts[tp]; part != nil {
				part.revoking = true
				part.revokeBegan.Store(true)
				only[tp] = true
				parts = append(parts, part)
			}
		}
	}
	c.mu.Unlock()
	done := c.hurryMarks() // its records finish once marked: not at the mark interval
	// A stop during the revoke holds it to the shutdown's bounds: its
	// records are waited for until the drain's end at the latest, its
	// commit until the shutdown's deadline (the stopped poll loop waits
	// for this callback).
	c.flight.waitIdle(parts, time.Now().Add(c.cfg.RevokeTimeout), c.stopping, c.drainBy)
	done()
	// A revoke the stop cut commits the partitions kept too, in the same
	// request: the final commit queues behind it (commitMu) with less of
	// the reserve than its two round trips to a slow coordinator take. A
	// revoke of nothing (the cooperative session's end, when a member
	// joins) commits nothing: it would hold commitMu from the final commit
	// for nothing revoked (adversary 55c).
	commitOnly := only
	if c.stopping.Err() != nil && len(only) > 0 {
		commitOnly = nil
	}
	cctx, cancel := c.untilShutdown(ctx)
	c.commit(cctx, commitOnly)
	cancel()
	// Forgotten under commitMu, so that no commit that read the partition
	// before it was forgotten is sent after the revoke's.
	c.commitMu.Lock()
	c.mu.Lock()
	for tp := range only {
		c.forget(tp)
	}
	c.m.partitionsGone.WithLabelValues("revoked").Add(float64(len(only)))
	c.mu.Unlock()
	c.commitMu.Unlock()
	c.log.Info("partitions revoked", "partitions", revoked)
}

// forget drops a partition: its context is cancelled, so its records'
// work is abandoned. Called with mu held.
func (c *committer) forget(tp topicPartition) {
	part := c.parts[tp]
	if part == nil {
		return
	}
	part.cancel()
	delete(c.parts, tp)
	c.m.committedOffset.DeleteLabelValues(tp.topic, strconv.Itoa(int(tp.partition)))
	c.lag.forget(tp)
}

// lost forgets partitions without committing (kgo.OnPartitionsLost):
// another member may own them already, and a late commit from us could
// move its offsets.
func (c *committer) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for t, ps := range lost {
		for _, p := range ps {
			c.forget(topicPartition{t, p})
		}
		c.m.partitionsGone.WithLabelValues("lost").Add(float64(len(ps)))
	}
	c.log.Warn("partitions lost; their in-flight work is abandoned uncommitted", "partitions", lost)
}

// fenced answers the ledger's refusal of this router's writes for the
// partitions e names (another Own moved their epoch) with the assignments
// the router keeps, per partition; the caller writes again for their
// records, under each one's fence as it is then (another answer may have
// taken it again since), and abandons the others. The group coordinator
// decides who owns a partition: a partition it still assigns to this
// member (the other Own was a late one, by a member the group had already
// dropped) is taken again in the ledger (a new epoch) and kept; any other
// is forgotten without committing, like lost (this router is the zombie).
// When the coordinator cannot say (the group rebalances and lists no
// assignment, or the question fails), or taking the partition again fails,
// a partition this member still owns and was not told to revoke is kept
// with its fence unchanged, neither taken again nor forgotten: the caller
// writes again and, refused again, asks again. After taking a partition
// again failed (the Own failed, or the coordinator did not answer a
// question within fenceQuestion), it is kept without asking or trying again for a
// while (retakeBackoff), so that an Own that keeps failing, or a
// coordinator slow to answer, does not hold the caller, the claimer or the
// marker of every partition, at each refusal.
// An assignment newer than the refused fence is kept as it is. Calls are
// serialised, so that the claimer and the marker, refused together, take
// a partition again once; each gives up with its ctx (the claimer's ends
// when the router stops polling).
func (c *committer) fenced(cctx context.Context, e *FencedError) map[PartitionRef]*partition {
	out := map[PartitionRef]*partition{}
	select {
	case c.fenceLock <- struct{}{}:
		defer func() { <-c.fenceLock }()
	case <-cctx.Done():
		// The caller stops (the claimer, when the router stops polling)
		// while another refusal is answered: nothing kept, its records
		// are abandoned.
		return out
	}
	cands := c.fencedCandidates(e, out)
	if len(cands) == 0 {
		return out
	}
	// Bounded by the caller's ctx, not by the router's work context
	// (c.parent's cancel): the marker's final flush, after the work
	// context ended, still asks and takes a refused partition again
	// (adversary 30-2). Each question has its own bound (ask), and so
	// has the Own (takeAgain): a budget shared by the three cut a
	// question short without counting it slow (adversary 30d).
	ctx, cancel := context.WithCancel(context.WithoutCancel(c.parent))
	defer cancel()
	defer context.AfterFunc(cctx, cancel)()
	now := time.Now()
	for part := range c.retakes {
		if part.ctx.Err() != nil {
			delete(c.retakes, part)
		}
	}
	if c.backingOff(cands, now, out) {
		return out
	}
	mine, member, unsure, slow := c.ask(ctx, cands)
	if slow && cctx.Err() == nil {
		c.backOff(cands, true)
	}
	var again []*partition
	var refs []PartitionRef
	c.mu.Lock()
	for _, part := range cands {
		ref := PartitionRef{part.tp.topic, part.tp.partition}
		switch {
		case mine[part.tp] && now.Before(c.retakes[part].until):
			out[ref] = part // taking it again failed a moment ago: kept
		case mine[part.tp]:
			again = append(again, part)
			refs = append(refs, ref)
		case unsure && !part.revoking && c.parts[part.tp] == part:
			// The coordinator cannot say (the group rebalances, or the
			// question failed), and the member keeps what the group has
			// not told it to revoke (the cooperative protocol; a
			// partition taken over is revoked or lost in time): neither
			// taken again nor forgotten, the write is sent again under the
			// same fence (refused again, it asks again; waitRefused's
			// waits).
			out[ref] = part
		}
	}
	c.mu.Unlock()
	epochs, keepOld := c.takeAgain(ctx, cctx, member, again, refs)
	c.keepOrForget(e, cands, again, refs, epochs, keepOld, out)
	return out
}

// fencedCandidates sorts the partitions e names: one this router took
// again since the refused fence goes into out; those still at the refused
// fence are returned, for the coordinator's answer; the others (gone, or
// an older assignment) are neither.
func (c *committer) fencedCandidates(e *FencedError, out map[PartitionRef]*partition) []*partition {
	var cands []*partition
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range e.Stale {
		tp := topicPartition{st.Topic, st.Partition}
		part := c.parts[tp]
		switch {
		case part == nil || part.group != st.Group || part.epoch.Load() < st.Epoch:
		case part.epoch.Load() > st.Epoch: // taken again meanwhile
			out[PartitionRef{st.Topic, st.Partition}] = part
		default:
			cands = append(cands, part)
		}
	}
	return cands
}

// takeAgain takes (Own, Confirmed) the partitions again, which the
// coordinator assigns to this member, and returns their new epochs (nil:
// the Own failed; an epoch 0: the partition is assigned elsewhere now) and
// whether the new epochs must not be used (keepOld); it keeps retakes.
func (c *committer) takeAgain(ctx, cctx context.Context, member string, again []*partition, refs []PartitionRef) (epochs []int64, keepOld bool) {
	slowAfter := false // the second question was not answered in time
	if len(refs) > 0 {
		var err error
		var gen int32
		if c.cl != nil {
			_, gen = c.cl.GroupMetadata()
		}
		octx, cancel := context.WithTimeout(ctx, ownBound)
		epochs, err = c.own(octx, Ownership{Group: c.cfg.Group, Member: member, Generation: gen, Confirmed: true, Parts: refs})
		cancel()
		if err != nil {
			// The group assigns them to this member: kept, under the
			// same fence, as when the coordinator cannot say; the write
			// refused again takes them again.
			c.log.Warn("could not take partitions again in the ledger's fence; their writes are sent again, and take them again once refused", "partitions", refs, "err", err)
			epochs = nil
		}
	}
	if epochs != nil {
		// The coordinator's answer may have gone stale while the Own was
		// in flight (the group dropped this member meanwhile, and gave the
		// partition to another, whose epoch this Own just passed): asked
		// again, a partition it now assigns elsewhere is not kept, and its
		// new epoch never carries a write (the other owner's next write
		// is refused, and takes it again). When it cannot say, no new
		// epoch is used: the partitions are kept under their old fences,
		// so their next write is refused and asks again (adversary 29e).
		var now map[topicPartition]bool
		var unsure bool
		now, _, unsure, slowAfter = c.ask(ctx, again)
		keepOld = unsure
		for i, part := range again {
			if !unsure && !now[part.tp] {
				epochs[i] = 0
			}
		}
		if slowAfter { // backs off, the new epochs unused
			epochs = nil
		}
	}
	for _, part := range again {
		if epochs != nil {
			delete(c.retakes, part)
			part.backoffUntil.Store(0)
			continue
		}
		if cctx.Err() != nil {
			// The caller gave up (the router stops polling): not a
			// failure of the ledger, and the marker's final flush may
			// still take it again.
			continue
		}
		c.backOff([]*partition{part}, slowAfter)
	}
	return epochs, keepOld
}

// keepOrForget keeps in out the partitions taken again (takeAgain's epochs
// stored, unless keepOld), and forgets the candidates out does not keep.
func (c *committer) keepOrForget(e *FencedError, cands, again []*partition, refs []PartitionRef, epochs []int64, keepOld bool,
	out map[PartitionRef]*partition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, part := range again {
		if c.parts[part.tp] == part {
			if epochs != nil {
				if epochs[i] == 0 { // assigned elsewhere now: forgotten below
					continue
				}
				if !keepOld {
					part.epoch.Store(epochs[i])
				}
			}
			out[refs[i]] = part
		}
	}
	n := 0
	for _, part := range cands {
		if _, ok := out[PartitionRef{part.tp.topic, part.tp.partition}]; !ok && c.parts[part.tp] == part {
			c.forget(part.tp)
			n++
		}
	}
	if len(again) > 0 {
		c.log.Warn("the ledger's fence refused writes for partitions the group still assigns to this router (a late Own of a member the group had dropped); taken again",
			"partitions", refs, "err", e)
	}
	if n > 0 {
		c.m.partitionsGone.WithLabelValues("fenced").Add(float64(n))
		c.log.Warn("partitions taken over by another member (the ledger's fence refused this router's writes); their in-flight work is abandoned uncommitted",
			"err", e)
	}
}

// confirm asks the group coordinator about partitions the ledger refused
// to the assignment of generation gen (a later generation holds them):
// those it assigns to this member are taken all the same (Confirmed) and
// added to fences; the others are left out (this member is stale).
func (c *committer) confirm(ctx context.Context, member string, gen int32, refused []PartitionRef, fences map[topicPartition]decide.Fence) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	mine, _, unsure := c.assignedToMe(dctx)
	var confirmed []PartitionRef
	for _, ref := range refused {
		if mine[topicPartition{ref.Topic, ref.Partition}] {
			confirmed = append(confirmed, ref)
		}
	}
	if unsure && len(confirmed) < len(refused) {
		// The coordinator cannot say: the partitions it did not confirm
		// are tracked under a fence no owner holds (notTaken), so that
		// their first write is refused and asks again (fenced), rather
		// than left untracked while the group assigns them here.
		for _, ref := range refused {
			if tp := (topicPartition{ref.Topic, ref.Partition}); !mine[tp] {
				fences[tp] = decide.Fence{Group: c.cfg.Group, Epoch: notTaken}
			}
		}
		c.log.Warn("partitions assigned in an older group generation than the ledger's owner holds them in, and the coordinator cannot say whose they are; "+
			"tracked without taking them: their first write asks again", "generation", gen, "partitions", refused, "confirmed_by_the_coordinator", confirmed)
	} else if len(confirmed) < len(refused) {
		c.log.Warn("partitions assigned in an older group generation than the ledger's owner holds them in; not taken (this member was dropped from the group)",
			"generation", gen, "partitions", refused, "confirmed_by_the_coordinator", confirmed)
	}
	if len(confirmed) == 0 {
		return
	}
	epochs, err := c.own(ctx, Ownership{Group: c.cfg.Group, Member: member, Generation: gen, Confirmed: true, Parts: confirmed})
	if err != nil {
		// Tracked all the same, as when the coordinator cannot say.
		for _, ref := range confirmed {
			fences[topicPartition{ref.Topic, ref.Partition}] = decide.Fence{Group: c.cfg.Group, Epoch: notTaken}
		}
		c.log.Warn("partitions confirmed by the coordinator but not taken in the ledger's fence; tracked without taking them: their first write asks again",
			"partitions", confirmed, "err", err)
		return
	}
	for i, ref := range confirmed {
		if epochs[i] != 0 {
			fences[topicPartition{ref.Topic, ref.Partition}] = decide.Fence{Group: c.cfg.Group, Epoch: epochs[i]}
		}
	}
}

// notTaken is the epoch of a partition tracked without being taken in the
// ledger (confirm): no owner row holds it, so every write under it is
// refused, and the refusal asks the coordinator again (fenced).
const notTaken = -1
