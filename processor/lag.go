package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"
	"github.com/twmb/franz-go/pkg/sasl"
)

// lagWatch watches the partitions this replica owns from outside the
// commit path: it exports how far the group's offset of each is behind the
// log end (dedup_consumer_lag; summed over replicas, the group's lag), and
// notices records that retention deleted before the group read them
// (noteGap, by the log start the gap's fetch answered with:
// dedup_records_lost_total and an error log, since the reset policy went
// on without them and operators must know what was skipped). A gap is
// counted when a poll shows it, once per router (a partition assigned
// back to it shows it again: counted), so never missed; a replica stopped
// before the group's offset passed it leaves it to the next owner, which
// reads from the same offset and counts it again: at least once over the
// replicas. (Counting it only once passed, tried in session 51, missed it
// when the commit past it landed unseen or the next owner could not read
// the group's offset: adversary 51d.)
//
// Its rule: it knows a partition from its assignment to its forgetting,
// as the committer tells it (assign, polled, committed, forget, all under
// committer.mu), and exports a lag series only for a partition it knows:
// the series is set and deleted under its lock, so a measurement never
// brings back the series of a partition that is gone. It decides nothing:
// what it sees is counted and logged.
//
// Its lock is innermost, like inFlight's (committer.go has the order): it
// takes no other lock, and calls Kafka only without it.
type lagWatch struct {
	topics   []string
	interval time.Duration // LagInterval
	latest   bool          // kafka.reset_offset latest: a reset skips what is still in the log too
	log      *slog.Logger
	lag      *prometheus.GaugeVec   // topic, partition
	lost     *prometheus.CounterVec // topic
	adm      *kadm.Client           // the committer's, set by New
	// dial makes the client of run's requests (set by New: lagClient; nil:
	// adm's), own the one run uses while it runs.
	dial func() (*kgo.Client, error)
	own  atomic.Pointer[kadm.Client]

	mu      sync.Mutex
	parts   map[topicPartition]*watched
	counted map[topicPartition][]gap // the last maxCounted gaps counted, by partition, whatever its assignment
}

// maxCounted is how many counted gaps of a partition the lag watch keeps,
// so that a partition assigned back does not count them again.
const maxCounted = 8

// watched is the lag watch's state of one assignment of a partition.
// Guarded by lagWatch.mu.
type watched struct {
	tp  topicPartition
	ctx context.Context // the assignment's: a gap check ends with it
	// at is where the group's offset is, as far as this replica knows: its
	// last commit, else the group's offset at assignment; -1 unknown.
	at int64
	// expect is the next offset we should see: the committed offset at
	// assignment, then one past the last polled record; -1 unknown. A jump
	// past it is a gap (compaction, transaction markers, or records that
	// retention deleted before we read them: checkGap tells them apart).
	expect   int64
	checking bool       // a checkGap runs (one at a time per partition)
	queued   [][2]int64 // gaps (from, to) waiting for it, at most maxQueuedChecks
}

// maxQueuedChecks bounds the gaps of a partition waiting for a check
// (brokers whose fetches do not say where the log starts).
const maxQueuedChecks = 16

// gap is a range of offsets [from, to) that a partition's records skipped
// and the records lost in it: deleted by retention before this group read
// them (from up to the log start), and under reset_offset latest those
// the reset skipped after them too (up to to).
type gap struct {
	tp              topicPartition
	from, to, start int64
	lost            int64
}

func newLagWatch(cfg Config, log *slog.Logger, m *metrics) *lagWatch {
	return &lagWatch{topics: cfg.Topics, interval: cfg.LagInterval, latest: cfg.ResetOffset == "latest", log: log, lag: m.lag, lost: m.lost,
		parts: map[topicPartition]*watched{}, counted: map[topicPartition][]gap{}}
}

// assign starts watching an assignment of tp, whose group offset was
// committed at assignment (-1 none).
func (l *lagWatch) assign(tp topicPartition, ctx context.Context, committed int64) *watched {
	w := &watched{tp: tp, ctx: ctx, at: committed, expect: committed}
	l.mu.Lock()
	l.parts[tp] = w
	l.mu.Unlock()
	return w
}

