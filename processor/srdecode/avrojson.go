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
//   - a union of null and one type is that value or null; any other union
//     is {"branch": value}, the branch a named type's full name or the
//     primitive's type ("string", "long");
//   - bytes and fixed are base64 text; an enum its symbol;
//   - decimal (bytes or fixed) its exact decimal text, as a string (a JSON
//     number would lose digits in the RFC 8785 canonical form);
//   - date "2006-01-02"; timestamp-* and local-timestamp-* RFC 3339 text
//     in UTC; time-*, uuid and any other logical type its underlying value.

// maxAvroDepth bounds the nesting a payload may build with a recursive
// schema (a linked list of records).
const maxAvroDepth = 512

// appendAvroJSON appends the JSON of the value of schema s read from r;
// a failure is r.Error.
func appendAvroJSON(b []byte, s avro.Schema, r *avro.Reader, depth int) []byte {
	if r.Error != nil {
		return b
	}
	if depth > maxAvroDepth {
		r.Error = fmt.Errorf("nested deeper than %d", maxAvroDepth)
		return b
	}
	switch s := s.(type) {
	case *avro.RefSchema:
		return appendAvroJSON(b, s.Schema(), r, depth)
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
			return strconv.AppendInt(b, r.ReadLong(), 10)
		case avro.Float:
			return appendJSONFloat(b, float64(r.ReadFloat()), 32, r)
		case avro.Double:
			return appendJSONFloat(b, r.ReadDouble(), 64, r)
		case avro.String:
			return appendJSONString(b, r.ReadString())
		case avro.Bytes:
			v := r.ReadBytes()
			b = append(b, '"')
			b = base64.StdEncoding.AppendEncode(b, v)
			return append(b, '"')
		}
	case *avro.FixedSchema:
		v := make([]byte, s.Size())
		r.Read(v)
		if d, ok := s.Logical().(*avro.DecimalLogicalSchema); ok {
			return appendDecimal(b, v, d.Scale())
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
			b = appendAvroJSON(b, f.Type(), r, depth+1)
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
		return appendAvroArray(b, s, r, depth)
	case *avro.MapSchema:
		return appendAvroMap(b, s, r, depth)
	case *avro.UnionSchema:
		return appendAvroUnion(b, s, r, depth)
	}
	r.Error = fmt.Errorf("schema type %s: not read", s.Type())
	return b
}

// appendAvroArray appends the JSON array of an Avro array's blocks.
func appendAvroArray(b []byte, s *avro.ArraySchema, r *avro.Reader, depth int) []byte {
	b = append(b, '[')
	first := true
	for r.Error == nil {
		n, _ := r.ReadBlockHeader()
		if n <= 0 {
			break
		}
		for range n {
			if r.Error != nil {
				break
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = appendAvroJSON(b, s.Items(), r, depth+1)
		}
	}
	return append(b, ']')
}

// appendAvroMap appends the JSON object of an Avro map's blocks.
func appendAvroMap(b []byte, s *avro.MapSchema, r *avro.Reader, depth int) []byte {
	b = append(b, '{')
	first := true
	for r.Error == nil {
		n, _ := r.ReadBlockHeader()
		if n <= 0 {
			break
		}
		for range n {
			if r.Error != nil {
				break
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = appendJSONString(b, r.ReadString())
			b = append(b, ':')
			b = appendAvroJSON(b, s.Values(), r, depth+1)
		}
	}
	return append(b, '}')
}

// appendAvroUnion appends a union's branch: null, the value of a nullable
// union's other branch, or {"branch name": value}.
func appendAvroUnion(b []byte, s *avro.UnionSchema, r *avro.Reader, depth int) []byte {
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
	if s.Nullable() {
		return appendAvroJSON(b, t, r, depth+1)
	}
	b = append(b, '{')
	b = appendJSONString(b, unionName(t))
	b = append(b, ':')
	b = appendAvroJSON(b, t, r, depth+1)
	return append(b, '}')
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
			return appendDecimal(b, v, d.Scale())
		}
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, v)
		return append(b, '"')
	case avro.String:
		return appendJSONString(b, r.ReadString())
	default:
		return appendAvroJSON(b, avro.NewPrimitiveSchema(t, nil), r, 0)
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
		return strconv.AppendInt(b, n, 10)
	}
	return append(append(append(b, '"'), at.UTC().Format(time.RFC3339Nano)...), '"')
}

// appendDecimal writes the decimal whose unscaled value is the big-endian
// two's complement v, scaled by scale, as a JSON string ("-12.340").
func appendDecimal(b []byte, v []byte, scale int) []byte {
	n := new(big.Int).SetBytes(v)
	if len(v) > 0 && v[0]&0x80 != 0 {
		n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(v))))
	}
	digits := n.String()
	neg := strings.HasPrefix(digits, "-")
	digits = strings.TrimPrefix(digits, "-")
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

// unionName is a union branch's name as hamba/avro's generic decode keys
// it: a named type's full name, else the type.
func unionName(t avro.Schema) string {
	if ref, ok := t.(*avro.RefSchema); ok {
		t = ref.Schema()
	}
	if n, ok := t.(avro.NamedSchema); ok {
		return n.FullName()
	}
	return string(t.Type())
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
