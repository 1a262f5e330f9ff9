package processor

import (
	"context"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// checkGap asks where the partition's log starts now: if past from, the
// records from `from` up to the log start (at most `to`) were deleted by
// retention before this group read them. Logged and counted: the reset
// policy decided to go on, and operators must know what was skipped.
func (c *committer) checkGap(p *partition, from, to int64) {
	defer func() { c.mu.Lock(); p.checking = false; c.mu.Unlock() }()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	starts, err := c.adm.ListStartOffsets(ctx, p.tp.topic)
	if err != nil {
		return
	}
	o, ok := starts.Lookup(p.tp.topic, p.tp.partition)
	if !ok || o.Err != nil || o.Offset <= from {
		return // compaction or transaction markers, not retention
	}
	lost := min(o.Offset, to) - from
	c.m.lost.WithLabelValues(p.tp.topic).Add(float64(lost))
	c.log.Error("records deleted by retention before they were consumed; they are lost",
		"topic", p.tp.topic, "partition", p.tp.partition, "from", from, "to", min(o.Offset, to)-1, "records", lost)
}

// lagLoop exports, for the partitions this replica owns, how far its
// committed offset is behind the log end (dedup_consumer_lag). Summed over
// replicas it is the group's lag.
func (c *committer) lagLoop(ctx context.Context) {
	every(ctx, c.cfg.LagInterval, func() { c.measureLag(ctx) })
}

func (c *committer) measureLag(ctx context.Context) {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	ends, err := c.adm.ListEndOffsets(lctx, c.cfg.Topics...)
	cancel()
	if err != nil {
		return
	}
	c.mu.Lock()
	ends.Each(func(o kadm.ListedOffset) {
		p := c.parts[topicPartition{o.Topic, o.Partition}]
		if p == nil || o.Err != nil {
			return
		}
		at := p.committed
		if at < 0 {
			at = p.assignedAt
		}
		if at >= 0 {
			c.m.lag.WithLabelValues(o.Topic, strconv.Itoa(int(o.Partition))).Set(float64(max(o.Offset-at, 0)))
		}
	})
	c.mu.Unlock()
}
