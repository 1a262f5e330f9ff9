package eventid

import (
	"encoding/base64"
	"slices"
	"sync"
)

// Content hashing: the RFC 8785 canonical form of {data, key, source,
// type} that the content rule's ID and the payload hash are taken over.

// assemble returns the RFC 8785 form of {data, key, source, type} from
// the already canonical data; key is left out when nil. RFC 8785 is
// compositional, so the object is the canonical members in sorted order
// (data < key < source < type): one parse of the payload, not two.
func assemble(canonData []byte, source, typ string, key []byte) []byte {
	return appendAssembled(nil, canonData, source, typ, key)
}

// appendAssembled appends assemble's bytes to b.
func appendAssembled(b []byte, canonData []byte, source, typ string, key []byte) []byte {
	b = slices.Grow(b, len(canonData)+len(source)+len(typ)+len(key)*4/3+48)
	b = append(b, `{"data":`...)
	b = append(b, canonData...)
	if key != nil {
		b = append(b, `,"key":"`...)
		b = base64.StdEncoding.AppendEncode(b, key)
		b = append(b, '"')
	}
	b = append(b, `,"source":`...)
	b = appendJCSString(b, source)
	b = append(b, `,"type":`...)
	b = appendJCSString(b, typ)
	return append(b, '}')
}

// scratch is one Decode's reusable buffers: the canonical writer (whose
// output is the canonical data) and the bytes a hash is taken of. Nothing
// of it outlives the Decode: IDs and hashes are copied out.
type scratch struct {
	c   canonWriter
	buf []byte
	ms  members // the record's top-level members (object)
	// once is whether ms came from canonWriter.objectOnce: its members'
	// canonical values, and the whole object's, are in c.
	once bool
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// release returns s to the pool; buffers grown by an unusually large
// record are dropped rather than kept.
func (s *scratch) release() {
	if cap(s.c.out) > 64<<10 || cap(s.buf) > 64<<10 || cap(s.ms) > 1<<10 {
		return
	}
	s.c.reset()
	clear(s.ms) // scanRecordObject cleared what a failed scan left past len
	s.ms, s.once = s.ms[:0], false
	scratchPool.Put(s)
}

// appendJCSString writes s as RFC 8785 (ECMAScript JSON.stringify) does:
// only '"', '\' and control characters are escaped, the short forms where
// they exist, otherwise \u00xx in lower case. s is valid UTF-8 here.
func appendJCSString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if n := plainLen(s[i:]); n > 0 {
			b = append(b, s[i:i+n]...)
			if i += n; i >= len(s) {
				break
			}
		}
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\t':
			b = append(b, '\\', 't')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
