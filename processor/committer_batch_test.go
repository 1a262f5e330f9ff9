package processor

import (
	"context"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// testCommitter is a committer that owns parts, taken as assigned takes a
// partition once the ledger's fence gave it an epoch (no Kafka client: what
// it tracks, finishes and counts in flight is read from its state).
func testCommitter(tb testing.TB, cfg Config, parts ...topicPartition) *committer {
	tb.Helper()
	m, err := newMetrics(prometheus.NewRegistry(), cfg.Topics)
	if err != nil {
		tb.Fatal(err)
	}
	c := newCommitter(cfg, slog.New(slog.DiscardHandler), m, context.Background(), func() bool { return false })
	for _, tp := range parts {
		ctx, cancel := context.WithCancel(c.parent)
		tb.Cleanup(cancel)
		p := &partition{tp: tp, ctx: ctx, cancel: cancel, tr: newTracker(), committed: -1, assignedAt: -1,
			watch: c.lag.assign(tp, ctx, -1), group: cfg.Group}
		p.epoch.Store(1)
		c.mu.Lock()
		c.parts[tp] = p
		c.mu.Unlock()
	}
	return c
}

// pollOf is a poll of n records over parts partitions of topic, as the
// client returns it: each partition's records in offset order, from 0.
func pollOf(topic string, parts, n int) []*kgo.Record {
	krs := make([]*kgo.Record, 0, n)
	per := (n + parts - 1) / parts
	for p := 0; p < parts && len(krs) < n; p++ {
		for off := 0; off < per && len(krs) < n; off++ {
			krs = append(krs, &kgo.Record{Topic: topic, Partition: int32(p), Offset: int64(off), LeaderEpoch: 1})
		}
	}
	return krs
}

// BenchmarkTrackAndEndAPollOfDuplicates is the committer's share of an
// all-duplicate replay's poll: 1000 records over 8 partitions tracked in
// poll order by the poll goroutine, then each ended once (a duplicate of a
// started row) by the claimer.
func BenchmarkTrackAndEndAPollOfDuplicates(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Group, cfg.Topics = "g", []string{"t"}
	var tps []topicPartition
	for p := int32(0); p < 8; p++ {
		tps = append(tps, topicPartition{"t", p})
	}
	c := testCommitter(b, cfg, tps...)
	krs := pollOf("t", 8, 1000)
	recs := make([]*record, 0, len(krs))
	b.ReportAllocs()
	for b.Loop() {
		recs = recs[:0]
		for _, kr := range krs {
			recs = append(recs, c.track(kr))
		}
		for _, rec := range recs {
			c.end(rec, true)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(krs)), "ns/record")
	if c.flight.n != 0 || c.parts[tps[0]].tr.next != 125 {
		b.Fatalf("in flight %d, partition 0 committable at %d: want 0 and 125", c.flight.n, c.parts[tps[0]].tr.next)
	}
}
