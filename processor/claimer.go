package processor

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/dedupio/dedup/processor/decide"
)

// claimBatch is a decoded and routed poll batch, on its way to the ledger:
// one intent per (record, route), with its start request and its record.
type claimBatch struct {
	intents []decide.Intent
	starts  []startRef // intent i is decision starts[i].d's intent starts[i].j
	owners  []*record
	refused map[PartitionRef]int // times the ledger's fence refused each partition's pieces of this batch
	// undecided, when set, is a poll not decided yet (no intents): the
	// records a replay looks up as known first (Router.settle, before the
	// claimer).
	undecided []polled
}

// startRef points at one intent of a decision, whose start request is
// built only if the intent is to start.
type startRef struct {
	d *decide.Decision
	j int
}

// request is the intent's start request, its data its own (ownedRequest).
func (s startRef) request() decide.StartRequest { return ownedRequest(s.d.Start(s.j)) }

func (s startRef) route() *decide.Route { return s.d.Routes[s.j] }

// entity is the intent's entity workflow ID (signal routes), else "".
func (s startRef) entity() string {
	if s.d.Entities == nil {
		return ""
	}
	return s.d.Entities[s.j]
}

// claimer claims each poll batch's intents in the ledger, in poll order,
// and acts on the verdicts. Its guarantee: every intent ends exactly once:
// new and re-driven intents are handed to the start pool (which starts one
// per workflow ID and makes the other copies wait), duplicates finish at
// once, conflicts are dead-lettered. The ledger answers per workflow ID
// (see Ledger.Claim); the claimer never deduplicates on its own, so which
// copy starts a workflow is decided in one place, startPool.submit.
type claimer struct {
	trace  *routerTracer // nil: off
	log    *slog.Logger
	m      *metrics
	ledger Ledger
	health *health
	hooks  hooks
	starts *startPool
	dlq    *deadLetterWriter
	end    func(rec *record, ok bool)
	// endAll ends a batch's duplicates together (committer.endAll);
	// ended is its scratch, reused batch after batch.
	endAll func(recs []*record, ok bool)
	ended  []*record
	// fenced answers the ledger's fence (committer.fenced): the refused
	// partitions the router took again, with their new fences; it forgot
	// the others.
	fenced func(context.Context, *FencedError) map[PartitionRef]*partition
	// waits are the partitions refused more than three times, waiting
	// (refused.go); claim runs on one goroutine: no lock.
	waits refusedWaits

	// The decision log samples duplicates: the first of each second is
	// logged at info, with how many went unlogged before it (claim runs on
	// one goroutine: no lock).
	dupLoggedAt time.Time
	dupUnlogged int
}

