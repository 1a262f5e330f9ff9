package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/integration/bench/peer"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
)

// The Watermill peer (integration/bench/peer) is measured like the router:
// in the stage process, on CPU 1, reaching Kafka, Temporal and PostgreSQL
// through the same proxies. Kafka needs no peer.Config.Dial: the broker
// advertises the proxy's address, so sarama stays behind it as franz-go
// does.

// peerWindow is Watermill's deduplicator window in the throughput stages:
// Watermill's default (one minute, longer than a backlog run).
const peerWindow = time.Minute

// WatermillBacklog is the Watermill peer over the router's backlog at the
// duplicate ratio (the same records: backlogWorkload).
func (e *Env) WatermillBacklog(ctx context.Context, dup float64) (RouterResult, error) {
	if dup >= 1 {
		return RouterResult{}, fmt.Errorf("stage %s: dup %.2f: an all-duplicate backlog is stage %s", StageWatermill, dup, StageWatermillReplay)
	}
	topic, recs, _, err := e.backlogWorkload(ctx, dup)
	if err != nil {
		return RouterResult{}, err
	}
	res, err := e.Watermill(ctx, topic, recs)
	res.DupRatio = dup
	return res, err
}

// WatermillReplay is the Watermill peer, a new process, over Records
// records of the replay's workload whose workflows Temporal has already
// started (started here first, outside the measured window): what a
// replay is to it, since its deduplicator remembers nothing across
// processes. Every workflow ID is a Temporal call, rejected as already
// started.
func (e *Env) WatermillReplay(ctx context.Context) (RouterResult, error) {
	topic, recs, _, err := e.replayWorkload(ctx, e.P.Records)
	if err != nil {
		return RouterResult{}, err
	}
	if err := e.startAll(ctx, recs); err != nil {
		return RouterResult{}, fmt.Errorf("starting the replay's workflows first: %w", err)
	}
	res, err := e.Watermill(ctx, topic, recs)
	res.DupRatio = 1
	return res, err
}

// startAll starts every workflow the routes make of recs, once, at the
// start concurrency.
func (e *Env) startAll(ctx context.Context, recs []*kgo.Record) error {
	reqs, err := startRequests(recs)
	if err != nil {
		return err
	}
	st := e.newStarter()
	_, err = e.measureStarts(ctx, reqs, func(ctx context.Context, req decide.StartRequest) error {
		_, err := st.Start(ctx, req)
		return err
	})
	return err
}

// startRequests are the router's start requests for the distinct workflow
// IDs the routes make of recs.
func startRequests(recs []*kgo.Record) ([]decide.StartRequest, error) {
	dec, rs := decoderAndRoutes()
	seen := map[string]bool{}
	var reqs []decide.StartRequest
	for _, kr := range recs {
		ev, err := dec.Decode(eventid.FromKafka(kr))
		if err != nil {
			return nil, err
		}
		for _, rt := range rs.Match(&ev) {
			if wid := decide.WorkflowID(rt.ID, ev.ID); !seen[wid] {
				seen[wid] = true
				reqs = append(reqs, decide.NewStartRequest(rt, &ev, wid))
			}
		}
	}
	return reqs, nil
}

