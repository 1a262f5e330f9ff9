package ledger

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/dedupio/dedup/processor/decide"
)

func TestTheStartedCacheNeverHoldsMoreThanItsEntries(t *testing.T) {
	for _, entries := range []int{1, 2, 5, 64} {
		now := time.Unix(1e9, 0)
		c := newStartedCache(entries, func() time.Time { return now })
		ins, sums := make([]decide.Intent, 300), make([][32]byte, 300)
		for i := range ins {
			ins[i] = decide.Intent{WorkflowID: fmt.Sprintf("activity-a:%d", i)}
			_, sums[i] = keySumOf(ins[i].WorkflowID)
			c.remember(ins, sums, []int{i}, c.since())
			if n := c.held(); n > entries || len(c.slots) != entries {
				t.Fatalf("entries %d: %d held in %d slots after %d IDs", entries, n, len(c.slots), i+1)
			}
			got := make([]stored, len(ins))
			if left := c.answer(ins, sums, []int{i}, got); len(left) != 0 {
				t.Fatalf("entries %d: the ID just remembered (%d) is not answered", entries, i)
			}
			now = now.Add(time.Millisecond)
		}
	}
}

// held is how many IDs c answers for.
func (c *startedCache) held() int {
	n := 0
	for k := range c.slots {
		if c.slots[k].epoch == c.epoch {
			n++
		}
	}
	return n
}

// The runbook, the example config and Config.StartedCache say a
// remembered workflow ID costs 72 bytes, made at the first ID remembered,
// and maxStartedCache's 10,000,000 720 MB: a user sizes a replica's
// memory by them (adversary 36b: they once said 80 and 800 MB). Measured
// on the live heap when the cache is full, right after a collection,
// with 5% slack over the figure.
func TestAFullStartedCacheHolds72BytesAnID(t *testing.T) {
	const perID = 72 * 1.05
	for _, entries := range []int{100_000, 1_000_000} {
		now := time.Unix(1e9, 0)
		runtime.GC()
		var before, full runtime.MemStats
		runtime.ReadMemStats(&before)
		c := newStartedCache(entries, func() time.Time { return now })
		ins, sums := make([]decide.Intent, 1), make([][32]byte, 1)
		for k := 0; k < 2*entries; k++ {
			ins[0] = decide.Intent{WorkflowID: fmt.Sprintf("activity-a:%d", k)}
			_, sums[0] = keySumOf(ins[0].WorkflowID)
			c.remember(ins, sums, []int{0}, c.since())
		}
		runtime.GC()
		runtime.ReadMemStats(&full)
		held := c.held()
		live := float64(full.HeapAlloc) - float64(before.HeapAlloc)
		if held < entries*9/10 {
			t.Errorf("started_cache %d: %d IDs held after %d remembered", entries, held, 2*entries)
		}
		if live/float64(entries) > perID {
			t.Errorf("started_cache %d: %.0f MB of live heap, %.0f bytes an entry; the docs say 72",
				entries, live/1e6, live/float64(entries))
		}
		runtime.KeepAlive(c)
	}
}

// benchStartedCache runs a claim's use of the memory of started rows over
// ids IDs in batches of 1,000, round after round: each batch is answered,
// and what it did not answer is remembered, as a claim whose read found
// every row started does. ns/op is per ID. Between batches, untimed, it
// writes 64 MiB, as a router's fetches, decoding and reads do between two
// claims: the memory's table is then out of the processor's caches, as it
// is in a router.
func benchStartedCache(b *testing.B, entries, ids int) {
	other := make([]byte, 64<<20)
	now := time.Unix(1e9, 0)
	c := newStartedCache(entries, func() time.Time { return now })
	const batch = 1000
	ins, sums := make([]decide.Intent, ids), make([][32]byte, ids)
	for i := range ins {
		ins[i] = decide.Intent{WorkflowID: fmt.Sprintf("activity-a:%d", i)}
		_, sums[i] = keySumOf(ins[i].WorkflowID)
	}
	got := make([]stored, ids)
	uniq := make([]int, batch)
	hits := 0
	b.ResetTimer()
	for n := 0; n < b.N; n += batch {
		b.StopTimer()
		for k := 0; k < len(other); k += 64 {
			other[k]++
		}
		b.StartTimer()
		from := n % ids
		for j := range uniq {
			uniq[j] = (from + j) % ids
		}
		since := c.since()
		left := c.answer(ins, sums, uniq, got)
		hits += batch - len(left)
		c.remember(ins, sums, left, since)
	}
	b.ReportMetric(float64(hits)/float64(b.N), "hits/ID")
}

// A replay of more IDs than the memory holds: every ID misses and is
// remembered.
func BenchmarkStartedCacheReplayPastItsSize(b *testing.B) { benchStartedCache(b, 100_000, 200_000) }

// A producer's retries of IDs the memory holds: every ID after the first
// round is answered.
func BenchmarkStartedCacheRetriesWithinItsSize(b *testing.B) { benchStartedCache(b, 100_000, 50_000) }
