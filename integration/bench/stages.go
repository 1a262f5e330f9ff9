package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.yaml.in/yaml/v3"

	"github.com/dedupio/dedup/connect/tracing"
	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/internal/demo/workload"
	"github.com/dedupio/dedup/internal/testsupport/promtext"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/sink/ledger"
)

// Rate is a throughput measurement.
type Rate struct {
	N       int     `json:"n"`
	Seconds float64 `json:"seconds"`
	PerSec  float64 `json:"per_sec"`
	// CPUSeconds is the measuring process's CPU time (user + system)
	// over the same window; 0 where not measured.
	CPUSeconds float64 `json:"cpu_seconds,omitempty"`
	// InfraBusy is the share of the window the infrastructure's core was
	// busy (window.infraBusy).
	InfraBusy float64 `json:"infra_cpu_busy,omitempty"`
}

// CPUPer is CPU microseconds per unit (0 when nothing was measured).
func (r Rate) CPUPer() float64 {
	if r.N == 0 {
		return 0
	}
	return r.CPUSeconds * 1e6 / float64(r.N)
}

// InfraCPUPer is the infrastructure core's CPU microseconds per unit
// (its busy share of the window, over N; 0 when nothing was measured).
func (r Rate) InfraCPUPer() float64 {
	if r.N == 0 {
		return 0
	}
	return r.InfraBusy * r.Seconds * 1e6 / float64(r.N)
}

func rate(n int, d time.Duration) Rate {
	return Rate{N: n, Seconds: d.Seconds(), PerSec: float64(n) / d.Seconds()}
}

// measured is the rate of n over the window, with its CPU time.
func (w window) measured(n int) Rate {
	r := rate(n, time.Since(w.wall))
	r.CPUSeconds = w.cpuSeconds()
	r.InfraBusy = w.infraBusy()
	return r
}

// RawStarts starts unique workflows with the router's starter at its
// concurrency: what Temporal accepts, with nothing in front. The requests
// are the router's own (decide.NewStartRequest) for a fresh unique-heavy
// workload like the backlog runs', so the server does the same work per
// start in both.
func (e *Env) RawStarts(ctx context.Context) (Rate, error) {
	reqs, err := e.uniqueRequests(e.P.RawStarts, "raw")
	if err != nil {
		return Rate{}, err
	}
	st := e.newStarter()
	return e.measureStarts(ctx, reqs, func(ctx context.Context, req decide.StartRequest) error {
		_, err := st.Start(ctx, req)
		return err
	})
}

