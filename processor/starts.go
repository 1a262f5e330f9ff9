package processor

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dedupio/dedup/processor/decide"
)

// job is one workflow start and the records that wait on it. Its fields
// are the pool's: written under startPool.mu, except runID (the worker
// sets it before handing the job to the marker) and what only the worker
// holding the job reads.
type job struct {
	rec   *record // the owner: the copy whose start this is
	req   decide.StartRequest
	runID string
	// check: the workflow was started before; start it again only if its
	// last run closed the way the reuse policy allows (rerun).
	check bool
	// checking: the check's LastRun read has begun. A check copy that
	// comes later may have seen a newer run than that read will: it
	// re-checks after this job instead of waiting on it (rechecks).
	checking bool
	// startReq is the start a waiting copy needs (verdict new or re-drive,
	// with its generation) when this job is a check: if the check decides
	// not to re-run, the job starts that instead, so a waiter that needs a
	// start never finishes without one.
	startReq *decide.StartRequest
	// waiters are the other copies of the same workflow (same batch or a
	// later one) that asked while this start was in flight: they finish
	// with it instead of calling Temporal again.
	waiters []*record
	// markRefused counts the refusals of the job's mark by the ledger's
	// fence, its partition taken again each time; past the third it waits
	// until markDue (the marker's own).
	markRefused int
	markDue     time.Time
	// held: the job holds its partition (startPool.holds) while its mark
	// waits for the ledger's fence.
	held bool
	// holding: the records waiting on the job that took a hold of their
	// partition while it held (startPool.hold). Guarded by startPool.mu.
	holding []*record
	// rechecks are check copies (duplicates under an allow_* policy) that
	// came when this job could no longer answer them: it was a start, or a
	// check whose LastRun read had begun. Finishing with it could swallow
	// a redelivery that saw a failed run (this job's retried start
	// answered with a run that failed since). When the job ends they are
	// submitted again, as checks: the first asks LastRun anew, after this
	// job's run exists, the others wait on it.
	rechecks []recheck
	// stuck: the job was reported waiting past its key's bound (park).
	stuck bool
}

// recheck is a check copy waiting for a job to end, with its own request.
type recheck struct {
	rec *record
	req decide.StartRequest
}

// startPool starts workflows with starts.concurrency workers and marks them
// started in the ledger in batches.
//
// Its guarantee, the one coalescing rule of the router: a workflow ID has
// at most one start in flight in this router. The first copy that needs
// it (verdict new or re-drive) owns the start; every other copy, whether
// in the same poll batch or a later one, waits on it and finishes with it.
// A copy finishes only once the ledger says started (or its dead letter is
// written), so a committed offset always means a started workflow. If the
// owner's partition is revoked or lost, the start is abandoned for it, and
// the first waiter whose partition is still owned takes the start over
// (waiters are never failed with an owner that went away). A start that
// Temporal refuses for good dead-letters the owner (temporal_permanent),
// marks the row dead_lettered and finishes the waiters with it: it is one
// event, dead-lettered once.
type startPool struct {
	trace   *routerTracer // nil: off
	cfg     Config
	log     *slog.Logger
	m       *metrics
	starter Starter
	ledger  Ledger
	health  *health
	hooks   hooks
	dlq     *deadLetterWriter
	end     func(rec *record, ok bool)
	// fenced answers the ledger's fence (committer.fenced): the refused
	// partitions the router took again, with their new fences.
	fenced func(context.Context, *FencedError) map[PartitionRef]*partition
	// workCtx ends when the router stops working (after the drain);
	// markCtx a little later, after the marker's final flush.
	workCtx context.Context

	mu       sync.Mutex
	starting map[string]*job // workflow ID -> its start in flight here
	// marked holds, while a claim is in progress (claimBegins to
	// claimEnds: from before the ledger reads its rows to the end of its
	// dispatch), the workflow IDs whose starts' marks left their rows
	// started (Started.Recorded) meanwhile, and that left starting since.
	// A copy of the claim answered new or re-drive for such a row read it
	// absent or pending, so before it was started: a row once started is
	// never pending again, nor absent while it is younger than the
	// retention. The start its claim saw pending is the one that row
	// records now: the copy ends with it, as its waiter would have
	// (submitClaimed). Cleared at claimEnds, so it holds one claim's worth
	// at most.
	marked   map[string]struct{}
	claiming bool
	// heldJobs are the jobs that hold their partition (hold), whose
	// waiters of a gone assignment dropWaitersOf ends.
	heldJobs map[*job]struct{}

	startQ chan *job
	markQ  chan *job
	// hurried counts what waits for records to finish now (a revoke, the
	// drain): while it is above zero the marker sends each mark as its
	// job comes, with whatever else is queued, not at its interval
	// (hurry). markNow wakes the marker for what it holds already.
	hurried atomic.Int32
	markNow chan struct{}
	// qmu guards closed: senders to startQ hold it for reading, and stop
	// sets closed under it, so that no job is put in the queue after its
	// final drain (one would never end: nothing reads the queue then).
	qmu    sync.RWMutex
	closed bool
	// parked counts the jobs parked without a worker (park).
	parked sync.WaitGroup
	// holds: a mark the ledger's fence refused over and over holds its
	// partition (not fetched, its records lent: fenceHolds); nil: none.
	holds *fenceHolds
	// flushBy bounds the marker's final flush: set by stop before it
	// closes markQ (zero: 10 s from then).
	flushBy time.Time
}

