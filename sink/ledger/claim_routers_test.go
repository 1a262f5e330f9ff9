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

// Two routers claim the same IDs with another payload than their rows',
// in opposite orders, round after round (a producer's retries of a
// changed event read by two consumer groups): every copy is a conflict,
// no claim fails (no deadlock between the claims' writes, the conflicts'
// rows included), and each copy is counted once.
func TestRoutersRecordingTheSameConflictsInOppositeOrdersDoNotDeadlock(t *testing.T) {
	l := open(t)
	ls, fs := routers(t, l, 2)
	ctx := context.Background()
	const n, rounds = 200, 15
	var ids []string
	for i := 0; i < n; i++ {
		ids = append(ids, fmt.Sprintf("c-%d", i))
	}
	var seed []decide.Intent
	for _, id := range ids {
		seed = append(seed, intent(id, "p"))
	}
	claim(t, l, seed...)
	for r := 0; r < rounds; r++ {
		batches := make([][]decide.Intent, 2)
		for k := range batches {
			for i := range ids {
				id := ids[i]
				if k == 1 {
					id = ids[n-1-i]
				}
				in := intent(id, fmt.Sprintf("other-%d", r%3))
				in.Partition, in.Offset, in.Fence = int32(k), int64(r*n+i), fs[k]
				batches[k] = append(batches[k], in)
			}
		}
		got := make([][]decide.Claimed, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for k := range batches {
			wg.Add(1)
			go func() { defer wg.Done(); got[k], errs[k] = ls[k].Claim(ctx, batches[k]) }()
		}
		wg.Wait()
		for k := range batches {
			if errs[k] != nil {
				t.Fatalf("round %d: router %d: %v", r, k, errs[k])
			}
			for i, c := range got[k] {
				if c.Verdict != decide.VerdictConflict {
					t.Fatalf("round %d: router %d: %s: %v, want a conflict", r, k, batches[k][i].EventID, c.Verdict)
				}
			}
		}
	}
	var copies int
	if err := l.Pool().QueryRow(ctx, `SELECT sum(copies)::int FROM dedup_conflicts`).Scan(&copies); err != nil {
		t.Fatal(err)
	}
	if copies != 2*n*rounds {
		t.Fatalf("%d copies counted, want %d", copies, 2*n*rounds)
	}
}

// Two routers claim batches of the same new IDs and of conflicting
// copies of rows claimed before, in opposite orders, retrying a deadlock
// as the router does: each new ID is still New for exactly one of them.
// A claim writes its rows (claimSQL commits), then records its conflicts
// in a statement of its own; a deadlock there fails the claim after its
// rows were inserted, and its retry finds them pending (re-drive), as
// does the other router: the ID is New for neither.
func TestRoutersClaimingNewIDsAmongConflictsInOppositeOrdersGiveOneNewEach(t *testing.T) {
	l := open(t)
	ls, fs := routers(t, l, 2)
	ctx := context.Background()
	const old, fresh, rounds = 150, 50, 25
	var seed []decide.Intent
	for i := 0; i < old; i++ {
		seed = append(seed, intent(fmt.Sprintf("c-%d", i), "p"))
	}
	claim(t, l, seed...)
	for r := 0; r < rounds; r++ {
		var all []decide.Intent
		for i := 0; i < old; i++ {
			all = append(all, intent(fmt.Sprintf("c-%d", i), fmt.Sprintf("other-%d", r)))
			if i%3 == 0 {
				all = append(all, intent(fmt.Sprintf("n%d-%d", r, i/3), "p"))
			}
		}
		batches := make([][]decide.Intent, 2)
		for k := range batches {
			for i := range all {
				in := all[i]
				if k == 1 {
					in = all[len(all)-1-i]
				}
				in.Partition, in.Offset, in.Fence = int32(k), int64(r*1000+i), fs[k]
				batches[k] = append(batches[k], in)
			}
		}
		got := make([][]decide.Claimed, 2)
		errs, tries := make([]error, 2), make([]int, 2)
		var wg sync.WaitGroup
		for k := range batches {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[k] = retriedAfterDeadlock(func() (err error) {
					tries[k]++
					got[k], err = ls[k].Claim(ctx, batches[k])
					return err
				})
			}()
		}
		wg.Wait()
		news := map[string]int{}
		for k := range batches {
			if errs[k] != nil {
				t.Fatalf("round %d: router %d: %v", r, k, errs[k])
			}
			for i, c := range got[k] {
				if c.Verdict == decide.VerdictNew {
					news[batches[k][i].EventID]++
				}
			}
		}
		for i := 0; i < fresh; i++ {
			if id := fmt.Sprintf("n%d-%d", r, i); news[id] != 1 {
				t.Fatalf("round %d: %s New %d times, want once (claims tried %v times: a deadlock retried)", r, id, news[id], tries)
			}
		}
	}
}