// measureStarts starts every request with start, at the router's start
// concurrency, and measures the window from the first to the last.
func (e *Env) measureStarts(ctx context.Context, reqs []decide.StartRequest, start func(context.Context, decide.StartRequest) error) (Rate, error) {
	var next atomic.Int64
	var firstErr error
	var mu sync.Mutex
	dropSetup()
	win := startWindow()
	var wg sync.WaitGroup
	for w := 0; w < e.P.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(len(reqs)) {
					return
				}
				if err := start(ctx, reqs[i]); err != nil {
					mu.Lock()
					firstErr = errors.Join(firstErr, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	r := win.measured(len(reqs))
	e.workflows.Add(int64(len(reqs)))
	return r, firstErr
}

// dropSetup collects a stage's set-up garbage before the measured window
// starts. One collection is not enough: sync.Pools keep what they hold for
// one more (their victim cache), and a router stage's set-up fills goose's
// SQL parser pool (the stage's migration, 8 MB) against a router's live
// heap of about 12 MB. Its pages stay with the process, as a running
// router's stay with it: given back to the OS (debug.FreeOSMemory), the
// replay faulted them in again and its CPU per duplicate rose 1.43x
// (session 57, docs/benchmark.md).
func dropSetup() {
	runtime.GC()
	runtime.GC()
}

// uniqueRequests are the first n start requests the router would make of a
// fresh unique-heavy workload (first DupRatios, new event IDs, named after
// kind), each with its record's coordinates as the router's carry them (so
// its search attributes are the router's six; the record's index in the
// workload stands for its offset).
func (e *Env) uniqueRequests(n int, kind string) ([]decide.StartRequest, error) {
	dec, rs := decoderAndRoutes()
	w := workload.Generate(workload.Spec{Topic: "raw", Partitions: e.P.Partitions, Records: n, DupRatio: e.P.DupRatios[0],
		CrossPartition: 0.1, Seed: 11, PayloadBytes: e.P.PayloadBytes, IDPrefix: e.name(kind) + "-"})
	seen := map[string]bool{}
	var reqs []decide.StartRequest
	for i, kr := range w.Records {
		ev, err := dec.Decode(eventid.FromKafka(kr))
		if err != nil {
			return nil, err
		}
		for _, rt := range rs.Match(&ev) {
			wid := decide.WorkflowID(rt.ID, ev.ID)
			if !seen[wid] && len(reqs) < n {
				seen[wid] = true
				req := decide.NewStartRequest(rt, &ev, wid)
				req.Record = &decide.RecordRef{Topic: kr.Topic, Partition: kr.Partition, Offset: int64(i)}
				reqs = append(reqs, req)
			}
		}
	}
	return reqs, nil
}

// ClaimRates are the raw claim statement's throughput.
type ClaimRates struct {
	New       Rate        `json:"new"`
	Duplicate Rate        `json:"duplicate"`
	LatencyMs Percentiles `json:"duplicate_batch_latency_ms"`
}

// RawClaims runs the router's claim statement (ledger.Claim) at the batch
// size: RawClaims new rows, then the same rows again once started.
func (e *Env) RawClaims(ctx context.Context) (ClaimRates, error) {
	pool, _, _, err := e.database(ctx)
	if err != nil {
		return ClaimRates{}, err
	}
	defer pool.Close()
	return e.claimRates(ctx, ledger.NewFromPool(pool), synthetic(e.name("claim"), e.P.RawClaims))
}

func (e *Env) claimRates(ctx context.Context, led *ledger.Postgres, intents []decide.Intent) (ClaimRates, error) {
	var r ClaimRates
	win := startWindow()
	for i := 0; i < len(intents); i += e.P.Batch {
		if _, err := led.Claim(ctx, intents[i:min(i+e.P.Batch, len(intents))]); err != nil {
			return r, err
		}
	}
	r.New = win.measured(len(intents))
	started := make([]processor.Started, len(intents))
	for i, in := range intents {
		started[i] = processor.Started{WorkflowID: in.WorkflowID, RunID: "r"}
	}
	for i := 0; i < len(started); i += 5000 {
		if err := led.MarkStarted(ctx, started[i:min(i+5000, len(started))]); err != nil {
			return r, err
		}
	}
	var err error
	r.Duplicate, r.LatencyMs, err = e.duplicateClaims(ctx, led, intents)
	return r, err
}

// duplicateClaims claims intents whose rows are all started, in batches.
func (e *Env) duplicateClaims(ctx context.Context, led *ledger.Postgres, intents []decide.Intent) (Rate, Percentiles, error) {
	var lat []time.Duration
	win := startWindow()
	for i := 0; i < len(intents); i += e.P.Batch {
		t := time.Now()
		v, err := led.Claim(ctx, intents[i:min(i+e.P.Batch, len(intents))])
		if err != nil {
			return Rate{}, Percentiles{}, err
		}
		lat = append(lat, time.Since(t))
		if v[0].Verdict != decide.VerdictDuplicate {
			return Rate{}, Percentiles{}, fmt.Errorf("claim of a started row gave %s", v[0].Verdict)
		}
	}
	return win.measured(len(intents)), percentiles(lat), nil
}

// RawConsume consumes n records as a group member that commits every poll
// and does nothing else.
func (e *Env) RawConsume(ctx context.Context, n int) (Rate, error) {
	topic, err := e.topic(ctx)
	if err != nil {
		return Rate{}, err
	}
	w := workload.Generate(workload.Spec{Topic: topic, Partitions: e.P.Partitions, Records: n, Seed: 9, PayloadBytes: e.P.PayloadBytes})
	if err := e.produce(ctx, w.Records); err != nil {
		return Rate{}, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.In.Brokers...), kgo.ConsumerGroup("g-"+topic), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), NoClientMetrics())
	if err != nil {
		return Rate{}, err
	}
	defer cl.Close()
	win := startWindow()
	got := 0
	for got < n {
		fs := cl.PollRecords(ctx, e.P.Batch)
		if ctx.Err() != nil {
			return Rate{}, ctx.Err()
		}
		got += fs.NumRecords()
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			return Rate{}, err
		}
	}
	return win.measured(got), nil
}

