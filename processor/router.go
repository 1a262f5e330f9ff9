package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/schemas"
)

// Hooks let tests stop the router at chosen points, the way a crash would.
// Production wiring leaves them nil.
type Hooks struct {
	// AfterClaim runs after a batch's claims are committed in the ledger
	// and before any of its workflows is started.
	AfterClaim func()
	// AfterStart runs after a workflow start succeeded and before it is
	// marked in the ledger or its offset committed.
	AfterStart func()
}

type topicPartition struct {
	topic     string
	partition int32
}

// partition is the router's state for one partition it owns.
type partition struct {
	tp        topicPartition
	ctx       context.Context // cancelled when the partition is revoked or lost
	cancel    context.CancelFunc
	tr        *tracker
	inFlight  int   // records polled and not ended
	committed int64 // offset last committed by us; -1 none
	revoking  bool  // no new records are taken
	// expect is the next offset we should see: the committed offset at
	// assignment, then one past the last polled record; -1 unknown. A jump
	// past it is a gap (compaction, transaction markers, or records that
	// retention deleted before we read them: checkGap tells them apart).
	expect     int64
	checking   bool
	assignedAt int64 // the group's committed offset at assignment; -1 none
}

// record is one polled Kafka record while it is in flight.
type record struct {
	part     *partition
	kr       *kgo.Record
	offset   int64
	epoch    int32
	pending  int  // intents (or a dead-letter write) not yet ended
	failed   bool // something was abandoned: never committable
	finished bool // set by the tracker
}

// job is one workflow start.
type job struct {
	rec   *record
	req   StartRequest
	runID string
	// waiters are later records that asked for the same workflow while this
	// start was in flight: they finish with it instead of calling Temporal
	// again.
	waiters []*record
}

// Router consumes the topics as a member of the group and turns records
// into workflow starts, exactly once per workflow ID. See doc.go.
type Router struct {
	cfg     Config
	log     *slog.Logger
	dec     *eventid.Decoder
	ledger  Ledger
	dlqLog  DeadLetterLog
	starter Starter
	hooks   Hooks
	m       *metrics
	cl      *kgo.Client

	mu       sync.Mutex
	cond     *sync.Cond // broadcast when records end or partitions change
	parts    map[topicPartition]*partition
	inFlight int
	joined   bool
	starting map[string]*job  // workflow ID -> its start in flight here
	down     map[string]error // dependency -> last error, while it fails: fetching is paused
	adm      *kadm.Client

	workCtx    context.Context // lives until the drain after shutdown
	workCancel context.CancelFunc
	startQ     chan *job
	markQ      chan *job
}

// New validates cfg and creates the Kafka client; nothing is consumed
// until Run.
// Extra Kafka client options (kprom hooks, say) come last.
func New(cfg Config, ledger Ledger, dlqLog DeadLetterLog, starter Starter, reg prometheus.Registerer, log *slog.Logger, hooks Hooks, extra ...kgo.Opt) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dec, err := eventid.NewDecoder(cfg.EventID)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(reg, cfg.Topics)
	if err != nil {
		return nil, err
	}
	r := &Router{
		cfg: cfg, log: log, dec: dec, ledger: ledger, dlqLog: dlqLog, starter: starter, hooks: hooks, m: m,
		parts:    map[topicPartition]*partition{},
		starting: map[string]*job{},
		down:     map[string]error{},
		// Room for the starts of every record in flight (one per route
		// each, usually), so the claimer claims the next batch while this
		// one's starts are still queued: a slow claim then does not leave
		// the start workers idle. Fuller than that, enqueue waits.
		startQ: make(chan *job, 2*(cfg.MaxInFlight+cfg.MaxPollRecords)),
		markQ:  make(chan *job, cfg.MarkBatch),
	}
	r.cond = sync.NewCond(&r.mu)
	r.workCtx, r.workCancel = context.WithCancel(context.Background())
	reset := kgo.NewOffset().AtStart()
	if cfg.ResetOffset == "latest" {
		reset = kgo.NewOffset().AtEnd()
	}
	r.cl, err = kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(reset),
		kgo.SessionTimeout(cfg.SessionTimeout),
		kgo.RebalanceTimeout(cfg.RebalanceTimeout),
		kgo.OnPartitionsAssigned(r.assigned),
		kgo.OnPartitionsRevoked(r.revoked),
		kgo.OnPartitionsLost(r.lost),
		kgo.FetchMaxBytes(int32(cfg.FetchMaxBytes)),
		kgo.ProducerBatchMaxBytes(int32(cfg.MaxValueBytes) + 64<<10),
		kgo.RecordDeliveryTimeout(30 * time.Second),
	}, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("creating kafka client: %w", err)
	}
	r.adm = kadm.NewClient(r.cl)
	return r, nil
}