func newStartPool(cfg Config, log *slog.Logger, m *metrics, starter Starter, ledger Ledger, h *health, hooks hooks, dlq *deadLetterWriter,
	end func(*record, bool), workCtx context.Context) *startPool {
	return &startPool{cfg: cfg, log: log, m: m, starter: starter, ledger: ledger, health: h, hooks: hooks, dlq: dlq, end: end,
		workCtx: workCtx, starting: map[string]*job{}, marked: map[string]struct{}{},
		// Room for the starts of every record in flight (one per route
		// each, usually), so the claimer claims the next batch while this
		// one's starts are still queued: a slow claim then does not leave
		// the start workers idle. Fuller than that, submit waits.
		startQ:  make(chan *job, 2*(cfg.MaxInFlight+cfg.MaxPollRecords)),
		markQ:   make(chan *job, cfg.Starts.MarkBatch),
		markNow: make(chan struct{}, 1),
	}
}

// submit asks for rec's workflow to be started (check: started before,
// run it again if the reuse policy allows): rec owns a new start, or
// waits on the one in flight. It reports whether rec waits.
//
// A check waits on a job only while that job is a check that has not yet
// read LastRun: the read then happens after this copy was claimed, so its
// answer is at least as new as anything this copy saw. Any other job in
// flight (a start, a re-run, a check already reading) makes it a recheck.
//
// ctx is the caller's: if it ends while the start queue is full (the
// claimer at shutdown, with Temporal hanging), the job is abandoned
// uncommitted rather than holding the shutdown up.
func (s *startPool) submit(ctx context.Context, rec *record, req decide.StartRequest, check bool) (waits bool) {
	s.mu.Lock()
	if waits, gone := s.joinLocked(rec, req, check); waits {
		s.mu.Unlock()
		if gone {
			s.end(rec, false)
		}
		return true
	}
	j := &job{rec: rec, req: req, check: check}
	s.starting[req.WorkflowID] = j
	s.mu.Unlock()
	s.enqueue(ctx, j)
	return false
}

// joinLocked makes rec wait on its workflow's start in flight, if there is
// one (a check may wait as a recheck), and reports whether it does. s.mu
// is held. A record of an assignment already gone does not wait on a job
// that holds its partition for the ledger's fence (dropWaitersOf): gone
// reports that the caller ends it, not ok, once s.mu is released.
func (s *startPool) joinLocked(rec *record, req decide.StartRequest, check bool) (waits, gone bool) {
	j := s.starting[req.WorkflowID]
	if j == nil {
		return false, false
	}
	if j.held { // its mark waits for the ledger's fence: rec holds its partition too (hold)
		if s.goneLocked(rec) {
			return true, true
		}
		j.holding = append(j.holding, rec)
		s.holdRecord(rec, true)
	}
	if check && (!j.check || j.checking) {
		j.rechecks = append(j.rechecks, recheck{rec: rec, req: req})
		return true, false
	}
	j.waiters = append(j.waiters, rec)
	if j.check && !check && j.startReq == nil {
		r := req // a copy: &req would move every call's req to the heap
		j.startReq = &r
	}
	return true, false
}

// enqueue hands a job to the workers, or abandons it when ctx ends first
// or the pool has stopped (a re-check or a takeover submitted after the
// drain, by the marker's final flush say).
func (s *startPool) enqueue(ctx context.Context, j *job) {
	s.qmu.RLock()
	if s.closed {
		s.qmu.RUnlock()
		s.done(j, false)
		return
	}
	select {
	case s.startQ <- j:
		s.qmu.RUnlock()
	case <-ctx.Done():
		s.qmu.RUnlock()
		s.done(j, false)
	}
}

