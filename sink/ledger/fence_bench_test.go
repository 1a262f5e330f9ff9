package ledger_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/sink/ledger"
)

// BenchmarkClaimFence is the fence's cost: batches of 500 new intents over
// 8 partitions, claimed unfenced (the claim before the fence: empty fence
// arrays) and fenced (each intent carries its partition's epoch), then the
// same batches again (duplicates, the replay's claim), in one run:
//
//	go test -run '^$' -bench ClaimFence -benchtime 200x ./sink/ledger
func BenchmarkClaimFence(b *testing.B) {
	l := open(b)
	ctx := context.Background()
	parts := make([]processor.PartitionRef, 8)
	for i := range parts {
		parts[i] = processor.PartitionRef{Topic: "events", Partition: int32(i)}
	}
	epochs, err := l.Own(ctx, "g", "bench", parts)
	if err != nil {
		b.Fatal(err)
	}
	seq := 0
	batch := func(fenced bool) []processor.Intent {
		out := make([]processor.Intent, 500)
		for i := range out {
			seq++
			out[i] = intent(fmt.Sprintf("bench-%d-%t", seq, fenced), "v")
			out[i].Partition = int32(i % 8)
			if fenced {
				out[i].Fence = processor.Fence{Group: "g", Epoch: epochs[i%8]}
			}
		}
		return out
	}
	// Interleaved, so that the ledger's growth and the machine's load
	// fall on both alike.
	for round := 0; round < 3; round++ {
		for _, fenced := range []bool{false, true} {
			benchClaims(b, l, batch, fenced)
		}
	}
}

func benchClaims(b *testing.B, l *ledger.Postgres, batch func(bool) []processor.Intent, fenced bool) {
	ctx := context.Background()
	{
		name := map[bool]string{false: "unfenced", true: "fenced"}[fenced]
		var done [][]processor.Intent
		b.Run("new/"+name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				in := batch(fenced)
				if _, err := l.Claim(ctx, in); err != nil {
					b.Fatal(err)
				}
				done = append(done, in)
			}
			b.ReportMetric(float64(500*b.N)/b.Elapsed().Seconds(), "rows/s")
		})
		b.Run("duplicate/"+name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				in := done[i%len(done)]
				var st []processor.Started
				if i < len(done) {
					for _, x := range in {
						st = append(st, processor.Started{WorkflowID: x.WorkflowID, RunID: "r", Generation: 1, Topic: x.Topic, Partition: x.Partition, Fence: x.Fence})
					}
					b.StopTimer()
					if err := l.MarkStarted(ctx, st); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				if _, err := l.Claim(ctx, in); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(500*b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
