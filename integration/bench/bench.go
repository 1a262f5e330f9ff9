// Package bench measures dedup against the limits of its own dependencies
// and against a naive consumer, on one machine (cmd/dedup-bench), with the
// infrastructure (kfake, Temporal, PostgreSQL: StartInfra) in one process
// pinned to CPU 0 and each measured stage (RunStage) alone in its own
// process pinned to CPU 1, behind latency-injecting proxies.
//
// Every stage runs on the same stack with the same settings:
//   - raw Temporal start capacity: the starter alone, unique IDs, at the
//     router's start concurrency;
//   - raw ledger claim capacity: the router's claim statement alone, at its
//     batch size, for new and for already-started IDs;
//   - raw consume capacity: a franz-go group consumer that commits and does
//     nothing else;
//   - the router, in the stage's process, on backlogs of each duplicate ratio, with its
//     Starter and PostgreSQL pool instrumented (calls, round trips, start
//     times), and live at a fixed rate for latency;
//   - the naive consumer most teams write: per record one autocommit upsert,
//     one synchronous start, one offset commit;
//   - the same job built with Watermill (package peer), on the same
//     backlogs, and once per run what it and dedup guarantee on a replay
//     after a restart or after Temporal's retention, with two replicas and
//     through a Temporal outage (peer.Guarantees);
//   - claim latency as the ledger grows;
//   - peak RSS and heap of a `dedup run` process over a large backlog.
//
// Each measured stage reports its process's CPU time (getrusage) over its
// measured window, so that the router's CPU per record and per workflow
// can be set beside the bare stages' (Report.Ratios). Run orchestrates:
// latency profiles (SetLatency), repetitions, the report.
package bench

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/dedupio/dedup/internal/demo/workload"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/sink/ledger"
	"github.com/dedupio/dedup/sink/starter"
)

// Params are the benchmark's knobs.
type Params struct {
	Records     int       // records per router backlog run
	Rounds      int       // unique-heavy backlogs, interleaved with raw start runs
	DupRatios   []float64 // backlog runs, one per ratio
	Partitions  int
	Concurrency int // start concurrency (router, raw starts, naive has 1)
	// ScaleSizes, if set, are the ledger sizes of the ledger-scale stage
	// (claims of ScaleClaims intents at each); RetentionRows, if set, the
	// ledger of the retention stage (RetentionDays days of rows). Both are
	// on-demand runs (make bench-ledger), not part of make bench.
	ScaleSizes  []int
	ScaleClaims int
	// ScaleOrdered gives the ledger-scale stage time-ordered event IDs
	// (UUIDv7: a millisecond timestamp first) instead of random ones.
	ScaleOrdered  bool
	RetentionRows int
	RetentionDays int
	// LedgerOnly runs the ledger stages alone (no latency profiles).
	LedgerOnly bool
	// MarkInterval, if set, is the router's starts.mark_interval (0:
	// dedup's default).
	MarkInterval time.Duration
	// Compression is every stage's gRPC compression to Temporal
	// (temporal.compression: none, dedup's default, or gzip, the SDK's).
	Compression  string
	Batch        int // max poll records = claim batch
	PayloadBytes int
	RawStarts    int   // starts in the raw start stage
	RawClaims    int   // rows in the raw claim stage
	ReplayN      int   // records of the all-duplicate replay workload
	LedgerSizes  []int // ledger sizes for the claim-latency stage
	NaiveRecords int   // records the naive consumer gets (it is slow)
	LiveRate     int   // records/s of the latency runs
	LiveSeconds  int
	// GuaranteeRecords is the records per backlog of the guarantees stage
	// (peer.Guarantees); 0 skips it.
	GuaranteeRecords int
	RSSBacklog       int // records behind a `dedup run` process; 0 skips
	// CostRecords is the records of each cost stage (costs.go: Avro
	// through a Schema Registry against JSON, tracing on against off);
	// 0 skips them.
	CostRecords int
	// CostsOnly runs the cost stages alone at each latency profile and
	// repetition (no other stage, no guarantees, ledger or RSS stage).
	CostsOnly bool
	DedupBin  string // the dedup binary for the RSS stage
}

