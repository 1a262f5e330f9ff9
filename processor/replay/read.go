package replay

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// This file is how every operator's tool that reads a topic up to an end
// (dedup dlq replay, the forecast of dedup offsets reset, dedup explain)
// reads it: as the router does, under kafka.isolation_level, and without
// waiting for records it can never read.
//
// Under read_committed a consumer reads nothing at or past the partition's
// last stable offset (LSO: the first offset of the oldest transaction still
// open) until that transaction ends, and never reads the records of an
// aborted transaction nor the transactions' commit and abort markers. So a
// read "until the high watermark" waits as long as a transaction stays
// open, and a read "until the record at end-1" waits for ever when that
// offset holds a marker or an aborted record. A Reader instead reads until
// the LSO (Ends), counts the markers as progress (it keeps control records,
// and never returns them), and ends a partition whose remaining offsets
// hold nothing it can read (aborted records whose abort marker lies past
// the LSO) once the consumer has been idle for a while and the cluster
// still answers.

// Ends are the offsets up to which a consumer of the isolation level
// (committed: read_committed) can read the topics' partitions now: the
// last stable offset under read_committed, the high watermark otherwise.
func Ends(ctx context.Context, adm *kadm.Client, committed bool, topics ...string) (kadm.ListedOffsets, error) {
	if committed {
		return adm.ListCommittedOffsets(ctx, topics...)
	}
	return adm.ListEndOffsets(ctx, topics...)
}

// DefaultIdle is how long a Reader waits for a record of a partition it
// has not finished before it asks whether anything is left to read.
const DefaultIdle = 10 * time.Second

// Span is the offsets of one partition a Reader reads: From up to Until
// (excluded).
type Span struct{ From, Until int64 }

// Stall is a partition a Reader ended before Until: its offsets from Next
// on held nothing it could read.
type Stall struct {
	Topic     string
	Partition int32
	Next      int64 // the offset after the last record (or marker) read
	Until     int64
}

func (s Stall) String() string {
	return fmt.Sprintf("%s/%d: offsets %d..%d gave no record to read (records of aborted transactions, or a partition leader that does not answer)",
		s.Topic, s.Partition, s.Next, s.Until-1)
}

// Reader reads spans of partitions, each once, with a client of its own.
type Reader struct {
	cl    *kgo.Client
	spans map[string]map[int32]Span
	next  map[string]map[int32]int64
	left  int
	// batches counts the record batches the client read, those it drops
	// (an aborted transaction's) too: a read through a long aborted
	// transaction, one batch a fetch under a small
	// kafka.fetch_max_partition_bytes, is progress without a record.
	batches batchCount
	// Idle is how long Poll waits for a record of an unfinished partition,
	// with no batch read meanwhile, before it pings the cluster and, when
	// it answers, ends every unfinished partition as a Stall (DefaultIdle
	// when 0).
	Idle time.Duration
	// Stalls are the partitions ended that way.
	Stalls []Stall
}

// NewReader is a Reader of spans, over a client of opts (the connection
// options; under read_committed, the isolation option among them). Spans
// with nothing to read (From >= Until) are finished at once.
func NewReader(opts []kgo.Opt, spans map[string]map[int32]Span) (*Reader, error) {
	r := &Reader{spans: map[string]map[int32]Span{}, next: map[string]map[int32]int64{}}
	from := map[string]map[int32]kgo.Offset{}
	for t, ps := range spans {
		for p, s := range ps {
			if s.From >= s.Until {
				continue
			}
			if r.spans[t] == nil {
				r.spans[t], r.next[t], from[t] = map[int32]Span{}, map[int32]int64{}, map[int32]kgo.Offset{}
			}
			r.spans[t][p], r.next[t][p] = s, s.From
			from[t][p] = kgo.NewOffset().At(s.From)
			r.left++
		}
	}
	cl, err := kgo.NewClient(append(slices.Clone(opts), kgo.ConsumePartitions(from), kgo.KeepControlRecords(), kgo.WithHooks(&r.batches))...)
	if err != nil {
		return nil, fmt.Errorf("creating kafka consumer: %w", err)
	}
	r.cl = cl
	return r, nil
}

// Client is the Reader's client (it may produce too).
func (r *Reader) Client() *kgo.Client { return r.cl }

// Close closes the client.
func (r *Reader) Close() { r.cl.Close() }

