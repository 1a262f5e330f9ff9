// Package replay sends dead-lettered records back through the dedup gate.
//
// It reads dead-letter topics from the start up to their end offsets as of
// the call (so records dead-lettered again during the replay are not read
// again), keeps those whose reason matches, and produces each back to its
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
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/schemas"
)

// Options select what to replay.
type Options struct {
	Brokers []string
	// ClientOpts are the Kafka connection options every dedup client
	// shares (TLS, SASL: internal/app KafkaOpts); they come after Brokers.
	ClientOpts []kgo.Opt
	// DeadLetterTopics to read.
	DeadLetterTopics []string
	// Reasons to replay; empty means all.
	Reasons []string
	// DryRun counts what would be replayed and produces nothing.
	DryRun bool
	// Limit stops after this many replayed records; 0 means no limit.
	Limit int
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
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(o.Brokers...), kgo.ConsumeTopics(o.DeadLetterTopics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil))}, o.ClientOpts...)...)
	if err != nil {
		return res, fmt.Errorf("creating kafka client: %w", err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, o.DeadLetterTopics...)
	if err != nil {
		return res, fmt.Errorf("listing dead-letter end offsets: %w", err)
	}
	remaining := map[string]map[int32]int64{}
	ends.Each(func(lo kadm.ListedOffset) {
		if lo.Offset > 0 {
			if remaining[lo.Topic] == nil {
				remaining[lo.Topic] = map[int32]int64{}
			}
			remaining[lo.Topic][lo.Partition] = lo.Offset
		}
	})
	want := map[string]bool{}
	for _, r := range o.Reasons {
		want[r] = true
	}
	for len(remaining) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return res, err
		}
		var out []*kgo.Record
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("reading %s/%d: %w", t, p, err) })
		if ferr != nil {
			return res, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := remaining[r.Topic][r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if r.Offset == end-1 {
				delete(remaining[r.Topic], r.Partition)
				if len(remaining[r.Topic]) == 0 {
					delete(remaining, r.Topic)
				}
			}
			res.Read++
			reason := header(r, schemas.HeaderDLQReason)
			if (len(want) > 0 && !want[reason]) || (o.Limit > 0 && total(res.Replayed) >= o.Limit) {
				res.Skipped[reason]++
				return
			}
			rec, err := original(r)
			if err != nil {
				log.Warn("not replayable", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
				res.Skipped[reason]++
				return
			}
			res.Replayed[reason]++
			out = append(out, rec)
		})
		if len(out) > 0 && !o.DryRun {
			if err := cl.ProduceSync(ctx, out...).FirstErr(); err != nil {
				return res, fmt.Errorf("producing replayed records: %w", err)
			}
		}
	}
	return res, nil
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
