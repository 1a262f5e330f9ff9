package ops

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/replay"
	"github.com/dedupio/dedup/schemas"
)

// Where a record stands in its partition's log.
const (
	RecordRead           = "read"             // read back from Kafka
	RecordOutOfRetention = "out_of_retention" // before the log start: deleted by retention
	RecordNotProduced    = "not_produced"     // at or past the log end
	RecordAbsent         = "absent"           // inside the log but not there (compacted away, aborted, or a transaction marker)
	// RecordUncommitted: at or past the last stable offset, in a
	// transaction still open, which a read_committed consumer (the router)
	// reads once it commits and never if it aborts.
	RecordUncommitted = "uncommitted"
	RecordUnknown     = "unknown" // Kafka did not answer, or no record was named
)

// bounds is a partition's log start and end, and where a consumer of
// kafka.isolation_level can read it up to now: under read_committed the
// last stable offset (the first offset of the oldest transaction still
// open, or the end), else the end.
type bounds struct{ start, end, stable int64 }

// partitionBounds reads the log start, end and readable end of every
// partition of the topics.
func (t *Tool) partitionBounds(ctx context.Context, topics ...string) (map[string]map[int32]bounds, error) {
	adm, err := t.kafka()
	if err != nil {
		return nil, err
	}
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("listing start offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("listing end offsets: %w", err)
	}
	stables := ends
	if t.cfg.Kafka.IsolationLevel == processor.IsolationReadCommitted {
		if stables, err = replay.Ends(ctx, adm, true, topics...); err != nil {
			return nil, fmt.Errorf("listing last stable offsets: %w", err)
		}
	}
	out := map[string]map[int32]bounds{}
	var first error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			first = cmp.Or(first, fmt.Errorf("end offset of %s/%d: %w", o.Topic, o.Partition, o.Err))
			return
		}
		s, ok := starts.Lookup(o.Topic, o.Partition)
		if !ok || s.Err != nil {
			first = cmp.Or(first, fmt.Errorf("start offset of %s/%d: missing", o.Topic, o.Partition))
			return
		}
		st, ok := stables.Lookup(o.Topic, o.Partition)
		if !ok || st.Err != nil {
			first = cmp.Or(first, fmt.Errorf("last stable offset of %s/%d: missing", o.Topic, o.Partition))
			return
		}
		if out[o.Topic] == nil {
			out[o.Topic] = map[int32]bounds{}
		}
		// Listed one after the other: the stable offset never past the
		// end nor before the start.
		out[o.Topic][o.Partition] = bounds{start: s.Offset, end: o.Offset, stable: min(max(st.Offset, s.Offset), o.Offset)}
	})
	if first != nil {
		return out, first
	}
	for _, tp := range topics {
		if len(out[tp]) == 0 {
			return out, fmt.Errorf("topic %s: %w", tp, kerr.UnknownTopicOrPartition)
		}
	}
	return out, nil
}

// readRecord reads the record at topic/partition/offset, and says where
// it stands when it cannot be read (with the partition's bounds). It reads
// as the router does (kafka.isolation_level): under read_committed a
// record of an aborted transaction is absent, and one of a transaction
// still open is uncommitted.
func (t *Tool) readRecord(ctx context.Context, topic string, partition int32, offset int64) (*kgo.Record, string, bounds, error) {
	all, err := t.partitionBounds(ctx, topic)
	if err != nil {
		return nil, RecordUnknown, bounds{}, err
	}
	b, ok := all[topic][partition]
	switch {
	case !ok:
		return nil, RecordUnknown, b, fmt.Errorf("topic %s has no partition %d", topic, partition)
	case offset < b.start:
		return nil, RecordOutOfRetention, b, nil
	case offset >= b.end:
		return nil, RecordNotProduced, b, nil
	case offset >= b.stable:
		return nil, RecordUncommitted, b, nil
	}
	rd, err := t.reader(map[string]map[int32]replay.Span{topic: {partition: {From: offset, Until: b.stable}}})
	if err != nil {
		return nil, RecordUnknown, b, err
	}
	defer rd.Close()
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for !rd.Done() && rd.Next(topic, partition) <= offset {
		recs, err := rd.Poll(rctx, 1)
		if err != nil {
			return nil, RecordUnknown, b, fmt.Errorf("reading %s/%d/%d: %w", topic, partition, offset, err)
		}
		if len(recs) > 0 && recs[0].Offset == offset {
			return recs[0], RecordRead, b, nil
		}
	}
	// Past it without a record (a marker, an aborted or compacted
	// record), or nothing readable up to the stable offset.
	return nil, RecordAbsent, b, nil
}

