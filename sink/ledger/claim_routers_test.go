package ledger_test

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/sink/ledger"
)

// routers opens n ledgers on l's database, each on a pool of its own, each
// owning partition k of topic "events" in group "g" (its fence).
func routers(t *testing.T, l *ledger.Postgres, n int) ([]*ledger.Postgres, []decide.Fence) {
	t.Helper()
	ctx := context.Background()
	ls, fs := make([]*ledger.Postgres, n), make([]decide.Fence, n)
	for k := range ls {
		p, err := pgxpool.New(ctx, l.Pool().Config().ConnString())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		ls[k] = ledger.NewFromPool(p)
		e, err := ls[k].Own(ctx, processor.Ownership{Group: "g", Member: fmt.Sprintf("r%d", k),
			Parts: []processor.PartitionRef{{Topic: "events", Partition: int32(k)}}})
		if err != nil {
			t.Fatal(err)
		}
		fs[k] = decide.Fence{Group: "g", Epoch: e[0]}
	}
	return ls, fs
}

// Three routers (pools of their own, each fenced on its own partition)
// claim, round after round, batches of the same IDs, each in an order of
// its own: the last round's IDs (started: the replay's read answers them
// after the first round) and new ones. No claim fails (no deadlock
// between the claims' row locks, taken in key order whatever the batch's
// order), each new ID is New for exactly one router, the others' copies
// re-drives or duplicates, and a started ID a duplicate for all.
func TestRoutersClaimingOneBatchInOrdersOfTheirOwnGiveOneNewEach(t *testing.T) {
	ls, fs := routers(t, open(t), 3)
	ctx := context.Background()
	const rounds, fresh = 12, 30
	var last []string
	for r := 0; r < rounds; r++ {
		ids := append([]string(nil), last...)
		for i := 0; i < fresh; i++ {
			ids = append(ids, fmt.Sprintf("r%d-%d", r, i))
		}
		batches := make([][]decide.Intent, len(ls))
		for k := range ls {
			order := append([]string(nil), ids...)
			rand.New(rand.NewSource(int64(r*10+k))).Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			for i, id := range order {
				in := intent(id, "p")
				in.Partition, in.Offset, in.Fence = int32(k), int64(r*1000+i), fs[k]
				batches[k] = append(batches[k], in)
			}
		}
		got := make([][]decide.Claimed, len(ls))
		errs := make([]error, len(ls))
		var wg sync.WaitGroup
		for k := range ls {
			wg.Add(1)
			go func() { defer wg.Done(); got[k], errs[k] = ls[k].Claim(ctx, batches[k]) }()
		}
		wg.Wait()
		news := map[string]int{}
		var started []processor.Started
		for k := range ls {
			if errs[k] != nil {
				t.Fatalf("round %d: router %d: %v", r, k, errs[k])
			}
			for i, c := range got[k] {
				in := batches[k][i]
				old := !strings.HasPrefix(in.EventID, fmt.Sprintf("r%d-", r))
				switch {
				case old && c.Verdict != decide.VerdictDuplicate:
					t.Fatalf("round %d: router %d: %s (started): %v", r, k, in.EventID, c.Verdict)
				case c.Verdict == decide.VerdictNew:
					news[in.EventID]++
					started = append(started, processor.Started{WorkflowID: in.WorkflowID, RunID: "run", Generation: 1,
						Topic: in.Topic, Partition: in.Partition, Fence: in.Fence})
				case !old && c.Verdict != decide.VerdictRedrive && c.Verdict != decide.VerdictDuplicate:
					t.Fatalf("round %d: router %d: %s: %v", r, k, in.EventID, c.Verdict)
				}
			}
		}
		last = last[:0]
		for i := 0; i < fresh; i++ {
			id := fmt.Sprintf("r%d-%d", r, i)
			if news[id] != 1 {
				t.Fatalf("round %d: %s New %d times, want once", r, id, news[id])
			}
			last = append(last, id)
		}
		if err := ls[0].MarkStarted(ctx, started); err != nil {
			if _, ok := processor.IsFenced(err); !ok {
				t.Fatal(err)
			}
		}
	}
}
