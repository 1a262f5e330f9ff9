package processor

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
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

// committerOnKafka is testCommitter with a Kafka client of group g on a
// kfake cluster with two partitions of topic t, to commit through; it
// returns how to read the group's committed offsets (-1: none).
func committerOnKafka(t *testing.T, cfg Config, parts ...topicPartition) (*committer, func() map[int32]int64) {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumerGroup(cfg.Group))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	c := testCommitter(t, cfg, parts...)
	c.cl, c.adm = cl, kadm.NewClient(cl)
	c.lag.adm = c.adm
	// No other member commits: the guard against going backwards reads
	// nothing (the group exists once the first commit made it).
	c.groupCommitted = func(context.Context, []string) (map[topicPartition]int64, error) { return nil, nil }
	committed := func() map[int32]int64 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		out := map[int32]int64{0: -1, 1: -1}
		resp, err := c.adm.FetchOffsetsForTopics(ctx, cfg.Group, "t")
		if errors.Is(err, kerr.GroupIDNotFound) {
			return out // nothing was ever committed
		}
		if err != nil {
			t.Fatal(err)
		}
		resp.Each(func(o kadm.OffsetResponse) {
			if o.Err == nil && o.At >= 0 {
				out[o.Partition] = o.At
			}
		})
		return out
	}
	return c, committed
}

// A poll's duplicates of two partitions end together, after one of the
// partitions was revoked (its records did not end within RevokeTimeout):
// the other partition's whole prefix is committed, nothing of the revoked
// one, and both partitions' records are counted out of flight.
func TestBatchEndAfterARevokeCommitsOnlyThePartitionStillOwned(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Group, cfg.Topics = "g", []string{"t"}
	cfg.RevokeTimeout = 50 * time.Millisecond // the records do not end within it: the test ends them after
	kept, gone := topicPartition{"t", 0}, topicPartition{"t", 1}
	c, committed := committerOnKafka(t, cfg, kept, gone)
	p0, p1 := c.parts[kept], c.parts[gone]
	recs := c.trackAll(pollOf("t", 2, 10), nil)
	for i, rec := range recs {
		if rec == nil {
			t.Fatalf("record %d not tracked", i)
		}
	}
	if c.flight.n != 10 || p0.inFlight != 5 || p1.inFlight != 5 {
		t.Fatalf("in flight %d (%d, %d), want 10 (5, 5)", c.flight.n, p0.inFlight, p1.inFlight)
	}

	c.revoked(context.Background(), nil, map[string][]int32{"t": {1}})
	// A poll after the revoke takes nothing of the revoked partition.
	if late := c.trackAll([]*kgo.Record{{Topic: "t", Partition: 1, Offset: 5}}, nil); late[0] != nil {
		t.Fatal("a record of the revoked partition was tracked")
	}
	c.endAll(recs, true)
	if c.flight.n != 0 || p0.inFlight != 0 || p1.inFlight != 0 {
		t.Fatalf("in flight %d (%d, %d) after every record ended, want 0", c.flight.n, p0.inFlight, p1.inFlight)
	}
	c.commit(context.Background(), nil)
	if got := committed(); got[0] != 5 || got[1] != -1 {
		t.Fatalf("group committed %v, want partition 0 at 5 and nothing for the revoked partition 1", got)
	}
}