// Ready says why the router is not ready: not in the group yet, or paused
// because a dependency fails. Nil means ready.
func (r *Router) Ready() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.joined {
		return errors.New("not in the consumer group yet")
	}
	for dep, err := range r.down {
		return fmt.Errorf("paused: %s failing: %w", dep, err)
	}
	return nil
}

// dependencyOf names what an operation depends on.
func dependencyOf(op string) string {
	switch op {
	case "claim", "mark", "dead_letter_log":
		return "postgres"
	case "start":
		return "temporal"
	}
	return "kafka"
}

// setDown records that a dependency fails (err != nil) or works again.
// While any fails, fetching is paused (the group membership stays) and
// polling stops; it resumes by itself when every one works again.
func (r *Router) setDown(dep string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	was := len(r.down) > 0
	_, wasDep := r.down[dep]
	if err != nil {
		r.down[dep] = err
	} else {
		delete(r.down, dep)
	}
	if _, isDep := r.down[dep]; isDep != wasDep {
		r.m.dependencyUp.WithLabelValues(dep).Set(map[bool]float64{true: 0, false: 1}[isDep])
	}
	now := len(r.down) > 0
	switch {
	case now && !was:
		r.cl.PauseFetchTopics(r.cfg.Topics...)
		r.m.pausedPartitions.Set(float64(len(r.parts)))
		r.log.Warn("pausing fetches: a dependency fails", "dependency", dep, "err", err)
	case !now && was:
		r.cl.ResumeFetchTopics(r.cfg.Topics...)
		r.m.pausedPartitions.Set(0)
		r.log.Info("resuming fetches", "dependency", dep)
		r.cond.Broadcast()
	}
}

// Run consumes until ctx is cancelled, then drains in-flight records for up
// to DrainTimeout, commits what finished, leaves the group and returns.
func (r *Router) Run(ctx context.Context) error {
	var workers sync.WaitGroup
	for i := 0; i < r.cfg.StartConcurrency; i++ {
		workers.Add(1)
		go func() { defer workers.Done(); r.startWorker() }()
	}
	markerDone := make(chan struct{})
	go func() { defer close(markerDone); r.marker() }()
	commitCtx, stopCommitter := context.WithCancel(context.Background())
	committerDone := make(chan struct{})
	go func() { defer close(committerDone); r.committer(commitCtx) }()
	go r.lagLoop(commitCtx)

	// The claim of batch N runs while batch N+1 is polled and decoded: one
	// claimer, fed in poll order, so verdicts follow the stream's order.
	claimQ := make(chan *claimBatch, 1)
	claimerDone := make(chan struct{})
	go func() {
		defer close(claimerDone)
		for b := range claimQ {
			r.claim(ctx, b)
		}
	}()

	var runErr error
	for {
		if !r.waitCapacity(ctx) {
			break
		}
		fetches := r.cl.PollRecords(ctx, r.cfg.MaxPollRecords)
		if fetches.IsClientClosed() {
			runErr = errors.New("kafka client closed")
			break
		}
		if ctx.Err() != nil {
			break
		}
		fetches.EachError(func(t string, p int32, err error) {
			var loss *kgo.ErrDataLoss
			switch {
			case errors.As(err, &loss):
				if n := loss.ResetTo - loss.ConsumedTo; n > 0 {
					r.m.lost.WithLabelValues(t).Add(float64(n))
				}
				r.log.Error("broker lost data; consumption reset", "topic", t, "partition", p, "err", err)
			case !errors.Is(err, context.Canceled):
				r.log.Warn("fetch error", "topic", t, "partition", p, "err", err)
			}
		})
		if b := r.prepare(ctx, fetches); b != nil {
			claimQ <- b
		}
	}
	close(claimQ)
	<-claimerDone

	// Drain: let started work finish, then stop the workers.
	r.waitDrained(r.cfg.DrainTimeout)
	r.workCancel()
	workers.Wait()
	for drained := false; !drained; {
		select {
		case j := <-r.startQ:
			r.jobDone(j, false)
		default:
			drained = true
		}
	}
	close(r.markQ)
	<-markerDone
	stopCommitter()
	<-committerDone
	fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	r.commit(fctx, nil)
	cancel()
	r.cl.Close() // leaves the group; revoked() finds nothing more to commit
	return runErr
}