// RouterResult is one router run.
type RouterResult struct {
	DupRatio          float64     `json:"dup_ratio"`
	Records           Rate        `json:"records"`
	Workflows         Rate        `json:"workflows_started"`
	TemporalCalls     int64       `json:"temporal_calls"`
	TemporalPerUnique float64     `json:"temporal_calls_per_workflow"`
	PGRoundTrips      int64       `json:"pg_round_trips"`
	PGPerRecord       float64     `json:"pg_round_trips_per_record"`
	LatencyMs         Percentiles `json:"latency_ms,omitempty"`
	// ClaimBusy is the share of the wall time a ledger claim was in flight
	// (the router has one claim in flight at a time): near 1, the ledger
	// is the limit; well below, something before it is.
	ClaimBusy float64 `json:"claim_busy"`
	// FirstRecordsMs is the wait from the window's start (the group
	// joined) to the first batch of records the Kafka client read: the
	// first fetch, which brings most of a backlog that compresses well
	// and which kfake sends from the infrastructure's core (firstFetch).
	FirstRecordsMs float64 `json:"first_records_ms"`
	// Intents are the workflow intents the router claimed (a record makes
	// one per route it matches), at the records' pace.
	Intents Rate `json:"intents"`
	// CPUSeconds is the measured process's CPU time (user + system) from
	// the group join to the last commit: the router (or the naive
	// consumer), less PollCPUSeconds. What remains of the benchmark's own
	// work is small: a timestamp per start.
	CPUSeconds float64 `json:"cpu_seconds"`
	// AlreadyStarted and StartErrors are Temporal calls rejected as
	// already started, and failed (the Watermill peer's; the router's
	// starter counts neither here).
	AlreadyStarted int64 `json:"already_started,omitempty"`
	StartErrors    int64 `json:"start_errors,omitempty"`
	// PollCPUSeconds is the benchmark's committed-offset reads in the
	// window (one every 20 ms), at their CPU cost measured right after.
	PollCPUSeconds float64 `json:"poll_cpu_seconds,omitempty"`
	// InfraBusy is the share of the window the infrastructure's core was
	// busy (window.infraBusy).
	InfraBusy float64 `json:"infra_cpu_busy"`
	// Spans is how many spans a traced run made (tracing-on).
	Spans int64 `json:"spans,omitempty"`
}

// CPUPerRecord is the CPU microseconds per record consumed (0 when there
// were none).
func (x RouterResult) CPUPerRecord() float64 {
	if x.Records.N == 0 {
		return 0
	}
	return x.CPUSeconds * 1e6 / float64(x.Records.N)
}

// CPUPerWorkflow is the CPU microseconds per workflow started (0 when there
// were none).
func (x RouterResult) CPUPerWorkflow() float64 {
	if x.Workflows.N == 0 {
		return 0
	}
	return x.CPUSeconds * 1e6 / float64(x.Workflows.N)
}

// InfraCPUPerWorkflow is the infrastructure core's CPU microseconds per
// started workflow (its busy share of the window, over the workflows):
// Temporal's, PostgreSQL's, Kafka's and the proxies' work for each. While
// that core is busy (near 100%), records/s go as its inverse. 0 when
// nothing started.
func (x RouterResult) InfraCPUPerWorkflow() float64 {
	if x.Workflows.N == 0 {
		return 0
	}
	return x.InfraBusy * x.Records.Seconds * 1e6 / float64(x.Workflows.N)
}

type routerRun struct {
	topic   string
	recs    []*kgo.Record
	prefill []decide.Intent
	// after runs on the run's ledger once the router has stopped.
	after func(ctx context.Context, led *ledger.Postgres) error
	// configure, if set, changes the router's config (a Schema Registry:
	// costs.go); tracing, if set, turns the router's and its starter's
	// tracing on.
	configure func(*processor.Config)
	tracing   *tracing.Tracing
}

