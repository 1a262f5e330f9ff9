package ops

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/schemas"
)

// Where a record stands in its partition's log.
const (
	RecordRead           = "read"             // read back from Kafka
	RecordOutOfRetention = "out_of_retention" // before the log start: deleted by retention
	RecordNotProduced    = "not_produced"     // at or past the log end
	RecordAbsent         = "absent"           // inside the log but not there (compacted away, or a transaction marker)
	RecordUnknown        = "unknown"          // Kafka did not answer, or no record was named
)

// bounds is a partition's log start and end.
type bounds struct{ start, end int64 }

// partitionBounds reads the log start and end of every partition of the
// topics.
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
	out := map[string]map[int32]bounds{}
	var first error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			if first == nil {
				first = fmt.Errorf("end offset of %s/%d: %w", o.Topic, o.Partition, o.Err)
			}
			return
		}
		s, ok := starts.Lookup(o.Topic, o.Partition)
		if !ok || s.Err != nil {
			if first == nil {
				first = fmt.Errorf("start offset of %s/%d: missing", o.Topic, o.Partition)
			}
			return
		}
		if out[o.Topic] == nil {
			out[o.Topic] = map[int32]bounds{}
		}
		out[o.Topic][o.Partition] = bounds{start: s.Offset, end: o.Offset}
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
// it stands when it cannot be read (with the partition's bounds).
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
	}
	cl, err := t.consumer(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(offset)}})
	if err != nil {
		return nil, RecordUnknown, b, err
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		fs := cl.PollRecords(rctx, 1)
		if rctx.Err() != nil {
			return nil, RecordUnknown, b, fmt.Errorf("reading %s/%d/%d: %w", topic, partition, offset, rctx.Err())
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return nil, RecordUnknown, b, fmt.Errorf("reading %s/%d/%d: %w", topic, partition, offset, ferr)
		}
		var got *kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			if got == nil {
				got = r
			}
		})
		switch {
		case got == nil:
			continue
		case got.Offset == offset:
			return got, RecordRead, b, nil
		case got.Offset > offset:
			return nil, RecordAbsent, b, nil
		}
	}
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
	start := map[int32]kgo.Offset{}
	left := 0
	from.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset < ends[o.Partition].end {
			start[o.Partition] = kgo.NewOffset().At(o.Offset)
			left++
		}
	})
	if left == 0 {
		return nil, nil
	}
	cl, err := t.consumer(map[string]map[int32]kgo.Offset{dlqTopic: start})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	done := map[int32]bool{}
	wantP, wantO := strconv.Itoa(int(partition)), strconv.FormatInt(offset, 10)
	for len(done) < left {
		fs := cl.PollFetches(rctx)
		if rctx.Err() != nil {
			return nil, fmt.Errorf("searching %s: %w", dlqTopic, rctx.Err())
		}
		var found *DLQCoordinates
		fs.EachRecord(func(r *kgo.Record) {
			if done[r.Partition] || found != nil {
				return
			}
			if r.Offset+1 >= ends[r.Partition].end || r.Timestamp.After(writtenAt.Add(slack)) {
				done[r.Partition] = true
			}
			h := headers(r)
			if h[schemas.HeaderDLQTopic] == topic && h[schemas.HeaderDLQPartition] == wantP && h[schemas.HeaderDLQOffset] == wantO &&
				h[schemas.HeaderDLQWorkflow] == workflow {
				found = &DLQCoordinates{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
			}
		})
		if found != nil {
			return found, nil
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