// Watermill produces recs to topic and runs the Watermill peer (one
// replica, peer.Run) over them. Its measured window runs from its first
// message entering the handler chain (after the group join) to its last
// message handled; sarama's autocommit (every second) then commits the
// offsets, outside the window, and the stage waits for that before
// stopping it. TemporalPerUnique is Temporal calls per distinct workflow
// ID of the backlog; AlreadyStarted the calls Temporal rejected as such.
func (e *Env) Watermill(ctx context.Context, topic string, recs []*kgo.Record) (RouterResult, error) {
	var res RouterResult
	if err := e.produce(ctx, recs); err != nil {
		return res, err
	}
	reqs, err := startRequests(recs)
	if err != nil {
		return res, err
	}
	group := "g-" + topic
	want := int64(len(recs))
	var win window
	end := make(chan window, 1)
	cfg := peer.Config{Brokers: e.In.Brokers, Topic: topic, Group: group, Temporal: e.TC, Namespace: e.In.Namespace,
		Routes: routes(), Window: peerWindow, StartTimeout: 10 * time.Second, Log: e.Log,
		// Every message passes OnFirst's sync.Once before OnHandled: the
		// window's start is written before end is sent.
		OnFirst: func() { win = startWindow() },
		OnHandled: func(n int64) {
			if n == want {
				end <- window{wall: time.Now(), cpu: cpuClock(), infra: readCore(infraCore)}
			}
		},
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type out struct {
		r   peer.Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		r, err := peer.Run(rctx, cfg, 0)
		done <- out{r, err}
	}()
	var stop window
	select {
	case stop = <-end:
	case o := <-done:
		return res, fmt.Errorf("the watermill peer stopped after %d of %d records: %w", o.r.Handled, want, errors.Join(o.err, ctx.Err()))
	case <-time.After(30 * time.Minute):
		cancel()
		<-done
		return res, fmt.Errorf("the watermill peer did not handle %d records in 30 minutes", want)
	}
	if win.profiled {
		stageProfile.end()
	}
	elapsed := stop.wall.Sub(win.wall)
	res.CPUSeconds = (stop.cpu - win.cpu).Seconds()
	res.InfraBusy = win.infra.busySince(stop.infra)
	_, err = e.waitConsumed(ctx, group, topic, time.Minute)
	cancel()
	o := <-done
	if err = errors.Join(err, o.err); err != nil {
		return res, err
	}
	pr := o.r
	e.workflows.Add(pr.NewStarts)
	res.Records = rate(len(recs), elapsed)
	res.Workflows = rate(int(pr.NewStarts), elapsed)
	res.TemporalCalls, res.AlreadyStarted, res.StartErrors = pr.TemporalCalls, pr.AlreadyStarted, pr.Errors
	if len(reqs) > 0 {
		res.TemporalPerUnique = float64(pr.TemporalCalls) / float64(len(reqs))
	}
	return res, nil
}

// Guarantees runs peer.Guarantees against the infrastructure (through the
// proxies) with dedup's side: GuaranteeRecords records per backlog at 30%
// duplicates (10% of them on another partition), Watermill's window an
// hour (only a restart or another replica forgets), a start timeout of 2 s
// for both jobs, and the outage through the infra process's FaultsAPI.
func (e *Env) Guarantees(ctx context.Context) (peer.GuaranteesResult, error) {
	faults := &RemoteFaults{API: e.In.FaultsAPI}
	p := peer.GuaranteeParams{Brokers: e.In.Brokers, DatabaseURL: e.In.DatabaseURL, Temporal: e.TC, Namespace: e.In.Namespace,
		Records: e.P.GuaranteeRecords, Partitions: e.P.Partitions, DupRatio: GuaranteeDupRatio, CrossPartition: 0.1,
		Window: time.Hour, Routes: routes(), Dedup: true, StartTimeout: GuaranteeStartTimeout,
		// The outage's refused starts would flood the log; they are counted.
		Log: slog.New(slog.DiscardHandler)}
	if e.In.CreateDatabases {
		p.CreateDatabase = func(ctx context.Context, name string) (string, error) {
			return createDatabase(ctx, e.In.DatabaseURL, name)
		}
	}
	if e.In.FaultsAPI != "" {
		p.Faults = faults
	}
	res, err := peer.Guarantees(ctx, p)
	// What stays in Temporal's visibility (Settle): the first pass's
	// executions were deleted.
	for _, s := range []*peer.Side{&res.Watermill, res.Dedup} {
		if s != nil {
			e.workflows.Add(s.AfterRetention.NewStarts + s.TwoReplicas.NewStarts)
			if s.Outage != nil {
				e.workflows.Add(s.Outage.NewStarts)
			}
		}
	}
	return res, errors.Join(err, faults.Err())
}

// The guarantees stage's workload and timeout.
const (
	GuaranteeDupRatio     = 0.3
	GuaranteeStartTimeout = 2 * time.Second
)
