package bench

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/internal/demo/workload"
	"github.com/dedupio/dedup/internal/testsupport/srstandin"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
)

// The sr-avro and sr-json stages compare the same logical records: each
// workload record (every format the workload writes: CloudEvents
// structured and binary, plain with and without an id) encoded as Avro
// through the registry and as plain JSON makes the same intents in the
// router's decider (workflow IDs, event IDs, ID rules, payload hashes),
// so their CPU per record differs by the decoding alone.
func TestCostRecordsDecideAlikeAsAvroAndAsJSON(t *testing.T) {
	e := &Env{In: &Infra{Brokers: []string{"127.0.0.1:9"}}, P: Params{Batch: 100, Concurrency: 4}}
	const topic = "costs"
	gen := func() []*kgo.Record {
		return workload.Generate(workload.Spec{Topic: topic, Partitions: 4, Records: 400, DupRatio: 0.3, CrossPartition: 0.1,
			Seed: 5, PayloadBytes: 256, IDPrefix: "c-"}).Records
	}
	asJSON, asAvro := gen(), gen()
	if err := encodeCostRecords(asJSON, jsonCostValue); err != nil {
		t.Fatal(err)
	}
	stand := srstandin.New()
	defer stand.Close()
	enc, err := avroCostValues(stand, topic)
	if err != nil {
		t.Fatal(err)
	}
	if err := encodeCostRecords(asAvro, enc); err != nil {
		t.Fatal(err)
	}
	if asAvro[0].Value[0] != 0 || asJSON[0].Value[0] != '{' {
		t.Fatalf("values are not Avro (%x...) and JSON (%q...)", asAvro[0].Value[:5], asJSON[0].Value[:5])
	}
	fromJSON, err := e.decidedIntents(t.Context(), topic, nil, asJSON)
	if err != nil {
		t.Fatal(err)
	}
	fromAvro, err := e.decidedIntents(t.Context(), topic, func(c *processor.Config) { c.SchemaRegistry.URL = stand.URL() }, asAvro)
	if err != nil {
		t.Fatal(err)
	}
	if len(fromJSON) < 200 {
		t.Fatalf("%d intents from 400 records at 30%% duplicates, want at least 200", len(fromJSON))
	}
	rules := map[string]int{}
	for _, in := range fromJSON {
		rules[in.IDRule]++
	}
	if rules["field"] == 0 || rules["content"] == 0 {
		t.Errorf("ID rules %v: want both field and content IDs", rules)
	}
	key := func(in decide.Intent) decide.Intent {
		return decide.Intent{WorkflowID: in.WorkflowID, ActivityID: in.ActivityID, EventID: in.EventID, IDRule: in.IDRule, PayloadHash: in.PayloadHash}
	}
	for i := range max(len(fromJSON), len(fromAvro)) {
		if i >= len(fromJSON) || i >= len(fromAvro) {
			t.Fatalf("%d intents from JSON, %d from Avro", len(fromJSON), len(fromAvro))
		}
		if key(fromJSON[i]) != key(fromAvro[i]) {
			t.Fatalf("intent %d: JSON %+v, Avro %+v", i, key(fromJSON[i]), key(fromAvro[i]))
		}
	}
	if stand.Requests() > 1 {
		t.Errorf("the registry was asked %d times, want once (the schema is cached by ID)", stand.Requests())
	}
}

// The report sets each costed run beside its baseline of the same
// repetition: Avro over JSON per record, tracing on over off per started
// workflow; a costs-only run reports those rows alone.
func TestCostRatiosSetEachCostedRunBesideItsBaseline(t *testing.T) {
	run := func(cpu float64, records, workflows int) RouterResult {
		return RouterResult{CPUSeconds: cpu, Records: Rate{N: records}, Workflows: Rate{N: workflows}}
	}
	rep := Rep{Costs: &CostRuns{
		AvroUnique: run(3, 1000, 900), JSONUnique: run(2, 1000, 900),
		AvroReplay: run(1.5, 1000, 0), JSONReplay: run(1, 1000, 0),
		TracingOn: run(1.2, 1000, 1000), TracingOff: run(1, 1000, 1000),
	}}
	rep.Costs.TracingOn.Spans = 4000
	r := &Report{Params: Params{CostRecords: 1000, CostsOnly: true}, Profiles: []Profile{{Latency: Latency{Name: "0ms"}, Reps: []Rep{rep}}}}
	r.Finish()
	want := map[string]float64{
		"router CPU per record, Avro through the Schema Registry / the same records as JSON (unique-heavy)":         1.5,
		"router CPU per record, Avro through the Schema Registry / the same records as JSON (all-duplicate replay)": 1.5,
		"router CPU per started workflow, tracing on (every trace sampled) / off (unique-heavy)":                    1.2,
		"spans per record, tracing on (unique-heavy)":                                                               4,
	}
	if len(r.Ratios) != len(costRatioDefs()) {
		t.Errorf("a costs-only report has %d rows, want the %d cost rows alone", len(r.Ratios), len(costRatioDefs()))
	}
	for _, row := range r.Ratios {
		if w, ok := want[row.Name]; ok {
			if d := row.Spread.Median - w; d > 1e-9 || d < -1e-9 {
				t.Errorf("%s: %v, want %v", row.Name, row.Spread.Median, w)
			}
			delete(want, row.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("rows missing: %v", want)
	}
	if md := r.Markdown(); !strings.Contains(md, "| Avro through the registry, unique-heavy |") || strings.Contains(md, "raw Temporal starts") || strings.Contains(md, "Watermill") {
		t.Errorf("a costs-only report's tables:\n%s", md)
	}
}
