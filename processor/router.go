package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/connect/dialguard"
	"github.com/dedupio/dedup/connect/tracing"
	"github.com/dedupio/dedup/processor/decide"
)

// Router consumes the topics as a member of the group and turns records
// into workflow starts, exactly once per workflow ID. See doc.go. It is
// the poll loop and the decoding of records into intents; everything else
// is done by one component per concern:
//
//   - committer (committer.go, assign.go, commit.go): partitions, the finished prefix, commits,
//     revoke and loss; the records in flight, capacity and drain
//     (inFlight, inflight.go); gaps and lag (lagWatch, lag.go);
//   - claimer (claimer.go): one ledger claim per batch, verdicts;
//   - startPool (starts.go): one start in flight per workflow ID, waiters,
//     the marker; a copy whose start was marked while it was claimed ends
//     as its waiter (marked.go);
//   - deadLetterWriter (deadletter.go): dead letters, written once;
//   - health (health.go): retries, dependency state, the pause.
type Router struct {
	cfg     Config
	log     *slog.Logger
	decider *decide.Decider
	m       *metrics
	cl      *kgo.Client
	// pools are the client's fetch pools (fetchpools.go).
	pools *fetchPools

	commits *committer
	claims  *claimer
	starts  *startPool
	dlq     *deadLetterWriter
	health  *health
	trace   *routerTracer // nil: tracing off (tracing.go)
	// known is the ledger as a KnownLedger when records are written known
	// (known.go), under print (knownPrint); nil: never. knownOff counts
	// down the polls the known path is not taken.
	known    KnownLedger
	print    [32]byte
	knownOff atomic.Int32
	// knownLoggedAt and knownUnlogged sample the known duplicates'
	// decision log (knownDuplicates; the settler's only).
	knownLoggedAt time.Time
	knownUnlogged int64
	// valuesMu makes a resolve of Schema Registry schemas and the
	// decisions that read them one step (lockValues).
	valuesMu sync.Mutex

	workCtx    context.Context // lives until the drain after shutdown
	workCancel context.CancelFunc

	fatalMu  sync.Mutex
	fatalErr error
	stopPoll context.CancelFunc // set by Run

	// afterPoll, if set (tests only), runs after each poll that returned
	// records, before they are tracked.
	afterPoll func()
	// closed is closed once the Kafka client has closed (leave), which
	// may be after Run returned.
	closed chan struct{}
}

// Options are what a router works with besides its Config.
type Options struct {
	// Ledger claims and marks workflow IDs (sink/ledger); required.
	Ledger Ledger
	// DeadLetterLog remembers which records were dead-lettered, so that a
	// redelivery is not written twice (sink/ledger); required.
	DeadLetterLog DeadLetterLog
	// Starter starts workflows in Temporal (sink/starter); required.
	Starter Starter
	// Registerer takes the router's metrics; nil registers them nowhere.
	Registerer prometheus.Registerer
	// Log is the router's logger; nil discards.
	Log *slog.Logger
	// KafkaOpts are extra Kafka client options (kprom hooks, a dialer of
	// the caller's), applied after the router's own. The config's
	// brokers, isolation level, TLS and SASL are applied by New
	// (Config.ClientOpts): they need not be repeated here. The lag watch
	// measures with a client of its own that dials as the router's does,
	// without its hooks (lagClient).
	KafkaOpts []kgo.Opt
	// Tracing, if set, traces each record from its Kafka headers' context
	// (tracing.go); nil is off: no span, no header read.
	Tracing *tracing.Tracing
}