// A revoke waits for its partitions' records in flight; ending them in a
// batch releases the wait, and the revoke commits what finished.
func TestBatchEndReleasesTheRevokesWait(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Group, cfg.Topics = "g", []string{"t"}
	cfg.RevokeTimeout = time.Minute // the wait must end by the records, not by the timeout
	tp := topicPartition{"t", 1}
	c, committed := committerOnKafka(t, cfg, tp)
	var krs []*kgo.Record
	for off := int64(0); off < 6; off++ {
		krs = append(krs, &kgo.Record{Topic: "t", Partition: 1, Offset: off})
	}
	recs := c.trackAll(krs, nil)
	for _, rec := range recs {
		c.flight.setPending(rec, 2) // two intents each
	}
	revoked := make(chan struct{})
	go func() {
		defer close(revoked)
		c.revoked(context.Background(), nil, map[string][]int32{"t": {1}})
	}()
	// The revoke marks the partition, then waits. Seeing the mark, the test
	// gives it 50ms to be inside its wait: if it is not yet, the records
	// end before it waits and the test still holds, proving less.
	for {
		c.mu.Lock()
		marked := c.parts[tp].revoking
		c.mu.Unlock()
		if marked {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	c.endAll(append([]*record(nil), recs...), true) // one piece of each: still in flight
	c.endAll(recs[:3], true)                        // the second pieces of the first three
	c.endAll(recs[3:], true)                        // and of the rest
	select {
	case <-revoked:
	case <-time.After(30 * time.Second): // half the RevokeTimeout: the wait missed the batch end
		t.Fatal("the revoke still waits after every record ended")
	}
	if got := committed(); got[1] != 6 {
		t.Fatalf("group committed %v, want partition 1 at 6", got)
	}
}

// BenchmarkTrackAndEndAPollOfDuplicates is the committer's share of an
// all-duplicate replay's poll: 1000 records over 8 partitions tracked in
// poll order by the poll goroutine (trackAll), then ended (a duplicate of
// a started row each) by the claimer (endAll).
func BenchmarkTrackAndEndAPollOfDuplicates(b *testing.B) {
	benchTrackAndEnd(b, func(c *committer, krs []*kgo.Record, _ []*record) {
		c.endAll(c.trackAll(krs, nil), true)
	})
}

// BenchmarkTrackAndEndRecordByRecord is the same poll through track and
// end, one record at a time (the start pool and the dead-letter writer
// end records so).
func BenchmarkTrackAndEndRecordByRecord(b *testing.B) {
	benchTrackAndEnd(b, func(c *committer, krs []*kgo.Record, recs []*record) {
		for i, kr := range krs {
			recs[i] = c.track(kr)
		}
		for _, rec := range recs {
			c.end(rec, true)
		}
	})
}

func benchTrackAndEnd(b *testing.B, poll func(c *committer, krs []*kgo.Record, recs []*record)) {
	cfg := DefaultConfig()
	cfg.Group, cfg.Topics = "g", []string{"t"}
	var tps []topicPartition
	for p := int32(0); p < 8; p++ {
		tps = append(tps, topicPartition{"t", p})
	}
	c := testCommitter(b, cfg, tps...)
	krs := pollOf("t", 8, 1000)
	recs := make([]*record, len(krs))
	b.ReportAllocs()
	for b.Loop() {
		poll(c, krs, recs)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(krs)), "ns/record")
	if c.flight.n != 0 || c.parts[tps[0]].tr.next != 125 {
		b.Fatalf("in flight %d, partition 0 committable at %d: want 0 and 125", c.flight.n, c.parts[tps[0]].tr.next)
	}
}

// BenchmarkReplayPipelineBatched is BenchmarkTrackAndEndAPollOfDuplicates
// as the router runs it: the poll goroutine tracks poll after poll while
// the claimer goroutine ends the previous ones (they contend on
// committer.mu). An op is one poll of 1000 records.
func BenchmarkReplayPipelineBatched(b *testing.B) {
	benchPipeline(b, func(c *committer, krs []*kgo.Record) []*record { return c.trackAll(krs, nil) },
		func(c *committer, recs []*record) { c.endAll(recs, true) })
}

// BenchmarkReplayPipelineRecordByRecord is the same pipeline through
// track and end, one record at a time.
func BenchmarkReplayPipelineRecordByRecord(b *testing.B) {
	benchPipeline(b, func(c *committer, krs []*kgo.Record) []*record {
		recs := make([]*record, len(krs))
		for i, kr := range krs {
			recs[i] = c.track(kr)
		}
		return recs
	}, func(c *committer, recs []*record) {
		for _, rec := range recs {
			c.end(rec, true)
		}
	})
}

func benchPipeline(b *testing.B, track func(*committer, []*kgo.Record) []*record, end func(*committer, []*record)) {
	cfg := DefaultConfig()
	cfg.Group, cfg.Topics = "g", []string{"t"}
	var tps []topicPartition
	for p := int32(0); p < 8; p++ {
		tps = append(tps, topicPartition{"t", p})
	}
	c := testCommitter(b, cfg, tps...)
	krs := pollOf("t", 8, 1000)
	polls := make(chan []*record, 2)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for recs := range polls {
			end(c, recs)
		}
	}()
	b.ReportAllocs()
	for b.Loop() {
		polls <- track(c, krs)
	}
	close(polls)
	<-ended
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(krs)), "ns/record")
	if c.flight.n != 0 {
		b.Fatalf("in flight %d after every poll ended, want 0", c.flight.n)
	}
}