// run runs an in-process router over the topic's backlog until committed.
func (e *Env) runRouter(ctx context.Context, rr routerRun, live func(ctx context.Context) error) (RouterResult, *timedStarter, error) {
	var res RouterResult
	pool, tracer, _, err := e.database(ctx)
	if err != nil {
		return res, nil, err
	}
	defer pool.Close()
	cfg := e.routerConfig(rr.topic)
	if rr.configure != nil {
		rr.configure(&cfg)
		if err := cfg.Validate(); err != nil {
			return res, nil, fmt.Errorf("configuring the router: %w", err)
		}
	}
	if len(rr.prefill) > 0 {
		// The rows carry their records' digests as the router's claims
		// would have written them (processor/known.go), so that a replay
		// meets a ledger a first pass left.
		if digest, err := processor.KnownDigester(cfg); err == nil {
			byCoords := make(map[[2]int64]*kgo.Record, len(rr.recs))
			for _, kr := range rr.recs {
				byCoords[[2]int64{int64(kr.Partition), kr.Offset}] = kr
			}
			for i := range rr.prefill {
				in := &rr.prefill[i]
				if kr := byCoords[[2]int64{int64(in.Partition), in.Offset}]; kr != nil && in.Known.Intents > 0 {
					in.Known.Digest = digest(kr)
				} else {
					in.Known = decide.Known{}
				}
			}
		} else {
			e.Log.Info("the prefilled rows carry no record digests", "why", err.Error())
			for i := range rr.prefill {
				rr.prefill[i].Known = decide.Known{}
			}
		}
		if err := prefill(ctx, pool, rr.prefill); err != nil {
			return res, nil, err
		}
		rr.prefill = nil // in the ledger now; dropped as the records below
	}
	n := len(rr.recs)
	if live == nil {
		if err := e.produce(ctx, rr.recs); err != nil {
			return res, nil, err
		}
		// The records are in Kafka now. The benchmark's own copies are no
		// router's: a replay's 200,000 are pointers the GC would otherwise
		// mark on every cycle of the measured window, a cost a router's
		// process does not have. The set-up's garbage goes with them.
		rr.recs = nil
		dropSetup()
	}
	// The router's ledger remembers what a user's does by default
	// (postgres.started_cache); the raw claim's remembers nothing.
	led := ledger.NewFromPool(pool).RememberStarted(ledger.DefaultConfig().StartedCache)
	inner := e.newStarter()
	if rr.tracing != nil {
		inner = e.temporalStarter().WithTracing(rr.tracing)
	}
	st := &timedStarter{inner: inner, started: map[string]time.Time{}, events: map[string]time.Time{}}
	reg := newRegistry()
	var first firstFetch
	commits := newCommitSeen()
	r, err := processor.New(cfg, processor.Options{Ledger: led, DeadLetterLog: led, Starter: st, Registerer: reg, Log: e.Log, Tracing: rr.tracing,
		KafkaOpts: []kgo.Opt{kgo.WithHooks(&first, commits), NoClientMetrics()}})
	if err != nil {
		return res, nil, err
	}
	tracer.n.Store(0)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	// Time from the group join on: joining is a fixed cost of seconds,
	// not throughput.
	for r.Ready() != nil && ctx.Err() == nil {
		time.Sleep(2 * time.Millisecond)
	}
	win := startWindow()
	began := win.wall
	if live != nil {
		if err := live(ctx); err != nil {
			cancel()
			if rerr := <-done; rerr != nil {
				e.Log.Warn("the router, stopped after the live load failed", "err", rerr)
			}
			return res, nil, err
		}
	}
	polls, err := e.waitCommitted(ctx, cfg.Group, rr.topic, 30*time.Minute, commits.ch)
	elapsed := time.Since(began)
	res.CPUSeconds = win.cpuSeconds()
	res.InfraBusy = win.infraBusy()
	cancel()
	if rerr := <-done; err == nil {
		err = rerr
	}
	workflows := len(st.started)
	e.workflows.Add(int64(workflows))
	res.Records = rate(n, elapsed)
	// Workflows started per second: up to the last start (records/s runs
	// to the last commit, which comes up to a commit interval later).
	var last time.Time
	for _, t := range st.started {
		if t.After(last) {
			last = t
		}
	}
	res.Workflows = rate(workflows, max(last.Sub(began), time.Millisecond))
	if workflows == 0 {
		res.Workflows = rate(0, elapsed)
	}
	res.TemporalCalls = st.calls.Load()
	if workflows > 0 {
		res.TemporalPerUnique = float64(res.TemporalCalls) / float64(workflows)
	}
	res.PGRoundTrips = tracer.n.Load()
	res.PGPerRecord = float64(res.PGRoundTrips) / float64(n)
	res.ClaimBusy = metricSum(reg, "dedup_claim_duration_seconds", histogramSum) / elapsed.Seconds()
	if at := first.at.Load(); at > 0 && live == nil {
		res.FirstRecordsMs = max(0, float64(time.Unix(0, at).Sub(began))/float64(time.Millisecond))
	}
	res.Intents = rate(int(metricSum(reg, "dedup_intents_total", counterValue)), elapsed)
	if err == nil {
		var per time.Duration
		per, err = e.pollCost(ctx, cfg.Group, rr.topic, 50)
		res.PollCPUSeconds = per.Seconds() * float64(polls)
		res.CPUSeconds = max(0, res.CPUSeconds-res.PollCPUSeconds)
	}
	if err == nil && rr.after != nil {
		err = rr.after(ctx, led)
	}
	return res, st, err
}