// New validates cfg and o and creates the Kafka client; nothing is
// consumed until Run.
func New(cfg Config, o Options) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch {
	case o.Ledger == nil:
		return nil, errors.New("processor.New: Options.Ledger is nil")
	case o.DeadLetterLog == nil:
		return nil, errors.New("processor.New: Options.DeadLetterLog is nil")
	case o.Starter == nil:
		return nil, errors.New("processor.New: Options.Starter is nil")
	}
	ledger, dlqLog, starter, reg, log, extra := o.Ledger, o.DeadLetterLog, o.Starter, o.Registerer, o.Log, o.KafkaOpts
	var hooks hooks // Run takes them from its context (failpoints.go: test builds only)
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	decider, err := NewDecider(cfg)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(reg, cfg.Topics)
	if err != nil {
		return nil, err
	}
	r := &Router{cfg: cfg, log: log, decider: decider, m: m, pools: &fetchPools{}, closed: make(chan struct{})}
	r.workCtx, r.workCancel = context.WithCancel(context.Background())
	r.health = newHealth(cfg, log, m, r.pause, r.fatal)
	r.commits = newCommitter(cfg, log, m, r.workCtx, r.health.Paused)
	r.commits.own = func(ctx context.Context, o Ownership) ([]int64, error) {
		var epochs []int64
		err := r.health.retry(ctx, OpOwn, func(ctx context.Context) error {
			var err error
			epochs, err = ledger.Own(ctx, o)
			return err
		})
		return epochs, err
	}
	r.dlq = &deadLetterWriter{cfg: cfg, log: log, m: m, dlqLog: dlqLog, health: r.health, end: r.commits.end}
	r.starts = newStartPool(cfg, log, m, starter, ledger, r.health, hooks, r.dlq, r.commits.end, r.workCtx)
	r.starts.fenced, r.commits.hurry = r.commits.fenced, r.starts.hurry
	r.claims = &claimer{log: log, m: m, ledger: ledger, health: r.health, hooks: hooks, starts: r.starts, dlq: r.dlq, end: r.commits.end,
		endAll: r.commits.endAll, fenced: r.commits.fenced}
	r.trace = newRouterTracer(o.Tracing)
	r.known, r.print = knownLedgerOf(ledger, cfg, log)
	r.commits.trace, r.claims.trace, r.starts.trace, r.dlq.trace = r.trace, r.trace, r.trace, r.trace
	reset := kgo.NewOffset().AtStart()
	if cfg.ResetOffset == "latest" {
		reset = kgo.NewOffset().AtEnd()
	}
	// cfg's connection (brokers, isolation level, TLS, SASL) first, then
	// the router's own options, then the caller's.
	kopts, err := cfg.ClientOpts()
	if err != nil {
		return nil, fmt.Errorf("creating kafka client: %w", err)
	}
	if err := cfg.checkCallerDialer(extra); err != nil {
		return nil, fmt.Errorf("creating kafka client: %w", err)
	}
	kopts = append(append(append(kopts, cfg.FetchLimits()...), []kgo.Opt{
		kgo.ConsumerGroup(cfg.Group),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(reset),
		// Transaction markers come to the poll loop as control records,
		// which finish at once (prepare): the committed offset then moves
		// past a marker once everything before it finished, and the lag of
		// a fully processed transactional partition reaches 0.
		kgo.KeepControlRecords(),
		// No assignment changes between a poll and the tracking of its
		// records (AllowRebalance in prepare): records fetched under an
		// assignment that was revoked or lost meanwhile, and assigned back,
		// must not be taken by the newer assignment.
		kgo.BlockRebalanceOnPoll(),
		kgo.WithPools(r.pools), // fetched batches' memory, given back as records end (fetchpools.go)
		kgo.SessionTimeout(cfg.SessionTimeout),
		kgo.RebalanceTimeout(cfg.RebalanceTimeout),
		kgo.OnPartitionsAssigned(r.commits.assigned),
		kgo.OnPartitionsRevoked(r.commits.revoked),
		kgo.OnPartitionsLost(r.commits.lost),
		kgo.ProducerBatchMaxBytes(int32(cfg.MaxValueBytes) + 64<<10),
		kgo.RecordDeliveryTimeout(30 * time.Second),
	}...), extra...)
	// o.KafkaOpts' SASL leaves only over TLS verified at each dial (unless kafka.allow_insecure).
	if kopts, err = dialguard.GuardKafka(kopts, cfg.AllowInsecure); err != nil {
		return nil, fmt.Errorf("creating kafka client: %w", err)
	}
	r.cl, err = kgo.NewClient(kopts...)
	if err != nil {
		return nil, fmt.Errorf("creating kafka client: %w", err)
	}
	r.commits.cl, r.dlq.cl = r.cl, r.cl
	// A partition that waits for the ledger's fence (refused.go) is not
	// fetched meanwhile (its buffered records are dropped and fetched
	// again when it is resumed), and its records in flight are lent: the
	// other partitions are polled (inFlight.lend).
	holds := &fenceHolds{
		pause: func(ref PartitionRef, paused bool) {
			tps := map[string][]int32{ref.Topic: {ref.Partition}}
			if paused {
				r.cl.PauseFetchPartitions(tps)
			} else {
				r.cl.ResumeFetchPartitions(tps)
			}
		},
		lend: r.commits.flight.lend,
		gone: r.starts.dropWaitersOf,
	}
	r.claims.waits.holds, r.starts.holds = holds, holds
	r.commits.adm = kadm.NewClient(r.cl)
	r.commits.lag.adm = r.commits.adm
	r.commits.lag.dial = func() (*kgo.Client, error) { return lagClient(r.cl) }
	// Only now may the group call back (assigned reads adm, commit cl):
	// with topics given to NewClient it would join before they are set.
	r.cl.AddConsumeTopics(cfg.Topics...)
	return r, nil
}