// polled notes a polled record of w's partition that came without its
// fetch: past the offset expected, it asks Kafka where the log starts
// (checkGap; one check at a time per partition).
func (l *lagWatch) polled(w *watched, offset int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.polledLocked(w, offset, nil)
}

// polledLocked is polled with l.mu held; fetches is the poll that brought
// the record (nil: unknown). A record past the offset expected is a gap:
// the fetch that brought it says where the partition's log started when
// the broker answered (Fetch v5+, KIP-107), which tells retention from
// compaction and transaction markers with no request of its own; only a
// fetch that did not say sends checkGap's ListOffsets. That request would
// go on the connection that carries the group's commits (franz-go's
// cxnNormal), answered in order: a slow answer would hold the final
// commit behind it (TestAStopWhileAGapIsSeenStillCommitsWhatStarted).
func (l *lagWatch) polledLocked(w *watched, offset int64, fetches kgo.Fetches) {
	if w.expect >= 0 && offset > w.expect {
		if start := logStartOf(fetches, w.tp, offset); start >= 0 {
			l.noteGap(w, w.expect, offset, start)
		} else if !w.checking {
			w.checking = true
			go l.checkGap(w, w.expect, offset)
		} else if len(w.queued) < maxQueuedChecks {
			w.queued = append(w.queued, [2]int64{w.expect, offset})
		}
	}
	w.expect = offset + 1
}

// polledAll notes a poll's tracked records (nil: not tracked) as polled
// does, in poll order, under one lock; fetches is the poll.
func (l *lagWatch) polledAll(recs []*record, fetches kgo.Fetches) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, rec := range recs {
		if rec != nil {
			l.polledLocked(rec.part.watch, rec.offset, fetches)
		}
	}
}

// logStartOf is the log start offset of tp that the broker answered with
// in the fetch of fetches that brought tp's record at offset, or -1 when
// none did (no such fetch, or a broker that does not say).
func logStartOf(fetches kgo.Fetches, tp topicPartition, offset int64) int64 {
	for _, f := range fetches {
		for _, t := range f.Topics {
			if t.Topic != tp.topic {
				continue
			}
			for _, p := range t.Partitions {
				if n := len(p.Records); p.Partition == tp.partition && n > 0 && p.Records[0].Offset <= offset && offset <= p.Records[n-1].Offset {
					return p.LogStartOffset
				}
			}
		}
	}
	return -1
}

// committed notes that this replica committed w's partition at offset.
func (l *lagWatch) committed(w *watched, offset int64) {
	l.mu.Lock()
	w.at = offset
	l.mu.Unlock()
}

// forget stops watching tp and drops its lag series.
func (l *lagWatch) forget(tp topicPartition) {
	l.mu.Lock()
	delete(l.parts, tp)
	l.lag.DeleteLabelValues(tp.topic, strconv.Itoa(int(tp.partition)))
	l.mu.Unlock()
}

// noteGap notes a gap of w's partition from offset from up to to (the
// record after it), given where the partition's log started: if past
// from, records from `from` on were deleted by retention before this
// group read them, up to the log start (at most to), or under
// reset_offset latest up to to (the reset skipped the rest of the log
// too), and counted. A start at or before from is compaction or
// transaction markers, not retention: nothing lost. Called with l.mu held.
func (l *lagWatch) noteGap(w *watched, from, to, start int64) {
	if start <= from {
		return
	}
	g := gap{tp: w.tp, from: from, to: to, start: start, lost: min(start, to) - from}
	if l.latest {
		g.lost = to - from
	}
	seen := l.counted[w.tp]
	for i, c := range seen {
		if c.from != g.from {
			continue
		}
		// This router counted it under an earlier assignment: only what
		// retention deleted since (the gap grew while the partition was
		// away) is new.
		if g.to <= c.to || g.lost <= c.lost {
			// Nothing more lost since (or a fetch answered with an older
			// log start: a leader behind): a counter cannot go down.
			if g.to > c.to {
				seen[i].to = g.to
			}
			return
		}
		seen[i] = g
		g.from, g.lost = c.to, g.lost-c.lost
		l.count(g)
		return
	}
	if len(seen) == maxCounted {
		seen = seen[1:]
	}
	l.counted[w.tp] = append(seen, g)
	l.count(g)
}

