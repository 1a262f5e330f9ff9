package processor

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupio/dedup/internal/demo/workload"
	"github.com/dedupio/dedup/processor/decide"
)

// BenchmarkDispatchDuplicates is the claimer's bookkeeping of one
// duplicate intent once the ledger answered (batches of 500, every intent
// a duplicate of a started row, the log at info): what an all-duplicate
// replay pays per record after Decide and the claim's round trip.
func BenchmarkDispatchDuplicates(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Brokers, cfg.Group, cfg.Topics, cfg.ResetOffset = []string{"x:1"}, "g", []string{"t"}, "earliest"
	cfg.Routes = decide.Routes{
		{ID: "order-confirmation", Match: decide.Match{Type: workload.TypeOrder}, WorkflowType: "W", TaskQueue: "q"},
		{ID: "welcome-email", Match: decide.Match{Type: workload.TypeSignup}, WorkflowType: "W", TaskQueue: "q"},
	}
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	d, err := decide.NewDecider(cfg.Decide())
	if err != nil {
		b.Fatal(err)
	}
	m, err := newMetrics(prometheus.NewRegistry(), []string{"t"})
	if err != nil {
		b.Fatal(err)
	}
	w := workload.Generate(workload.Spec{Topic: "t", Partitions: 8, Records: 500, Seed: 1, PayloadBytes: 256})
	var batch claimBatch
	for _, kr := range w.Records {
		dec := d.Decide(kr)
		for j, in := range dec.Intents {
			batch.intents = append(batch.intents, in)
			batch.starts = append(batch.starts, startRef{d: &dec, j: j})
			batch.owners = append(batch.owners, nil)
		}
	}
	verdicts := make([]decide.Claimed, len(batch.intents))
	for i := range verdicts {
		verdicts[i] = decide.Claimed{Verdict: decide.VerdictDuplicate, Generation: 1}
	}
	ended := 0
	c := &claimer{log: slog.New(slog.NewJSONHandler(io.Discard, nil)), m: m, end: func(*record, bool) { ended++ },
		endAll: func(recs []*record, _ bool) { ended += len(recs) }}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		c.dispatch(ctx, &batch, verdicts)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(ended), "ns/intent")
	if ended == 0 {
		b.Fatal("no duplicate ended")
	}
}
