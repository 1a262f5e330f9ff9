package peer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc/codes"

	"github.com/dedupio/dedup/integration/devstack"
	"github.com/dedupio/dedup/internal/demo/workload"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/sink/ledger"
	"github.com/dedupio/dedup/sink/starter"
)

// Faults makes Temporal refuse starts for a while: *devstack.TemporalFaults
// in the process that runs the server, or a client of it elsewhere.
type Faults interface {
	// Refuse fails every start in namespace with code for d.
	Refuse(namespace string, code codes.Code, d time.Duration)
	// Clear removes every fault.
	Clear()
}

// GuaranteeParams say what Guarantees runs on.
type GuaranteeParams struct {
	// Stack, if set, is where the dependencies run; it fills Brokers,
	// DatabaseURL and CreateDatabase where they are unset.
	Stack *devstack.Stack
	// Brokers are Kafka's seed brokers.
	Brokers []string
	// DatabaseURL is PostgreSQL's (dedup's ledger); with CreateDatabase
	// set, the dedup side creates its own database beside it instead.
	DatabaseURL    string
	CreateDatabase func(ctx context.Context, name string) (string, error)
	// Temporal is a client bound to Namespace.
	Temporal  client.Client
	Namespace string
	// Records per backlog, over Partitions partitions; DupRatio of them
	// re-send an earlier event, CrossPartition of those on another
	// partition than the original's.
	Records, Partitions      int
	DupRatio, CrossPartition float64
	// Window is the Watermill deduplicator's (longer than the run: only
	// a restart or another replica forgets).
	Window time.Duration
	// Routes; nil: order.created to one activity, user.signed_up to two
	// (the benchmark's).
	Routes decide.Routes
	// Dedup also runs every scenario with dedup's router (processor,
	// sink/ledger on a fresh database, sink/starter).
	Dedup bool
	// Timeout bounds each pass (default 2 minutes).
	Timeout time.Duration
	// StartTimeout bounds one start call of either job (default 10s).
	StartTimeout time.Duration
	// Faults, when set (a non-nil value), act on the Temporal server the
	// client reaches (devstack.Config.TemporalFaults): the outage scenario
	// runs, in which Temporal refuses every start for StartTimeout + 2s.
	Faults Faults
	Log    *slog.Logger
}

// Pass is one consumption of a backlog, by one job.
type Pass struct {
	Records        int     `json:"records"`
	TemporalCalls  int64   `json:"temporal_calls"`
	NewStarts      int64   `json:"new_starts"`
	AlreadyStarted int64   `json:"already_started"`
	Errors         int64   `json:"errors"`
	Seconds        float64 `json:"seconds"`
	// Handled is per replica (Watermill: messages acked, including
	// those the deduplicator dropped; dedup: not counted).
	Handled []int64 `json:"handled_per_replica,omitempty"`
	// Deduplicated is the messages Watermill's deduplicator dropped;
	// Lost those it dropped after the handler had failed for them
	// (Result.Lost).
	Deduplicated int64 `json:"deduplicated,omitempty"`
	Lost         int64 `json:"lost_to_deduplicator,omitempty"`
}

// Side is what one job did in each scenario.
type Side struct {
	Job string `json:"job"`
	// First consumes the backlog once, one replica.
	First Pass `json:"first"`
	// Restart consumes it again with a new process (a new in-memory
	// deduplicator) after the group's offsets were deleted, so it starts
	// from the oldest offset: a restart with an offset reset.
	Restart Pass `json:"replay_after_restart"`
	// AfterRetention consumes it again after every execution First
	// started was deleted from Temporal (RetentionEmulation).
	AfterRetention Pass `json:"replay_after_temporal_retention"`
	// ExecutionsPerWorkflow is the executions each workflow ID had over
	// First and AfterRetention: 1 is exactly-once, 2 a second execution.
	ExecutionsPerWorkflow float64 `json:"executions_per_workflow_id"`
	// TwoReplicas consumes another backlog, all its duplicates on another
	// partition than their original, with two replicas in one group.
	TwoReplicas Pass `json:"two_replicas"`
	// Outage consumes a third backlog while Temporal refuses every start
	// (Unavailable) for StartTimeout + 2s, from before its first record
	// is produced; OutageMissing is how many of its workflow IDs have no
	// execution afterwards (events lost).
	Outage        *Pass `json:"temporal_outage,omitempty"`
	OutageMissing int   `json:"temporal_outage_missing_workflows"`
}