// waitCapacity blocks while MaxInFlight records are in flight or fetching
// is paused.
func (r *Router) waitCapacity(ctx context.Context) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for (r.inFlight >= r.cfg.MaxInFlight || len(r.down) > 0) && ctx.Err() == nil {
		stop := context.AfterFunc(ctx, func() { r.mu.Lock(); r.cond.Broadcast(); r.mu.Unlock() })
		r.cond.Wait()
		stop()
	}
	return ctx.Err() == nil
}

func (r *Router) waitDrained(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	t := time.AfterFunc(timeout, func() { r.mu.Lock(); r.cond.Broadcast(); r.mu.Unlock() })
	defer t.Stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.inFlight > 0 && time.Now().Before(deadline) {
		r.cond.Wait()
	}
	if r.inFlight > 0 {
		r.log.Warn("shutting down with records in flight; they will be redelivered", "records", r.inFlight)
	}
}

// item is a record during handle.
type item struct {
	rec     *record
	intents []int // indexes into the batch's intents
}

type deadLetter struct {
	rec      *record
	reason   string
	err      error
	workflow string
}

// claimBatch is a decoded and routed poll batch, on its way to the ledger.
type claimBatch struct {
	items   []item
	intents []Intent
	reqs    []StartRequest
	owners  []*record
}

// prepare decodes and routes one poll, dead-letters what can never
// succeed, and returns the batch's intents for claim (nil if none).
func (r *Router) prepare(ctx context.Context, fetches kgo.Fetches) *claimBatch {
	var (
		items   []item
		intents []Intent
		reqs    []StartRequest
		owners  []*record
		dead    []deadLetter
	)
	// Track in poll order (the tracker needs offsets in order), then decode
	// in parallel: decoding (JSON, RFC 8785, SHA-256) is most of the CPU a
	// batch costs, and it is pure.
	type polled struct {
		kr  *kgo.Record
		rec *record
		ev  eventid.Event
		err error
	}
	var batch []polled
	fetches.EachRecord(func(kr *kgo.Record) {
		if rec := r.track(kr); rec != nil { // nil: partition revoked since the fetch
			batch = append(batch, polled{kr: kr, rec: rec})
		}
	})
	r.m.records.Add(float64(len(batch)))
	parallel(len(batch), func(i int) {
		p := &batch[i]
		if len(p.kr.Value) <= r.cfg.MaxValueBytes {
			p.ev, p.err = r.dec.Decode(toEventRecord(p.kr))
		}
	})
	for i := range batch {
		kr, rec, ev, err := batch[i].kr, batch[i].rec, batch[i].ev, batch[i].err
		if len(kr.Value) > r.cfg.MaxValueBytes {
			dead = append(dead, deadLetter{rec: rec, reason: "oversized",
				err: fmt.Errorf("value is %d bytes, over max_value_bytes %d", len(kr.Value), r.cfg.MaxValueBytes)})
			continue
		}
		if err != nil {
			dead = append(dead, deadLetter{rec: rec, reason: string(eventid.ReasonOf(err)), err: err})
			continue
		}
		routes := r.cfg.Routes.Match(&ev)
		if len(routes) == 0 {
			r.m.noRoute.Inc()
			if r.cfg.NoRoute == "dead_letter" {
				dead = append(dead, deadLetter{rec: rec, reason: "no_route", err: fmt.Errorf("no route matches type %q source %q", ev.Type, ev.Source)})
				continue
			}
			r.end(rec, true)
			continue
		}
		it := item{rec: rec}
		keys := make([]string, len(routes))
		var keyErr error
		for j, rt := range routes {
			keys[j] = ev.ID
			if rt.Key == KeyScheduledFor {
				if keys[j], err = scheduledFor(ev.Data); err != nil && keyErr == nil {
					keyErr = fmt.Errorf("route %s: %w", rt.ID, err)
				}
			}
		}
		if keyErr != nil {
			dead = append(dead, deadLetter{rec: rec, reason: "undecodable", err: keyErr})
			continue
		}
		for j, rt := range routes {
			wid := WorkflowID(rt.ID, keys[j])
			it.intents = append(it.intents, len(intents))
			intents = append(intents, Intent{
				WorkflowID: wid, ActivityID: rt.ID, EventID: ev.ID, IDRule: string(ev.Rule),
				PayloadHash: ev.PayloadHash, Topic: kr.Topic, Partition: kr.Partition, Offset: kr.Offset,
			})
			reqs = append(reqs, NewStartRequest(rt, &ev, wid))
			owners = append(owners, rec)
		}
		r.mu.Lock()
		rec.pending = len(it.intents)
		r.mu.Unlock()
		items = append(items, it)
	}
	if len(dead) > 0 {
		r.deadLetter(ctx, dead)
	}
	if len(intents) == 0 {
		return nil
	}
	return &claimBatch{items: items, intents: intents, reqs: reqs, owners: owners}
}

