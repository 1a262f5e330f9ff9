package ledger_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
)

// BenchmarkClaimFence is the fence's cost on the claim: batches of 500
// intents over 8 partitions, claimed unfenced (as before the fence: empty
// fence arrays) and fenced (each intent carries its partition's epoch),
// alternating batch by batch so that the ledger's growth, autovacuum,
// checkpoints and the machine's load fall on both alike. "new" claims
// fresh IDs; "duplicate" claims batches again after their rows were marked
// started (a replay). It reports each side's rows/s and fenced/unfenced:
//
//	go test -run '^$' -bench ClaimFence -benchtime 400x ./sink/ledger
func BenchmarkClaimFence(b *testing.B) {
	l := open(b)
	ctx := context.Background()
	parts := make([]processor.PartitionRef, 8)
	for i := range parts {
		parts[i] = processor.PartitionRef{Topic: "events", Partition: int32(i)}
	}
	epochs, err := l.Own(ctx, processor.Ownership{Group: "g", Member: "bench", Parts: parts})
	if err != nil {
		b.Fatal(err)
	}
	seq := 0
	batch := func(fenced bool) []decide.Intent {
		out := make([]decide.Intent, 500)
		for i := range out {
			seq++
			out[i] = intent(fmt.Sprintf("bench-%d", seq), "v")
			out[i].Partition = int32(i % 8)
			if fenced {
				out[i].Fence = decide.Fence{Group: "g", Epoch: epochs[i%8]}
			}
		}
		return out
	}
	claim := func(in []decide.Intent) time.Duration {
		t0 := time.Now()
		if _, err := l.Claim(ctx, in); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	report := func(b *testing.B, took [2]time.Duration, n int) {
		b.ReportMetric(float64(500*n)/took[0].Seconds(), "unfenced-rows/s")
		b.ReportMetric(float64(500*n)/took[1].Seconds(), "fenced-rows/s")
		b.ReportMetric(took[0].Seconds()/took[1].Seconds(), "fenced/unfenced")
	}
	var done [2][][]decide.Intent
	b.Run("new", func(b *testing.B) {
		var took [2]time.Duration
		for i := 0; i < b.N; i++ {
			for k, fenced := range []bool{false, true} {
				in := batch(fenced)
				took[k] += claim(in)
				done[k] = append(done[k], in)
			}
		}
		report(b, took, b.N)
	})
	// Every batch claimed above, marked started (outside the timing).
	for k := range done {
		for _, in := range done[k] {
			st := make([]processor.Started, len(in))
			for i, x := range in {
				st[i] = processor.Started{WorkflowID: x.WorkflowID, RunID: "r", Generation: 1, Topic: x.Topic, Partition: x.Partition, Fence: x.Fence}
			}
			if err := l.MarkStarted(ctx, st); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("duplicate", func(b *testing.B) {
		var took [2]time.Duration
		for i := 0; i < b.N; i++ {
			for k := range done {
				took[k] += claim(done[k][i%len(done[k])])
			}
		}
		report(b, took, b.N)
	})
}