// firstFetch is a Kafka client hook that keeps when the client first read
// a batch of records (kgo.HookFetchBatchRead: once per batch, on the
// fetching goroutine).
type firstFetch struct{ at atomic.Int64 }

func (f *firstFetch) OnFetchBatchRead(kgo.BrokerMetadata, string, int32, kgo.FetchBatchMetrics) {
	if f.at.Load() == 0 {
		f.at.CompareAndSwap(0, time.Now().UnixNano())
	}
}

// AfterFirstRecords is the records' rate from the first batch read
// (FirstRecordsMs) to the window's end: the whole window's when the first
// batch came before it.
func (r RouterResult) AfterFirstRecords() float64 {
	s := r.Records.Seconds - r.FirstRecordsMs/1000
	if s <= 0 {
		return 0
	}
	return float64(r.Records.N) / s
}

// Backlog runs the router over n records with the duplicate ratio.
func (e *Env) Backlog(ctx context.Context, dup float64) (RouterResult, error) {
	topic, recs, pre, err := e.backlogWorkload(ctx, dup)
	if err != nil {
		return RouterResult{}, err
	}
	res, _, err := e.runRouter(ctx, routerRun{topic: topic, recs: recs, prefill: pre}, nil)
	res.DupRatio = dup
	return res, err
}

// backlogWorkload is a fresh topic and Records records for it at the
// duplicate ratio (not produced yet), and, when every record is a
// duplicate, the intents a ledger must hold as started. Any consumer
// compared with the router's backlog runs gets its workload here.
func (e *Env) backlogWorkload(ctx context.Context, dup float64) (string, []*kgo.Record, []decide.Intent, error) {
	topic, err := e.topic(ctx)
	if err != nil {
		return "", nil, nil, err
	}
	w := workload.Generate(workload.Spec{Topic: topic, Partitions: e.P.Partitions, Records: e.P.Records, DupRatio: dup,
		CrossPartition: 0.1, Seed: uint64(dup*1000) + 3, PayloadBytes: e.P.PayloadBytes, IDPrefix: topic + "-"})
	var pre []decide.Intent
	if dup >= 1 {
		// Every record a duplicate: the ledger has them all as started.
		if pre, err = workflowIDs(w.Records); err != nil {
			return "", nil, nil, err
		}
	}
	return topic, w.Records, pre, nil
}

// replayWorkload is n records whose workflows a fresh ledger has as
// started (a group reset to earliest over a processed topic).
func (e *Env) replayWorkload(ctx context.Context, n int) (string, []*kgo.Record, []decide.Intent, error) {
	topic, err := e.topic(ctx)
	if err != nil {
		return "", nil, nil, err
	}
	w := workload.Generate(workload.Spec{Topic: topic, Partitions: e.P.Partitions, Records: n, DupRatio: 0.3,
		CrossPartition: 0.1, Seed: 77, PayloadBytes: e.P.PayloadBytes, IDPrefix: topic + "-"})
	pre, err := workflowIDs(w.Records)
	return topic, w.Records, pre, err
}

// Replay is the all-duplicate workload: ReplayN records whose workflows the
// ledger has as started. It also returns the claim statement alone over
// the same IDs, on the same database, right after the router.
func (e *Env) Replay(ctx context.Context) (RouterResult, Rate, error) {
	topic, recs, pre, err := e.replayWorkload(ctx, e.P.ReplayN)
	if err != nil {
		return RouterResult{}, Rate{}, err
	}
	// The claim alone, after the router, needs the IDs again: they wait in
	// gob's bytes, which the GC does not scan, so that the router's window
	// carries none of the benchmark's data (runRouter drops its records).
	var packed bytes.Buffer
	if err := gob.NewEncoder(&packed).Encode(pre); err != nil {
		return RouterResult{}, Rate{}, err
	}
	var raw Rate
	after := func(ctx context.Context, led *ledger.Postgres) error {
		var pre []decide.Intent
		if err := gob.NewDecoder(&packed).Decode(&pre); err != nil {
			return err
		}
		var err error
		raw, _, err = e.duplicateClaims(ctx, led, pre)
		return err
	}
	res, _, err := e.runRouter(ctx, routerRun{topic: topic, recs: recs, prefill: pre, after: after}, nil)
	res.DupRatio = 1
	return res, raw, err
}