// Done says whether every span was read (or ended).
func (r *Reader) Done() bool { return r.left == 0 }

// Next is the offset after the last record or marker read of a partition.
func (r *Reader) Next(topic string, partition int32) int64 { return r.next[topic][partition] }

// Finish ends a partition before its span's end.
func (r *Reader) Finish(topic string, partition int32) {
	if _, ok := r.spans[topic][partition]; !ok {
		return
	}
	delete(r.spans[topic], partition)
	r.left--
	r.cl.PauseFetchPartitions(map[string][]int32{topic: {partition}})
}

// Poll returns the next records of the unfinished spans, in offset order
// per partition, without control records; none once Done. It may return
// none before Done (a poll that brought only markers, or a Stall).
func (r *Reader) Poll(ctx context.Context, max int) ([]*kgo.Record, error) {
	idle := r.Idle
	if idle <= 0 {
		idle = DefaultIdle
	}
	// stale: the partitions of which a poll since the wait began brought
	// records read already (the client read from the partition's start
	// again, say, when a span lies past its end): their batches are no
	// progress. Another partition's batches are.
	read, stale := r.batches.snapshot(), map[tp]bool{}
	for since := time.Now(); r.left > 0; {
		wait := idle - time.Since(since)
		if wait <= 0 && r.moved(read, stale) {
			read, since, wait = r.batches.snapshot(), time.Now(), idle // batches came that held nothing to return
			clear(stale)
		}
		if wait <= 0 {
			// Nothing for a while: either nothing is left to read
			// below the ends, or Kafka does not answer.
			if err := r.cl.Ping(ctx); err != nil {
				return nil, fmt.Errorf("no record for %s, and kafka does not answer: %w", idle, err)
			}
			r.stall()
			return nil, nil
		}
		pctx, cancel := context.WithTimeout(ctx, wait)
		fs := r.cl.PollRecords(pctx, max)
		cancel()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				ferr = fmt.Errorf("reading %s/%d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return nil, ferr
		}
		var out []*kgo.Record
		progress := false
		fs.EachRecord(func(rec *kgo.Record) {
			s, ok := r.spans[rec.Topic][rec.Partition]
			if !ok || rec.Offset < r.next[rec.Topic][rec.Partition] {
				stale[tp{rec.Topic, rec.Partition}] = true
				return // finished, or read already
			}
			progress = true
			r.next[rec.Topic][rec.Partition] = rec.Offset + 1
			if rec.Offset < s.Until && !rec.Attrs.IsControl() {
				out = append(out, rec)
			}
			if rec.Offset+1 >= s.Until {
				r.Finish(rec.Topic, rec.Partition)
			}
		})
		if progress {
			return out, nil
		}
	}
	return nil, nil
}

// tp is a topic's partition.
type tp struct {
	topic     string
	partition int32
}

// batchCount is a Kafka client hook that counts the batches read, by
// partition.
type batchCount struct {
	mu sync.Mutex
	n  map[tp]int64
}

func (b *batchCount) OnFetchBatchRead(_ kgo.BrokerMetadata, topic string, partition int32, _ kgo.FetchBatchMetrics) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n == nil {
		b.n = map[tp]int64{}
	}
	b.n[tp{topic, partition}]++
}

func (b *batchCount) snapshot() map[tp]int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.n)
}

// moved says whether an unfinished partition not stale read batches
// since the counts were.
func (r *Reader) moved(were map[tp]int64, stale map[tp]bool) bool {
	now := r.batches.snapshot()
	for p, n := range now {
		if _, unfinished := r.spans[p.topic][p.partition]; unfinished && !stale[p] && n != were[p] {
			return true
		}
	}
	return false
}

// stall ends every unfinished partition as a Stall.
func (r *Reader) stall() {
	var left []Stall
	for t, ps := range r.spans {
		for p, s := range ps {
			left = append(left, Stall{Topic: t, Partition: p, Next: r.next[t][p], Until: s.Until})
		}
	}
	sort.Slice(left, func(i, j int) bool {
		return left[i].Topic < left[j].Topic || left[i].Topic == left[j].Topic && left[i].Partition < left[j].Partition
	})
	for _, s := range left {
		r.Finish(s.Topic, s.Partition)
	}
	r.Stalls = append(r.Stalls, left...)
}