// claim claims b (nil: none) and the pieces of the waiting partitions
// that are due (refusedWaits), and dispatches their intents. It returns
// once every start is queued, so the claim of the next batch overlaps with
// the starts of this one.
func (c *claimer) claim(ctx context.Context, b *claimBatch) {
	// From before the ledger reads the rows to the end of the dispatch,
	// the start pool notes the starts whose marks left their rows started
	// (submitClaimed).
	c.starts.claimBegins()
	defer c.starts.claimEnds()
	// A refused statement is split by partition (unfenced): the batches
	// to claim hold disjoint partitions, each partition's pieces in order.
	var todo []*claimBatch
	if b = c.waits.behindWaiting(b); b != nil {
		todo = append(todo, b)
	}
	// queued: the pieces of todo that are the first of their partition's
	// queue.
	var queued map[*claimBatch]PartitionRef
	for _, q := range c.waits.dueWaiting(time.Now()) {
		if queued == nil {
			queued = map[*claimBatch]PartitionRef{}
		}
		queued[q] = PartitionRef{q.intents[0].Topic, q.intents[0].Partition}
		todo = append(todo, q)
	}
	// done ends a queue's first piece: its next piece is claimed now.
	done := func(b *claimBatch) {
		if ref, ok := queued[b]; ok {
			if next := c.waits.claimed(ref, b); next != nil {
				queued[next] = ref
				todo = append(todo, next)
			}
		}
	}
	for len(todo) > 0 {
		b := todo[0]
		todo = todo[1:]
		var verdicts []decide.Claimed
		start := time.Now()
		err := c.health.retry(ctx, OpClaim, func(ctx context.Context) error {
			var err error
			verdicts, err = c.ledger.Claim(ctx, b.intents)
			return err
		})
		c.m.claimSeconds.Observe(time.Since(start).Seconds())
		c.m.claimBatch.Observe(float64(len(b.intents)))
		c.trace.claimed(b, verdicts, err, start)
		if f, ok := IsFenced(err); ok {
			// Nothing of the batch was written: the moved partitions'
			// records are abandoned (the new owner has them), those of a
			// partition the router took again are claimed again under its
			// new fence, after the pieces of the partitions the fence did
			// not refuse, claimed first: a partition refused over and over
			// holds no other's records. Past its third refusal, it waits
			// in a queue of its own.
			out := c.unfenced(b, f, c.fenced(ctx, f))
			if out[0] != nil {
				todo = append(todo, out[0])
			}
			retaken := out[1]
			switch ref, first := queued[b]; {
			case retaken == nil:
				done(b)
			case refusedMost(retaken) <= 3 && first:
				c.waits.replaceFirst(ref, b, retaken)
				queued[retaken] = ref
				todo = append(todo, retaken)
			case refusedMost(retaken) <= 3:
				todo = append(todo, retaken)
			case first: // one partition: the queue's
				c.waits.requeue(ref, b, retaken, refusedMost(retaken))
			default:
				for ref, p := range byPartition(retaken) {
					c.waits.wait(ref, p, p.refused[ref])
				}
			}
			continue
		}
		done(b)
		if err != nil { // shutting down, or the ledger refused for good
			c.endAll(b.owners, false)
			continue
		}
		if c.hooks.AfterClaim != nil {
			c.hooks.AfterClaim()
		}
		c.dispatch(ctx, b, verdicts)
	}
}

// waitingDue is a channel that fires when the first waiting partition is
// due (a nil channel when none waits): the claimer then claims it
// (claim(ctx, nil)).
func (c *claimer) waitingDue() <-chan time.Time {
	at, ok := c.waits.next()
	if !ok {
		return nil
	}
	return time.After(time.Until(at))
}

// abandonWaiting ends the records of the waiting partitions, not ok (the
// router stops: nothing is committed past them).
func (c *claimer) abandonWaiting() {
	if recs := c.waits.all(); len(recs) > 0 {
		c.endAll(recs, false)
	}
}

