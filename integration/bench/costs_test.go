package bench

import (
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
