package processor

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dedupio/dedup/processor/decide"
)

// committer owns partition membership and offsets. Its guarantee: an offset
// is committed only when every record before it in its partition finished
// (the contiguous finished prefix, tracker); nothing is committed for a
// partition after it is revoked (beyond what finished within RevokeTimeout)
// or lost; commits carry the group generation, so a zombie's late commit is
// rejected by the broker; a commit never moves a partition's committed
// offset backwards (it reads the group's committed offsets first and leaves
// out a partition another member committed past since this one was assigned
// it: a stale owner that the broker let back into the group with its old
// position must not rewind the group); a final commit happens on shutdown.
// It counts records in and out of the in-flight accounting (flight,
// inflight.go: capacity, drain, the revoke's wait), and tells the lag watch
// (lag, lag.go: consumer lag, offsets deleted by retention before they were
// read) what it was assigned, polled, committed and forgot.
//
// Every other component finishes its work on a record through end; nothing
// else touches offsets.
//
// Lock order: commitMu, then mu, then flight.mu or lag.mu (never both);
// health.mu comes before mu and flight.mu (health.update calls setPaused
// under it; the committer and flight read the pause without a lock).
// flight and lag take no other lock, and no one waits on flight's
// condition holding commitMu or mu: revoked waits, then commits; track and
// end hold mu only to count in and out.
type committer struct {
	cfg Config
	log *slog.Logger
	m   *metrics
	cl  *kgo.Client
	adm *kadm.Client
	// trace records commits (tracing.go); nil: off.
	trace *routerTracer
	// groupCommitted reads the group's committed offsets of topics (kadm,
	// unless a test sets it).
	groupCommitted func(ctx context.Context, topics []string) (map[topicPartition]int64, error)
	paused         func() bool // fetching is paused (a dependency fails)
	// parent is the parent of every partition's context: cancelled when
	// the router's work stops.
	parent context.Context
	// own takes partitions in the ledger's fence (Ledger.Own, retried)
	// and returns their epochs.
	own func(ctx context.Context, o Ownership) ([]int64, error)

	// fenceMu serialises fenced (a partition is taken again once).
	fenceMu sync.Mutex

	// commitMu makes each commit one step: read the finished prefix, read
	// the group's offsets, send, record what landed. Without it the
	// ticker's commit could read an older prefix, then send it after the
	// revoke committed a newer one (hole C). Never held while waiting for
	// records (revoked waits first, then commits).
	commitMu sync.Mutex

	// flight counts the records in flight, under its own lock.
	flight *inFlight
	// lag exports lag and checks gaps, under its own lock.
	lag *lagWatch

	mu     sync.Mutex
	parts  map[topicPartition]*partition
	owning int // partitions assigned and being taken in the ledger's fence (not in parts yet)
	joined bool
}

func newCommitter(cfg Config, log *slog.Logger, m *metrics, parent context.Context, paused func() bool) *committer {
	return &committer{cfg: cfg, log: log, m: m, parent: parent, paused: paused, parts: map[topicPartition]*partition{},
		flight: newInFlight(cfg.MaxInFlight, paused, m.inFlight, log), lag: newLagWatch(cfg, log, m)}
}

// track registers a polled record with its partition, or returns nil if the
// partition is no longer ours (or is being revoked). The record starts with
// one piece of work; the caller sets how many it really has
// (flight.setPending) before handing any of them out.
func (c *committer) track(kr *kgo.Record) *record {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.parts[topicPartition{kr.Topic, kr.Partition}]
	if p == nil || p.revoking {
		return nil
	}
	c.lag.polled(p.watch, kr.Offset)
	rec := &record{part: p, kr: kr, offset: kr.Offset, epoch: kr.LeaderEpoch, pending: 1}
	p.tr.add(rec)
	c.flight.add(p)
	return rec
}

// end ends one of a record's pieces of work. ok=false abandons it: the
// record is never committed by this router and will be redelivered.
//
// The last piece finishes the record in its partition's tracker, under mu
// and only if the partition is still this assignment, then counts it out
// of flight: whoever sees the partition with nothing in flight finds the
// record in the prefix.
func (c *committer) end(rec *record, ok bool) {
	last, committable := c.flight.endPiece(rec, ok)
	if !last {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p := rec.part
	if committable && c.parts[p.tp] == p {
		p.tr.finish(rec)
	}
	rec.kr = nil
	c.flight.done(p)
}

// ready says whether the router has joined the group.
func (c *committer) ready() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.joined
}

// run commits on a ticker until ctx ends.
func (c *committer) run(ctx context.Context) {
	every(ctx, c.cfg.CommitInterval, func() { c.commit(ctx, nil) })
}