// dispatch acts on the ledger's verdicts of b's intents (verdicts[i] is
// intent i's): new and re-driven intents go to the start pool,
// duplicates finish (together, once the batch is dispatched), conflicts
// are dead-lettered.
func (c *claimer) dispatch(ctx context.Context, b *claimBatch, verdicts []decide.Claimed) {
	var conflicts []deadLetter
	now := time.Now()
	ended := c.ended[:0]
	defer func() {
		c.endAll(ended, true)
		c.ended = ended[:0]
	}()
	// Counted per batch, not per intent: a replay claims a million a
	// minute.
	var counts [decide.VerdictConflict + 1]float64
	defer func() {
		for v := decide.VerdictNew; v <= decide.VerdictConflict; v++ {
			if counts[v] > 0 {
				c.m.intents.WithLabelValues(v.String()).Add(counts[v])
			}
		}
	}()
	for i, cl := range verdicts {
		in, rec, v := &b.intents[i], b.owners[i], cl.Verdict
		if v == decide.VerdictNew || v == decide.VerdictRedrive {
			req := b.starts[i].request()
			req.Generation = cl.Generation
			waits, started := c.starts.submitClaimed(ctx, rec, req)
			switch {
			case waits:
				// Another copy's start is in flight here: this one finishes
				// with it, and Temporal hears of it once.
				counts[decide.VerdictDuplicate]++
				c.duplicate(in, "start_in_flight", now)
				continue
			case !started:
				counts[v]++
				if e := b.starts[i].entity(); e != "" {
					logDecision(c.log, slog.LevelInfo, v.String(), intentOf(in), "workflow_id", in.WorkflowID, "entity_workflow_id", e)
					continue
				}
				logDecision(c.log, slog.LevelInfo, v.String(), intentOf(in), "workflow_id", in.WorkflowID, "generation", cl.Generation)
				continue
			}
			// Another copy's start, whose mark left the row started after
			// this claim read it, left the pool before this copy's turn (a
			// claimer descheduled): this copy ends as its waiter would
			// have, ok and with no re-run check.
			counts[decide.VerdictDuplicate]++
			c.duplicate(in, "start_in_flight", now)
			ended = append(ended, rec)
			continue
		}
		switch {
		case v == decide.VerdictConflict:
			// Logged by the dead-letter writer once the dead letter is
			// written (decision "conflict").
			counts[v]++
			conflicts = append(conflicts, deadLetter{rec: rec, reason: decide.ReasonConflict, workflow: in.WorkflowID,
				err:     fmt.Errorf("workflow %s was claimed with another payload; not started", in.WorkflowID),
				eventID: in.EventID, rule: in.IDRule})
		case b.starts[i].route().MayRerun():
			// Started before; the policy may allow a closed run to run
			// again: the start pool asks Temporal how it ended.
			counts[v]++
			c.duplicate(in, "started_rerun_check", now)
			req := b.starts[i].request()
			req.Generation = cl.Generation
			c.starts.submit(ctx, rec, req, true)
		default:
			counts[v]++
			c.duplicate(in, "started", now)
			ended = append(ended, rec)
		}
	}
	if len(conflicts) > 0 {
		c.dlq.write(ctx, conflicts)
	}
}

// duplicate logs a duplicate: each one at debug, and the first of each
// second at info with sampled=true and how many were not logged at info
// since the previous sample (the decision log's duplicates). ledger says
// what the copy is a duplicate of: a started row ("started", or
// "started_rerun_check" under an allow_* policy, which asks Temporal next)
// or a start in flight in this router ("start_in_flight").
// now is the batch's time (one clock read a batch: its intents are
// dispatched within microseconds). The debug line's arguments are built
// only when debug is on: a replay has a million duplicates a minute.
func (c *claimer) duplicate(in *decide.Intent, ledger string, now time.Time) {
	if now.Sub(c.dupLoggedAt) >= time.Second {
		logDecision(c.log, slog.LevelInfo, "duplicate", intentOf(in),
			"sampled", true, "not_logged_since_last_sample", c.dupUnlogged, "ledger", ledger, "workflow_id", in.WorkflowID)
		c.dupLoggedAt, c.dupUnlogged = now, 0
		return
	}
	c.dupUnlogged++
	if c.log.Enabled(context.Background(), slog.LevelDebug) {
		logDecision(c.log, slog.LevelDebug, "duplicate", intentOf(in), "ledger", ledger, "workflow_id", in.WorkflowID)
	}
}

// claimLoop is the claimer's goroutine (Router.Run): it claims the
// batches of claimQ in poll order, the polls waiting behind one together
// (gatherPolls), and a partition the fence refused over and over when its
// turn comes (refused.go), until claimQ is closed.
func (r *Router) claimLoop(ctx context.Context, claimQ <-chan *claimBatch) {
	var held *claimBatch
	for {
		b := held
		if b == nil {
			var ok bool
			select {
			case b, ok = <-claimQ:
				if !ok {
					r.claims.abandonWaiting()
					return
				}
			case <-r.claims.waitingDue(): // a partition refused over and over (refused.go)
				r.claims.claim(ctx, nil)
				continue
			}
		}
		b, held = gatherPolls(b, claimQ)
		r.claims.claim(ctx, b)
	}
}
