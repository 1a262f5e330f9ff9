package srdecode

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hamba/avro/v2"
)

// This file writes an Avro record's JSON straight from its bytes, walking
// the writer's schema: no generic value in between (hamba/avro's decode
// to any, then encoding/json, costs about twice as much, and keeps a
// nullable named type wrapped in {"name": value} where it unwraps a
// nullable string). The logical value, for every schema:
//
//   - a record is an object, its fields in the writer's order;
//   - a union is its branch's value, or null: never {"branch": value},
//     so a union that gains a branch (a compatible change) keeps the
//     value of every record written before it, and routes match its
//     field as they match any other (two branches that write the same
//     JSON, a record of another name with the same fields, are one value);
//   - a long is a number, or its digits as a string when its magnitude is
//     over 2^53 (a double, as RFC 8785 reads numbers, would merge it with
//     its neighbours);
//   - a string (and a map key) is refused unless it is UTF-8;
//   - bytes and fixed are base64 text; an enum its symbol;
//   - decimal (bytes or fixed) its exact decimal text, as a string (a JSON
//     number would lose digits in the RFC 8785 canonical form);
//   - date "2006-01-02"; timestamp-* and local-timestamp-* RFC 3339 text
//     in UTC; time-*, uuid and any other logical type its underlying value.

// maxAvroDepth bounds the nesting a payload may build with a recursive
// schema (a linked list of records).
const maxAvroDepth = 512

// maxAvroFixed bounds a fixed's size, as hamba/avro's Reader bounds bytes
// and strings (Config.MaxByteSliceSize, 1 MiB): the size is the schema's
// word, read before a byte of the payload.
const maxAvroFixed = 1 << 20

// appendAvroJSON appends the JSON of the value of schema s read from r;
// a failure is r.Error. items is what is left of the array and map items
// the payload may announce (its length to start with): an item takes at
// least one byte, but for a type that takes none (null, an empty record),
// so a few bytes never announce billions of them.
func appendAvroJSON(b []byte, s avro.Schema, r *avro.Reader, depth int, items *int) []byte {
	if r.Error != nil {
		return b
	}
	if depth > maxAvroDepth {
		r.Error = fmt.Errorf("nested deeper than %d", maxAvroDepth)
		return b
	}
	switch s := s.(type) {
	case *avro.RefSchema:
		return appendAvroJSON(b, s.Schema(), r, depth, items)
	case *avro.NullSchema:
		return append(b, "null"...)
	case *avro.PrimitiveSchema:
		if l := s.Logical(); l != nil {
			return appendLogical(b, s.Type(), l, r)
		}
		switch s.Type() {
		case avro.Null:
			return append(b, "null"...)
		case avro.Boolean:
			return strconv.AppendBool(b, r.ReadBool())
		case avro.Int:
			return strconv.AppendInt(b, int64(r.ReadInt()), 10)
		case avro.Long:
			return appendLong(b, r.ReadLong())
		case avro.Float:
			return appendJSONFloat(b, float64(r.ReadFloat()), 32, r)
		case avro.Double:
			return appendJSONFloat(b, r.ReadDouble(), 64, r)
		case avro.String:
			return appendAvroString(b, r)
		case avro.Bytes:
			v := r.ReadBytes()
			b = append(b, '"')
			b = base64.StdEncoding.AppendEncode(b, v)
			return append(b, '"')
		}
	case *avro.FixedSchema:
		if s.Size() < 0 || s.Size() > maxAvroFixed {
			r.Error = fmt.Errorf("fixed %s: size %d is not between 0 and %d", s.FullName(), s.Size(), maxAvroFixed)
			return b
		}
		v := make([]byte, s.Size())
		r.Read(v)
		if d, ok := s.Logical().(*avro.DecimalLogicalSchema); ok {
			return appendDecimal(b, v, d, r)
		}
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, v)
		return append(b, '"')
	case *avro.RecordSchema:
		b = append(b, '{')
		for i, f := range s.Fields() {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, f.Name())
			b = append(b, ':')
			b = appendAvroJSON(b, f.Type(), r, depth+1, items)
		}
		return append(b, '}')
	case *avro.EnumSchema:
		i := int(r.ReadInt())
		syms := s.Symbols()
		if r.Error == nil && (i < 0 || i >= len(syms)) {
			r.Error = fmt.Errorf("enum %s: symbol %d of %d", s.FullName(), i, len(syms))
			return b
		}
		if r.Error != nil {
			return b
		}
		return appendJSONString(b, syms[i])
	case *avro.ArraySchema:
		return appendAvroArray(b, s, r, depth, items)
	case *avro.MapSchema:
		return appendAvroMap(b, s, r, depth, items)
	case *avro.UnionSchema:
		return appendAvroUnion(b, s, r, depth, items)
	}
	r.Error = fmt.Errorf("schema type %s: not read", s.Type())
	return b
}

