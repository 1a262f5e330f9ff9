// Package replay sends dead-lettered records back through the dedup gate.
//
// It reads dead-letter topics from the start up to their end offsets as of
// the call (so records dead-lettered again during the replay are not read
// again): under read_committed (kafka.isolation_level; the default here
// too) the committed dead letters, up to the last stable offset (Reader).
// It keeps those whose reason matches, and produces each back to its
// original topic with its original key, value and headers. The router then
// treats it like any record: workflows already started stay skipped by the
// ledger, the others start. The original coordinates travel in
// dedup-origin-* headers, so that the coordinates ID rule gives a replayed
// record its first ID, not a new one.
//
// Replaying is therefore safe to repeat, but a record whose cause is not
// fixed (a conflict, a poison payload) is dead-lettered again: filter by
// reason.
package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/processor/tenantsig"
	"github.com/dedupio/dedup/schemas"
)

// Options select what to replay.
type Options struct {
	Brokers []string
	// ClientOpts are the Kafka connection options every dedup client
	// shares (the isolation level, TLS, SASL: internal/app KafkaOpts); they
	// come after Brokers. Without an isolation level, the replay reads
	// committed records only.
	ClientOpts []kgo.Opt
	// DeadLetterTopics to read.
	DeadLetterTopics []string
	// Reasons to replay; empty means all.
	Reasons []string
	// DryRun counts what would be replayed and produces nothing.
	DryRun bool
	// Limit stops after this many replayed records; 0 means no limit.
	Limit int
	// Idle is how long the replay waits for a dead letter of a partition
	// it has not read to its end before it ends that partition, when Kafka
	// still answers (Reader.Idle; DefaultIdle when 0).
	Idle time.Duration
}

// Result counts what happened, by dead-letter reason.
type Result struct {
	Read     int
	Replayed map[string]int // reason -> records sent back (or that would be, in a dry run)
	Skipped  map[string]int // reason -> records the filter left
}

// Run replays.
func Run(ctx context.Context, o Options, log *slog.Logger) (Result, error) {
	res := Result{Replayed: map[string]int{}, Skipped: map[string]int{}}
	if len(o.DeadLetterTopics) == 0 {
		return res, errors.New("no dead-letter topics to read")
	}
	// Committed records only unless ClientOpts say otherwise
	// (kafka.isolation_level): an aborted dead letter was never written.
	opts := append([]kgo.Opt{kgo.SeedBrokers(o.Brokers...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil))}, o.ClientOpts...)
	spans, err := deadLetterSpans(ctx, opts, o.DeadLetterTopics)
	if err != nil {
		return res, err
	}
	rd, err := NewReader(opts, spans)
	if err != nil {
		return res, err
	}
	defer rd.Close()
	rd.Idle = o.Idle
	want := map[string]bool{}
	for _, r := range o.Reasons {
		want[r] = true
	}
	for !rd.Done() {
		recs, err := rd.Poll(ctx, 0)
		if err != nil {
			return res, err
		}
		var out []*kgo.Record
		for _, r := range recs {
			res.Read++
			reason := header(r, schemas.HeaderDLQReason)
			if (len(want) > 0 && !want[reason]) || (o.Limit > 0 && total(res.Replayed) >= o.Limit) {
				res.Skipped[reason]++
				continue
			}
			rec, err := original(r)
			if err != nil {
				log.Warn("not replayable", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
				res.Skipped[reason]++
				continue
			}
			res.Replayed[reason]++
			out = append(out, rec)
		}
		if len(out) > 0 && !o.DryRun {
			if err := rd.Client().ProduceSync(ctx, out...).FirstErr(); err != nil {
				return res, fmt.Errorf("producing replayed records: %w", err)
			}
		}
	}
	for _, s := range rd.Stalls {
		log.Warn("dead-letter partition ended before its end offset", "stall", s.String())
	}
	return res, nil
}

// deadLetterSpans are the dead-letter topics' partitions from their log
// start to where a consumer of opts' isolation level can read them now
// (Ends): dead letters written during the replay are not read.
func deadLetterSpans(ctx context.Context, opts []kgo.Opt, topics []string) (map[string]map[int32]Span, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("creating kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("listing dead-letter start offsets: %w", err)
	}
	ends, err := Ends(ctx, adm, Committed(cl), topics...)
	if err != nil {
		return nil, fmt.Errorf("listing dead-letter end offsets: %w", err)
	}
	spans := map[string]map[int32]Span{}
	var first error
	ends.Each(func(e kadm.ListedOffset) {
		s, ok := starts.Lookup(e.Topic, e.Partition)
		switch {
		case e.Err != nil:
			first = cmp.Or(first, fmt.Errorf("end offset of %s/%d: %w", e.Topic, e.Partition, e.Err))
		case !ok || s.Err != nil:
			first = cmp.Or(first, fmt.Errorf("start offset of %s/%d: missing", e.Topic, e.Partition))
		case s.Offset < e.Offset:
			if spans[e.Topic] == nil {
				spans[e.Topic] = map[int32]Span{}
			}
			spans[e.Topic][e.Partition] = Span{From: s.Offset, Until: e.Offset}
		}
	})
	return spans, first
}

// original rebuilds the record the router dead-lettered.
func original(r *kgo.Record) (*kgo.Record, error) {
	topic := header(r, schemas.HeaderDLQTopic)
	if topic == "" {
		return nil, errors.New("no dedup-topic header: not written by dedup")
	}
	rec := &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value}
	for _, h := range r.Headers {
		switch h.Key {
		case schemas.HeaderDLQTopic:
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: schemas.HeaderOriginTopic, Value: h.Value})
		case schemas.HeaderDLQPartition:
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: schemas.HeaderOriginPartition, Value: h.Value})
		case schemas.HeaderDLQOffset:
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: schemas.HeaderOriginOffset, Value: h.Value})
		case eventid.TenantHeader, tenantsig.Header:
			// The event's own headers (its ID is the tenant's, signed by
			// the ingress), not ones dedup's dead-lettering added:
			// replayed, the event keeps its ID and its workflows.
			rec.Headers = append(rec.Headers, h)
		default:
			if !strings.HasPrefix(h.Key, "dedup-") {
				rec.Headers = append(rec.Headers, h)
			}
		}
	}
	return rec, nil
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
