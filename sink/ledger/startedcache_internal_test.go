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
			if n := len(c.young) + len(c.old); n > entries {
				t.Fatalf("entries %d: %d held after %d IDs", entries, n, i+1)
			}
			got := make([]stored, len(ins))
			if left := c.answer(ins, sums, []int{i}, got); len(left) != 0 {
				t.Fatalf("entries %d: the ID just remembered (%d) is not answered", entries, i)
			}
			now = now.Add(time.Millisecond)
		}
	}
}

// The runbook, the example config and Config.StartedCache say a
// remembered workflow ID costs 95 to 150 bytes (twice that between
// collections), and maxStartedCache's 10,000,000 about 1.2 GB: a user
// sizes a replica's memory by them (adversary 36b: they said 80 and
// 800 MB). Measured on the live heap when the cache is full (young one
// short of half, old half), right after a collection, with 10% slack
// over the figure.
func TestAFullStartedCacheHoldsAtMostAbout150BytesAnID(t *testing.T) {
	const perID = 150 * 1.1
	for _, entries := range []int{100_000, 1_000_000} {
		now := time.Unix(1e9, 0)
		runtime.GC()
		var before, full runtime.MemStats
		runtime.ReadMemStats(&before)
		c := newStartedCache(entries, func() time.Time { return now })
		ins, sums := make([]decide.Intent, 1), make([][32]byte, 1)
		for k, rotations := 0, 0; rotations < 2; k++ {
			ins[0] = decide.Intent{WorkflowID: fmt.Sprintf("activity-a:%d", k)}
			_, sums[0] = keySumOf(ins[0].WorkflowID)
			c.remember(ins, sums, []int{0}, c.since())
			if len(c.young) == c.half-1 && len(c.old) == c.half {
				rotations++ // the second time: the young map made as large as the old one
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&full)
		held := len(c.young) + len(c.old)
		live := float64(full.HeapAlloc) - float64(before.HeapAlloc)
		if live/float64(held) > perID {
			t.Errorf("started_cache %d: %d IDs held in %.0f MB of live heap, %.0f bytes an ID; the docs say at most about 150",
				entries, held, live/1e6, live/float64(held))
		}
		runtime.KeepAlive(c)
	}
}