// GuaranteesResult is both jobs' sides.
type GuaranteesResult struct {
	// Workflows is the distinct workflow IDs of the backlog (what
	// exactly-once starts), TwoReplicaWorkflows the second backlog's.
	Workflows           int    `json:"workflows"`
	TwoReplicaWorkflows int    `json:"two_replica_workflows"`
	OutageWorkflows     int    `json:"outage_workflows,omitempty"`
	Watermill           Side   `json:"watermill"`
	Dedup               *Side  `json:"dedup,omitempty"`
	RetentionEmulation  string `json:"retention_emulation"`
}

// RetentionEmulation says how Guarantees emulates the namespace retention
// passing.
const RetentionEmulation = "every execution the first pass started is deleted with " +
	"workflowservice DeleteWorkflowExecution (a running one is terminated first), then " +
	"DescribeWorkflowExecution is polled until each answers NotFound: the state Temporal is in " +
	"once the namespace retention has removed closed executions; the ledger keeps its rows " +
	"(postgres.retention is longer than Temporal's)"

// Guarantees runs the scenarios against the stack for the Watermill job
// and, with p.Dedup, for dedup's router: each job on its own topics, group
// and workflow IDs.
func Guarantees(ctx context.Context, p GuaranteeParams) (GuaranteesResult, error) {
	res := GuaranteesResult{RetentionEmulation: RetentionEmulation}
	if p.Routes == nil {
		p.Routes = DefaultRoutes()
	}
	if err := p.Routes.Validate(); err != nil {
		return res, err
	}
	if p.Timeout <= 0 {
		p.Timeout = 2 * time.Minute
	}
	if p.StartTimeout <= 0 {
		p.StartTimeout = 10 * time.Second
	}
	if p.Log == nil {
		p.Log = slog.New(slog.DiscardHandler)
	}
	if st := p.Stack; st != nil {
		if len(p.Brokers) == 0 {
			p.Brokers = st.Brokers()
		}
		if p.DatabaseURL == "" {
			p.DatabaseURL = st.DatabaseURL
		}
		if p.CreateDatabase == nil && st.Postgres != nil {
			p.CreateDatabase = st.Postgres.CreateDatabase
		}
	}
	if len(p.Brokers) == 0 {
		return res, errors.New("peer: Guarantees: no Brokers (and no Stack)")
	}
	kcl, err := kgo.NewClient(kgo.SeedBrokers(p.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return res, err
	}
	defer kcl.Close()
	g := &guarantees{p: p, kcl: kcl, adm: kadm.NewClient(kcl), stamp: time.Now().UnixNano()}
	jobs := []job{&watermillJob{g: g}}
	if p.Dedup {
		jobs = append(jobs, &dedupJob{g: g})
	}
	for _, j := range jobs {
		side, w, err := g.side(ctx, j)
		res.Workflows, res.TwoReplicaWorkflows, res.OutageWorkflows = w[0], w[1], w[2]
		if j.name() == "watermill" {
			res.Watermill = side
		} else {
			res.Dedup = &side
		}
		if err != nil {
			return res, fmt.Errorf("%s: %w", j.name(), err)
		}
	}
	return res, nil
}

// DefaultRoutes are the benchmark's routes: order.created to one
// activity, user.signed_up to two.
func DefaultRoutes() decide.Routes {
	return decide.Routes{
		{ID: "order-confirmation", Match: decide.Match{Type: workload.TypeOrder}, WorkflowType: "RunActivityWorkflow", TaskQueue: "bench"},
		{ID: "welcome-email", Match: decide.Match{Type: workload.TypeSignup}, WorkflowType: "RunActivityWorkflow", TaskQueue: "bench"},
		{ID: "crm-sync", Match: decide.Match{Type: workload.TypeSignup}, WorkflowType: "RunActivityWorkflow", TaskQueue: "bench"},
	}
}

type guarantees struct {
	p     GuaranteeParams
	kcl   *kgo.Client
	adm   *kadm.Client
	stamp int64
	seq   atomic.Int64
}

// job is one of the two implementations: pass consumes topic with
// replicas replicas in group until every record is committed.
type job interface {
	name() string
	pass(ctx context.Context, topic, group string, replicas, records int) (Pass, error)
	close()
}

func (g *guarantees) name(kind string) string {
	return fmt.Sprintf("peer-%s-%d-%d", kind, g.stamp, g.seq.Add(1))
}

func (g *guarantees) side(ctx context.Context, j job) (Side, [3]int, error) {
	var n [3]int
	side := Side{Job: j.name()}
	defer j.close()
	topic, group := g.name(j.name()), g.name(j.name()+"-g")
	if err := g.createTopic(ctx, topic); err != nil {
		return side, n, err
	}
	w := workload.Generate(workload.Spec{Topic: topic, Partitions: g.p.Partitions, Records: g.p.Records, DupRatio: g.p.DupRatio,
		CrossPartition: g.p.CrossPartition, Seed: 21, IDPrefix: topic + "-"})
	ids := g.workflowIDs(w.Records)
	n[0] = len(ids)
	if err := g.kcl.ProduceSync(ctx, w.Records...).FirstErr(); err != nil {
		return side, n, err
	}
	var err error
	if side.First, err = j.pass(ctx, topic, group, 1, len(w.Records)); err != nil {
		return side, n, fmt.Errorf("first pass: %w", err)
	}
	if err := g.resetGroup(ctx, group); err != nil {
		return side, n, err
	}
	if side.Restart, err = j.pass(ctx, topic, group, 1, len(w.Records)); err != nil {
		return side, n, fmt.Errorf("replay after restart: %w", err)
	}
	if err := g.deleteExecutions(ctx, ids); err != nil {
		return side, n, err
	}
	if err := g.resetGroup(ctx, group); err != nil {
		return side, n, err
	}
	if side.AfterRetention, err = j.pass(ctx, topic, group, 1, len(w.Records)); err != nil {
		return side, n, fmt.Errorf("replay after retention: %w", err)
	}
	if len(ids) > 0 {
		side.ExecutionsPerWorkflow = float64(side.First.NewStarts+side.AfterRetention.NewStarts) / float64(len(ids))
	}
	// Two replicas, on a backlog whose duplicates are all on another
	// partition than their original.
	topic2, group2 := g.name(j.name()), g.name(j.name()+"-g")
	if err := g.createTopic(ctx, topic2); err != nil {
		return side, n, err
	}
	w2 := workload.Generate(workload.Spec{Topic: topic2, Partitions: g.p.Partitions, Records: g.p.Records, DupRatio: max(g.p.DupRatio, 0.3),
		CrossPartition: 1, Seed: 22, IDPrefix: topic2 + "-"})
	n[1] = len(g.workflowIDs(w2.Records))
	j2 := &producing{job: j, g: g, recs: w2.Records}
	if side.TwoReplicas, err = j2.pass(ctx, topic2, group2, 2, len(w2.Records)); err != nil || g.p.Faults == nil {
		return side, n, err
	}
	// A Temporal outage longer than a start's timeout.
	topic3, group3 := g.name(j.name()), g.name(j.name()+"-g")
	if err := g.createTopic(ctx, topic3); err != nil {
		return side, n, err
	}
	w3 := workload.Generate(workload.Spec{Topic: topic3, Partitions: g.p.Partitions, Records: g.p.Records, DupRatio: g.p.DupRatio,
		CrossPartition: g.p.CrossPartition, Seed: 23, IDPrefix: topic3 + "-"})
	ids3 := g.workflowIDs(w3.Records)
	n[2] = len(ids3)
	j3 := &producing{job: j, g: g, recs: w3.Records, before: func() {
		g.p.Faults.Refuse(g.p.Namespace, codes.Unavailable, g.p.StartTimeout+2*time.Second)
	}}
	outage, err := j3.pass(ctx, topic3, group3, 1, len(w3.Records))
	g.p.Faults.Clear()
	side.Outage = &outage
	if err != nil {
		return side, n, err
	}
	side.OutageMissing, err = g.missing(ctx, ids3)
	return side, n, err
}

// producing produces its records once every replica of the pass has
// joined the group, so that no replica consumes alone meanwhile.
type producing struct {
	job
	g    *guarantees
	recs []*kgo.Record
	// before, if set, runs just before the records are produced.
	before func()
}

func (g *guarantees) createTopic(ctx context.Context, topic string) error {
	resp, err := g.adm.CreateTopics(ctx, int32(g.p.Partitions), 1, nil, topic, topic+".dlq")
	if err != nil {
		return err
	}
	return resp.Error()
}

// resetGroup deletes the group (its committed offsets): the next pass
// starts at the oldest offset, as both jobs are configured to.
func (g *guarantees) resetGroup(ctx context.Context, group string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := g.adm.DeleteGroup(ctx, group)
		if err == nil && resp.Err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("deleting group %s: %w", group, errors.Join(err, resp.Err))
		}
		time.Sleep(200 * time.Millisecond) // members may still be leaving
	}
}