// claim claims a batch's intents in one ledger call and queues the starts
// of the new and re-driven ones; duplicates finish at once, conflicts are
// dead-lettered. It returns once every start is queued (the queue has room
// for everything in flight), so the claim of the next batch overlaps with
// the starts of this one.
func (r *Router) claim(ctx context.Context, b *claimBatch) {
	items, intents, reqs, owners := b.items, b.intents, b.reqs, b.owners
	var verdicts []Verdict
	start := time.Now()
	err := r.retry(ctx, "claim", func(ctx context.Context) error {
		var err error
		verdicts, err = r.ledger.Claim(ctx, intents)
		return err
	})
	r.m.claimSeconds.Observe(time.Since(start).Seconds())
	r.m.claimBatch.Observe(float64(len(intents)))
	if err != nil { // shutting down
		for _, it := range items {
			for range it.intents {
				r.end(it.rec, false)
			}
		}
		return
	}
	if r.hooks.AfterClaim != nil {
		r.hooks.AfterClaim()
	}
	var conflicts []deadLetter
	for i, v := range verdicts {
		switch v {
		case VerdictNew, VerdictRedrive:
			r.mu.Lock()
			if j := r.starting[intents[i].WorkflowID]; j != nil {
				// A re-send while our own start of it is in flight: the
				// ledger still says pending, but Temporal need not hear it
				// twice. It finishes (or is abandoned) with that start.
				j.waiters = append(j.waiters, owners[i])
				r.mu.Unlock()
				r.m.intents.WithLabelValues(VerdictDuplicate.String()).Inc()
				continue
			}
			j := &job{rec: owners[i], req: reqs[i]}
			r.starting[j.req.WorkflowID] = j
			r.mu.Unlock()
			r.m.intents.WithLabelValues(v.String()).Inc()
			r.enqueue(j)
		case VerdictConflict:
			r.m.intents.WithLabelValues(v.String()).Inc()
			conflicts = append(conflicts, deadLetter{rec: owners[i], reason: "conflict", workflow: intents[i].WorkflowID,
				err: fmt.Errorf("workflow %s was claimed with another payload; not started", intents[i].WorkflowID)})
		default:
			r.m.intents.WithLabelValues(v.String()).Inc()
			r.log.Debug("duplicate skipped", "workflow_id", intents[i].WorkflowID, "topic", intents[i].Topic,
				"partition", intents[i].Partition, "offset", intents[i].Offset)
			r.end(owners[i], true)
		}
	}
	if len(conflicts) > 0 {
		r.deadLetter(ctx, conflicts)
	}
}

// parallel runs fn(0..n-1) on up to GOMAXPROCS goroutines.
func parallel(n int, fn func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n/64+1)
	if workers <= 1 {
		for i := 0; i < n; i++ {
			fn(i)
		}
		return
	}
	var wg sync.WaitGroup
	var next atomic.Int64
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// track registers a polled record with its partition, or returns nil if the
// partition is no longer ours.
func (r *Router) track(kr *kgo.Record) *record {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.parts[topicPartition{kr.Topic, kr.Partition}]
	if p == nil || p.revoking {
		return nil
	}
	if p.expect >= 0 && kr.Offset > p.expect && !p.checking {
		p.checking = true
		go r.checkGap(p, p.expect, kr.Offset)
	}
	p.expect = kr.Offset + 1
	rec := &record{part: p, kr: kr, offset: kr.Offset, epoch: kr.LeaderEpoch, pending: 1}
	p.tr.add(rec)
	p.inFlight++
	r.inFlight++
	r.m.inFlight.Set(float64(r.inFlight))
	return rec
}

