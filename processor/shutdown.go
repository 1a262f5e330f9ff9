package processor

import (
	"context"
	"sync"
	"time"
)

// shutdownReserve is the part of drain_timeout (d) kept from the drain for
// the shutdown's last steps, the marker's final flush, the final commit and
// the leave: a quarter of it, at least 1s (the final commit's half of it,
// 500 ms, holds two round trips of a coordinator answering in 200 ms) and
// at most 5s.
func shutdownReserve(d time.Duration) time.Duration {
	return min(max(d/4, time.Second), 5*time.Second)
}

// stopPolling records the router's stop, once, and ends stopping: the
// whole shutdown has drain_timeout from then (shutdownDeadline).
func (c *committer) stopPolling() {
	c.stopMu.Lock()
	if c.stopAt.IsZero() {
		c.stopAt = time.Now()
	}
	c.stopMu.Unlock()
	c.stop()
}

// shutdownDeadline is drain_timeout after the router stopped polling; the
// zero time before it did.
func (c *committer) shutdownDeadline() time.Time {
	c.stopMu.Lock()
	defer c.stopMu.Unlock()
	if c.stopAt.IsZero() {
		return time.Time{}
	}
	return c.stopAt.Add(c.cfg.DrainTimeout)
}

// drainBy is when the shutdown stops waiting for records in flight: its
// deadline less the share of its last steps (shutdownReserve); the zero
// time before the stop.
func (c *committer) drainBy() time.Time {
	d := c.shutdownDeadline()
	if d.IsZero() {
		return d
	}
	return d.Add(-shutdownReserve(c.cfg.DrainTimeout))
}

// untilShutdown is ctx, ended at the shutdown's deadline once the router
// stops polling: a revoke's commit that the coordinator holds cannot hold
// the shutdown past drain_timeout (a revoke runs inside the poll, which
// the stopped poll loop waits for).
func (c *committer) untilShutdown(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	var t *time.Timer
	stop := context.AfterFunc(c.stopping, func() {
		if d := c.shutdownDeadline(); !d.IsZero() {
			mu.Lock()
			t = time.AfterFunc(time.Until(d), cancel)
			mu.Unlock()
		}
	})
	return ctx, func() {
		stop()
		mu.Lock()
		if t != nil {
			t.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

// leave leaves the group and closes the client, waiting until deadline
// at most. Leaving waits for a rebalance in progress (a join the
// coordinator holds for members that died without leaving can take a
// whole rebalance timeout): past the deadline the router stops waiting,
// and the group gives its partitions away once the session times out.
// Its revoked callback finds nothing more to commit.
func (r *Router) leave(deadline time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	go func() {
		defer close(r.closed)
		_ = r.cl.LeaveGroupContext(ctx)
		r.cl.Close()
	}()
	select {
	case <-r.closed:
	case <-ctx.Done():
		r.log.Warn("leaving the consumer group did not finish within drain_timeout (a rebalance is in progress); "+
			"stopping without waiting: the group reassigns this member's partitions once its session times out",
			"session_timeout", r.cfg.SessionTimeout)
	}
}