// commit commits, for the partitions we own (only those in only, if set),
// the end of the finished prefix where it moved since the last commit.
//
// Offsets this router commits never decrease: commits are serialised
// (commitMu) from the read of the prefix to the record of what landed, so
// an offset is sent only above the last one that landed for the same
// assignment of the partition, and only while the partition is still
// owned (a revoke forgets it under commitMu, after its own commit).
func (c *committer) commit(ctx context.Context, only map[topicPartition]bool) {
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	offsets := map[string]map[int32]kgo.EpochOffset{}
	want := map[topicPartition]int64{}
	assignedAt := map[topicPartition]int64{}
	parts := map[topicPartition]*partition{}
	c.mu.Lock()
	for tp, p := range c.parts {
		if (only != nil && !only[tp]) || p.tr.next < 0 || p.tr.next <= p.committed {
			continue
		}
		if offsets[tp.topic] == nil {
			offsets[tp.topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[tp.topic][tp.partition] = kgo.EpochOffset{Epoch: p.tr.nextEpoch, Offset: p.tr.next}
		want[tp] = p.tr.next
		assignedAt[tp] = p.assignedAt
		parts[tp] = p
	}
	c.mu.Unlock()
	if len(want) == 0 {
		return
	}
	// Never backwards: what the group committed is read first, and a
	// partition committed past our offset is left out. (Between this read
	// and our commit another member could still commit; that window is
	// one round trip, against the seconds a stalled replica lags.)
	topics := make([]string, 0, len(offsets))
	for t := range offsets {
		topics = append(topics, t)
	}
	group, err := c.readGroupCommitted(ctx, topics)
	if err != nil {
		c.m.commits.WithLabelValues("error").Add(float64(len(want)))
		c.log.Warn("reading the group's committed offsets before a commit failed; will retry", "err", err)
		return
	}
	for tp, off := range want {
		// Past ours and moved since we were assigned the partition:
		// another member committed it. (Past ours but where it was at
		// assignment is no one's progress: the log was truncated or
		// recreated below it and the client restarted from its start;
		// committing then repairs the group's offset.)
		if g, ok := group[tp]; ok && g > off && g != assignedAt[tp] {
			delete(want, tp)
			delete(offsets[tp.topic], tp.partition)
			c.m.commits.WithLabelValues("behind").Inc()
			c.log.Warn("not committing: the group's committed offset is past ours (another member has owned the partition since); leaving it as it is",
				"topic", tp.topic, "partition", tp.partition, "offset", off, "group_committed", g)
		}
	}
	// Still ours, as read (lost forgets without commitMu): a partition lost
	// meanwhile is left out.
	c.mu.Lock()
	for tp := range want {
		if c.parts[tp] != parts[tp] {
			delete(want, tp)
			delete(offsets[tp.topic], tp.partition)
		}
	}
	c.mu.Unlock()
	if len(want) == 0 {
		return
	}
	start := time.Now()
	var failed map[topicPartition]error
	c.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		failed = map[topicPartition]error{}
		if err != nil {
			for tp := range want {
				failed[tp] = err
			}
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil {
					failed[topicPartition{t.Topic, p.Partition}] = perr
				}
			}
		}
	})
	c.m.commitSeconds.Observe(time.Since(start).Seconds())
	c.trace.committed(start, want, failed)
	c.mu.Lock()
	defer c.mu.Unlock()
	for tp, off := range want {
		if err, bad := failed[tp]; bad {
			c.m.commits.WithLabelValues("error").Inc()
			c.log.Warn("offset commit failed; will retry", "topic", tp.topic, "partition", tp.partition, "offset", off, "err", err)
			continue
		}
		c.m.commits.WithLabelValues("ok").Inc()
		c.m.committedOffset.WithLabelValues(tp.topic, strconv.Itoa(int(tp.partition))).Set(float64(off))
		if p := c.parts[tp]; p != nil && off > p.committed {
			p.committed = off
			c.lag.committed(p.watch, off)
		}
	}
}

