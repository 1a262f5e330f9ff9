package processor

import (
	"context"
	"slices"
	"time"
)

// marker batches started workflows into one ledger update; their records
// finish when it succeeds. Its final flush (after the workers stopped)
// gets a short deadline of its own, not the cancelled work context. A
// mark the drain's end cut short (or the answer to its refusal: fenced
// gives up once the work context ended) leaves what it did not write to
// the final flush, sent again under the fences as they are then (a mark
// lands once, whatever its tries), rather than ending it unmarked; what
// it wrote (a refusal writes the rows whose fence held) ends ok at once,
// whatever the final flush meets.
func (s *startPool) marker() {
	var batch []*job
	// waiting: marks the ledger's fence refused more than three times,
	// their partition taken again each time (a member the group dropped
	// that keeps taking it), each until its markDue: the other
	// partitions' marks go on meanwhile.
	var waiting []*job
	tick := time.NewTicker(s.cfg.Starts.MarkInterval)
	defer tick.Stop()
	flush := func(ctx context.Context, final bool) {
		if !final && s.workCtx.Err() != nil {
			// The drain ended: what is batched goes with the final
			// flush, under a deadline of its own.
			return
		}
		now := time.Now()
		kept := waiting[:0]
		for _, j := range waiting {
			if final || !now.Before(j.markDue) {
				batch = append(batch, j)
			} else {
				kept = append(kept, j)
			}
		}
		clear(waiting[len(kept):])
		waiting = kept
		// A refusal of the ledger's fence marks the rows of the other
		// partitions; a job whose owner's partition moved is abandoned (a
		// waiter of a partition still ours takes it over and marks it),
		// unless the router took its record's assignment again: then its
		// mark is sent again under the new fence, never given up for the
		// number of its refusals (retakenFor), at once for the first
		// three, then after a wait (waitRefused's), with the next flush
		// that is due, or here if this is the final flush.
		for sent := 0; len(batch) > 0; sent++ {
			if final && sent > 0 {
				// Only refused jobs are left: wait for them, as for the
				// final flush's own refusals, not for those of the run
				// (up to a second, longer than a short flush has:
				// adversary 30c-2).
				waitRefused(ctx, sent)
			}
			started := make([]Started, len(batch))
			for i, j := range batch {
				started[i] = Started{WorkflowID: j.req.WorkflowID, RunID: j.runID, Generation: j.req.Generation,
					Topic: j.rec.part.tp.topic, Partition: j.rec.part.tp.partition, Fence: j.rec.part.fence()}
			}
			err := s.health.retry(ctx, OpMark, func(ctx context.Context) error { return s.ledger.MarkStarted(ctx, started) })
			f, fenced := IsFenced(err)
			var again map[PartitionRef]*partition
			if fenced {
				again = s.fenced(ctx, f)
			}
			// cutShort: the drain's end cut this mark or its refusal's
			// answer short; see the marker's doc (adversaries 32–32c).
			cutShort := err != nil && !final && s.workCtx.Err() != nil
			if cutShort && !fenced {
				return // nothing written: the whole batch waits
			}
			var retry, kept []*job
			for i, j := range batch {
				refused := fenced && f.Has(started[i].Topic, started[i].Partition, started[i].Fence)
				if refused && cutShort {
					kept = append(kept, j)
					continue
				}
				if refused && retakenFor(again, j.rec) {
					if j.markRefused++; j.markRefused > 3 && !final {
						j.markDue = time.Now().Add(refusedWait(j.markRefused))
						waiting = append(waiting, j)
						s.hold(j, true)
						continue
					}
					retry = append(retry, j)
					continue
				}
				ok := err == nil || (fenced && !refused)
				if ok && started[i].Recorded {
					s.markedStarted(j)
				}
				s.hold(j, false)
				s.done(j, ok)
			}
			clear(batch) // reused: a job left in it would keep its request and record's bytes
			if cutShort {
				batch = append(batch[:0], kept...)
				return
			}
			batch = append(batch[:0], retry...)
		}
	}
	for {
		due := s.firstDue(waiting)
		select {
		case j, ok := <-s.markQ:
			if !ok {
				ctx, cancel := s.finalFlushCtx()
				flush(ctx, true)
				cancel()
				return
			}
			batch = append(batch, j)
			hurried := s.hurried.Load() > 0
			if hurried {
				// A revoke or the drain waits (hurry): this mark and
				// those queued behind it go now.
				batch = s.takeQueued(batch)
			}
			if len(batch) >= s.cfg.Starts.MarkBatch || hurried {
				flush(s.workCtx, false)
			}
		case <-s.markNow:
			flush(s.workCtx, false)
		case <-tick.C:
			flush(s.workCtx, false)
		case <-due:
			flush(s.workCtx, false)
		}
	}
}

// firstDue fires at the first markDue of the waiting marks (nil: none).
// After the drain's end the waiting marks go with the final flush: no
// timer then, which a due already past would fire again and again.
func (s *startPool) firstDue(waiting []*job) <-chan time.Time {
	if len(waiting) == 0 || s.workCtx.Err() != nil {
		return nil
	}
	first := waiting[0].markDue
	for _, j := range waiting[1:] {
		if j.markDue.Before(first) {
			first = j.markDue
		}
	}
	return time.After(time.Until(first))
}

