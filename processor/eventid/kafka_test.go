package eventid

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// FromKafka copies no header: the decoder reads the record's own.
func TestFromKafkaReadsTheRecordsHeadersWithoutCopying(t *testing.T) {
	kr := &kgo.Record{Topic: "t", Value: []byte(`{}`), Headers: []kgo.RecordHeader{{Key: "ce_id", Value: []byte("a")}, {Key: "ce_type", Value: []byte("x")}}}
	if n := testing.AllocsPerRun(100, func() { _ = FromKafka(kr) }); n != 0 {
		t.Fatalf("FromKafka allocates %v times a record, want 0", n)
	}
	r := FromKafka(kr)
	if len(r.Headers) != 2 || &r.Headers[0] != &kr.Headers[0] {
		t.Fatalf("FromKafka's headers are not the record's: %v", r.Headers)
	}
}

// Sharing is safe: an append to the Record's headers (a caller adding one
// before Decode or SignTenant) grows a copy, never writes into the spare
// room of the record's slice, which its owner appends to next.
func TestAnAppendToFromKafkasHeadersNeverWritesIntoTheRecords(t *testing.T) {
	hs := make([]kgo.RecordHeader, 1, 4)
	hs[0] = kgo.RecordHeader{Key: "ce_id", Value: []byte("a")}
	kr := &kgo.Record{Headers: hs}
	r := FromKafka(kr)
	r.Headers = append(r.Headers, Header{Key: "dedup-tenant", Value: []byte("acme")})
	if spare := kr.Headers[:2][1]; spare.Key != "" || spare.Value != nil {
		t.Fatalf("the append wrote %q into the record's spare room", spare.Key)
	}
	kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: "mine"})
	if r.Headers[1].Key != "dedup-tenant" {
		t.Fatalf("the record's own append changed the Record's headers: %v", r.Headers)
	}
}
