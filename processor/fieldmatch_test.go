package processor

import (
	"testing"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/dedupio/dedup/internal/testsupport/srstandin"
	"github.com/dedupio/dedup/processor/decide"
)

// orderStatusAvro is an order with a nested record and a nullable field,
// to route on.
const orderStatusAvro = `{"type":"record","name":"Order","namespace":"shop","fields":[
 {"name":"type","type":"string"},{"name":"order_id","type":"string"},{"name":"amount","type":"long"},
 {"name":"paid","type":"boolean"},{"name":"region","type":["null","string"],"default":null},
 {"name":"status","type":{"type":"record","name":"Status","fields":[{"name":"code","type":"string"}]}}]}`

// A route on fields of the data matches an Avro record behind the
// Schema Registry exactly as it matches the same record in JSON: on its
// logical value (a nested record, a long by its digits, a boolean, a
// nullable string), and a record whose field differs, is null, or whose
// field's type differs matches no route.
func TestDecideRoutesAvroAndJSONRecordsOnAFieldOfTheirData(t *testing.T) {
	stand := srstandin.New()
	defer stand.Close()
	id, _ := stand.Register("events-value", sr.Schema{Schema: orderStatusAvro})
	cfg := registryConfig(t, stand.URL())
	cfg.Routes = decide.Routes{{ID: "paid-eu", Match: decide.Match{Type: "order.*", Fields: map[string]string{
		"data.status.code": "paid", "data.region": "eu-*", "data.amount": "1200", "data.paid": "true"}}, WorkflowType: "W", TaskQueue: "q"}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	d, err := NewDecider(cfg)
	if err != nil {
		t.Fatal(err)
	}
	order := func(code string, region any, amount int64) map[string]any {
		return map[string]any{"type": "order.placed", "order_id": "o-1", "amount": amount, "paid": true, "region": region,
			"status": map[string]any{"code": code}}
	}
	cases := []struct {
		name  string
		value []byte
		match bool
	}{
		{"avro, all fields match", avroRecord(t, orderStatusAvro, id, order("paid", "eu-west-1", 1200)), true},
		{"json, all fields match", []byte(`{"type":"order.placed","order_id":"o-1","amount":1200,"paid":true,"region":"eu-west-1","status":{"code":"paid"}}`), true},
		{"avro, another status", avroRecord(t, orderStatusAvro, id, order("open", "eu-west-1", 1200)), false},
		{"json, another status", []byte(`{"type":"order.placed","amount":1200,"paid":true,"region":"eu-west-1","status":{"code":"open"}}`), false},
		{"avro, region null", avroRecord(t, orderStatusAvro, id, order("paid", nil, 1200)), false},
		{"json, region missing", []byte(`{"type":"order.placed","amount":1200,"paid":true,"status":{"code":"paid"}}`), false},
		{"avro, another amount", avroRecord(t, orderStatusAvro, id, order("paid", "eu-west-1", 12)), false},
		{"json, status of another type", []byte(`{"type":"order.placed","amount":1200,"paid":true,"region":"eu-west-1","status":"paid"}`), false},
	}
	vs := make([][]byte, len(cases))
	for i, c := range cases {
		vs[i] = c.value
	}
	for i, dc := range decideResolved(t, d, vs...) {
		c := cases[i]
		if dc.DeadLetter != "" {
			t.Fatalf("%s: dead letter %q (%v)", c.name, dc.DeadLetter, dc.Err)
		}
		if got := len(dc.Intents) == 1 && dc.Routes[0].ID == "paid-eu"; got != c.match || dc.NoRoute == c.match {
			t.Errorf("%s: %d intents, no route %v; want a match: %v (data %s)", c.name, len(dc.Intents), dc.NoRoute, c.match, dc.Event.Data)
		}
	}
}