// readGroupCommitted is the group's committed offset per partition of
// topics (partitions with none are absent).
func (c *committer) readGroupCommitted(ctx context.Context, topics []string) (map[topicPartition]int64, error) {
	if c.groupCommitted != nil {
		return c.groupCommitted(ctx, topics)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := c.adm.FetchOffsetsForTopics(ctx, c.cfg.Group, topics...)
	if err != nil {
		return nil, err
	}
	out := map[topicPartition]int64{}
	var perr error
	resp.Each(func(o kadm.OffsetResponse) {
		switch {
		case o.Err != nil:
			perr = o.Err
		case o.At >= 0:
			out[topicPartition{o.Topic, o.Partition}] = o.At
		}
	})
	return out, perr
}

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
// finish, commits what finished, and forgets the partitions
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
				only[tp] = true
				parts = append(parts, part)
			}
		}
	}
	c.mu.Unlock()
	c.flight.waitIdle(parts, c.cfg.RevokeTimeout)
	c.commit(ctx, only)
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
// partitions e names (another Own moved their epoch). The group
// coordinator decides who owns a partition: a partition it still assigns
// to this member (the other Own was a late one, by a member the group had
// already dropped) is taken again in the ledger (a new epoch) and returned
// with its new fence, so that the caller writes again under it; any other
// is forgotten without committing, like lost (this router is the zombie).
// An assignment newer than the refused fence is left alone. Calls are
// serialised, so that the claimer and the marker, refused together, take
// a partition again once.
func (c *committer) fenced(e *FencedError) map[PartitionRef]decide.Fence {
	c.fenceMu.Lock()
	defer c.fenceMu.Unlock()
	out := map[PartitionRef]decide.Fence{}
	var cands []*partition
	c.mu.Lock()
	for _, st := range e.Stale {
		tp := topicPartition{st.Topic, st.Partition}
		part := c.parts[tp]
		switch {
		case part == nil || part.group != st.Group || part.epoch.Load() < st.Epoch:
		case part.epoch.Load() > st.Epoch: // taken again meanwhile
			out[PartitionRef{st.Topic, st.Partition}] = part.fence()
		default:
			cands = append(cands, part)
		}
	}
	c.mu.Unlock()
	if len(cands) == 0 {
		return out
	}
	ctx, cancel := context.WithTimeout(c.parent, 10*time.Second)
	defer cancel()
	mine, member := c.assignedToMe(ctx)
	var again []*partition
	var refs []PartitionRef
	for _, part := range cands {
		if mine[part.tp] {
			again = append(again, part)
			refs = append(refs, PartitionRef{part.tp.topic, part.tp.partition})
		}
	}
	var epochs []int64
	if len(refs) > 0 {
		var err error
		var gen int32
		if c.cl != nil {
			_, gen = c.cl.GroupMetadata()
		}
		if epochs, err = c.own(ctx, Ownership{Group: c.cfg.Group, Member: member, Generation: gen, Confirmed: true, Parts: refs}); err != nil {
			c.log.Warn("could not take partitions again in the ledger's fence; forgetting them", "partitions", refs, "err", err)
			again, epochs = nil, nil
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, part := range again {
		if c.parts[part.tp] == part {
			part.epoch.Store(epochs[i])
			out[refs[i]] = part.fence()
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
	return out
}

// confirm asks the group coordinator about partitions the ledger refused
// to the assignment of generation gen (a later generation holds them):
// those it assigns to this member are taken all the same (Confirmed) and
// added to fences; the others are left out (this member is stale).
func (c *committer) confirm(ctx context.Context, member string, gen int32, refused []PartitionRef, fences map[topicPartition]decide.Fence) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	mine, _ := c.assignedToMe(dctx)
	var confirmed []PartitionRef
	for _, ref := range refused {
		if mine[topicPartition{ref.Topic, ref.Partition}] {
			confirmed = append(confirmed, ref)
		}
	}
	if len(confirmed) < len(refused) {
		c.log.Warn("partitions assigned in an older group generation than the ledger's owner holds them in; not taken (this member was dropped from the group)",
			"generation", gen, "partitions", refused, "confirmed_by_the_coordinator", confirmed)
	}
	if len(confirmed) == 0 {
		return
	}
	epochs, err := c.own(ctx, Ownership{Group: c.cfg.Group, Member: member, Generation: gen, Confirmed: true, Parts: confirmed})
	if err != nil {
		c.log.Warn("partitions confirmed by the coordinator but not taken in the ledger's fence", "partitions", confirmed, "err", err)
		return
	}
	for i, ref := range confirmed {
		if epochs[i] != 0 {
			fences[topicPartition{ref.Topic, ref.Partition}] = decide.Fence{Group: c.cfg.Group, Epoch: epochs[i]}
		}
	}
}

// assignedToMe asks the group coordinator which partitions it assigns to
// this member now (none if it cannot say).
func (c *committer) assignedToMe(ctx context.Context) (map[topicPartition]bool, string) {
	if c.cl == nil || c.adm == nil {
		return nil, ""
	}
	member, _ := c.cl.GroupMetadata()
	groups, err := c.adm.DescribeGroups(ctx, c.cfg.Group)
	if err != nil {
		c.log.Warn("describing the consumer group to check a partition the ledger's fence refused", "err", err)
		return nil, member
	}
	out := map[topicPartition]bool{}
	g, ok := groups[c.cfg.Group]
	if !ok || g.Err != nil {
		return out, member
	}
	for _, m := range g.Members {
		if m.MemberID != member {
			continue
		}
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range a.Topics {
				for _, p := range t.Partitions {
					out[topicPartition{t.Topic, p}] = true
				}
			}
		}
	}
	return out, member
}

// setPaused exports how many owned partitions are paused, and wakes the
// poll loop's wait for capacity (waitCapacity asks whether it is paused).
func (c *committer) setPaused(paused bool) {
	c.mu.Lock()
	n := 0
	if paused {
		// Partitions still being taken in the ledger's fence are
		// assigned and wait too (PostgreSQL down at an assignment).
		n = len(c.parts) + c.owning
	}
	c.m.pausedPartitions.Set(float64(n))
	c.mu.Unlock()
	c.flight.wake()
}

// every runs fn every d until ctx ends.
func every(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}
