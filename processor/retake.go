package processor

import (
	"context"
	"errors"
	"time"
)

// Taking a refused partition again (committer.fenced): the coordinator's
// answer it asks for, and the backoff after a failure.

// retake is a partition whose taking again failed: its Own failed
// (failures), or the coordinator did not answer a question about it in
// time (slow); not asked about or tried again until until.
type retake struct {
	failures int
	slow     int
	until    time.Time
}

// retakeBackoff is how long fenced keeps a partition without trying to
// take it again after its failures-th failure: 10 s a failure, at most a
// minute.
func retakeBackoff(failures int) time.Duration {
	return min(time.Duration(failures)*10*time.Second, time.Minute)
}

// fenceQuestion bounds the first question fenced asks the group
// coordinator about a partition: a coordinator slow to answer holds the
// caller (the claimer, the marker) of every partition no longer than that
// at a refusal (adversary 30-1). Unanswered, the partition backs off for
// slowBackoff, and the next question about it may take twice as long, up
// to 10 s (questionBound): a coordinator that answers steadily in 3 s is
// answered at the second try (adversary 30c-1).
const fenceQuestion = 2 * time.Second

// ownBound bounds fenced's Own of the partitions it takes again (retried
// while the ledger is down): failed, they back off (retakeBackoff).
const ownBound = 10 * time.Second

// questionBound is how long a question about a partition whose questions
// were slow slow times in a row may take.
func questionBound(slow int) time.Duration {
	return min(fenceQuestion<<min(slow, 3), 10*time.Second)
}

// slowBackoff is how long fenced keeps a partition without asking about it
// again after its slow-th question in a row not answered in time: 5 s
// each, at most a minute (the caller is held a question's bound at most
// once in that time).
func slowBackoff(slow int) time.Duration {
	return min(time.Duration(slow)*5*time.Second, time.Minute)
}

// ask is assignedToMe bounded by the questionBound of parts' slowest;
// slow: the coordinator did not answer within it (unsure too). A question
// that fails at once is only unsure: it holds no one, and the next
// refusal asks again. fenceLock is held.
func (c *committer) ask(ctx context.Context, parts []*partition) (mine map[topicPartition]bool, member string, unsure, slow bool) {
	n := 0
	for _, part := range parts {
		n = max(n, c.retakes[part].slow)
	}
	qctx, cancel := context.WithTimeout(ctx, questionBound(n))
	defer cancel()
	mine, member, unsure = c.assignedToMe(qctx)
	return mine, member, unsure, unsure && mine == nil && ctx.Err() == nil && qctx.Err() != nil
}

// backOff counts a failure to take the partitions again: their Own failed,
// or (slow) the coordinator did not answer a question before or after it
// in time. Each is kept without being taken again, or asked about, for
// retakeBackoff or slowBackoff. fenceLock is held.
func (c *committer) backOff(parts []*partition, slow bool) {
	if c.retakes == nil {
		c.retakes = map[*partition]retake{}
	}
	for _, part := range parts {
		r := c.retakes[part]
		if slow {
			r.slow++
			r.until = time.Now().Add(slowBackoff(r.slow))
		} else {
			r.failures++
			r.until = time.Now().Add(retakeBackoff(r.failures))
		}
		c.retakes[part] = r
		part.backoffUntil.Store(r.until.UnixNano())
	}
}

// backsOff reports whether part is backing off now (backOff), and is not
// being revoked.
func backsOff(part *partition) bool {
	return !part.revokeBegan.Load() && time.Now().UnixNano() < part.backoffUntil.Load()
}

// backoffPoll is how often waitBackoff looks at the backoff again: it may
// end before the time it had when the wait began (a slow question's
// shorter backoff replaces it, a re-take clears it, a revoke begins;
// adversary 31c).
const backoffPoll = 100 * time.Millisecond

// waitBackoff waits while part backs off (backsOff), or until its
// assignment or ctx ends: a write of it sent again before that is refused
// again, under the fence kept. A dead-letter mark sent again on its own
// waits so, rather than cost the ledger a refused statement about every
// second for each record in flight while its partition backs off (up to
// a minute; adversary 31b-4).
func waitBackoff(ctx context.Context, part *partition) {
	for backsOff(part) {
		t := time.NewTimer(min(time.Until(time.Unix(0, part.backoffUntil.Load())), backoffPoll))
		select {
		case <-ctx.Done():
		case <-part.ctx.Done():
		case <-t.C:
			continue
		}
		t.Stop()
		return
	}
}

// backingOff keeps cands in out without asking the coordinator when each
// is backing off (retakes): an Own that failed or a question that was slow
// a moment ago is not tried again at each refusal, whose write is sent again under the
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
