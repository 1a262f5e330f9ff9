package srdecode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/hamba/avro/v2"
	"github.com/linkedin/goavro/v2"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/dedupio/dedup/internal/testsupport/srstandin"
	"github.com/dedupio/dedup/processor/srdecode"
)

const benchSchema = `{"type":"record","name":"Order","namespace":"shop","fields":[
 {"name":"type","type":"string"},{"name":"order_id","type":"string"},{"name":"amount","type":"long"},
 {"name":"currency","type":"string"},{"name":"note","type":["null","string"],"default":null},
 {"name":"customer","type":{"type":"record","name":"Customer","fields":[{"name":"id","type":"string"},{"name":"email","type":"string"}]}},
 {"name":"skus","type":{"type":"array","items":"string"}}]}`

// BenchmarkAvroToJSON is the Avro step alone, from the encoded record to
// its JSON: hamba/avro through the Registry (what dedup runs), against
// linkedin/goavro (native map, then encoding/json) on the same bytes.
func BenchmarkAvroToJSON(b *testing.B) {
	stand := srstandin.New()
	defer stand.Close()
	id, _ := stand.Register("s", sr.Schema{Schema: benchSchema})
	cl, err := sr.NewClient(sr.URLs(stand.URL()))
	if err != nil {
		b.Fatal(err)
	}
	reg := srdecode.New(cl)
	payload, err := avro.Marshal(avro.MustParse(benchSchema), map[string]any{"type": "order.placed", "order_id": "o-000001",
		"amount": int64(1001), "currency": "EUR", "note": "leave at the door",
		"customer": map[string]any{"id": "c-0001", "email": "someone@example.com"}, "skus": []any{"sku-1", "sku-22", "sku-333"}})
	if err != nil {
		b.Fatal(err)
	}
	framed := frame(b, id, nil, payload)
	if err := reg.Resolve(context.Background(), [][]byte{framed}); err != nil {
		b.Fatal(err)
	}
	codec, err := goavro.NewCodec(benchSchema)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("hamba", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := reg.Decode(framed); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("goavro", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			v, rest, err := codec.NativeFromBinary(payload)
			if err != nil || len(rest) != 0 {
				b.Fatal(err, len(rest))
			}
			if _, err := json.Marshal(v); err != nil {
				b.Fatal(fmt.Errorf("goavro value: %w", err))
			}
		}
	})
}
