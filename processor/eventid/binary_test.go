package eventid

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"testing"
)

// protobufBytes is a Protobuf message (field 1 varint 150, field 2 the
// string "testing", field 3 bytes 00 ff): not UTF-8 text, not JSON.
var protobufBytes = []byte{0x08, 0x96, 0x01, 0x12, 0x07, 't', 'e', 's', 't', 'i', 'n', 'g', 0x1a, 0x02, 0x00, 0xff}

func binaryRec(value []byte, headers ...string) Record {
	r := rec("", headers...)
	r.Value = value
	return r
}

// Issue #15: a binary-mode record with ce_id, ce_type, ce_source and a
// content type that is not JSON (text/plain, Protobuf, Avro) is an event
// whose data is its value's bytes, as they were; its identity hashes the
// raw bytes.
func TestBinaryModeDataOfAnyContentType(t *testing.T) {
	d := mustDecoder(t, nil)
	ce := func(extra ...string) []string {
		return append([]string{"ce_specversion", "1.0", "ce_id", "evt-1", "ce_type", "order.created", "ce_source", "shop"}, extra...)
	}
	cases := []struct {
		name      string
		r         Record
		wantBytes []byte // nil: JSON data
		wantData  string
		wantCT    string
	}{
		{name: "text/plain in ce_datacontenttype (as the issue tried it)", r: binaryRec([]byte("hello, world"), ce("ce_datacontenttype", "text/plain")...),
			wantBytes: []byte("hello, world"), wantData: "null", wantCT: "text/plain"},
		{name: "protobuf in content-type (the Kafka binding's header)", r: binaryRec(protobufBytes, ce("content-type", "application/protobuf")...),
			wantBytes: protobufBytes, wantData: "null", wantCT: "application/protobuf"},
		{name: "avro", r: binaryRec([]byte{0x00, 0x02, 0x06, 'f', 'o', 'o'}, ce("content-type", "avro/binary")...),
			wantBytes: []byte{0x00, 0x02, 0x06, 'f', 'o', 'o'}, wantData: "null", wantCT: "avro/binary"},
		{name: "text that happens to be JSON is still text", r: binaryRec([]byte("123"), ce("content-type", "text/plain; charset=utf-8")...),
			wantBytes: []byte("123"), wantData: "null", wantCT: "text/plain; charset=utf-8"},
		{name: "white space is kept in bytes", r: binaryRec([]byte(" a \n"), ce("content-type", "text/plain")...),
			wantBytes: []byte(" a \n"), wantData: "null", wantCT: "text/plain"},
		{name: "content-type wins over ce_datacontenttype", r: binaryRec([]byte(`{"a":1}`), ce("content-type", "application/json", "ce_datacontenttype", "text/plain")...),
			wantData: `{"a":1}`, wantCT: "application/json"},
		{name: "JSON with a charset", r: binaryRec([]byte(`{"a": 1}`), ce("content-type", "application/json; charset=utf-8")...),
			wantData: `{"a":1}`, wantCT: "application/json; charset=utf-8"},
		{name: "a +json type is JSON", r: binaryRec([]byte(`[1, 2]`), ce("content-type", "application/vnd.shop+json")...),
			wantData: `[1,2]`, wantCT: "application/vnd.shop+json"},
		{name: "no content type, JSON value", r: binaryRec([]byte(`{"a":1}`), ce()...), wantData: `{"a":1}`},
		{name: "no content type, not JSON: bytes", r: binaryRec(protobufBytes, ce()...), wantBytes: protobufBytes, wantData: "null"},
		{name: "empty value: no data", r: binaryRec([]byte{}, ce("content-type", "text/plain")...), wantData: "null", wantCT: "text/plain"},
		{name: "null value with CloudEvents headers: an event without data", r: binaryRec(nil, ce()...), wantData: "null"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := d.Decode(tc.r)
			if err != nil {
				t.Fatal(err)
			}
			if ev.ID != "evt-1" || ev.Rule != RuleHeader || ev.Type != "order.created" || ev.Source != "shop" {
				t.Fatalf("event %+v", ev)
			}
			if !bytes.Equal(ev.Bytes, tc.wantBytes) || (tc.wantBytes == nil) != (ev.Bytes == nil) {
				t.Errorf("bytes = %q, want %q", ev.Bytes, tc.wantBytes)
			}
			if compacted(ev.Data) != tc.wantData || ev.ContentType != tc.wantCT {
				t.Errorf("data = %s, content type %q; want %s, %q", ev.Data, ev.ContentType, tc.wantData, tc.wantCT)
			}
		})
	}
}

