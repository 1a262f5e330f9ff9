package eventid

import (
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
