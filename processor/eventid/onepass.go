package eventid

import (
	"slices"
	"unicode/utf8"
)

// One pass over a record's JSON object: its top-level members (what
// appendMembers reads) and each member's canonical value (what canonical
// writes), so that the data of a structured or plain record is not
// scanned once for the envelope and again for the payload hash.

// objectOnce scans the JSON object v into ms (appended, document order,
// as appendMembers) and writes each member to c.out in canonical form,
// "key":value, with the value's canonical bytes in m.canon. ok is false
// when either scan would leave its fast path (escaped or non-ASCII keys,
// \u escapes, deep nesting, anything jcs refuses, invalid input): the
// caller then runs the two scans one after the other, with the errors
// they have. The canonical values share c.out: they are valid until c
// writes again.
func (c *canonWriter) objectOnce(ms members, v []byte) (members, bool) {
	c.in, c.i, c.depth = v, 0, 0
	c.out = slices.Grow(c.out[:0], len(v))
	c.spans = c.spans[:0]
	c.ws()
	if c.i >= len(v) || v[c.i] != '{' {
		return nil, false
	}
	c.i++
	c.ws()
	first := len(ms)
	if c.i < len(v) && v[c.i] == '}' {
		c.i++
	} else {
		for {
			c.ws()
			if c.i >= len(v) || v[c.i] != '"' {
				return nil, false
			}
			start, ks := len(c.out), c.i+1
			key, plain, ok := c.str()
			if !ok || !plain || !ascii(key) {
				return nil, false
			}
			c.ws()
			if c.i >= len(v) || v[c.i] != ':' {
				return nil, false
			}
			c.i++
			c.out = append(c.out, ':')
			c.ws()
			vs, cs := c.i, len(c.out)
			if !c.value() {
				return nil, false
			}
			// The span's start and end are the member's text in c.out
			// (allTop sorts them), canon's offsets its value's.
			c.spans = append(c.spans, memberSpan{ks: ks, ke: ks + len(key), start: start, end: len(c.out)})
			ms = append(ms, member{key: key, val: v[vs:c.i:c.i], canon: c.out[cs:len(c.out):len(c.out)]})
			c.ws()
			if c.i >= len(v) {
				return nil, false
			}
			if v[c.i] == '}' {
				c.i++
				break
			}
			if v[c.i] != ',' {
				return nil, false
			}
			c.i++
		}
	}
	c.ws()
	if c.i != len(v) {
		return nil, false
	}
	// c.out may have moved while it grew: each canon is re-sliced from
	// the final buffer (a member's offsets are its span's).
	for k := range ms[first:] {
		sp := c.spans[k]
		ms[first+k].canon = c.out[sp.end-len(ms[first+k].canon) : sp.end : sp.end]
	}
	return ms, true
}

// wholeObject is the canonical form of the object objectOnce scanned
// last: its members sorted by key; ok is false for a repeated key, which
// RFC 8785 refuses (the caller's general path says so). It is written to
// c.tmp, valid until c writes again.
func (c *canonWriter) wholeObject() ([]byte, bool) {
	top := c.spans
	slices.SortFunc(top, func(a, b memberSpan) int { return utf16Compare(c.key(a), c.key(b)) })
	for k := 1; k < len(top); k++ {
		if utf16Compare(c.key(top[k-1]), c.key(top[k])) == 0 {
			return nil, false
		}
	}
	c.tmp = append(c.tmp[:0], '{')
	for k, m := range top {
		if k > 0 {
			c.tmp = append(c.tmp, ',')
		}
		c.tmp = append(c.tmp, c.out[m.start:m.end]...)
	}
	return append(c.tmp, '}'), true
}

func ascii(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
