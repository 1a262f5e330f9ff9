package srdecode_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"

	"github.com/dedupio/dedup/processor/srdecode"
)

// The logical value of every kind of Avro schema, as avrojson.go states
// it: records in the writer's field order (a recursive one too), a union
// as its branch's value (a record included) or null, bytes and fixed as base64, enums as their
// symbol; a payload cut short, or with a byte more, is an error.
func TestAvroJSONOfEveryKindOfSchema(t *testing.T) {
	const kinds = `{"type":"record","name":"K","namespace":"x","fields":[
 {"name":"b","type":"boolean"},{"name":"i","type":"int"},{"name":"l","type":"long"},
 {"name":"f","type":"float"},{"name":"d","type":"double"},{"name":"s","type":"string"},{"name":"by","type":"bytes"},
 {"name":"fx","type":{"type":"fixed","name":"Two","size":2}},
 {"name":"e","type":{"type":"enum","name":"Colour","symbols":["RED","GREEN"]}},
 {"name":"a","type":{"type":"array","items":"long"}},{"name":"m","type":{"type":"map","values":"string"}},
 {"name":"n","type":["null","string"]},{"name":"u","type":["null","string","long","x.Colour"]},
 {"name":"next","type":["null","K"],"default":null}]}`
	sch := avro.MustParse(kinds)
	for i, c := range []struct {
		v    map[string]any
		want string
	}{
		{map[string]any{"b": true, "i": int32(-7), "l": int64(math.MaxInt64), "f": float32(1.5), "d": 1e-9, "s": "a\"b\\c\n\u0001é<&>",
			"by": []byte{0, 1, 0xff}, "fx": [2]byte{1, 2}, "e": "GREEN", "a": []int64{1, -2, 3}, "m": map[string]any{"k": "v"},
			"n": "x", "u": map[string]any{"long": int64(5)}, "next": map[string]any{"x.K": map[string]any{"b": false, "i": int32(0), "l": int64(0),
				"f": float32(0), "d": 1e21, "s": "", "by": []byte{}, "fx": [2]byte{}, "e": "RED", "a": []int64{}, "m": map[string]any{},
				"n": nil, "u": map[string]any{"x.Colour": "RED"}, "next": nil}}},
			`{"b":true,"i":-7,"l":"9223372036854775807","f":1.5,"d":1e-9,"s":"a\"b\\c\n\u0001é<&>","by":"AAH/","fx":"AQI=","e":"GREEN","a":[1,-2,3],"m":{"k":"v"},"n":"x","u":5,` +
				`"next":{"b":false,"i":0,"l":0,"f":0,"d":1e+21,"s":"","by":"","fx":"AAA=","e":"RED","a":[],"m":{},"n":null,"u":"RED","next":null}}`},
		{map[string]any{"b": false, "i": int32(math.MinInt32), "l": int64(math.MinInt64), "f": float32(0.25), "d": -2.5, "s": "\u00ff",
			"by": []byte("plain"), "fx": [2]byte{}, "e": "RED", "a": []int64{}, "m": map[string]any{}, "n": nil, "u": nil, "next": nil},
			`{"b":false,"i":-2147483648,"l":"-9223372036854775808","f":0.25,"d":-2.5,"s":"ÿ","by":"cGxhaW4=","fx":"AAA=","e":"RED","a":[],"m":{},"n":null,"u":null,"next":null}`},
	} {
		payload, err := avro.Marshal(sch, c.v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := srdecode.AvroJSON(kinds, payload)
		if err != nil {
			t.Fatalf("value %d: %v", i, err)
		}
		if string(got) != c.want {
			t.Errorf("value %d:\ngot  %s\nwant %s", i, got, c.want)
		}
		for _, bad := range [][]byte{payload[:len(payload)-1], append(append([]byte{}, payload...), 0)} {
			if _, err := srdecode.AvroJSON(kinds, bad); err == nil {
				t.Errorf("value %d: %d bytes of %d decoded", i, len(bad), len(payload))
			}
		}
	}
}

// Logical types: timestamps as RFC 3339 in UTC, dates as dates, decimals
// as exact decimal text (a string: no digit lost to a float), the others
// as their underlying value.
func TestAvroJSONOfLogicalTypes(t *testing.T) {
	const schema = `{"type":"record","name":"L","fields":[
 {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"us","type":{"type":"long","logicalType":"timestamp-micros"}},
 {"name":"day","type":{"type":"int","logicalType":"date"}},
 {"name":"tm","type":{"type":"int","logicalType":"time-millis"}},
 {"name":"id","type":{"type":"string","logicalType":"uuid"}},
 {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":40,"scale":3}},
 {"name":"small","type":{"type":"fixed","name":"D","size":4,"logicalType":"decimal","precision":9,"scale":4}},
 {"name":"opt","type":["null",{"type":"long","logicalType":"timestamp-millis"}]}]}`
	at := time.Date(2026, 3, 1, 9, 30, 0, 123000000, time.UTC)
	price, _ := new(big.Rat).SetString("-123456789012345678901234567890.125")
	payload, err := avro.Marshal(avro.MustParse(schema), map[string]any{"ts": at, "us": at.Add(456 * time.Microsecond),
		"day": at, "tm": 5 * time.Second, "id": "0190f1c2-7d1e-7000-8000-000000000001", "price": price,
		"small": big.NewRat(5, 10000), "opt": at})
	if err != nil {
		t.Fatal(err)
	}
	got, err := srdecode.AvroJSON(schema, payload)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"ts":"2026-03-01T09:30:00.123Z","us":"2026-03-01T09:30:00.123456Z","day":"2026-03-01","tm":5000,` +
		`"id":"0190f1c2-7d1e-7000-8000-000000000001","price":"-123456789012345678901234567890.125","small":"0.0005","opt":"2026-03-01T09:30:00.123Z"}`
	if string(got) != want {
		t.Errorf("\ngot  %s\nwant %s", got, want)
	}
}

// An array of a type that takes no bytes (null, an empty record) costs
// its writer nothing per item: a block header alone may announce 2^62 of
// them. The items a payload may announce are bounded by its length, so a
// few bytes never decode to gigabytes of JSON.
func TestAvroArrayOfEmptyItemsIsBoundedByThePayload(t *testing.T) {
	for _, schema := range []string{
		`{"type":"array","items":"null"}`,
		`{"type":"array","items":{"type":"record","name":"E","fields":[]}}`,
	} {
		// Block count 10,000,000 (zig-zag varint), then the end of the array.
		payload := binary.AppendVarint(nil, 10_000_000)
		payload = append(payload, 0)
		out, err := srdecode.AvroJSON(schema, payload)
		if err == nil {
			t.Errorf("%s: %d bytes decoded to %d bytes of JSON", schema, len(payload), len(out))
		}
	}
	// As many empty items as the payload has bytes still decode.
	payload := append(binary.AppendVarint(nil, 2), 0)
	if out, err := srdecode.AvroJSON(`{"type":"array","items":"null"}`, payload); err != nil || string(out) != "[null,null]" {
		t.Errorf("two nulls: %s, %v", out, err)
	}
}

// A fixed's size is the registry's word, not the payload's: a schema
// naming a fixed larger than any payload (or negative) is an error for
// the value, never an allocation of that size.
func TestAvroFixedLargerThanThePayloadIsAnError(t *testing.T) {
	for _, size := range []int{1 << 46, -1} {
		schema := fmt.Sprintf(`{"type":"fixed","name":"Big","size":%d}`, size)
		if _, err := srdecode.AvroJSON(schema, []byte{1, 2, 3}); err == nil {
			t.Errorf("size %d: a 3-byte payload decoded", size)
		}
	}
}

// An Avro string is UTF-8 (the spec). One that is not must not be read
// as U+FFFD: "\xff" and "\xfe" would then be one logical value, so two
// different records one event with one payload hash, the second skipped
// as a duplicate. It is an error (the record is undecodable), as the
// Avro spec wants. Map keys too.
func TestAvroStringThatIsNotUTF8IsAnError(t *testing.T) {
	for _, c := range []struct{ schema string }{
		{`"string"`},
		{`{"type":"string","logicalType":"uuid"}`},
		{`{"type":"map","values":"long"}`},
	} {
		for _, s := range []string{"\xff", "a\xfeb"} {
			var payload []byte
			if c.schema[0] == '{' && strings.Contains(c.schema, "map") {
				payload = binary.AppendVarint(nil, 1)
				payload = binary.AppendVarint(payload, int64(len(s)))
				payload = append(payload, s...)
				payload = append(payload, 2, 0) // the value 1, the end of the map
			} else {
				payload = binary.AppendVarint(nil, int64(len(s)))
				payload = append(payload, s...)
			}
			if out, err := srdecode.AvroJSON(c.schema, payload); err == nil {
				t.Errorf("%s %q decoded to %s", c.schema, s, out)
			}
		}
	}
	if out, err := srdecode.AvroJSON(`"string"`, append([]byte{4}, "é"...)); err != nil || string(out) != `"é"` {
		t.Errorf("valid UTF-8: %s, %v", out, err)
	}
}

// A decimal's unscaled value is as long as its writer makes it: a 1 MiB
// one is a 2.5-million-digit number whose decimal text costs seconds of
// CPU (math/big), per record. A decimal has no more digits than its
// precision (the spec: a larger one is invalid), and none more than
// 4096 bytes (about 9,900 digits) whatever the schema says.
func TestAvroDecimalIsBoundedByItsPrecision(t *testing.T) {
	long := func(n int) []byte {
		v := make([]byte, n)
		for i := range v {
			v[i] = 0x7f
		}
		return v
	}
	withLen := func(v []byte) []byte { return append(binary.AppendVarint(nil, int64(len(v))), v...) }
	for _, c := range []struct {
		schema  string
		payload []byte
	}{
		{`{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}`, withLen(long(64 << 10))},
		{`{"type":"bytes","logicalType":"decimal","precision":4,"scale":2}`, withLen([]byte{0x27, 0x10})}, // 10000: 5 digits
		{`{"type":"bytes","logicalType":"decimal","precision":100000000,"scale":2}`, withLen(long(64 << 10))},
		{`{"type":"fixed","name":"D","size":2,"logicalType":"decimal","precision":3,"scale":2}`, []byte{0x03, 0xe8}}, // 1000: 4 digits
	} {
		if out, err := srdecode.AvroJSON(c.schema, c.payload); err == nil {
			t.Errorf("%s: a %d-byte decimal decoded (%d bytes of JSON)", c.schema, len(c.payload), len(out))
		}
	}
	if out, err := srdecode.AvroJSON(`{"type":"bytes","logicalType":"decimal","precision":4,"scale":2}`, withLen([]byte{0x27, 0x0f})); err != nil || string(out) != `"99.99"` {
		t.Errorf("9999 at precision 4: %s, %v", out, err)
	}
}

// A union is its branch's value wherever it stands: inside an array and a
// map, of a map or an array, of records (two records with the same fields
// are one value); a branch index the union does not have is an error.
func TestAvroUnionIsItsBranchsValueWhereverItStands(t *testing.T) {
	const schema = `{"type":"record","name":"U","fields":[
 {"name":"arr","type":{"type":"array","items":["null","long","string"]}},
 {"name":"m","type":{"type":"map","values":["string","boolean"]}},
 {"name":"coll","type":[{"type":"map","values":"long"},{"type":"array","items":"long"}]},
 {"name":"rec","type":[{"type":"record","name":"A","fields":[{"name":"x","type":"long"}]},{"type":"record","name":"B","fields":[{"name":"x","type":"long"}]}]}]}`
	sch := avro.MustParse(schema)
	for i, c := range []struct {
		v    map[string]any
		want string
	}{
		{map[string]any{"arr": []any{nil, map[string]any{"long": int64(1)}, map[string]any{"string": "1"}},
			"m": map[string]any{"k": map[string]any{"boolean": true}}, "coll": map[string]any{"map": map[string]any{"a": int64(1)}},
			"rec": map[string]any{"A": map[string]any{"x": int64(7)}}},
			`{"arr":[null,1,"1"],"m":{"k":true},"coll":{"a":1},"rec":{"x":7}}`},
		{map[string]any{"arr": []any{}, "m": map[string]any{}, "coll": map[string]any{"array": []any{int64(1)}},
			"rec": map[string]any{"B": map[string]any{"x": int64(7)}}},
			`{"arr":[],"m":{},"coll":[1],"rec":{"x":7}}`},
	} {
		payload, err := avro.Marshal(sch, c.v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := srdecode.AvroJSON(schema, payload)
		if err != nil || string(got) != c.want {
			t.Errorf("value %d: %s, %v; want %s", i, got, err, c.want)
		}
	}
	for _, branch := range []int64{2, -1, 1 << 40} {
		payload := binary.AppendVarint(nil, branch)
		payload = append(payload, 2)
		if got, err := srdecode.AvroJSON(`["null","long"]`, payload); err == nil {
			t.Errorf("branch %d of 2 decoded as %s", branch, got)
		}
	}
}