// committed is the group's committed offset of each partition of the
// topics (absent: none).
func (t *Tool) committed(ctx context.Context) (map[string]map[int32]int64, error) {
	adm, err := t.kafka()
	if err != nil {
		return nil, err
	}
	resp, err := adm.FetchOffsets(ctx, t.cfg.Kafka.Group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return map[string]map[int32]int64{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fetching the committed offsets of group %s: %w", t.cfg.Kafka.Group, err)
	}
	out := map[string]map[int32]int64{}
	var first error
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Err != nil {
			if first == nil {
				first = fmt.Errorf("committed offset of %s/%d: %w", o.Topic, o.Partition, o.Err)
			}
			return
		}
		if o.At < 0 {
			return
		}
		if out[o.Topic] == nil {
			out[o.Topic] = map[int32]int64{}
		}
		out[o.Topic][o.Partition] = o.At
	})
	return out, first
}

// DLQCoordinates is where a dead letter was written.
type DLQCoordinates struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// findDeadLetter looks for the dead letter of topic/partition/offset (and
// workflow, for per-workflow reasons) in dlqTopic, among the records
// written within five minutes of writtenAt (dedup logs the dead letter
// once the topic acknowledged it). nil when it is not there any more.
func (t *Tool) findDeadLetter(ctx context.Context, dlqTopic, topic string, partition int32, offset int64, workflow string, writtenAt time.Time) (*DLQCoordinates, error) {
	adm, err := t.kafka()
	if err != nil {
		return nil, err
	}
	const slack = 5 * time.Minute
	from, err := adm.ListOffsetsAfterMilli(ctx, writtenAt.Add(-slack).UnixMilli(), dlqTopic)
	if err != nil {
		return nil, fmt.Errorf("listing offsets of %s: %w", dlqTopic, err)
	}
	all, err := t.partitionBounds(ctx, dlqTopic)
	if err != nil {
		return nil, err
	}
	ends := all[dlqTopic]
	spans := map[int32]replay.Span{}
	from.Each(func(o kadm.ListedOffset) {
		if b, ok := ends[o.Partition]; ok && o.Err == nil && o.Offset < b.stable {
			spans[o.Partition] = replay.Span{From: o.Offset, Until: b.stable}
		}
	})
	if len(spans) == 0 {
		return nil, nil
	}
	rd, err := t.reader(map[string]map[int32]replay.Span{dlqTopic: spans})
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	wantP, wantO := strconv.Itoa(int(partition)), strconv.FormatInt(offset, 10)
	for !rd.Done() {
		recs, err := rd.Poll(rctx, 0)
		if err != nil {
			return nil, fmt.Errorf("searching %s: %w", dlqTopic, err)
		}
		for _, r := range recs {
			if r.Timestamp.After(writtenAt.Add(slack)) {
				rd.Finish(r.Topic, r.Partition)
				continue
			}
			h := headers(r)
			if h[schemas.HeaderDLQTopic] == topic && h[schemas.HeaderDLQPartition] == wantP && h[schemas.HeaderDLQOffset] == wantO &&
				h[schemas.HeaderDLQWorkflow] == workflow {
				return &DLQCoordinates{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}, nil
			}
		}
	}
	return nil, nil
}

func headers(r *kgo.Record) map[string]string {
	out := make(map[string]string, len(r.Headers))
	for _, h := range r.Headers {
		out[h.Key] = string(h.Value)
	}
	return out
}
