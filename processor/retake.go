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

// fenceQuestion bounds each question fenced asks the group coordinator: a
// coordinator slow to answer holds the caller (the claimer, the marker) of
// every partition no longer than that at a refusal, and unanswered, the
// partitions back off as after a failed Own (adversary 30-1).
const fenceQuestion = 2 * time.Second

// ask is assignedToMe bounded by fenceQuestion; slow: the coordinator did
// not answer within it (unsure too). A question that fails at once is only
// unsure: it holds no one, and the next refusal asks again.
func (c *committer) ask(ctx context.Context) (mine map[topicPartition]bool, member string, unsure, slow bool) {
	qctx, cancel := context.WithTimeout(ctx, fenceQuestion)
	defer cancel()
	mine, member, unsure = c.assignedToMe(qctx)
	return mine, member, unsure, unsure && mine == nil && ctx.Err() == nil && qctx.Err() != nil
}

// backOff counts a failure to take the partitions again (the Own failed,
// or the coordinator was slow to answer a question before or after it): each is kept without being taken
// again, or asked about, for retakeBackoff. fenceLock is held.
func (c *committer) backOff(parts []*partition) {
	if c.retakes == nil {
		c.retakes = map[*partition]retake{}
	}
	for _, part := range parts {
		r := c.retakes[part]
		r.failures++
		r.until = time.Now().Add(retakeBackoff(r.failures))
		c.retakes[part] = r
	}
}

// backingOff keeps cands in out without asking the coordinator when each
// is backing off (retakes): an Own that failed or a question that was slow a moment ago
// is not tried again at each refusal, whose write is sent again under the
// same fence. A partition gone or being revoked is not kept. fenceLock is
// held.
func (c *committer) backingOff(cands []*partition, now time.Time, out map[PartitionRef]*partition) bool {
	for _, part := range cands {
		if !now.Before(c.retakes[part].until) {
			return false
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, part := range cands {
		if c.parts[part.tp] == part && !part.revoking {
			out[PartitionRef{part.tp.topic, part.tp.partition}] = part
		}
	}
	return true
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