// run runs the workers and the marker until the work context ends and the
// marker's queue is closed by stop; it returns when all have stopped. The
// marker's final flush gives up at flushBy (the shutdown's deadline, less
// the final commit's share), or 10 s after stop if that comes first.
func (s *startPool) run() (stop func(flushBy time.Time)) {
	var workers sync.WaitGroup
	for i := 0; i < s.cfg.Starts.Concurrency; i++ {
		workers.Add(1)
		go func() { defer workers.Done(); s.worker() }()
	}
	markerDone := make(chan struct{})
	go func() { defer close(markerDone); s.marker() }()
	return func(flushBy time.Time) {
		workers.Wait()  // they stop when workCtx ends
		s.parked.Wait() // so do the parked jobs
		// Close the queue: a drainer abandons what senders blocked on a
		// full queue put in, so that they let go of qmu; once closed is
		// set no one sends again, and the last drain empties it.
		stopDrain, drained := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(drained)
			for {
				select {
				case j := <-s.startQ:
					s.done(j, false)
				case <-stopDrain:
					return
				}
			}
		}()
		s.qmu.Lock()
		s.closed = true
		s.qmu.Unlock()
		close(stopDrain)
		<-drained
		for empty := false; !empty; {
			select {
			case j := <-s.startQ:
				s.done(j, false)
			default:
				empty = true
			}
		}
		s.flushBy = flushBy
		close(s.markQ) // the marker reads flushBy after this
		<-markerDone
	}
}

func (s *startPool) worker() {
	for {
		var j *job
		select {
		case j = <-s.startQ:
		case <-s.workCtx.Done():
			return
		}
		ctx := j.rec.part.ctx
		s.mu.Lock()
		check := j.check
		j.checking = check
		s.mu.Unlock()
		if check && !s.rerun(ctx, j) {
			continue
		}
		var res StartResult
		sctx, span := s.trace.starting(ctx, j)
		err := s.health.retry(sctx, OpStart, func(ctx context.Context) error {
			t := time.Now()
			var err error
			res, err = s.starter.Start(ctx, j.req)
			s.m.startSeconds.Observe(time.Since(t).Seconds())
			if _, parked := parkedErr(err); err != nil && !IsPermanent(err) && !parked {
				s.m.startErrors.WithLabelValues("transient").Inc()
			}
			return err
		})
		s.trace.started(span, res, err)
		switch {
		case err == nil && j.req.Signal != nil:
			s.delivered(j, res)
			if s.hooks.AfterSignal != nil {
				s.hooks.AfterSignal()
			}
			j.runID = res.RunID
			s.markQ <- j
		case err == nil:
			if res.AlreadyStarted {
				s.m.starts.WithLabelValues("already_started").Inc()
				if s.log.Enabled(context.Background(), slog.LevelDebug) { // its arguments are built only then
					s.log.Debug("workflow already started", "workflow_id", j.req.WorkflowID, "run_id", res.RunID,
						"event_id", j.req.Input.EventID, "generation", j.req.Generation)
				}
			} else {
				s.m.starts.WithLabelValues("started").Inc()
			}
			if s.hooks.AfterStart != nil {
				s.hooks.AfterStart()
			}
			j.runID = res.RunID
			s.markQ <- j
		case IsPermanent(err):
			s.m.startErrors.WithLabelValues("permanent").Inc()
			s.deadLetter(ctx, j, err)
		default: // revoked, lost or shutting down
			if p, ok := parkedErr(err); ok && ctx.Err() == nil {
				s.park(ctx, j, p) // one key's wait, without a worker (parked.go)
				continue
			}
			s.done(j, false)
		}
	}
}

// delivered counts and logs a signal route's delivery that Temporal
// accepted: into a run it started (started) or one already open
// (signaled; a re-sent delivery whose request ID the run had recorded
// is counted here too: Temporal answers it alike, without a second
// signal).
func (s *startPool) delivered(j *job, res StartResult) {
	result := "started"
	if res.AlreadyStarted {
		result = "signaled"
	}
	s.m.signals.WithLabelValues(result).Inc()
	if s.log.Enabled(context.Background(), slog.LevelDebug) {
		s.log.Debug("event delivered", "workflow_id", j.req.WorkflowID, "entity_workflow_id", j.req.Signal.WorkflowID,
			"run_id", res.RunID, "event_id", j.req.Signal.Input.EventID, "result", result)
	}
}

