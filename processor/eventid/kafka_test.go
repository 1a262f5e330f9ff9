package eventid

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor/tenantsig"
)

// ReadKafka copies no header: the decoder reads the record's own.
func TestReadKafkaReadsTheRecordsHeadersWithoutCopying(t *testing.T) {
	kr := &kgo.Record{Topic: "t", Value: []byte(`{}`), Headers: []kgo.RecordHeader{{Key: "ce_id", Value: []byte("a")}, {Key: "ce_type", Value: []byte("x")}}}
	if n := testing.AllocsPerRun(100, func() { _ = ReadKafka(kr) }); n != 0 {
		t.Fatalf("ReadKafka allocates %v times a record, want 0", n)
	}
	r := ReadKafka(kr)
	if len(r.Headers) != 2 || &r.Headers[0] != &kr.Headers[0] {
		t.Fatalf("ReadKafka's headers are not the record's: %v", r.Headers)
	}
}

// Sharing is safe for an append: one to the Record's headers grows a
// copy, never writes into the spare room of the record's slice, which its
// owner appends to next.
func TestAnAppendToReadKafkasHeadersNeverWritesIntoTheRecords(t *testing.T) {
	hs := make([]kgo.RecordHeader, 1, 4)
	hs[0] = kgo.RecordHeader{Key: "ce_id", Value: []byte("a")}
	kr := &kgo.Record{Headers: hs}
	r := ReadKafka(kr)
	r.Headers = append(r.Headers, Header{Key: "dedup-tenant", Value: []byte("acme")})
	if spare := kr.Headers[:2][1]; spare.Key != "" || spare.Value != nil {
		t.Fatalf("the append wrote %q into the record's spare room", spare.Key)
	}
	kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: "mine"})
	if r.Headers[1].Key != "dedup-tenant" {
		t.Fatalf("the record's own append changed the Record's headers: %v", r.Headers)
	}
}

// FromKafka's Record is the caller's: what it does to the Record's
// headers in place (drop one, edit one, reorder them: all without an
// append) must not change kr, which the caller still produces, commits or
// dead-letters. (ReadKafka, which only Decide uses, shares them.)
func TestAnInPlaceEditOfFromKafkasHeadersNeverChangesTheRecord(t *testing.T) {
	orig := func() *kgo.Record {
		return &kgo.Record{Topic: "t", Value: []byte(`{"total":1}`), Headers: []kgo.RecordHeader{
			{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_type", Value: []byte("order.created")},
			{Key: "ce_id", Value: []byte("k-9")}, {Key: TenantHeader, Value: []byte("acme")},
			{Key: tenantsig.Header, Value: []byte("v1;kid=k1;AAAA")}, {Key: "traceparent", Value: []byte("00-aa-bb-01")},
		}}
	}
	for name, edit := range map[string]func(r *Record){
		// a caller that strips the signature before asking for a new one
		// (what decide.SignTenant does to kr, done to the Record instead)
		"delete the signature": func(r *Record) {
			r.Headers = slices.DeleteFunc(r.Headers, func(h Header) bool { return h.Key == tenantsig.Header })
		},
		"edit a header's value": func(r *Record) {
			for i := range r.Headers {
				if r.Headers[i].Key == "ce_id" {
					r.Headers[i].Value = []byte("normalised")
				}
			}
		},
		"sort the headers": func(r *Record) {
			slices.SortFunc(r.Headers, func(a, b Header) int { return strings.Compare(a.Key, b.Key) })
		},
	} {
		kr, want := orig(), orig()
		r := FromKafka(kr)
		edit(&r)
		if !reflect.DeepEqual(kr.Headers, want.Headers) {
			t.Errorf("%s: an edit of FromKafka's Record changed the kgo.Record's headers:\n got %q\nwant %q", name, kr.Headers, want.Headers)
		}
	}
}