// finalFlushCtx is the final flush's context: not the work context, which
// has ended, but a deadline of its own, flushBy (what the shutdown left
// it), or 10 s if that comes first.
func (s *startPool) finalFlushCtx() (context.Context, context.CancelFunc) {
	flushBy := time.Now().Add(10 * time.Second)
	if !s.flushBy.IsZero() && s.flushBy.Before(flushBy) {
		flushBy = s.flushBy
	}
	return context.WithDeadline(context.WithoutCancel(s.workCtx), flushBy)
}

// hurry makes the marker send its marks at once, not at its interval,
// until done is called: a revoke or the drain waits for records that
// finish only once their workflows are marked, and would otherwise wait
// up to starts.mark_interval for a mark, past a revoke_timeout or a
// drain_timeout a little longer than the interval (adversary 32).
func (s *startPool) hurry() (done func()) {
	s.hurried.Add(1)
	select {
	case s.markNow <- struct{}{}:
	default:
	}
	return func() { s.hurried.Add(-1) }
}

// takeQueued appends to batch the jobs already in the mark queue, up to
// a batch, without waiting for more (a closed queue is left for the
// marker's loop to see).
func (s *startPool) takeQueued(batch []*job) []*job {
	for len(batch) < s.cfg.Starts.MarkBatch {
		select {
		case j, ok := <-s.markQ:
			if !ok {
				return batch
			}
			batch = append(batch, j)
		default:
			return batch
		}
	}
	return batch
}

// hold makes j hold its partition while its mark waits for the ledger's
// fence (held), or lets go of it (fenceHolds): once each way. The records
// waiting on j (waiters, rechecks), of whatever partition, hold theirs
// too, those that join while it holds included (joinLocked): they finish
// only with j, so their partitions' records would fill max_in_flight in
// its place.
func (s *startPool) hold(j *job, held bool) {
	s.mu.Lock()
	if j.held == held {
		s.mu.Unlock()
		return
	}
	j.held = held
	if held {
		if s.heldJobs == nil {
			s.heldJobs = map[*job]struct{}{}
		}
		s.heldJobs[j] = struct{}{}
	} else {
		delete(s.heldJobs, j)
	}
	recs := []*record{j.rec}
	var ended []*record
	if held {
		// Those of an assignment already gone end now (dropWaitersOf).
		j.waiters = slices.DeleteFunc(j.waiters, func(w *record) bool {
			if s.goneLocked(w) {
				ended = append(ended, w)
				return true
			}
			return false
		})
		j.rechecks = slices.DeleteFunc(j.rechecks, func(rc recheck) bool {
			if s.goneLocked(rc.rec) {
				ended = append(ended, rc.rec)
				return true
			}
			return false
		})
		j.holding = append(j.holding, j.waiters...)
		for _, rc := range j.rechecks {
			j.holding = append(j.holding, rc.rec)
		}
	}
	recs = append(recs, j.holding...)
	if !held {
		j.holding = nil
	}
	s.mu.Unlock()
	for _, rec := range recs {
		s.holdRecord(rec, held)
	}
	for _, rec := range ended {
		s.end(rec, false)
	}
}

// goneLocked reports whether rec's assignment is gone while the router
// works: such a record does not wait on a held job (dropWaitersOf). s.mu
// is held.
func (s *startPool) goneLocked(rec *record) bool {
	return rec.part.ctx.Err() != nil && s.workCtx.Err() == nil
}

// holdRecord takes (or drops) one hold of rec's partition.
func (s *startPool) holdRecord(rec *record, held bool) {
	s.holds.hold(rec.part, held)
}

// dropWaitersOf ends, not ok, the records of part, an assignment gone,
// that wait on a held job (waiters, rechecks), and drops their holds:
// nothing of a gone assignment is committed, its next assignment polls
// them again, and a partition that moved away and back over and over
// while the job stayed held added a poll of copies in flight, lent, at
// each move (adversary 29a). The job's own record stays: its mark is
// still sent. Not when the router stops (every assignment is gone then):
// the final flush sends the held marks once more, and their waiters end
// with them.
func (s *startPool) dropWaitersOf(part *partition) {
	if s.workCtx.Err() != nil {
		return
	}
	var ended, unheld []*record
	of := func(rec *record) bool { return rec.part == part }
	s.mu.Lock()
	for j := range s.heldJobs {
		j.waiters = slices.DeleteFunc(j.waiters, func(w *record) bool {
			if of(w) {
				ended = append(ended, w)
				return true
			}
			return false
		})
		j.rechecks = slices.DeleteFunc(j.rechecks, func(rc recheck) bool {
			if of(rc.rec) {
				ended = append(ended, rc.rec)
				return true
			}
			return false
		})
		j.holding = slices.DeleteFunc(j.holding, func(w *record) bool {
			if of(w) {
				unheld = append(unheld, w)
				return true
			}
			return false
		})
	}
	s.mu.Unlock()
	for _, rec := range unheld {
		s.holdRecord(rec, false)
	}
	for _, rec := range ended {
		s.end(rec, false)
	}
}