// NaiveReplay is the naive consumer over the replay's workload, on
// NaiveRecords records.
func (e *Env) NaiveReplay(ctx context.Context) (RouterResult, error) {
	_, recs, pre, err := e.replayWorkload(ctx, e.P.NaiveRecords)
	if err != nil {
		return RouterResult{}, err
	}
	res, err := e.Naive(ctx, recs, pre)
	res.DupRatio = 1
	return res, err
}

// Live produces at LiveRate for LiveSeconds while the router runs, and
// measures each unique event's latency from its produce time to its
// workflow start.
func (e *Env) Live(ctx context.Context, dup float64) (RouterResult, error) {
	topic, err := e.topic(ctx)
	if err != nil {
		return RouterResult{}, err
	}
	n := e.P.LiveRate * e.P.LiveSeconds
	w := workload.Generate(workload.Spec{Topic: topic, Partitions: e.P.Partitions, Records: n, DupRatio: dup,
		CrossPartition: 0.1, Seed: uint64(dup*1000) + 5, PayloadBytes: e.P.PayloadBytes, IDPrefix: topic + "-"})
	var pre []decide.Intent
	if dup >= 1 {
		if pre, err = workflowIDs(w.Records); err != nil {
			return RouterResult{}, err
		}
	}
	produced := map[string]time.Time{}
	var mu sync.Mutex
	first := map[string]bool{}
	live := func(ctx context.Context) error {
		tick := time.NewTicker(time.Second / time.Duration(e.P.LiveRate))
		defer tick.Stop()
		for _, r := range w.Records {
			<-tick.C
			r.Timestamp = time.Now()
			if id := eventIDOf(r); id != "" && !first[id] {
				first[id] = true
				mu.Lock()
				produced[id] = r.Timestamp
				mu.Unlock()
			}
			e.kcl.Produce(ctx, r, nil)
		}
		return e.kcl.Flush(ctx)
	}
	res, st, err := e.runRouter(ctx, routerRun{topic: topic, recs: w.Records, prefill: pre}, live)
	if err != nil {
		return res, err
	}
	var lat []time.Duration
	st.mu.Lock()
	for id, t := range st.events {
		if p, ok := produced[id]; ok {
			lat = append(lat, t.Sub(p))
		}
	}
	st.mu.Unlock()
	res.DupRatio = dup
	res.LatencyMs = percentiles(lat)
	return res, nil
}

// eventIDOf reads the ID of records that carry one (header or field).
func eventIDOf(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == "ce_id" {
			return string(h.Value)
		}
	}
	s := string(r.Value)
	i := strings.Index(s, `"id":"`)
	if i < 0 {
		return ""
	}
	s = s[i+6:]
	return s[:strings.IndexByte(s, '"')]
}