// Env is what a stage process measures with: the infrastructure's
// (proxied) addresses, a Temporal client on them, and its own Kafka client
// for producing backlogs.
type Env struct {
	In  *Infra
	TC  client.Client
	Log *slog.Logger
	P   Params
	seq atomic.Int64
	// workflows counts every workflow this process started (the
	// orchestrator waits for visibility to catch up with them: Settle).
	workflows atomic.Int64
	kcl       *kgo.Client
	adm       *kadm.Client
	topics    []string
}

// NoClientMetrics is in every franz-go client of the benchmark's stages
// (the router's through processor.Options.KafkaOpts): they send the broker
// no client metrics (KIP-714). kfake subscribes every client that asks to
// all its metrics; an Apache Kafka broker advertises the telemetry APIs
// only with a telemetry plugin, and subscribes a client only to what an
// operator configured, and sarama (the Watermill peer's client) has no
// KIP-714. A subscribed franz-go client builds a compressor for its pushes
// whose lz4 probe takes two 4 MB blocks: in a router stage, 8 MB each for
// the router's client and the producer's, against the router's live heap
// of about 12 MB, freed and returned to the OS during the window. The
// shipped router keeps franz-go's default.
func NoClientMetrics() kgo.Opt { return kgo.DisableClientMetrics() }

