package ledger

import (
	"fmt"
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
			got := map[string]stored{}
			if left := c.answer(ins, sums, []int{i}, got); len(left) != 0 {
				t.Fatalf("entries %d: the ID just remembered (%d) is not answered", entries, i)
			}
			now = now.Add(time.Millisecond)
		}
	}
}
