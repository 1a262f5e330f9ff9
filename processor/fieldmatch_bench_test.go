package processor

import (
	"testing"

	"github.com/dedupio/dedup/internal/demo/workload"
	"github.com/dedupio/dedup/processor/decide"
)

// BenchmarkDecideFieldMatch is BenchmarkDecide with each route also
// matching on two fields of the data (match.fields): the cost of reading
// them from the 256-byte payloads.
func BenchmarkDecideFieldMatch(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Brokers, cfg.Group, cfg.Topics, cfg.ResetOffset = []string{"x:1"}, "g", []string{"t"}, "earliest"
	fields := map[string]string{"data.customer": "customer-*", "data.amount": "*"}
	cfg.Routes = decide.Routes{
		{ID: "order-confirmation", Match: decide.Match{Type: workload.TypeOrder, Fields: fields}, WorkflowType: "W", TaskQueue: "q"},
		{ID: "welcome-email", Match: decide.Match{Type: workload.TypeSignup, Fields: fields}, WorkflowType: "W", TaskQueue: "q"},
		{ID: "crm-sync", Match: decide.Match{Type: workload.TypeSignup, Fields: fields}, WorkflowType: "W", TaskQueue: "q"},
	}
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	d, err := decide.NewDecider(cfg.Decide())
	if err != nil {
		b.Fatal(err)
	}
	w := workload.Generate(workload.Spec{Topic: "t", Partitions: 8, Records: 1000, DupRatio: 0.3, Seed: 1, PayloadBytes: 256})
	routed := 0
	for _, r := range w.Records {
		if dec := d.Decide(r); len(dec.Intents) > 0 {
			routed++
		}
	}
	if routed < len(w.Records)/2 {
		b.Fatalf("%d of %d records routed: the fields do not match the workload", routed, len(w.Records))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if dec := d.Decide(w.Records[i%len(w.Records)]); dec.DeadLetter != "" {
			b.Fatal(dec.Err)
		}
	}
}