// NewEnv dials the infrastructure's Kafka.
func NewEnv(in *Infra, tc client.Client, p Params, log *slog.Logger) (*Env, error) {
	kcl, err := kgo.NewClient(kgo.SeedBrokers(in.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(4<<20), kgo.MaxBufferedRecords(200000), NoClientMetrics())
	if err != nil {
		return nil, err
	}
	return &Env{In: in, TC: tc, Log: log, P: p, kcl: kcl, adm: kadm.NewClient(kcl)}, nil
}

// Workflows is how many workflows this process started.
func (e *Env) Workflows() int64 { return e.workflows.Load() }

// Settle waits until the Temporal server's visibility has caught up with
// want workflows. The in-process server writes visibility asynchronously
// (it is most of its CPU here): without this, one stage's backlog of
// visibility writes would slow the next stage down.
func Settle(ctx context.Context, tc client.Client, want int64, log *slog.Logger) {
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		resp, err := tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{})
		if err == nil && resp.Count >= want {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	log.Warn("visibility did not catch up", "want", want)
}

// Close releases the Kafka client.
func (e *Env) Close() { e.kcl.Close() }

// name is unique across the run's processes (topics, databases and event
// IDs are made of it).
func (e *Env) name(kind string) string {
	return fmt.Sprintf("%s-%d-%d", kind, os.Getpid(), e.seq.Add(1))
}

// countTracer counts statements sent to PostgreSQL: each is one round trip
// (pgx pipelines parse, bind and execute of a cached statement).
type countTracer struct{ n atomic.Int64 }

func (c *countTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *countTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// database creates a fresh migrated database and a traced pool on it.
func (e *Env) database(ctx context.Context) (*pgxpool.Pool, *countTracer, string, error) {
	url := e.In.DatabaseURL
	if e.In.CreateDatabases {
		var err error
		if url, err = createDatabase(ctx, url, fmt.Sprintf("bench_%d_%d", os.Getpid(), e.seq.Add(1))); err != nil {
			return nil, nil, "", err
		}
	}
	if err := ledger.Migrate(ctx, url); err != nil {
		return nil, nil, "", err
	}
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, nil, "", err
	}
	tr := &countTracer{}
	pc.ConnConfig.Tracer = tr
	pc.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	return pool, tr, url, err
}

// createDatabase creates database name next to the admin database and
// returns its URL.
func createDatabase(ctx context.Context, admin, name string) (string, error) {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", fmt.Errorf("connecting to create %s: %w", name, err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("creating database %s: %w", name, err)
	}
	u, err := url.Parse(admin)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

func (e *Env) topic(ctx context.Context) (string, error) {
	t := e.name("bench")
	_, err := e.adm.CreateTopics(ctx, int32(e.P.Partitions), 1, nil, t, t+".dlq")
	e.topics = append(e.topics, t, t+".dlq")
	return t, err
}

// DropTopics deletes the topics this process created: the broker keeps
// every record in the infra process's heap, and its garbage collections
// would otherwise scan them for the rest of the run.
func (e *Env) DropTopics(ctx context.Context) error {
	_, err := e.adm.DeleteTopics(ctx, e.topics...)
	e.topics = nil
	return err
}

func (e *Env) produce(ctx context.Context, recs []*kgo.Record) error {
	for i := 0; i < len(recs); i += 5000 {
		if err := e.kcl.ProduceSync(ctx, recs[i:min(i+5000, len(recs))]...).FirstErr(); err != nil {
			return err
		}
	}
	return nil
}

// routes are the benchmark's: order.created to one activity, user.signed_up
// to two, as in the tests.
func routes() decide.Routes {
	return decide.Routes{
		{ID: "order-confirmation", Match: decide.Match{Type: workload.TypeOrder}, WorkflowType: "RunActivityWorkflow", TaskQueue: "bench"},
		{ID: "welcome-email", Match: decide.Match{Type: workload.TypeSignup}, WorkflowType: "RunActivityWorkflow", TaskQueue: "bench"},
		{ID: "crm-sync", Match: decide.Match{Type: workload.TypeSignup}, WorkflowType: "RunActivityWorkflow", TaskQueue: "bench"},
	}
}

func (e *Env) routerConfig(topic string) processor.Config {
	c := processor.DefaultConfig()
	c.Brokers = e.In.Brokers
	c.Group = "g-" + topic
	c.Topics = []string{topic}
	c.ResetOffset = "earliest"
	c.MaxPollRecords = e.P.Batch
	c.Starts.Concurrency = e.P.Concurrency
	if e.P.MarkInterval > 0 {
		c.Starts.MarkInterval = e.P.MarkInterval
	}
	c.CommitInterval = 100 * time.Millisecond
	c.SessionTimeout = 10 * time.Second
	c.Routes = routes()
	_ = c.Validate()
	return c
}

// timedStarter counts Temporal calls and records when each workflow's
// start first succeeded, and each event's first workflow start.
type timedStarter struct {
	inner   processor.Starter
	calls   atomic.Int64
	mu      sync.Mutex
	started map[string]time.Time // workflow ID -> first successful start
	events  map[string]time.Time // event ID -> its first workflow's start
}

func (s *timedStarter) Start(ctx context.Context, req decide.StartRequest) (processor.StartResult, error) {
	s.calls.Add(1)
	res, err := s.inner.Start(ctx, req)
	if err == nil {
		now := time.Now()
		s.mu.Lock()
		if _, ok := s.started[req.WorkflowID]; !ok {
			s.started[req.WorkflowID] = now
		}
		if _, ok := s.events[req.Input.EventID]; !ok {
			s.events[req.Input.EventID] = now
		}
		s.mu.Unlock()
	}
	return res, err
}

// LastRun is the inner starter's (the benchmark's routes reject
// duplicates: it is never called).
func (s *timedStarter) LastRun(ctx context.Context, namespace, workflowID string) (decide.Run, error) {
	return s.inner.LastRun(ctx, namespace, workflowID)
}

func (e *Env) newStarter() processor.Starter { return e.temporalStarter() }

// temporalStarter is the router's starter, with the record's search
// attributes unless DEDUP_BENCH_SEARCH_ATTRIBUTES=off in the stage's
// environment (temporal.search_attributes: off; for a same-run A/B through
// a -baseline-exe wrapper that sets it: what the attributes cost Temporal).
func (e *Env) temporalStarter() *starter.Temporal {
	sa := starter.SearchAttributesOn
	if os.Getenv("DEDUP_BENCH_SEARCH_ATTRIBUTES") == "off" {
		sa = starter.SearchAttributesOff
	}
	return starter.New(e.TC, starter.Config{Namespace: e.In.Namespace, StartTimeout: 10 * time.Second, SearchAttributes: sa})
}

// Percentiles of durations.
type Percentiles struct {
	P50, P95, P99 float64 // milliseconds
	N             int
}

func percentiles(ds []time.Duration) Percentiles {
	if len(ds) == 0 {
		return Percentiles{}
	}
	slices.Sort(ds)
	at := func(q float64) float64 {
		return float64(ds[min(len(ds)-1, int(q*float64(len(ds))))]) / 1e6
	}
	return Percentiles{P50: at(0.50), P95: at(0.95), P99: at(0.99), N: len(ds)}
}

// waitConsumed waits until the group's committed offsets reach the end,
// and returns how many times it read them: every 20 ms.
func (e *Env) waitConsumed(ctx context.Context, group, topic string, timeout time.Duration) (int, error) {
	return e.waitCommitted(ctx, group, topic, timeout, nil)
}

// waitCommitted is waitConsumed for a consumer whose commits the benchmark
// sees (commits: commitSeen's signal): it reads the group's offsets after
// each commit the consumer finished, or a second after the last read,
// instead of every 20 ms. A read every 20 ms wakes the measured process
// 50 times a second, and the runtime's wake-up of an idle process (its
// sysmon thread's polling, the context switches) costs more than the read
// that pollCost measures and takes out: the in-process router's measured
// window would carry the benchmark's own polling.
func (e *Env) waitCommitted(ctx context.Context, group, topic string, timeout time.Duration, commits <-chan struct{}) (int, error) {
	ends, err := e.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	every := 20 * time.Millisecond
	if commits != nil {
		every = time.Second // a safety net: a commit signals first
	}
	t := time.NewTimer(every)
	defer t.Stop()
	deadline := time.Now().Add(timeout)
	polls := 0
	for time.Now().Before(deadline) {
		polls++
		if e.consumed(ctx, group, ends) {
			return polls, nil
		}
		t.Reset(every)
		select {
		case <-commits: // nil: never
		case <-t.C:
		case <-ctx.Done():
			return polls, ctx.Err()
		}
	}
	return polls, fmt.Errorf("group %s did not consume %s in %s", group, topic, timeout)
}

// commitSeen is a Kafka client hook that signals each offset commit the
// client finished (kgo.HookBrokerE2E of an OffsetCommit request), for
// waitCommitted. Its channel holds one signal: a commit that lands while
// the waiter reads is read again after.
type commitSeen struct{ ch chan struct{} }

func newCommitSeen() *commitSeen { return &commitSeen{ch: make(chan struct{}, 1)} }

func (c *commitSeen) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, _ kgo.BrokerE2E) {
	if key == kmsg.OffsetCommit.Int16() {
		select {
		case c.ch <- struct{}{}:
		default:
		}
	}
}

