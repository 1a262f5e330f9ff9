package eventid

import (
	"testing"
)

// FuzzDecode feeds arbitrary values and headers to the decoder: it must
// never panic, and it must either return an *Error with a Reason or an
// event with a non-empty ID, a type, and a deterministic result.
func FuzzDecode(f *testing.F) {
	seeds := []struct {
		value, hk, hv string
	}{
		{`{"specversion":"1.0","id":"a","type":"t","source":"s","data":{"x":1}}`, "", ""},
		{`{"type":"t","x":[1,2,{"y":null}]}`, "", ""},
		{`{"id":12,"type":"t"}`, "idempotency-key", "k"},
		{`{"x":1}`, "ce_type", "t"},
		{`garbage`, "ce_specversion", "1.0"},
		{`{"type":"t","n":1e400}`, "", ""},
		{`{"type":"\ud800"}`, "", ""},
		{``, "ce_type", "t"},
		{"\x08\x96\x01", "ce_type", "t"},
		{`{"a":1}`, "content-type", "text/plain"},
	}
	for _, s := range seeds {
		f.Add([]byte(s.value), s.hk, []byte(s.hv), []byte("key"))
	}
	d, err := NewDecoder(DefaultConfig())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, value []byte, hk string, hv []byte, key []byte) {
		r := Record{Topic: "t", Partition: 1, Offset: 2, Key: key, Value: value}
		if hk != "" {
			r.Headers = []Header{{Key: hk, Value: hv}}
			if hk == "content-type" { // binary data of any type
				r.Headers = append(r.Headers, Header{Key: "ce_type", Value: []byte("t")})
			}
		}
		ev, err := d.Decode(r)
		if err != nil {
			if ReasonOf(err) == "" {
				t.Fatalf("error without a reason: %v", err)
			}
			return
		}
		if ev.ID == "" || ev.Type == "" || ev.Rule == "" {
			t.Fatalf("incomplete event %+v", ev)
		}
		again, err := d.Decode(r)
		if err != nil || again.ID != ev.ID || again.PayloadHash != ev.PayloadHash {
			t.Fatalf("not deterministic: %+v vs %+v (%v)", ev, again, err)
		}
	})
}
