package processor

import (
	"context"
	"errors"
	"time"
)

// Taking a refused partition again (committer.fenced): the coordinator's
// answer it asks for, and the backoff after a failure.

// retake is a partition whose taking again (fenced's Own) failed: not
// tried again until until.
type retake struct {
	failures int
	until    time.Time
}

// retakeBackoff is how long fenced keeps a partition without trying to
// take it again after its failures-th failure: 10 s a failure, at most a
// minute.
func retakeBackoff(failures int) time.Duration {
	return min(time.Duration(failures)*10*time.Second, time.Minute)
}

// assignedToMe asks the group coordinator which partitions it assigns to
// this member now (none if it cannot say). unsure: it cannot say, because
// the question failed, or because the group is between two assignments
// (not Stable) and lists this member: the coordinator then answers with no
// assignment, while under the cooperative protocol the member keeps what
// it owns until it revokes it.
func (c *committer) assignedToMe(ctx context.Context) (mine map[topicPartition]bool, member string, unsure bool) {
	if c.cl == nil || c.adm == nil {
		return nil, "", false
	}
	member, _ = c.cl.GroupMetadata()
	groups, err := c.adm.DescribeGroups(ctx, c.cfg.Group)
	if err == nil {
		if g, ok := groups[c.cfg.Group]; !ok {
			err = errors.New("the coordinator did not describe the group")
		} else {
			err = g.Err
		}
	}
	if err != nil {
		c.log.Warn("describing the consumer group to check a partition the ledger's fence refused", "err", err)
		return nil, member, true
	}
	out := map[topicPartition]bool{}
	g := groups[c.cfg.Group]
	for _, m := range g.Members {
		if m.MemberID != member {
			continue
		}
		unsure = g.State != "Stable"
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range a.Topics {
				for _, p := range t.Partitions {
					out[topicPartition{t.Topic, p}] = true
				}
			}
		}
	}
	return out, member, unsure
}