// pause pauses or resumes fetching (health calls it when the pause
// changes).
func (r *Router) pause(paused bool) {
	if paused {
		r.cl.PauseFetchTopics(r.cfg.Topics...)
	} else {
		r.cl.ResumeFetchTopics(r.cfg.Topics...)
	}
	r.commits.setPaused(paused)
}

// fatal stops the router with err: Run returns it.
func (r *Router) fatal(err error) {
	r.fatalMu.Lock()
	defer r.fatalMu.Unlock()
	if r.fatalErr == nil {
		r.fatalErr = err
		if r.stopPoll != nil {
			r.stopPoll()
		}
	}
}

// Ready says why the router is not ready: not in the group yet, or paused
// because a dependency fails. Nil means ready.
func (r *Router) Ready() error {
	if !r.commits.ready() {
		return errors.New("not in the consumer group yet")
	}
	return r.health.Why()
}

// Run consumes until ctx is cancelled, then drains in-flight records for up
// to DrainTimeout, commits what finished, leaves the group and returns.
// It returns early, with the error, when a dependency refuses for good.
func (r *Router) Run(ctx context.Context) error {
	// Test-only stops (failpoints.go; none in a build without -tags
	// failpoints), before any loop runs.
	if h := failpointsFrom(ctx); h.AfterClaim != nil || h.AfterStart != nil || h.AfterSignal != nil {
		r.claims.hooks, r.starts.hooks = h, h
	}
	ctx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	// An Own of the assignment callback gives up with the poll: the poll
	// waits for the callback (BlockRebalanceOnPoll).
	defer context.AfterFunc(ctx, r.commits.stopPolling)()
	r.fatalMu.Lock()
	r.stopPoll = stopPoll
	r.fatalMu.Unlock()

	stopStarts := r.starts.run()
	commitCtx, stopCommitter := context.WithCancel(context.Background())
	var loops sync.WaitGroup
	loops.Add(2)
	go func() { defer loops.Done(); r.commits.run(commitCtx) }()
	go func() { defer loops.Done(); r.commits.lag.run(commitCtx) }()

	// The claim of batch N runs while batch N+1 is polled and decoded: one
	// claimer, fed in poll order, so verdicts follow the stream's order.
	// A claimer that is behind claims the polls waiting for it together
	// (gatherPolls).
	claimQ := make(chan *claimBatch, 1)
	// While the ledger replays, a poll goes to the claimer undecided and
	// its known records end first (known.go): then a settler between the
	// poll loop and the claimer reads which are known and decides the
	// rest, in poll order, while the claimer claims the previous poll's.
	polledQ := claimQ
	if r.known != nil {
		polledQ = make(chan *claimBatch, 1)
		go r.settleLoop(ctx, polledQ, claimQ)
	}
	claimerDone := make(chan struct{})
	go func() {
		defer close(claimerDone)
		r.claimLoop(ctx, claimQ)
	}()

	var runErr error
	for r.commits.flight.waitCapacity(ctx) {
		fetches := r.cl.PollRecords(ctx, r.cfg.MaxPollRecords)
		if fetches.IsClientClosed() {
			r.cl.AllowRebalance()
			runErr = errors.New("kafka client closed")
			break
		}
		if ctx.Err() != nil {
			r.cl.AllowRebalance()
			break
		}
		if r.afterPoll != nil && !fetches.Empty() {
			r.afterPoll()
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
			polledQ <- b
		}
	}
	close(polledQ)
	<-claimerDone

	// Shutdown takes at most DrainTimeout from the stop, whatever the
	// group is doing: the drain gets most of it, the final mark, commit
	// and leave what is left (shutdownReserve; a pod's grace period must
	// cover DrainTimeout). A revoke the stop found in progress kept to the
	// same bounds (revoked); what it used is not given again.
	r.commits.stopPolling()
	deadline := r.commits.shutdownDeadline()
	reserve := shutdownReserve(r.cfg.DrainTimeout)
	// Drain: let started work finish (marked at once: hurry, for the rest
	// of the run), then stop the workers and the marker.
	r.starts.hurry()
	r.commits.flight.waitDrained(time.Until(deadline) - reserve)
	r.workCancel()
	// The marker's final flush gets a quarter of the reserve, the final
	// commit what the flush left of the next half, the leave the last
	// quarter: a ledger that refuses the mark cannot hold the shutdown
	// past drain_timeout (its records stay uncommitted), nor starve the
	// final commit of what finished before, whether or not the drain
	// used its whole share.
	stopStarts(deadline.Add(-reserve * 3 / 4))
	stopCommitter()
	loops.Wait()
	fctx, cancel := context.WithDeadline(context.Background(), deadline.Add(-reserve/4))
	r.commits.commit(fctx, nil)
	cancel()
	r.leave(deadline)
	r.fatalMu.Lock()
	defer r.fatalMu.Unlock()
	if r.fatalErr != nil {
		return r.fatalErr
	}
	return runErr
}