// deadLetter dead-letters a start Temporal refused for good: the owner's
// record goes to the dead-letter topic, then the ledger row ends
// dead_lettered, and only then do the owner and its waiters finish. Two
// steps, and the record waits for both: finished after the write alone, a
// revoke or shutdown before the mark landed would commit past a row left
// pending with no owner. If either step is abandoned (revoked,
// lost, shutting down), nothing is committed: the redelivery re-drives the
// row, Temporal refuses again, the dead-letter log says the record was
// written (no second write), and the mark is tried again.
func (s *startPool) deadLetter(ctx context.Context, j *job, cause error) {
	err := s.dlq.put(ctx, []deadLetter{{rec: j.rec, reason: decide.ReasonTemporalPermanent, err: cause, workflow: j.req.WorkflowID,
		eventID: j.req.EventID(), rule: j.req.IDRule()}})
	if err == nil {
		// The job leaves the in-flight map before the mark: once the row
		// is dead_lettered, a copy claimed after it re-claims the row
		// (pending again) and must start on its own, not wait on this
		// job and finish with it, leaving the row pending with no owner.
		// The copies already waiting were claimed before the mark: the
		// mark ends their row too.
		s.mu.Lock()
		if s.starting[j.req.WorkflowID] == j {
			delete(s.starting, j.req.WorkflowID)
		}
		s.mu.Unlock()
		// A refusal of the ledger's fence: the owner's partition moved,
		// and the row is the new owner's (the record is abandoned; a
		// waiter of a partition still ours takes the job over under its
		// own fence), unless the router took the partition again: then
		// the mark is sent again under the new fence.
		// Never given up for the number of its refusals while the router
		// takes its record's assignment again (retakenFor); sent again
		// without the worker, which starts other partitions' records
		// meanwhile.
		if s.markDeadLettered(ctx, j, 1) {
			s.hold(j, true)
			s.parked.Add(1)
			go func() {
				defer s.parked.Done()
				defer s.hold(j, false)
				ctx, cancel := context.WithCancel(ctx)
				defer cancel()
				defer context.AfterFunc(s.workCtx, cancel)() // the pool stops: so does the retry
				for try := 2; s.markDeadLettered(ctx, j, try); try++ {
				}
			}()
		}
		return
	}
	s.done(j, false)
}

// markDeadLettered sends j's dead-letter mark for the try-th time (after
// waitRefused's wait for the refusals before it, and, sent again, after
// its partition's backoff: waitBackoff) and ends j, unless the
// ledger's fence refused it and the router took its record's assignment
// again: then it reports again, and j is not ended.
func (s *startPool) markDeadLettered(ctx context.Context, j *job, try int) (again bool) {
	waitRefused(ctx, try-1)
	if try > 1 {
		waitBackoff(ctx, j.rec.part)
	} else if backsOff(j.rec.part) {
		// It would be refused (its partition is kept under the refused
		// fence until its backoff ends): sent after the backoff, off the
		// worker, as a refused mark is.
		return true
	}
	dl := []DeadLettered{{WorkflowID: j.req.WorkflowID, Topic: j.rec.part.tp.topic, Partition: j.rec.part.tp.partition,
		Fence: j.rec.part.fence()}}
	err := s.health.retry(ctx, OpMark, func(ctx context.Context) error { return s.ledger.MarkDeadLettered(ctx, dl) })
	if f, ok := IsFenced(err); ok && retakenFor(s.fenced(ctx, f), j.rec) {
		return true
	}
	s.done(j, err == nil)
	return false
}

// done ends a start's owner and the records waiting on it.
func (s *startPool) done(j *job, ok bool) {
	s.end(j.rec, ok)
	s.release(j, ok)
}

// release ends the start's waiters with the owner's outcome; if the start
// was abandoned, the first waiter whose partition is still owned takes it
// over instead, with the waiters after it. Either way its rechecks are
// submitted again, as checks, once the job has left the in-flight map (or
// its takeover is in it).
func (s *startPool) release(j *job, ok bool) {
	s.mu.Lock()
	if s.starting[j.req.WorkflowID] == j {
		delete(s.starting, j.req.WorkflowID)
	}
	waiters, rechecks := j.waiters, j.rechecks
	j.waiters, j.rechecks = nil, nil
	var resubmit []*record
	if cur := s.starting[j.req.WorkflowID]; !ok && cur != nil {
		// A newer job of this workflow is in flight (this one left the
		// map before its dead letter's mark): the waiters ask again, and
		// wait on it or start on their own, rather than take over.
		resubmit, waiters = waiters, nil
	} else if !ok {
		for i, w := range waiters {
			if w.part.ctx.Err() == nil && s.workCtx.Err() == nil {
				nj := &job{rec: w, req: j.req, check: j.check, startReq: j.startReq, waiters: waiters[i+1:]}
				s.starting[nj.req.WorkflowID] = nj
				waiters = waiters[:i]
				go s.enqueue(s.workCtx, nj)
				break
			}
		}
	}
	s.mu.Unlock()
	for _, w := range waiters {
		s.end(w, ok)
	}
	if len(rechecks) > 0 || len(resubmit) > 0 {
		// Not on the caller's goroutine: submit may wait for room in the
		// start queue, and the caller may be a worker or the marker.
		req, check := j.req, j.check
		go func() {
			for _, w := range resubmit {
				s.submit(s.workCtx, w, req, check)
			}
			for _, rc := range rechecks {
				s.submit(s.workCtx, rc.rec, rc.req, true)
			}
		}()
	}
}