// waitConsumed waits until the group's committed offsets reach the ends
// of topic's partitions.
func (g *guarantees) waitConsumed(ctx context.Context, group, topic string) error {
	ends, err := g.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		committed, err := g.adm.FetchOffsets(ctx, group)
		if err == nil {
			done := true
			ends.Each(func(o kadm.ListedOffset) {
				c, ok := committed.Lookup(o.Topic, o.Partition)
				if o.Offset > 0 && (!ok || c.At < o.Offset) {
					done = false
				}
			})
			if done {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("group %s did not consume %s: %w", group, topic, ctx.Err())
}

func (g *guarantees) waitMembers(ctx context.Context, group string, n int) error {
	return WaitGroupMembers(ctx, g.adm, group, n)
}

// WaitGroupMembers waits until the consumer group is stable with n
// members (Watermill's replicas, or dedup's routers).
func WaitGroupMembers(ctx context.Context, adm *kadm.Client, group string, n int) error {
	for ctx.Err() == nil {
		gs, err := adm.DescribeGroups(ctx, group)
		if err == nil {
			if d, ok := gs[group]; ok && d.State == "Stable" && len(d.Members) == n {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("group %s did not get %d members: %w", group, n, ctx.Err())
}

// workflowIDs are the distinct workflow IDs the routes make of recs.
func (g *guarantees) workflowIDs(recs []*kgo.Record) []string {
	dec, _ := eventid.NewDecoder(eventid.DefaultConfig())
	seen := map[string]bool{}
	var out []string
	for _, kr := range recs {
		ev, err := dec.Decode(eventid.FromKafka(kr))
		if err != nil {
			continue
		}
		for _, rt := range g.p.Routes.Match(&ev) {
			if id := decide.WorkflowID(rt.ID, ev.ID); !seen[id] {
				seen[id] = true
				out = append(out, id)
			}
		}
	}
	return out
}

// deleteExecutions deletes every execution of ids and waits until
// Temporal no longer knows them (RetentionEmulation).
func (g *guarantees) deleteExecutions(ctx context.Context, ids []string) error {
	ws := g.p.Temporal.WorkflowService()
	for _, id := range ids {
		_, err := ws.DeleteWorkflowExecution(ctx, &workflowservice.DeleteWorkflowExecutionRequest{
			Namespace: g.p.Namespace, WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: id}})
		var nf *serviceerror.NotFound
		if err != nil && !errors.As(err, &nf) {
			return fmt.Errorf("deleting workflow %s: %w", id, err)
		}
	}
	deadline := time.Now().Add(g.p.Timeout)
	for _, id := range ids {
		for {
			_, err := ws.DescribeWorkflowExecution(ctx, &workflowservice.DescribeWorkflowExecutionRequest{
				Namespace: g.p.Namespace, Execution: &commonpb.WorkflowExecution{WorkflowId: id}})
			var nf *serviceerror.NotFound
			if errors.As(err, &nf) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("workflow %s still there after its deletion (last: %v)", id, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// missing counts the workflow IDs of ids without an execution.
func (g *guarantees) missing(ctx context.Context, ids []string) (int, error) {
	n := 0
	for _, id := range ids {
		_, err := g.p.Temporal.WorkflowService().DescribeWorkflowExecution(ctx, &workflowservice.DescribeWorkflowExecutionRequest{
			Namespace: g.p.Namespace, Execution: &commonpb.WorkflowExecution{WorkflowId: id}})
		var nf *serviceerror.NotFound
		switch {
		case errors.As(err, &nf):
			n++
		case err != nil:
			return n, fmt.Errorf("describing workflow %s: %w", id, err)
		}
	}
	return n, nil
}

// watermillJob runs the Watermill peer.
type watermillJob struct{ g *guarantees }

func (w *watermillJob) name() string { return "watermill" }
func (w *watermillJob) close()       {}

func (w *watermillJob) config(topic, group string) Config {
	p := w.g.p
	return Config{Brokers: p.Brokers, Topic: topic, Group: group, Temporal: p.Temporal, Namespace: p.Namespace,
		Routes: p.Routes, Window: p.Window, StartTimeout: p.StartTimeout, Log: p.Log}
}

func (w *watermillJob) pass(ctx context.Context, topic, group string, replicas, records int) (Pass, error) {
	return w.run(ctx, topic, group, replicas, records, nil)
}

func (w *watermillJob) run(ctx context.Context, topic, group string, replicas, records int, joined func(context.Context) error) (Pass, error) {
	ctx, cancel := context.WithTimeout(ctx, w.g.p.Timeout)
	defer cancel()
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	began := time.Now()
	type out struct {
		each  []Result
		total Result
		err   error
	}
	done := make(chan out, 1)
	go func() {
		each, total, err := RunGroup(rctx, w.config(topic, group), replicas, 0)
		done <- out{each, total, err}
	}()
	var err error
	if joined != nil {
		if err = w.g.waitMembers(ctx, group, replicas); err == nil {
			err = joined(ctx)
		}
	}
	if err == nil {
		err = w.g.waitConsumed(ctx, group, topic)
	}
	stop()
	o := <-done
	pass := Pass{Records: records, TemporalCalls: o.total.TemporalCalls, NewStarts: o.total.NewStarts,
		AlreadyStarted: o.total.AlreadyStarted, Errors: o.total.Errors, Seconds: time.Since(began).Seconds(), Deduplicated: o.total.Deduplicated, Lost: o.total.Lost}
	for _, r := range o.each {
		pass.Handled = append(pass.Handled, r.Handled)
	}
	return pass, errors.Join(err, o.err)
}

func (p *producing) pass(ctx context.Context, topic, group string, replicas, records int) (Pass, error) {
	produce := func(ctx context.Context) error {
		if p.before != nil {
			p.before()
		}
		return p.g.kcl.ProduceSync(ctx, p.recs...).FirstErr()
	}
	switch j := p.job.(type) {
	case *watermillJob:
		return j.run(ctx, topic, group, replicas, records, produce)
	case *dedupJob:
		return j.run(ctx, topic, group, replicas, records, produce)
	}
	return Pass{}, fmt.Errorf("unknown job %T", p.job)
}

// dedupJob runs dedup's router on one ledger database for all its passes.
type dedupJob struct {
	g    *guarantees
	pool *pgxpool.Pool
}

func (d *dedupJob) name() string { return "dedup" }

func (d *dedupJob) close() {
	if d.pool != nil {
		d.pool.Close()
	}
}

func (d *dedupJob) ledger(ctx context.Context) (*ledger.Postgres, error) {
	if d.pool == nil {
		p := d.g.p
		url := p.DatabaseURL
		if p.CreateDatabase != nil {
			var err error
			name := strings.ReplaceAll(d.g.name("dedup_ledger"), "-", "_")
			if url, err = p.CreateDatabase(ctx, name); err != nil {
				return nil, err
			}
		}
		if err := ledger.Migrate(ctx, url); err != nil {
			return nil, err
		}
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			return nil, err
		}
		d.pool = pool
	}
	return ledger.NewFromPool(d.pool).RememberStarted(ledger.DefaultConfig().StartedCache), nil
}

func (d *dedupJob) pass(ctx context.Context, topic, group string, replicas, records int) (Pass, error) {
	return d.run(ctx, topic, group, replicas, records, nil)
}

func (d *dedupJob) run(ctx context.Context, topic, group string, replicas, records int, joined func(context.Context) error) (Pass, error) {
	ctx, cancel := context.WithTimeout(ctx, d.g.p.Timeout)
	defer cancel()
	led, err := d.ledger(ctx)
	if err != nil {
		return Pass{}, err
	}
	p := d.g.p
	cfg := processor.DefaultConfig()
	cfg.Brokers, cfg.Group, cfg.Topics = p.Brokers, group, []string{topic}
	cfg.ResetOffset = "earliest"
	cfg.MaxPollRecords = 500
	cfg.CommitInterval = 100 * time.Millisecond
	cfg.SessionTimeout = 10 * time.Second
	cfg.Routes = p.Routes
	cfg.Retry.Max = time.Second
	st := &countingStarter{inner: starter.New(p.Temporal, starter.Config{Namespace: p.Namespace, StartTimeout: p.StartTimeout})}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make([]error, replicas)
	for i := range replicas {
		r, err := processor.New(cfg, processor.Options{Ledger: led, DeadLetterLog: led, Starter: st, Registerer: prometheus.NewRegistry(), Log: p.Log})
		if err != nil {
			stop()
			wg.Wait()
			return Pass{}, err
		}
		wg.Go(func() { errs[i] = r.Run(rctx) })
	}
	began := time.Now()
	if joined != nil {
		if err = d.g.waitMembers(ctx, group, replicas); err == nil {
			err = joined(ctx)
		}
	}
	if err == nil {
		err = d.g.waitConsumed(ctx, group, topic)
	}
	stop()
	wg.Wait()
	return Pass{Records: records, TemporalCalls: st.calls.Load(), NewStarts: st.started.Load(), AlreadyStarted: st.already.Load(),
		Errors: st.errors.Load(), Seconds: time.Since(began).Seconds()}, errors.Join(append(errs, err)...)
}

// countingStarter counts dedup's Temporal calls and their outcomes.
type countingStarter struct {
	inner                           processor.Starter
	calls, started, already, errors atomic.Int64
}

func (c *countingStarter) Start(ctx context.Context, req decide.StartRequest) (processor.StartResult, error) {
	c.calls.Add(1)
	res, err := c.inner.Start(ctx, req)
	switch {
	case err != nil:
		c.errors.Add(1)
	case res.AlreadyStarted:
		c.already.Add(1)
	default:
		c.started.Add(1)
	}
	return res, err
}

func (c *countingStarter) LastRun(ctx context.Context, namespace, workflowID string) (decide.Run, error) {
	return c.inner.LastRun(ctx, namespace, workflowID)
}
