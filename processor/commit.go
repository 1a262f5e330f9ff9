package processor

import (
	"context"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

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
