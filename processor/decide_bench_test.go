package processor

import (
	"testing"

	"github.com/dedupio/dedup/internal/demo/workload"
	"github.com/dedupio/dedup/processor/decide"
)

// BenchmarkDecide decides the benchmark's mixed workload (256-byte
// payloads, the benchmark's three routes): the router's CPU per record
// before any I/O, which the all-duplicate replay pays on every record.
func BenchmarkDecide(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Brokers, cfg.Group, cfg.Topics, cfg.ResetOffset = []string{"x:1"}, "g", []string{"t"}, "earliest"
	cfg.Routes = decide.Routes{
		{ID: "order-confirmation", Match: decide.Match{Type: workload.TypeOrder}, WorkflowType: "W", TaskQueue: "q"},
		{ID: "welcome-email", Match: decide.Match{Type: workload.TypeSignup}, WorkflowType: "W", TaskQueue: "q"},
		{ID: "crm-sync", Match: decide.Match{Type: workload.TypeSignup}, WorkflowType: "W", TaskQueue: "q"},
	}
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	d, err := decide.NewDecider(cfg.Decide())
	if err != nil {
		b.Fatal(err)
	}
	w := workload.Generate(workload.Spec{Topic: "t", Partitions: 8, Records: 1000, DupRatio: 0.3, Seed: 1, PayloadBytes: 256})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if dec := d.Decide(w.Records[i%len(w.Records)]); dec.DeadLetter != "" {
			b.Fatal(dec.Err)
		}
	}
}
