package eventid

import (
	"crypto/sha256"
	"encoding"
	"encoding/base64"
	"hash"
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
	b = append(b, dataPrefix...)
	b = append(b, canonData...)
	return appendAssembledTail(b, source, typ, key)
}

// dataPrefix opens the assembled form; the canonical data follows it.
var dataPrefix = []byte(`{"data":`)

// appendAssembledTail appends what follows the canonical data in the
// assembled form: the key (when not nil), source and type, and the close.
func appendAssembledTail(b []byte, source, typ string, key []byte) []byte {
	b = slices.Grow(b, len(source)+len(typ)+len(key)*4/3+40)
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

// hashData starts the hashes of the assembled forms of canonData: SHA-256
// over dataPrefix and the canonical data, its state kept in s. The payload
// hash and the content rule's ID differ only after the data (the key, then
// source and type), so a record's data, its bulk, is hashed once.
func (s *scratch) hashData(canonData []byte) {
	if s.h == nil {
		h := sha256.New()
		s.h, s.hState, s.hRestore = h, h.(encoding.BinaryAppender), h.(encoding.BinaryUnmarshaler)
	}
	s.h.Reset()
	s.h.Write(dataPrefix)
	s.h.Write(canonData)
	var err error
	if s.mid, err = s.hState.AppendBinary(s.midBuf[:0]); err != nil {
		panic("eventid: saving SHA-256 state: " + err.Error()) // no error: a digest always marshals
	}
	s.atMid = true
}

// sumAssembled is SHA-256 of assemble(canonData, source, typ, key) for
// the canonData of the last hashData.
func (s *scratch) sumAssembled(source, typ string, key []byte) [sha256.Size]byte {
	if !s.atMid {
		if err := s.hRestore.UnmarshalBinary(s.mid); err != nil {
			panic("eventid: restoring SHA-256 state: " + err.Error()) // no error: AppendBinary's own bytes
		}
	}
	s.atMid = false
	s.buf = appendAssembledTail(s.buf[:0], source, typ, key)
	s.h.Write(s.buf)
	s.h.Sum(s.sum[:0])
	return s.sum
}

// scratch is one Decode's reusable buffers: the canonical writer (whose
// output is the canonical data) and the bytes a hash is taken of. Nothing
// of it outlives the Decode: IDs and hashes are copied out.
type scratch struct {
	c   canonWriter
	buf []byte
	// h is SHA-256 (hState and hRestore its state's save and restore);
	// mid its state after hashData (in midBuf: SHA-256's saved state is
	// 108 bytes), atMid whether h is still in it, sum the last sum.
	h        hash.Hash
	hState   encoding.BinaryAppender
	hRestore encoding.BinaryUnmarshaler
	mid      []byte
	midBuf   [128]byte
	atMid    bool
	sum      [sha256.Size]byte
	ms       members // the record's top-level members (object)
	// once is whether ms came from canonWriter.objectOnce: its members'
	// canonical values, and the whole object's, are in c.
	once bool
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// release returns s to the pool. The buffers of an unusually large record
// (canonical data or hashed tail over 64 KiB, over 1<<10 top-level
// members, or room for 4<<10 left by a scan that failed) are dropped
// rather than kept; the rest of s, its digest, is.
func (s *scratch) release() {
	if cap(s.c.out) > 64<<10 || cap(s.buf) > 64<<10 || len(s.ms) > 1<<10 || cap(s.ms) > 4<<10 {
		s.c.out, s.c.tmp, s.c.spans, s.buf, s.ms = nil, nil, nil, nil, nil
	}
	s.c.reset()
	clear(s.ms) // scanRecordObject cleared what a failed scan left past len
	s.ms, s.once, s.atMid = s.ms[:0], false, false
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