// The content rule and the payload hash of binary data are the raw bytes':
// one byte more or less is another event; the same bytes at another offset
// are the same event; and the same event in structured mode (data_base64)
// has the same identity.
func TestBinaryDataIdentityIsItsBytes(t *testing.T) {
	d := mustDecoder(t, func(c *Config) { c.Chain = []Rule{RuleContent} })
	withCT := func(v []byte) Record {
		return binaryRec(v, "ce_specversion", "1.0", "ce_type", "order.created", "ce_source", "shop", "content-type", "application/protobuf")
	}
	a, err := d.Decode(withCT(protobufBytes))
	if err != nil {
		t.Fatal(err)
	}
	moved := withCT(bytes.Clone(protobufBytes))
	moved.Partition, moved.Offset = 7, 9000
	if b, _ := d.Decode(moved); b.ID != a.ID || b.PayloadHash != a.PayloadHash {
		t.Errorf("same bytes at another offset: %s vs %s", b.ID, a.ID)
	}
	for i := range protobufBytes {
		other := bytes.Clone(protobufBytes)
		other[i] ^= 0x01
		if b, _ := d.Decode(withCT(other)); b.ID == a.ID || b.PayloadHash == a.PayloadHash {
			t.Errorf("byte %d flipped, same identity", i)
		}
	}
	if b, _ := d.Decode(withCT(protobufBytes[:len(protobufBytes)-1])); b.ID == a.ID {
		t.Error("one byte shorter, same identity")
	}
	// The content type is not part of the identity: the bytes are.
	text := binaryRec(protobufBytes, "ce_specversion", "1.0", "ce_type", "order.created", "ce_source", "shop", "content-type", "application/x-other")
	if b, _ := d.Decode(text); b.ID != a.ID || b.PayloadHash != a.PayloadHash {
		t.Error("another content type changed the identity")
	}
	structured := rec(fmt.Sprintf(`{"specversion":"1.0","type":"order.created","source":"shop","datacontenttype":"application/protobuf","data_base64":%q}`,
		base64.StdEncoding.EncodeToString(protobufBytes)))
	if b, err := d.Decode(structured); err != nil || b.ID != a.ID || b.PayloadHash != a.PayloadHash {
		t.Errorf("structured data_base64 of the same bytes: %s (%v), binary mode %s", b.ID, err, a.ID)
	} else if b.ContentType != "application/protobuf" {
		t.Errorf("structured datacontenttype = %q", b.ContentType)
	}
}

// A null value without CloudEvents headers is a tombstone (log
// compaction's delete marker): its own reason, which the router skips; an
// empty (not null) value stays undecodable, as before.
func TestTombstone(t *testing.T) {
	d := mustDecoder(t, nil)
	if _, err := d.Decode(binaryRec(nil)); ReasonOf(err) != ReasonTombstone {
		t.Errorf("null value: %v, want a tombstone", err)
	}
	if _, err := d.Decode(binaryRec(nil, "idempotency-key", "k")); ReasonOf(err) != ReasonTombstone {
		t.Errorf("null value with other headers: %v, want a tombstone", err)
	}
	if _, err := d.Decode(binaryRec([]byte{})); ReasonOf(err) != ReasonUndecodable {
		t.Errorf("empty value: %v, want undecodable", err)
	}
	plain := mustDecoder(t, func(c *Config) { c.Format = FormatPlain })
	if _, err := plain.Decode(binaryRec(nil, "ce_type", "t")); ReasonOf(err) != ReasonTombstone {
		t.Errorf("plain format, null value: %v, want a tombstone", err)
	}
}

func TestJSONContentType(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/json": true, "Application/JSON; charset=utf-8": true, "text/json": true, "application/cloudevents+json": true,
		"application/vnd.api+json": true, "": false, "text/plain": false, "application/protobuf": false, "application/x-protobuf": false,
		"avro/binary": false, "application/octet-stream": false, "application/jsonx": false,
	} {
		if got := JSONContentType(ct); got != want {
			t.Errorf("%q: %v, want %v", ct, got, want)
		}
	}
}