// consumed reads the group's committed offsets once: do they reach ends?
func (e *Env) consumed(ctx context.Context, group string, ends kadm.ListedOffsets) bool {
	committed, err := e.adm.FetchOffsets(ctx, group)
	if err != nil {
		return false
	}
	done := true
	ends.Each(func(o kadm.ListedOffset) {
		// An empty partition has nothing to commit.
		c, ok := committed.Lookup(o.Topic, o.Partition)
		if o.Offset > 0 && (!ok || c.At < o.Offset) {
			done = false
		}
	})
	return done
}

// pollCost is the CPU time of one of waitConsumed's reads, measured over
// n reads: the benchmark's own work inside a router's measured window,
// which runRouter takes out of the router's CPU time.
func (e *Env) pollCost(ctx context.Context, group, topic string, n int) (time.Duration, error) {
	ends, err := e.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	w := startWindow()
	for range n {
		e.consumed(ctx, group, ends)
	}
	return time.Duration(w.cpuSeconds() * float64(time.Second) / float64(n)), nil
}

// workflowIDs are the workflow IDs the routes make of records, computed
// with the router's own decoder and routes (for pre-filling a ledger).
func workflowIDs(recs []*kgo.Record) ([]decide.Intent, error) {
	dec, rs := decoderAndRoutes()
	seen := map[string]bool{}
	var out []decide.Intent
	for _, kr := range recs {
		ev, err := dec.Decode(eventid.FromKafka(kr))
		if err != nil {
			continue
		}
		matched := rs.Match(&ev)
		// The record's number of intents, as the router writes it with
		// the rows its claim inserts (decide.Known; its digest is the
		// router's: prefill); none when a route may run again.
		known := int32(len(matched))
		for _, r := range matched {
			if r.MayRerun() {
				known = 0
			}
		}
		for _, r := range matched {
			id := decide.WorkflowID(r.ID, ev.ID)
			if !seen[id] {
				seen[id] = true
				out = append(out, decide.Intent{WorkflowID: id, ActivityID: r.ID, EventID: ev.ID, IDRule: string(ev.Rule),
					PayloadHash: ev.PayloadHash, Topic: kr.Topic, Partition: kr.Partition, Offset: kr.Offset,
					Known: decide.Known{Intents: known}})
			}
		}
	}
	return out, nil
}

