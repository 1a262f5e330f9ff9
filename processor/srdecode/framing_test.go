package srdecode_test

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/dedupio/dedup/internal/testsupport/srstandin"
	"github.com/dedupio/dedup/processor/srdecode"
)

// FuzzConfluentFraming holds the framing's rules on any bytes: a value
// that reads as framed has its ID and rest exactly as written (header
// re-encoded + rest = the value), message indexes that read re-encode to
// bytes that read the same, and decoding with a Protobuf and an Avro schema never
// panics: an error or a JSON value.
func FuzzConfluentFraming(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 1, 0, 10, 1, 'x'})
	f.Add([]byte{0, 0, 0, 0, 2, 2, 'x'})
	f.Add([]byte{0, 0, 0, 0, 1, 4, 2, 2, 10, 1, 'y'})
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff, 0x81})
	f.Add([]byte(`{"type":"t"}`))
	stand := srstandin.New()
	defer stand.Close()
	pid, _ := stand.Register("p", sr.Schema{Schema: shopProto, Type: sr.TypeProtobuf})
	aid, _ := stand.Register("a", sr.Schema{Schema: orderV1})
	if pid != 1 || aid != 2 {
		f.Fatalf("ids %d, %d", pid, aid)
	}
	cl, err := sr.NewClient(sr.URLs(stand.URL()))
	if err != nil {
		f.Fatal(err)
	}
	reg := srdecode.New(cl)
	if err := reg.Resolve(context.Background(), [][]byte{{0, 0, 0, 0, 1}, {0, 0, 0, 0, 2}}); err != nil {
		f.Fatal(err)
	}
	var h sr.ConfluentHeader
	f.Fuzz(func(t *testing.T, v []byte) {
		if !srdecode.Framed(v) {
			return
		}
		id, rest, err := srdecode.SchemaID(v)
		if err != nil {
			if len(v) >= 5 {
				t.Fatalf("a framed value of %d bytes has no ID: %v", len(v), err)
			}
			return
		}
		again, err := h.AppendEncode(nil, id, nil)
		if err != nil || !bytes.Equal(append(again, rest...), v) {
			t.Fatalf("header of id %d re-encodes to %x, not %x (%v)", id, again, v[:5], err)
		}
		if idx, _, err := srdecode.MessageIndexes(rest); err == nil {
			enc, err := h.AppendEncode(nil, id, idx)
			if err != nil {
				t.Fatalf("indexes %v do not encode: %v", idx, err)
			}
			// Varints have more than one spelling (0x80 0x00 is 0): the
			// rule is that what was read reads back the same.
			back, left, err := srdecode.MessageIndexes(enc[5:])
			if err != nil || len(left) != 0 || !slices.Equal(back, idx) {
				t.Fatalf("indexes %v re-encode to %x, which reads %v (%v)", idx, enc[5:], back, err)
			}
		}
		if id == 1 || id == 2 {
			_, _ = reg.Decode(v) // must not panic
		}
	})
}