// prepare tracks one poll and returns its batch for the claimer (nil if
// none): decided (decideAll), or, while the ledger replays, undecided,
// each record with its digest, for the claimer to end the known ones and
// decide the rest (settle, known.go).
func (r *Router) prepare(ctx context.Context, fetches kgo.Fetches) *claimBatch {
	// Track in poll order (the tracker needs offsets in order), then decide
	// in parallel: decoding (JSON, RFC 8785, SHA-256) is most of the CPU a
	// batch costs, and it is pure. The slices are sized for the poll, and
	// the intents' for the decisions: grown by append, copying the
	// decisions and intents cost a replay about a tenth of its CPU.
	batch := make([]polled, 0, fetches.NumRecords())
	krs := fetches.Records()
	for i, rec := range r.commits.trackAll(krs, fetches) {
		switch kr := krs[i]; {
		case rec == nil: // partition revoked since the fetch
		case kr.Attrs.IsControl():
			// A transaction's commit or abort marker: no event. It ends
			// at once, so the offset after it is committable once every
			// record before it finished.
			r.commits.end(rec, true)
		default:
			batch = append(batch, polled{kr: kr, rec: rec})
		}
	}
	// Tracked: the group may rebalance again (BlockRebalanceOnPoll).
	r.cl.AllowRebalance()
	r.m.records.Add(float64(len(batch)))
	unlock := r.lockValues() // the resolve and the decisions, one step
	if !r.resolve(ctx, len(batch), func(i int) *kgo.Record { return batch[i].kr }, func(i int) *record { return batch[i].rec }) {
		unlock()
		return nil
	}
	if len(batch) > 0 && r.knownPath() {
		// Undecided: the settler resolves the rest again when it decides
		// them.
		unlock()
		parallel(len(batch), func(i int) { batch[i].digest = knownDigest(&r.print, batch[i].kr) })
		return &claimBatch{undecided: batch}
	}
	r.decideRecords(batch)
	unlock()
	return r.intentsOf(ctx, batch)
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