// prefill inserts intents as started rows with COPY (the state a ledger is
// in after they were processed), so that a replay of their records is
// all-duplicate without first starting them in Temporal. The rows lie in
// the heap as a router's claims left them (inHeapOrder), not in the
// records' order: how far apart a replay's look-ups land is part of
// what they cost.
func prefill(ctx context.Context, pool *pgxpool.Pool, intents []decide.Intent) error {
	rows := make([][]any, len(intents))
	now := time.Now() // started rows have their start's time, as a mark writes it
	for i, in := range inHeapOrder(intents, prefillClaim) {
		var digest, count any // NULL: no Known (decide.Known)
		if in.Known.Intents > 0 {
			digest, count = in.Known.Digest, int16(in.Known.Intents)
		}
		rows[i] = []any{in.WorkflowID, in.ActivityID, in.EventID, in.IDRule, in.PayloadHash[:], in.Topic, in.Partition, in.Offset, "started", "prefilled", now,
			digest, count}
	}
	_, err := pool.CopyFrom(ctx, pgx.Identifier{"dedup_ledger"},
		[]string{"workflow_id", "activity_id", "event_id", "id_rule", "payload_hash", "topic", "kafka_partition", "kafka_offset", "state", "run_id", "started_at",
			"record_digest", "record_intents"},
		pgx.CopyFromRows(rows))
	if err != nil {
		return fmt.Errorf("prefilling %d ledger rows: %w", len(intents), err)
	}
	// VACUUM, not only ANALYZE: the rows a replay meets were written long
	// before it (its first pass), so autovacuum has long since set their
	// hint bits and visibility. Freshly copied rows would have the
	// replay's first claims set those bits, and autovacuum would visit
	// the table at a moment of its own (every autovacuum_naptime),
	// inside the measured window or not: noise on the infrastructure's
	// core, not the router's work.
	_, err = pool.Exec(ctx, "VACUUM (ANALYZE) dedup_ledger")
	return err
}

// prefillClaim is the claim a router made of the prefilled rows' records:
// a poll of the benchmark's default batch (-batch).
const prefillClaim = 1000

// inHeapOrder is intents, in the records' order, in the order a router's
// claims of claim intents each inserted them: by ledger key within each
// claim (sink/ledger claims in key order), the claims in the records'
// order. A started row's mark writes its next version in the same page
// when it has room (the ledger's fillfactor is 90) or in the next with
// room, in key order too, which keeps that order.
func inHeapOrder(intents []decide.Intent, claim int) []decide.Intent {
	out := slices.Clone(intents)
	for at := 0; at < len(out); at += claim {
		c := out[at:min(at+claim, len(out))]
		keys := make(map[string][16]byte, len(c))
		for _, in := range c {
			keys[in.WorkflowID] = schemas.LedgerKey(in.WorkflowID)
		}
		slices.SortStableFunc(c, func(a, b decide.Intent) int {
			ka, kb := keys[a.WorkflowID], keys[b.WorkflowID]
			return bytes.Compare(ka[:], kb[:])
		})
	}
	return out
}

// synthetic makes n intents with fresh IDs (the shape of real ones).
func synthetic(prefix string, n int) []decide.Intent {
	out := make([]decide.Intent, n)
	for i := range out {
		id := fmt.Sprintf("%s-evt-%09d", prefix, i)
		out[i] = decide.Intent{WorkflowID: decide.WorkflowID("order-confirmation", id), ActivityID: "order-confirmation",
			EventID: id, IDRule: "field", Topic: "events", Partition: int32(i % 8), Offset: int64(i)}
		out[i].PayloadHash[0] = byte(i)
	}
	rand.New(rand.NewPCG(uint64(n), 1)).Shuffle(n, func(a, b int) { out[a], out[b] = out[b], out[a] })
	return out
}

func newRegistry() *prometheus.Registry { return prometheus.NewRegistry() }

// metricSum sums, over the named metric's label sets in reg, what of
// each sample counts: its counter value, its histogram's sum.
func metricSum(reg *prometheus.Registry, name string, of func(*dto.Metric) float64) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += of(m)
			}
		}
	}
	return sum
}

func counterValue(m *dto.Metric) float64 { return m.GetCounter().GetValue() }
func histogramSum(m *dto.Metric) float64 { return m.GetHistogram().GetSampleSum() }

func decoderAndRoutes() (*eventid.Decoder, decide.Routes) {
	dec, _ := eventid.NewDecoder(eventid.DefaultConfig())
	rs := routes()
	_ = rs.Validate()
	return dec, rs
}