// A poll whose partitions interleave (as several fetches of one poll do),
// with a record of two intents: its duplicate ends in the batch, its
// start later, abandoned. The batch end finishes only the records whose
// last piece it ended; the record still starting holds its partition's
// prefix back, and once abandoned it is never committable, though the
// record after it finished.
func TestBatchEndFinishesARecordOnlyWithItsLastPiece(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Group, cfg.Topics = "g", []string{"t"}
	tp0, tp1 := topicPartition{"t", 0}, topicPartition{"t", 1}
	c := testCommitter(t, cfg, tp0, tp1)
	p0, p1 := c.parts[tp0], c.parts[tp1]
	krs := []*kgo.Record{{Topic: "t", Partition: 0, Offset: 0}, {Topic: "t", Partition: 1, Offset: 0},
		{Topic: "t", Partition: 0, Offset: 1}, {Topic: "t", Partition: 1, Offset: 1}}
	recs := c.trackAll(krs, nil)
	for i, rec := range recs {
		if rec == nil || rec.part.tp.partition != krs[i].Partition || rec.offset != krs[i].Offset {
			t.Fatalf("record %d tracked as %+v", i, rec)
		}
	}
	c.flight.setPending(recs[0], 2) // a duplicate and a new start
	c.endAll(append([]*record(nil), recs...), true)
	if p0.tr.next != -1 || p1.tr.next != 2 {
		t.Fatalf("committable at %d and %d, want nothing of partition 0 (its first record still starting) and 2", p0.tr.next, p1.tr.next)
	}
	if c.flight.n != 1 || p0.inFlight != 1 || p1.inFlight != 0 {
		t.Fatalf("in flight %d (%d, %d), want 1 (1, 0)", c.flight.n, p0.inFlight, p1.inFlight)
	}
	c.end(recs[0], false) // its start is abandoned
	if p0.tr.next != -1 || c.flight.n != 0 || p0.inFlight != 0 {
		t.Fatalf("after the abandoned start: committable at %d, in flight %d (%d); want nothing committable and 0", p0.tr.next, c.flight.n, p0.inFlight)
	}
}

// The poll goroutine tracks poll after poll while the claimer ends each
// poll's duplicates in a batch and the start pool ends the other piece of
// every other record one at a time, all at once (run with -race): every
// record is counted out exactly once and every partition's prefix reaches
// its last record.
func TestBatchTrackAndEndsOnThreeGoroutinesCountEveryRecordOnce(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Group, cfg.Topics = "g", []string{"t"}
	var tps []topicPartition
	for p := int32(0); p < 4; p++ {
		tps = append(tps, topicPartition{"t", p})
	}
	c := testCommitter(t, cfg, tps...)
	const polls, per = 50, 40 // 10 records of each partition a poll
	toClaimer, toPool := make(chan []*record, 4), make(chan *record, polls*per)
	done := make(chan struct{}, 2)
	go func() {
		for recs := range toClaimer {
			c.endAll(recs, true)
		}
		done <- struct{}{}
	}()
	go func() {
		for rec := range toPool {
			c.end(rec, true)
		}
		done <- struct{}{}
	}()
	for n := 0; n < polls; n++ {
		krs := make([]*kgo.Record, 0, per)
		for p := int32(0); p < 4; p++ {
			for off := 0; off < per/4; off++ {
				krs = append(krs, &kgo.Record{Topic: "t", Partition: p, Offset: int64(n*per/4 + off)})
			}
		}
		recs := c.trackAll(krs, nil)
		for i, rec := range recs {
			if i%2 == 0 {
				c.flight.setPending(rec, 2)
				toPool <- rec
			}
		}
		toClaimer <- recs
	}
	close(toClaimer)
	close(toPool)
	<-done
	<-done
	if c.flight.n != 0 {
		t.Fatalf("in flight %d after every record ended, want 0", c.flight.n)
	}
	for _, tp := range tps {
		if p := c.parts[tp]; p.inFlight != 0 || p.tr.next != polls*per/4 {
			t.Errorf("partition %d: in flight %d, committable at %d; want 0 and %d", tp.partition, p.inFlight, p.tr.next, polls*per/4)
		}
	}
}
