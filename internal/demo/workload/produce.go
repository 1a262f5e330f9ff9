package workload

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ProduceOptions drive a demo producer.
type ProduceOptions struct {
	Brokers    []string
	Topic      string
	Partitions int
	Rate       int     // records per second
	Limit      int     // stop after this many records; 0: until ctx ends
	DupRatio   float64 // share of re-sends
	OnError    func(error)
}

// Produce sends rounds of a demo workload at a steady rate: every round
// has fresh IDs, DupRatio re-sends (identical, and ID-less reshaped) and
// one same-ID-other-payload conflict.
func Produce(ctx context.Context, o ProduceOptions) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(o.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return fmt.Errorf("creating kafka client: %w", err)
	}
	defer cl.Close()
	const round = 1000
	sent := 0
	tick := time.NewTicker(time.Second / time.Duration(max(o.Rate, 1)))
	defer tick.Stop()
	for r := 0; o.Limit == 0 || sent < o.Limit; r++ {
		w := Generate(Spec{Topic: o.Topic, Partitions: o.Partitions, Records: round, DupRatio: o.DupRatio,
			Conflicts: 1, CrossPartition: 0.1, Seed: uint64(r + 1), IDPrefix: fmt.Sprintf("demo%d-%d-", time.Now().Unix(), r)})
		for _, rec := range w.Records {
			if o.Limit > 0 && sent >= o.Limit {
				break
			}
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
			cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
				if err != nil && ctx.Err() == nil && o.OnError != nil {
					o.OnError(err)
				}
			})
			sent++
		}
	}
	return cl.Flush(ctx)
}