// count counts and logs a gap: the reset policy went on without its
// records, and operators must know what was skipped.
func (l *lagWatch) count(g gap) {
	l.lost.WithLabelValues(g.tp.topic).Add(float64(g.lost))
	if g.from+g.lost > min(g.start, g.to) {
		l.log.Error("records skipped by kafka.reset_offset latest, the first ones deleted by retention, before they were consumed; they are lost",
			"topic", g.tp.topic, "partition", g.tp.partition, "from", g.from, "to", g.to-1, "deleted_to", min(g.start, g.to)-1, "records", g.lost)
		return
	}
	l.log.Error("records deleted by retention before they were consumed; they are lost",
		"topic", g.tp.topic, "partition", g.tp.partition, "from", g.from, "to", g.from+g.lost-1, "records", g.lost)
}

// checkGap asks Kafka where the partition's log starts now, for a gap
// whose fetch did not say, and notes it (noteGap) if w is still watched.
func (l *lagWatch) checkGap(w *watched, from, to int64) {
	defer func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(w.queued) > 0 && w.ctx.Err() == nil {
			next := w.queued[0]
			w.queued = w.queued[1:]
			go l.checkGap(w, next[0], next[1])
			return
		}
		w.checking, w.queued = false, nil
	}()
	ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
	defer cancel()
	adm := l.adm
	if own := l.own.Load(); own != nil {
		adm = own
	}
	starts, err := adm.ListStartOffsets(ctx, w.tp.topic)
	if err != nil {
		return
	}
	if o, ok := starts.Lookup(w.tp.topic, w.tp.partition); ok && o.Err == nil {
		l.mu.Lock()
		if l.parts[w.tp] == w {
			l.noteGap(w, from, to, o.Offset)
		}
		l.mu.Unlock()
	}
}

// run exports, for the partitions this replica owns, how far its committed
// offset is behind the log end (dedup_consumer_lag), every LagInterval
// until ctx ends. Summed over replicas it is the group's lag.
//
// Its requests (and a gap check's, while it runs) go on a Kafka client of
// their own (dial), closed when run returns: franz-go sends ListOffsets,
// OffsetFetch and OffsetCommit to a broker on one connection, answered in
// order, so a ListOffsets the broker is slow to answer would hold the
// router's commits behind it, the shutdown's final commit included
// (TestAStopWhileALagMeasureIsSlowStillCommitsWhatStarted). If that
// client cannot be made, the router's is used, and a warning says so.
func (l *lagWatch) run(ctx context.Context) {
	adm := l.adm
	if l.dial != nil {
		cl, err := l.dial()
		if err != nil {
			l.log.Warn("the lag watch's own Kafka client could not be made; measuring lag with the router's", "err", err)
		} else {
			adm = kadm.NewClient(cl)
			l.own.Store(adm)
			defer func() { l.own.Store(nil); cl.Close() }()
		}
	}
	every(ctx, l.interval, func() { l.measure(ctx, adm) })
}

func (l *lagWatch) measure(ctx context.Context, adm *kadm.Client) {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	ends, err := adm.ListEndOffsets(lctx, l.topics...)
	cancel()
	if err != nil {
		return
	}
	l.mu.Lock()
	ends.Each(func(o kadm.ListedOffset) {
		w := l.parts[topicPartition{o.Topic, o.Partition}]
		if w == nil || o.Err != nil {
			return
		}
		if w.at >= 0 {
			l.lag.WithLabelValues(o.Topic, strconv.Itoa(int(o.Partition))).Set(float64(max(o.Offset-w.at, 0)))
		}
	})
	l.mu.Unlock()
}