// end ends one of a record's pending pieces of work. ok=false abandons it:
// the record is never committed by this router and will be redelivered.
func (r *Router) end(rec *record, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !ok {
		rec.failed = true
	}
	rec.pending--
	if rec.pending > 0 {
		return
	}
	p := rec.part
	p.inFlight--
	r.inFlight--
	r.m.inFlight.Set(float64(r.inFlight))
	if !rec.failed && r.parts[p.tp] == p {
		p.tr.finish(rec)
	}
	rec.kr = nil
	r.cond.Broadcast()
}

func (r *Router) startWorker() {
	for {
		var j *job
		select {
		case j = <-r.startQ:
		case <-r.workCtx.Done():
			return
		}
		var res StartResult
		err := r.retry(j.rec.part.ctx, "start", func(ctx context.Context) error {
			t := time.Now()
			var err error
			res, err = r.starter.Start(ctx, j.req)
			r.m.startSeconds.Observe(time.Since(t).Seconds())
			if err != nil && !IsPermanent(err) {
				r.m.startErrors.WithLabelValues("transient").Inc()
			}
			return err
		})
		switch {
		case err == nil:
			if res.AlreadyStarted {
				r.m.starts.WithLabelValues("already_started").Inc()
			} else {
				r.m.starts.WithLabelValues("started").Inc()
			}
			if r.hooks.AfterStart != nil {
				r.hooks.AfterStart()
			}
			j.runID = res.RunID
			r.markQ <- j
		case IsPermanent(err):
			r.m.startErrors.WithLabelValues("permanent").Inc()
			ok := r.deadLetter(j.rec.part.ctx, []deadLetter{{rec: j.rec, reason: "temporal_permanent", err: err, workflow: j.req.WorkflowID}})
			r.releaseWaiters(j, ok) // the same event: dead-lettered once
		default: // revoked, lost or shutting down
			r.jobDone(j, false)
		}
	}
}

// marker batches started workflows into one ledger update; their records
// finish when it succeeds.
func (r *Router) marker() {
	var batch []*job
	tick := time.NewTicker(r.cfg.MarkInterval)
	defer tick.Stop()
	flush := func() {
		if len(batch) == 0 {
			return
		}
		started := make([]Started, len(batch))
		for i, j := range batch {
			started[i] = Started{WorkflowID: j.req.WorkflowID, RunID: j.runID}
		}
		err := r.retry(r.workCtx, "mark", func(ctx context.Context) error { return r.ledger.MarkStarted(ctx, started) })
		for _, j := range batch {
			r.jobDone(j, err == nil)
		}
		batch = batch[:0]
	}
	for {
		select {
		case j, ok := <-r.markQ:
			if !ok {
				flush()
				return
			}
			batch = append(batch, j)
			if len(batch) >= r.cfg.MarkBatch {
				flush()
			}
		case <-tick.C:
			flush()
		}
	}
}

// jobDone ends a start's record and the records waiting on it.
func (r *Router) jobDone(j *job, ok bool) {
	r.end(j.rec, ok)
	r.releaseWaiters(j, ok)
}

func (r *Router) releaseWaiters(j *job, ok bool) {
	r.mu.Lock()
	if r.starting[j.req.WorkflowID] == j {
		delete(r.starting, j.req.WorkflowID)
	}
	waiters := j.waiters
	j.waiters = nil
	if !ok {
		// The start was abandoned (its partition went away). Waiters from
		// partitions we still own must not be failed with it, or their
		// partitions could never commit again: the first of them takes the
		// start over.
		for i, w := range waiters {
			if w.part.ctx.Err() == nil && r.workCtx.Err() == nil {
				nj := &job{rec: w, req: j.req, waiters: waiters[i+1:]}
				r.starting[nj.req.WorkflowID] = nj
				waiters = waiters[:i]
				go r.enqueue(nj)
				break
			}
		}
	}
	r.mu.Unlock()
	for _, w := range waiters {
		r.end(w, ok)
	}
}