// Naive is the consumer most teams write: per record, an autocommit upsert
// (ON CONFLICT DO NOTHING), a synchronous start when the row was new, and
// a synchronous offset commit. (It also has the lost-event bug dedup
// avoids: a crash between upsert and start loses the event.)
func (e *Env) Naive(ctx context.Context, recs []*kgo.Record, pre []decide.Intent) (RouterResult, error) {
	var res RouterResult
	topic, err := e.topic(ctx)
	if err != nil {
		return res, err
	}
	cp := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		c := *r
		c.Topic = topic
		cp[i] = &c
	}
	if err := e.produce(ctx, cp); err != nil {
		return res, err
	}
	pool, tracer, _, err := e.database(ctx)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	if err := prefill(ctx, pool, pre); err != nil {
		return res, err
	}
	tracer.n.Store(0)
	dec, rs := decoderAndRoutes()
	st := e.newStarter()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.In.Brokers...), kgo.ConsumerGroup("g-"+topic), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), NoClientMetrics())
	if err != nil {
		return res, err
	}
	defer cl.Close()
	win := startWindow()
	began := win.wall
	got, starts := 0, 0
	var calls int64
	for got < len(cp) {
		fs := cl.PollRecords(ctx, 1)
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		for _, kr := range fs.Records() {
			got++
			ev, err := dec.Decode(eventid.FromKafka(kr))
			if err == nil {
				for _, r := range rs.Match(&ev) {
					id := decide.WorkflowID(r.ID, ev.ID)
					tag, err := pool.Exec(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset)
						VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING`, id, r.ID, ev.ID, string(ev.Rule), ev.PayloadHash[:], kr.Topic, kr.Partition, kr.Offset)
					if err != nil {
						return res, err
					}
					if tag.RowsAffected() == 1 {
						calls++
						if _, err := st.Start(ctx, decide.StartRequest{WorkflowID: id, WorkflowType: r.WorkflowType, TaskQueue: r.TaskQueue,
							ReusePolicy: r.IDReusePolicy, Input: schemas.WorkflowInput{WorkflowID: id, EventID: ev.ID, Data: ev.Data}}); err != nil {
							return res, err
						}
						starts++
					}
				}
			}
			if err := cl.CommitRecords(ctx, kr); err != nil {
				return res, err
			}
		}
	}
	elapsed := time.Since(began)
	res.CPUSeconds = win.cpuSeconds()
	res.InfraBusy = win.infraBusy()
	e.workflows.Add(int64(starts))
	res.Records = rate(got, elapsed)
	res.Workflows = rate(starts, elapsed)
	res.TemporalCalls = calls
	if starts > 0 {
		res.TemporalPerUnique = float64(calls) / float64(starts)
	}
	res.PGRoundTrips = tracer.n.Load()
	res.PGPerRecord = float64(res.PGRoundTrips) / float64(got)
	return res, nil
}

// LedgerPoint is claim throughput at one ledger size.
type LedgerPoint struct {
	Rows       int        `json:"ledger_rows"`
	Raw        ClaimRates `json:"raw_claim"`
	RouterDups Rate       `json:"router_all_duplicate_records"`
}

// LedgerGrowth fills one ledger to each size in turn and measures the raw
// claim statement, new and duplicate, at each.
func (e *Env) LedgerGrowth(ctx context.Context) ([]LedgerPoint, error) {
	pool, _, _, err := e.database(ctx)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	led := ledger.NewFromPool(pool)
	var out []LedgerPoint
	filled := 0
	for _, size := range e.P.LedgerSizes {
		if size > filled {
			_, err := pool.Exec(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset, state, run_id, started_at)
				SELECT 'activity-order-confirmation:fill-evt-' || lpad(g::text, 10, '0'), 'order-confirmation', 'fill-evt-' || g, 'field',
					sha256(g::text::bytea), 'events', g % 8, g, 'started', 'r', now()
				FROM generate_series($1::bigint, $2::bigint - 1) g`, filled, size)
			if err != nil {
				return out, fmt.Errorf("filling the ledger to %d rows: %w", size, err)
			}
			if _, err := pool.Exec(ctx, "VACUUM ANALYZE dedup_ledger"); err != nil {
				return out, err
			}
			filled = size
		}
		r, err := e.claimRates(ctx, led, synthetic(e.name(fmt.Sprintf("grow%d", size)), e.P.RawClaims))
		if err != nil {
			return out, err
		}
		out = append(out, LedgerPoint{Rows: size, Raw: r})
		e.Log.Info("ledger growth", "rows", size, "new_per_sec", int(r.New.PerSec), "dup_per_sec", int(r.Duplicate.PerSec))
	}
	return out, nil
}

// RSSResult is a `dedup run` process over a large all-duplicate backlog.
type RSSResult struct {
	Backlog     int     `json:"backlog_records"`
	PeakRSSMiB  float64 `json:"peak_rss_mib"`
	HeapMiB     float64 `json:"heap_inuse_mib_at_end"`
	Records     Rate    `json:"records"`
	StartCalls  float64 `json:"temporal_start_calls"`
	MaxInFlight int     `json:"max_in_flight"`
	// Affinity is `taskset -cp` of the dedup process (forked from the
	// stage, it inherits its CPU).
	Affinity string `json:"affinity"`
}