// appendAvroArray appends the JSON array of an Avro array's blocks.
func appendAvroArray(b []byte, s *avro.ArraySchema, r *avro.Reader, depth int, items *int) []byte {
	b = append(b, '[')
	first := true
	for r.Error == nil {
		n, _ := r.ReadBlockHeader()
		if n <= 0 {
			break
		}
		if n > int64(*items) {
			r.Error = fmt.Errorf("a block of %d items: more than the payload's bytes", n)
			break
		}
		*items -= int(n)
		for range n {
			if r.Error != nil {
				break
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = appendAvroJSON(b, s.Items(), r, depth+1, items)
		}
	}
	return append(b, ']')
}

// appendAvroMap appends the JSON object of an Avro map's blocks.
func appendAvroMap(b []byte, s *avro.MapSchema, r *avro.Reader, depth int, items *int) []byte {
	b = append(b, '{')
	first := true
	for r.Error == nil {
		n, _ := r.ReadBlockHeader()
		if n <= 0 {
			break
		}
		if n > int64(*items) {
			r.Error = fmt.Errorf("a block of %d items: more than the payload's bytes", n)
			break
		}
		*items -= int(n)
		for range n {
			if r.Error != nil {
				break
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = appendAvroString(b, r)
			b = append(b, ':')
			b = appendAvroJSON(b, s.Values(), r, depth+1, items)
		}
	}
	return append(b, '}')
}

// appendAvroUnion appends a union's branch: null, or the branch's value.
func appendAvroUnion(b []byte, s *avro.UnionSchema, r *avro.Reader, depth int, items *int) []byte {
	i := int(r.ReadLong())
	ts := s.Types()
	if r.Error == nil && (i < 0 || i >= len(ts)) {
		r.Error = fmt.Errorf("union branch %d of %d", i, len(ts))
	}
	if r.Error != nil {
		return b
	}
	t := ts[i]
	if t.Type() == avro.Null {
		return append(b, "null"...)
	}
	return appendAvroJSON(b, t, r, depth+1, items)
}

// appendLogical writes a primitive of logical type l (see the top of the
// file).
func appendLogical(b []byte, t avro.Type, l avro.LogicalSchema, r *avro.Reader) []byte {
	var n int64
	switch t {
	case avro.Int:
		n = int64(r.ReadInt())
	case avro.Long:
		n = r.ReadLong()
	case avro.Bytes:
		v := r.ReadBytes()
		if d, ok := l.(*avro.DecimalLogicalSchema); ok {
			return appendDecimal(b, v, d, r)
		}
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, v)
		return append(b, '"')
	case avro.String:
		return appendAvroString(b, r)
	default:
		var none int
		return appendAvroJSON(b, avro.NewPrimitiveSchema(t, nil), r, 0, &none)
	}
	if r.Error != nil {
		return b
	}
	var at time.Time
	switch l.Type() {
	case avro.Date:
		return append(append(append(b, '"'), time.Unix(n*86400, 0).UTC().Format(time.DateOnly)...), '"')
	case avro.TimestampMillis, avro.LocalTimestampMillis:
		at = time.UnixMilli(n)
	case avro.TimestampMicros, avro.LocalTimestampMicros:
		at = time.UnixMicro(n)
	case "timestamp-nanos", "local-timestamp-nanos":
		at = time.Unix(0, n)
	default:
		return appendLong(b, n)
	}
	return append(append(append(b, '"'), at.UTC().Format(time.RFC3339Nano)...), '"')
}

// maxExactLong is the largest magnitude every integer up to which is a
// distinct double.
const maxExactLong = 1 << 53

// appendLong writes a long as a JSON number, or as a string of its digits
// when its magnitude is over 2^53: the content rule's canonical form (RFC
// 8785) reads a number as a double, where 2^53 and 2^53+1 are one value,
// so two records differing there would be one event with one payload.
func appendLong(b []byte, n int64) []byte {
	if n > maxExactLong || n < -maxExactLong {
		b = append(b, '"')
		b = strconv.AppendInt(b, n, 10)
		return append(b, '"')
	}
	return strconv.AppendInt(b, n, 10)
}

// maxDecimalBytes bounds a decimal's unscaled value (about 9,900
// digits): its decimal text costs time quadratic in its length (math/big;
// 4 s for 1 MiB), whatever precision the schema claims.
const maxDecimalBytes = 4096

// appendDecimal writes the decimal whose unscaled value is the big-endian
// two's complement v, scaled by d's scale, as a JSON string ("-12.340").
// One longer than maxDecimalBytes, or with more digits than d's precision
// (invalid, says the spec), is an error.
func appendDecimal(b []byte, v []byte, d *avro.DecimalLogicalSchema, r *avro.Reader) []byte {
	if r.Error != nil {
		return b
	}
	if len(v) > maxDecimalBytes {
		r.Error = fmt.Errorf("a decimal of %d bytes, over %d", len(v), maxDecimalBytes)
		return b
	}
	scale := d.Scale()
	n := new(big.Int).SetBytes(v)
	if len(v) > 0 && v[0]&0x80 != 0 {
		n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(v))))
	}
	digits := n.String()
	neg := strings.HasPrefix(digits, "-")
	digits = strings.TrimPrefix(digits, "-")
	if len(digits) > d.Precision() {
		r.Error = fmt.Errorf("a decimal of %d digits, over its precision %d", len(digits), d.Precision())
		return b
	}
	b = append(b, '"')
	if neg {
		b = append(b, '-')
	}
	if scale <= 0 {
		b = append(b, digits...)
		return append(b, '"')
	}
	if len(digits) <= scale {
		digits = strings.Repeat("0", scale-len(digits)+1) + digits
	}
	b = append(b, digits[:len(digits)-scale]...)
	b = append(b, '.')
	b = append(b, digits[len(digits)-scale:]...)
	return append(b, '"')
}

// appendJSONFloat writes f as encoding/json does (ES6 number form).
func appendJSONFloat(b []byte, f float64, bits int, r *avro.Reader) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		if r.Error == nil {
			r.Error = errors.New("a NaN or infinite number has no JSON form")
		}
		return b
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	b = strconv.AppendFloat(b, f, format, -1, bits)
	if format == 'e' {
		// e-09 to e-9
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// appendAvroString reads an Avro string and writes it as a JSON string.
// A string that is not UTF-8 is an error, not U+FFFD: two different
// strings would read as one value (one event, one payload hash).
func appendAvroString(b []byte, r *avro.Reader) []byte {
	s := r.ReadString()
	if r.Error != nil {
		return b
	}
	if !utf8.ValidString(s) {
		r.Error = errors.New("a string that is not UTF-8")
		return b
	}
	return appendJSONString(b, s)
}

// appendJSONString writes s as a JSON string; invalid UTF-8 becomes
// U+FFFD, as encoding/json writes it.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