// enqueue hands a job to the start workers, or abandons it on shutdown.
func (r *Router) enqueue(j *job) {
	select {
	case r.startQ <- j:
	case <-r.workCtx.Done():
		r.jobDone(j, false)
	}
}

// deadLetter writes records to the dead-letter topic and ends them once the
// write is acknowledged and logged. Records the log says were written
// before (a redelivery) are not written again. On shutdown they are
// abandoned instead.
func (r *Router) deadLetter(ctx context.Context, dls []deadLetter) bool {
	entries := make([]DeadLetter, len(dls))
	for i, d := range dls {
		src := d.rec.kr
		entries[i] = DeadLetter{Topic: src.Topic, Partition: src.Partition, Offset: src.Offset, WorkflowID: d.workflow,
			Reason: d.reason, Error: d.err.Error(), DLQTopic: r.cfg.DeadLetterTopicFor(src.Topic)}
	}
	var written []bool
	err := r.retry(ctx, "dead_letter_log", func(ctx context.Context) error {
		var err error
		written, err = r.dlqLog.Written(ctx, entries)
		return err
	})
	var krs []*kgo.Record
	var fresh []DeadLetter
	for i, d := range dls {
		if err != nil || written[i] {
			continue
		}
		src := d.rec.kr
		hs := append([]kgo.RecordHeader(nil), src.Headers...)
		hs = append(hs,
			kgo.RecordHeader{Key: schemas.HeaderDLQReason, Value: []byte(d.reason)},
			kgo.RecordHeader{Key: schemas.HeaderDLQError, Value: []byte(d.err.Error())},
			kgo.RecordHeader{Key: schemas.HeaderDLQTopic, Value: []byte(src.Topic)},
			kgo.RecordHeader{Key: schemas.HeaderDLQPartition, Value: []byte(strconv.Itoa(int(src.Partition)))},
			kgo.RecordHeader{Key: schemas.HeaderDLQOffset, Value: []byte(strconv.FormatInt(src.Offset, 10))},
			kgo.RecordHeader{Key: schemas.HeaderDLQTimestamp, Value: []byte(src.Timestamp.UTC().Format("2006-01-02T15:04:05.000Z07:00"))},
		)
		if d.workflow != "" {
			hs = append(hs, kgo.RecordHeader{Key: schemas.HeaderDLQWorkflow, Value: []byte(d.workflow)})
		}
		krs = append(krs, &kgo.Record{Topic: entries[i].DLQTopic, Key: src.Key, Value: src.Value, Headers: hs})
		fresh = append(fresh, entries[i])
	}
	if err == nil && len(krs) > 0 {
		unsent := krs
		err = r.retry(ctx, "dead_letter", func(ctx context.Context) error {
			var failed []*kgo.Record
			var first error
			for _, res := range r.cl.ProduceSync(ctx, unsent...) {
				if res.Err == nil {
					continue
				}
				if errors.Is(res.Err, kerr.MessageTooLarge) || errors.Is(res.Err, kerr.RecordListTooLarge) {
					// The dead-letter topic will never take this value:
					// record the reason without it (the original stays in
					// the source topic at the offset the headers name)
					// rather than block the partition.
					kr := res.Record
					kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: schemas.HeaderDLQValueDropped, Value: []byte(strconv.Itoa(len(kr.Value)))})
					kr.Value = nil
				}
				failed = append(failed, res.Record)
				if first == nil {
					first = res.Err
				}
			}
			unsent = failed // only what failed is sent again
			return first
		})
		if err == nil {
			err = r.retry(ctx, "dead_letter_log", func(ctx context.Context) error { return r.dlqLog.Record(ctx, fresh) })
		}
		if err == nil {
			for _, f := range fresh {
				r.m.deadLetters.WithLabelValues(f.Reason).Inc()
				r.log.Warn("dead-lettered record", "topic", f.Topic, "partition", f.Partition, "offset", f.Offset,
					"reason", f.Reason, "err", f.Error)
			}
		}
	}
	for _, d := range dls {
		r.end(d.rec, err == nil)
	}
	return err == nil
}