// RSS runs `dedup run` as a process over RSSBacklog records (their
// workflows already in the ledger) and samples its resident memory.
func (e *Env) RSS(ctx context.Context) (RSSResult, error) {
	res := RSSResult{Backlog: e.P.RSSBacklog}
	topic, err := e.topic(ctx)
	if err != nil {
		return res, err
	}
	w := workload.Generate(workload.Spec{Topic: topic, Partitions: e.P.Partitions, Records: e.P.RSSBacklog, DupRatio: 0.3,
		Seed: 11, PayloadBytes: e.P.PayloadBytes, IDPrefix: topic + "-"})
	pre, err := workflowIDs(w.Records)
	if err != nil {
		return res, err
	}
	pool, _, url, err := e.database(ctx)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	if err := prefill(ctx, pool, pre); err != nil {
		return res, err
	}
	if err := e.produce(ctx, w.Records); err != nil {
		return res, err
	}
	w = nil
	cfg := config.Default()
	cfg.Kafka = e.routerConfig(topic)
	cfg.Routes, cfg.EventID, cfg.Starts, cfg.Retry = cfg.Kafka.Routes, cfg.Kafka.EventID, cfg.Kafka.Starts, cfg.Kafka.Retry
	cfg.Postgres.URL = url
	cfg.Temporal.HostPort = e.In.Temporal
	cfg.Temporal.Namespace = e.In.Namespace
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return res, err
	}
	cfg.Admin.Listen = l.Addr().String()
	if err := l.Close(); err != nil {
		return res, err
	}
	cfg.Log.Level = "warn"
	res.MaxInFlight = cfg.Kafka.MaxInFlight
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return res, err
	}
	dir, err := os.MkdirTemp("", "dedup-bench-")
	if err != nil {
		return res, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	path := filepath.Join(dir, "dedup.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return res, err
	}
	cmd := exec.CommandContext(ctx, e.P.DedupBin, "run", "--config", path)
	cmd.Stderr = os.Stderr
	began := time.Now()
	p, err := startProc(cmd)
	if err != nil {
		return res, err
	}
	defer p.stop()
	res.Affinity = affinityOf(cmd.Process.Pid, false)[0]
	stop := make(chan struct{})
	var peak atomic.Int64
	go func() {
		for {
			if kb := vmRSSKiB(cmd.Process.Pid, "VmHWM:"); kb > peak.Load() {
				peak.Store(kb)
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	err = p.during(ctx, func(ctx context.Context) error {
		_, err := e.waitConsumed(ctx, cfg.Kafka.Group, topic, 30*time.Minute)
		return err
	})
	elapsed := time.Since(began)
	close(stop)
	if kb := vmRSSKiB(cmd.Process.Pid, "VmHWM:"); kb > peak.Load() {
		peak.Store(kb)
	}
	res.PeakRSSMiB = float64(peak.Load()) / 1024
	res.HeapMiB = promtext.Sum(cfg.Admin.Listen, "go_memstats_heap_inuse_bytes", "", "") / (1 << 20)
	res.StartCalls = promtext.Sum(cfg.Admin.Listen, "dedup_workflow_starts_total", "", "") + promtext.Sum(cfg.Admin.Listen, "dedup_workflow_start_errors_total", "", "")
	res.Records = rate(e.P.RSSBacklog, elapsed)
	return res, err
}

// proc is a started process whose exit ends what waits for it.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process exited; err is then set
	err    error
}

func startProc(cmd *exec.Cmd) (*proc, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, exited: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	return p, nil
}

// during runs wait with a context that ends when the process exits: a
// `dedup run` that exits (a config it refuses) ends the stage at once,
// with its exit status, instead of the wait's timeout.
func (p *proc) during(ctx context.Context, wait func(context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-p.exited:
			cancel(fmt.Errorf("%s exited (its stderr is above): %v", p.cmd.Path, p.err))
		case <-ctx.Done():
		}
	}()
	err := wait(ctx)
	if cause := context.Cause(ctx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}

// stop kills the process and waits for it.
func (p *proc) stop() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

func vmRSSKiB(pid int, field string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), field) {
			n, _ := strconv.ParseInt(strings.Fields(sc.Text())[1], 10, 64)
			return n
		}
	}
	return 0
}

// UniqueRecords is the naive consumer's unique-heavy workload: n records at
// the first duplicate ratio.
func UniqueRecords(p Params, n int) []*kgo.Record {
	w := workload.Generate(workload.Spec{Topic: "naive", Partitions: p.Partitions, Records: n, DupRatio: p.DupRatios[0],
		CrossPartition: 0.1, Seed: 99, PayloadBytes: p.PayloadBytes, IDPrefix: fmt.Sprintf("naive-%d-", time.Now().UnixNano())})
	return w.Records
}
