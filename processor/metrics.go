package processor

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupio/dedup/processor/decide"
)

// metrics are the router's Prometheus series. Labels are small fixed sets:
// never an event or workflow ID.
type metrics struct {
	records          prometheus.Counter
	intents          *prometheus.CounterVec // outcome: new, redrive, duplicate, conflict
	noRoute          prometheus.Counter
	tombstones       prometheus.Counter
	known            prometheus.Counter
	reruns           prometheus.Counter
	deadLetters      *prometheus.CounterVec // reason
	starts           *prometheus.CounterVec // result: started, already_started
	signals          *prometheus.CounterVec // result: started, signaled
	startErrors      *prometheus.CounterVec // kind: transient, permanent
	retries          *prometheus.CounterVec // op: Op
	claimBatch       prometheus.Histogram
	claimSeconds     prometheus.Histogram
	startSeconds     prometheus.Histogram
	commitSeconds    prometheus.Histogram
	commits          *prometheus.CounterVec // result: ok, error, behind
	committedOffset  *prometheus.GaugeVec   // topic, partition
	inFlight         prometheus.Gauge
	pausedPartitions prometheus.Gauge
	dependencyUp     *prometheus.GaugeVec   // dependency: postgres, temporal, kafka
	lost             *prometheus.CounterVec // topic
	partitionsGone   *prometheus.CounterVec // how: revoked, lost
	lag              *prometheus.GaugeVec   // topic, partition
}

func newMetrics(reg prometheus.Registerer, topics []string) (*metrics, error) {
	m := &metrics{
		records: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dedup_records_total", Help: "Kafka records polled."}),
		intents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dedup_intents_total", Help: "Workflow intents by ledger verdict: new, redrive (pending claim started again), duplicate, conflict."}, []string{"outcome"}),
		tombstones: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dedup_records_tombstone_total", Help: "Records with a null value and no CloudEvents headers (tombstones): skipped and committed, not dead-lettered."}),
		known: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dedup_records_known_total", Help: "Records a replay ended without deciding them again: the ledger held every one of their intents started, claimed by the record at its coordinates with its digest (their intents count as duplicates)."}),
		reruns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dedup_reruns_total", Help: "Redelivered events whose closed run the reuse policy let start again (one new run each)."}),
		noRoute: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dedup_records_no_route_total", Help: "Records whose event type no route matches."}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dedup_dead_letters_total", Help: "Records written to the dead-letter topic, by reason."}, []string{"reason"}),
		starts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dedup_workflow_starts_total", Help: "Workflow starts that succeeded: started, or already_started in Temporal."}, []string{"result"}),
		signals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dedup_signals_delivered_total", Help: "Signal routes' deliveries that Temporal accepted: started (the event started a new run of its entity workflow) or signaled (a run was open: it was signalled, or already had this delivery's request ID)."}, []string{"result"}),
		startErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dedup_workflow_start_errors_total", Help: "Failed start attempts: transient (retried) or permanent (dead-lettered)."}, []string{"kind"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dedup_retries_total", Help: "Retries after transient errors, by operation."}, []string{"op"}),
		claimBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "dedup_claim_batch_size", Help: "Intents per ledger claim.", Buckets: prometheus.ExponentialBuckets(1, 4, 8)}),
		claimSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "dedup_claim_duration_seconds", Help: "Ledger claim latency, retries included.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		startSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "dedup_workflow_start_duration_seconds", Help: "Temporal start call latency, per attempt.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "dedup_offset_commit_duration_seconds", Help: "Offset commit latency.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		commits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dedup_offset_commits_total", Help: "Offset commits per partition by result: ok, error, or behind (not sent: the group's committed offset is already past ours, another member owns the partition)."}, []string{"result"}),
		committedOffset: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "dedup_committed_offset", Help: "Last offset this replica committed, per partition it owns."}, []string{"topic", "partition"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dedup_in_flight_records", Help: "Polled records not yet finished."}),
		pausedPartitions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dedup_paused_partitions", Help: "Owned partitions whose fetching is paused because a dependency fails."}),
		dependencyUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "dedup_dependency_up", Help: "1 while the dependency answers, 0 while the router retries it."}, []string{"dependency"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dedup_records_lost_total", Help: "Records deleted by retention (or lost by the broker) before this group consumed them."}, []string{"topic"}),
	}
	m.partitionsGone = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "dedup_partitions_released_total", Help: "Partitions this replica gave up: revoked (a rebalance; finished work committed first), lost (the group fenced it, e.g. after a stall: nothing committed) or fenced (the ledger refused its writes: another member owns the partition; nothing committed)."}, []string{"how"})
	for _, h := range []string{"revoked", "lost", "fenced"} {
		m.partitionsGone.WithLabelValues(h)
	}
	m.lag = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "dedup_consumer_lag", Help: "Records between this replica's committed offset and the log end, per partition it owns."}, []string{"topic", "partition"})
	// Every label value that can appear is exported from the start, at 0,
	// so that rates and alerts see the series before the first event.
	for d := Dependency(0); d < numDeps; d++ {
		m.dependencyUp.WithLabelValues(d.String()).Set(1)
	}
	for _, r := range decide.Reasons {
		m.deadLetters.WithLabelValues(string(r))
	}
	for _, k := range []string{"transient", "permanent"} {
		m.startErrors.WithLabelValues(k)
	}
	for op := Op(0); op < numOps; op++ {
		m.retries.WithLabelValues(op.String())
	}
	for _, r := range []string{"ok", "error", "behind"} {
		m.commits.WithLabelValues(r)
	}
	for _, t := range topics {
		m.lost.WithLabelValues(t)
	}
	for _, o := range []string{"new", "redrive", "duplicate", "conflict"} {
		m.intents.WithLabelValues(o)
	}
	for _, r := range []string{"started", "already_started"} {
		m.starts.WithLabelValues(r)
	}
	for _, r := range []string{"started", "signaled"} {
		m.signals.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{m.records, m.intents, m.known, m.reruns, m.noRoute, m.tombstones, m.deadLetters, m.starts, m.signals, m.startErrors, m.retries,
		m.claimBatch, m.claimSeconds, m.startSeconds, m.commitSeconds, m.commits, m.committedOffset, m.inFlight,
		m.pausedPartitions, m.dependencyUp, m.lost, m.partitionsGone, m.lag} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering router metrics: %w", err)
		}
	}
	return m, nil
}
