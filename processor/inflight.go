package processor

import (
	"context"
	"time"
)

// wake wakes everything waiting on the committer (capacity, drain,
// revoke): the pause changed, or a deadline passed.
func (c *committer) wake() {
	c.mu.Lock()
	c.cond.Broadcast()
	c.mu.Unlock()
}

// setPending says how many pieces of work rec has (one per intent).
func (c *committer) setPending(rec *record, n int) {
	c.mu.Lock()
	rec.pending = n
	c.mu.Unlock()
}

// waitCapacity blocks while MaxInFlight records are in flight or fetching
// is paused; false once ctx ends.
func (c *committer) waitCapacity(ctx context.Context) bool {
	stop := context.AfterFunc(ctx, c.wake)
	defer stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for (c.inFlight >= c.cfg.MaxInFlight || c.paused()) && ctx.Err() == nil {
		c.cond.Wait()
	}
	return ctx.Err() == nil
}

// waitDrained waits up to timeout for every record in flight to end.
func (c *committer) waitDrained(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	t := time.AfterFunc(timeout, c.wake)
	defer t.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.inFlight > 0 && time.Now().Before(deadline) {
		c.cond.Wait()
	}
	if c.inFlight > 0 {
		c.log.Warn("shutting down with records in flight; they will be redelivered", "records", c.inFlight)
	}
}
