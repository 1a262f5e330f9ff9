package eventid

import (
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/internal/demo/workload"
)

// BenchmarkDecode decodes a mixed workload (CloudEvents structured and
// binary, plain with and without IDs), 256-byte payloads.
func BenchmarkDecode(b *testing.B) {
	w := workload.Generate(workload.Spec{Topic: "t", Partitions: 8, Records: 1000, DupRatio: 0.3, Seed: 1, PayloadBytes: 256})
	recs := make([]Record, len(w.Records))
	for i, kr := range w.Records {
		recs[i] = toRecord(kr)
	}
	d, _ := NewDecoder(DefaultConfig())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := d.Decode(recs[i%len(recs)]); err != nil {
			b.Fatal(err)
		}
	}
}

func toRecord(kr *kgo.Record) Record {
	r := Record{Topic: kr.Topic, Partition: kr.Partition, Offset: kr.Offset, Key: kr.Key, Value: kr.Value}
	r.Headers = append(r.Headers, kr.Headers...)
	return r
}

// BenchmarkDecodeContentRule decodes plain JSON records without an ID
// (256-byte payloads): the default chain ends at the content rule, whose
// ID is a second SHA-256 beside the payload hash (the data hashed once,
// both from its state).
func BenchmarkDecodeContentRule(b *testing.B) {
	recs := make([]Record, 64)
	for i := range recs {
		v := fmt.Sprintf(`{"type":"order.placed","source":"/shop","data":{"order":%d,"customer":"c-%d","lines":[{"sku":"A-1","qty":2,"price":12.5},{"sku":"B-7","qty":1,"price":3.25}],"note":%q}}`,
			i, i*7, strings.Repeat("x", 64))
		recs[i] = Record{Topic: "t", Offset: int64(i), Key: []byte(fmt.Sprint("k", i)), Value: []byte(v)}
	}
	d, _ := NewDecoder(DefaultConfig())
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ev, err := d.Decode(recs[i%len(recs)])
		if err != nil || ev.Rule != RuleContent {
			b.Fatal(ev.Rule, err)
		}
	}
}