// lagClient makes the lag watch's client: cl's connection to Kafka (its
// seeds, its dial function (dedup's guarded dialer, the caller's, or the
// one franz-go made over cl's TLS config), SASL, client ID, timeouts,
// retries, versions and logger), read back from cl, and nothing else. Not the caller's
// KafkaOpts as such: they may hold hooks that must run once per router
// (kprom registers its metrics on a client's creation and panicked on a
// second: TestARouterWithKpromHooksInKafkaOptsKeepsRunningAndExportsKafkaMetrics).
// A setting it cannot read back is an error, never a default (a missing
// seed list would be localhost:9092).
func lagClient(cl *kgo.Client) (*kgo.Client, error) {
	seeds, ok := cl.OptValue(kgo.SeedBrokers).([]string)
	if !ok || len(seeds) == 0 {
		return nil, errors.New("lag client: the router's seed brokers could not be read back")
	}
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...)}
	// franz-go makes a client's dial function at its creation when none
	// was given (over DialTLSConfig and DialTimeout): it is the whole of
	// how cl dials.
	dial, ok := cl.OptValue(kgo.Dialer).(func(context.Context, string, string) (net.Conn, error))
	if !ok || dial == nil {
		return nil, errors.New("lag client: the router's dialer could not be read back")
	}
	opts = append(opts, kgo.Dialer(dial))
	switch v := cl.OptValue(kgo.SASL).(type) {
	case []sasl.Mechanism:
		if len(v) > 0 {
			opts = append(opts, kgo.SASL(v...))
		}
	default:
		return nil, fmt.Errorf("lag client: the router's SASL could not be read back (%T)", v)
	}
	if id := cl.OptValues(kgo.ClientID); len(id) == 2 && id[1] == true {
		if s, ok := id[0].(string); ok {
			opts = append(opts, kgo.ClientID(s))
		}
	}
	if sv := cl.OptValues(kgo.SoftwareNameAndVersion); len(sv) == 2 {
		name, okn := sv[0].(string)
		version, okv := sv[1].(string)
		if okn && okv {
			opts = append(opts, kgo.SoftwareNameAndVersion(name, version))
		}
	}
	if lg, ok := cl.OptValue(kgo.WithLogger).(kgo.Logger); ok && lg != nil {
		opts = append(opts, kgo.WithLogger(lg))
	}
	for _, d := range []struct {
		opt func(time.Duration) kgo.Opt
	}{{kgo.DialTimeout}, {kgo.RequestTimeoutOverhead}, {kgo.ConnIdleTimeout}, {kgo.MetadataMaxAge}, {kgo.MetadataMinAge}} {
		if v, ok := cl.OptValue(d.opt).(time.Duration); ok && v > 0 {
			opts = append(opts, d.opt(v))
		}
	}
	if v, ok := cl.OptValue(kgo.MaxVersions).(*kversion.Versions); ok && v != nil {
		opts = append(opts, kgo.MaxVersions(v))
	}
	if v, ok := cl.OptValue(kgo.MinVersions).(*kversion.Versions); ok && v != nil {
		opts = append(opts, kgo.MinVersions(v))
	}
	if v, ok := cl.OptValue(kgo.RetryBackoffFn).(func(int) time.Duration); ok && v != nil {
		opts = append(opts, kgo.RetryBackoffFn(v))
	}
	if v, ok := cl.OptValue(kgo.RequestRetries).(int64); ok {
		opts = append(opts, kgo.RequestRetries(int(v)))
	}
	if v, ok := cl.OptValue(kgo.RetryTimeoutFn).(func(int16) time.Duration); ok && v != nil {
		opts = append(opts, kgo.RetryTimeoutFn(v))
	}
	if v, ok := cl.OptValue(kgo.BrokerMaxWriteBytes).(int32); ok && v > 0 {
		opts = append(opts, kgo.BrokerMaxWriteBytes(v))
	}
	if v, ok := cl.OptValue(kgo.BrokerMaxReadBytes).(int32); ok && v > 0 {
		opts = append(opts, kgo.BrokerMaxReadBytes(v))
	}
	return kgo.NewClient(opts...)
}
