package replay

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// live produces a record to events/0 every 20 ms until the test ends: a
// source partition with traffic.
func (c *cluster) live(t *testing.T) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte("live")})
			time.Sleep(20 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait(); cl.Close() })
}

// A span past the partition's end (a dead letter's original offset in a
// source topic recreated since, or truncated by an unclean leader
// election) holds nothing to read: the client, out of range, reads the
// partition again from its start, and every record it reads lies below
// the span. While the partition takes new records (live traffic, far
// from reaching the span) the Reader must still end it as a Stall within
// a bounded time (Idle 1 s here: within 15 s), not wait, reading batches
// below the span, until the partition's end reaches it.
func TestReaderEndsASpanPastThePartitionsEndAsAStallUnderLiveTraffic(t *testing.T) {
	c := newCluster(t, 1)
	c.live(t)
	time.Sleep(200 * time.Millisecond)
	rd, err := NewReader([]kgo.Opt{kgo.SeedBrokers(c.addrs...), kgo.FetchIsolationLevel(kgo.ReadCommitted())},
		map[string]map[int32]Span{topic: {0: {From: 1_000_000, Until: 1_000_001}}})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	rd.Idle = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	start := time.Now()
	for !rd.Done() {
		recs, err := rd.Poll(ctx, 100)
		if err != nil {
			t.Fatalf("after %s: %v; want the span ended as a Stall", time.Since(start).Round(time.Millisecond), err)
		}
		if len(recs) > 0 {
			t.Fatalf("read %d records below the span", len(recs))
		}
	}
	if len(rd.Stalls) != 1 || rd.Stalls[0].Next != 1_000_000 {
		t.Errorf("after %s: stalls %v; want events/0 from 1000000", time.Since(start).Round(time.Millisecond), rd.Stalls)
	}
}
