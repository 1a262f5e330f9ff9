package processor

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/dedupio/dedup/internal/testsupport/srstandin"
)

// benchOrderAvro is an order with a nested record, an array and a
// nullable field: about 200 bytes as JSON.
const benchOrderAvro = `{"type":"record","name":"Order","namespace":"shop","fields":[
 {"name":"type","type":"string"},{"name":"order_id","type":"string"},{"name":"amount","type":"long"},
 {"name":"currency","type":"string"},{"name":"note","type":["null","string"],"default":null},
 {"name":"customer","type":{"type":"record","name":"Customer","fields":[{"name":"id","type":"string"},{"name":"email","type":"string"}]}},
 {"name":"skus","type":{"type":"array","items":"string"}}]}`

func benchOrder(i int) map[string]any {
	return map[string]any{"type": "order.placed", "order_id": fmt.Sprintf("o-%06d", i), "amount": int64(1000 + i), "currency": "EUR",
		"note": "leave at the door", "customer": map[string]any{"id": fmt.Sprintf("c-%04d", i%977), "email": "someone@example.com"},
		"skus": []any{"sku-1", "sku-22", "sku-333"}}
}

// BenchmarkDecideRegistryRecord is the router's CPU per record through
// Decide (decode, content ID, the signal route's template) for one order
// as an Avro record behind the registry (schema cached) and as the same
// logical record in JSON: the cost of Avro is the difference.
func BenchmarkDecideRegistryRecord(b *testing.B) {
	stand := srstandin.New()
	defer stand.Close()
	id, _ := stand.Register("events-value", sr.Schema{Schema: benchOrderAvro})
	d, err := NewDecider(registryConfig(b, stand.URL()))
	if err != nil {
		b.Fatal(err)
	}
	const n = 1000
	avroRecs, jsonRecs := make([]*kgo.Record, n), make([]*kgo.Record, n)
	for i := range n {
		avroRecs[i] = &kgo.Record{Topic: testTopic, Key: []byte("k"), Value: avroRecord(b, benchOrderAvro, id, benchOrder(i))}
		js, err := json.Marshal(benchOrder(i))
		if err != nil {
			b.Fatal(err)
		}
		jsonRecs[i] = &kgo.Record{Topic: testTopic, Key: []byte("k"), Value: js}
	}
	if err := d.Resolve(b.Context(), avroRecs); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		recs []*kgo.Record
	}{{"avro", avroRecs}, {"json", jsonRecs}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.recs[0].Value)))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if dec := d.Decide(c.recs[i%n]); dec.DeadLetter != "" {
					b.Fatal(dec.Err)
				}
			}
		})
	}
}