// retry runs fn until it succeeds, returns a permanent error, or ctx ends,
// backing off exponentially (with jitter) between transient errors.
func (r *Router) retry(ctx context.Context, op string, fn func(context.Context) error) error {
	wait := r.cfg.RetryInitial
	dep := dependencyOf(op)
	for attempt := 0; ; attempt++ {
		err := fn(ctx)
		if err == nil || IsPermanent(err) || ctx.Err() != nil {
			if attempt > 0 {
				r.setDown(dep, nil) // it answered, or we stopped asking
			}
			if err == nil || IsPermanent(err) {
				return err
			}
			return ctx.Err()
		}
		r.setDown(dep, err)
		r.m.retries.WithLabelValues(op).Inc()
		if attempt == 0 || attempt%10 == 0 {
			r.log.Warn("retrying after transient error", "op", op, "attempt", attempt+1, "err", err)
		}
		sleep := wait/2 + rand.N(wait/2+1)
		select {
		case <-ctx.Done():
			r.setDown(dep, nil)
			return ctx.Err()
		case <-time.After(sleep):
		}
		wait = min(wait*2, r.cfg.RetryMax)
	}
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

func (r *Router) committer(ctx context.Context) {
	every(ctx, r.cfg.CommitInterval, func() { r.commit(ctx, nil) })
}

// commit commits, for the partitions we own (only those in only, if set),
// the end of the finished prefix where it moved since the last commit.
func (r *Router) commit(ctx context.Context, only map[topicPartition]bool) {
	offsets := map[string]map[int32]kgo.EpochOffset{}
	want := map[topicPartition]int64{}
	r.mu.Lock()
	for tp, p := range r.parts {
		if (only != nil && !only[tp]) || p.tr.next < 0 || p.tr.next <= p.committed {
			continue
		}
		if offsets[tp.topic] == nil {
			offsets[tp.topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[tp.topic][tp.partition] = kgo.EpochOffset{Epoch: p.tr.nextEpoch, Offset: p.tr.next}
		want[tp] = p.tr.next
	}
	r.mu.Unlock()
	if len(want) == 0 {
		return
	}
	start := time.Now()
	var failed map[topicPartition]error
	r.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
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
	r.m.commitSeconds.Observe(time.Since(start).Seconds())
	r.mu.Lock()
	defer r.mu.Unlock()
	for tp, off := range want {
		if err, bad := failed[tp]; bad {
			r.m.commits.WithLabelValues("error").Inc()
			r.log.Warn("offset commit failed; will retry", "topic", tp.topic, "partition", tp.partition, "offset", off, "err", err)
			continue
		}
		r.m.commits.WithLabelValues("ok").Inc()
		r.m.committedOffset.WithLabelValues(tp.topic, strconv.Itoa(int(tp.partition))).Set(float64(off))
		if p := r.parts[tp]; p != nil && off > p.committed {
			p.committed = off
		}
	}
}

func (r *Router) assigned(ctx context.Context, _ *kgo.Client, assigned map[string][]int32) {
	// Where the group left each partition, to notice records that retention
	// deleted before anyone read them (the client then resumes at the log
	// start without an error).
	committed := map[topicPartition]int64{}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	var topics []string
	for t := range assigned {
		topics = append(topics, t)
	}
	if resp, err := r.adm.FetchOffsetsForTopics(fctx, r.cfg.Group, topics...); err == nil {
		resp.Each(func(o kadm.OffsetResponse) {
			if o.Err == nil && o.At >= 0 {
				committed[topicPartition{o.Topic, o.Partition}] = o.At
			}
		})
	}
	cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	for t, ps := range assigned {
		for _, p := range ps {
			tp := topicPartition{t, p}
			ctx, cancel := context.WithCancel(r.workCtx)
			expect, ok := committed[tp]
			if !ok {
				expect = -1
			}
			r.parts[tp] = &partition{tp: tp, ctx: ctx, cancel: cancel, tr: newTracker(), committed: -1, expect: expect, assignedAt: expect}
		}
	}
	if len(r.down) > 0 {
		r.m.pausedPartitions.Set(float64(len(r.parts)))
	}
	r.joined = true
	r.log.Info("partitions assigned", "partitions", assigned)
}

// revoked gives in-flight records of revoked partitions RevokeTimeout to
// finish, commits what finished, and forgets the partitions. Whatever did
// not finish is abandoned, uncommitted, for the new owner.
func (r *Router) revoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	only := map[topicPartition]bool{}
	r.mu.Lock()
	for t, ps := range revoked {
		for _, p := range ps {
			tp := topicPartition{t, p}
			if part := r.parts[tp]; part != nil {
				part.revoking = true
				only[tp] = true
			}
		}
	}
	r.mu.Unlock()
	deadline := time.Now().Add(r.cfg.RevokeTimeout)
	t := time.AfterFunc(r.cfg.RevokeTimeout, func() { r.mu.Lock(); r.cond.Broadcast(); r.mu.Unlock() })
	r.mu.Lock()
	for time.Now().Before(deadline) && r.busy(only) {
		r.cond.Wait()
	}
	r.mu.Unlock()
	t.Stop()
	r.commit(ctx, only)
	r.mu.Lock()
	for tp := range only {
		r.parts[tp].cancel()
		delete(r.parts, tp)
		r.m.committedOffset.DeleteLabelValues(tp.topic, strconv.Itoa(int(tp.partition)))
		r.m.lag.DeleteLabelValues(tp.topic, strconv.Itoa(int(tp.partition)))
	}
	r.cond.Broadcast()
	r.mu.Unlock()
	r.log.Info("partitions revoked", "partitions", revoked)
}

func (r *Router) busy(tps map[topicPartition]bool) bool {
	for tp := range tps {
		if r.parts[tp].inFlight > 0 {
			return true
		}
	}
	return false
}

// lost forgets partitions without committing: another member may own them
// already, and a late commit from us could move its offsets.
func (r *Router) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for t, ps := range lost {
		for _, p := range ps {
			tp := topicPartition{t, p}
			if part := r.parts[tp]; part != nil {
				part.cancel()
				delete(r.parts, tp)
				r.m.committedOffset.DeleteLabelValues(tp.topic, strconv.Itoa(int(tp.partition)))
				r.m.lag.DeleteLabelValues(tp.topic, strconv.Itoa(int(tp.partition)))
			}
		}
	}
	r.cond.Broadcast()
	r.log.Warn("partitions lost; their in-flight work is abandoned uncommitted", "partitions", lost)
}

// checkGap asks where the partition's log starts now: if past from, the
// records from `from` up to the log start (at most `to`) were deleted by
// retention before this group read them. Logged and counted: the reset
// policy decided to go on, and operators must know what was skipped.
func (r *Router) checkGap(p *partition, from, to int64) {
	defer func() { r.mu.Lock(); p.checking = false; r.mu.Unlock() }()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	starts, err := r.adm.ListStartOffsets(ctx, p.tp.topic)
	if err != nil {
		return
	}
	o, ok := starts.Lookup(p.tp.topic, p.tp.partition)
	if !ok || o.Err != nil || o.Offset <= from {
		return // compaction or transaction markers, not retention
	}
	lost := min(o.Offset, to) - from
	r.m.lost.WithLabelValues(p.tp.topic).Add(float64(lost))
	r.log.Error("records deleted by retention before they were consumed; they are lost",
		"topic", p.tp.topic, "partition", p.tp.partition, "from", from, "to", min(o.Offset, to)-1, "records", lost)
}

// lagLoop exports, for the partitions this replica owns, how far its
// committed offset is behind the log end (dedup_consumer_lag). Summed over
// replicas it is the group's lag.
func (r *Router) lagLoop(ctx context.Context) {
	every(ctx, r.cfg.LagInterval, func() { r.measureLag(ctx) })
}

func (r *Router) measureLag(ctx context.Context) {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	ends, err := r.adm.ListEndOffsets(lctx, r.cfg.Topics...)
	cancel()
	if err != nil {
		return
	}
	r.mu.Lock()
	ends.Each(func(o kadm.ListedOffset) {
		p := r.parts[topicPartition{o.Topic, o.Partition}]
		if p == nil || o.Err != nil {
			return
		}
		at := p.committed
		if at < 0 {
			at = p.assignedAt
		}
		if at >= 0 {
			r.m.lag.WithLabelValues(o.Topic, strconv.Itoa(int(o.Partition))).Set(float64(max(o.Offset-at, 0)))
		}
	})
	r.mu.Unlock()
}

func toEventRecord(kr *kgo.Record) eventid.Record {
	hs := make([]eventid.Header, len(kr.Headers))
	for i, h := range kr.Headers {
		hs[i] = eventid.Header{Key: h.Key, Value: h.Value}
	}
	return eventid.Record{Topic: kr.Topic, Partition: kr.Partition, Offset: kr.Offset, Key: kr.Key, Value: kr.Value, Headers: hs}
}
