package eventid

import (
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// The fast path of RFC 8785 canonicalisation (fastjson.go says why and
// when it falls back to the general one).

// canonical returns the RFC 8785 form of v, exactly what jcs.Transform
// returns (and its error when v is not canonicalisable).
func canonical(v []byte) ([]byte, error) {
	return (&canonWriter{}).canonical(v)
}

// canonical is canonical(v) written into c's buffers, which the result
// shares: it is valid until c writes again.
func (c *canonWriter) canonical(v []byte) ([]byte, error) {
	if out, ok := c.fast(v); ok {
		return out, nil
	}
	return jcs.Transform(v)
}

// fast is canonical(v) by the fast path alone; ok is false when v needs
// the general one. An ok result also means that v is valid JSON (the fast
// path accepts a subset of the grammar encoding/json accepts), so a
// caller that must check v is JSON and then canonicalise it needs one
// pass, not two.
func (c *canonWriter) fast(v []byte) (out []byte, ok bool) {
	c.in, c.i, c.depth = v, 0, 0
	c.out = slices.Grow(c.out[:0], len(v))
	c.spans = c.spans[:0]
	c.ws()
	if c.value() {
		c.ws()
		if c.i == len(c.in) {
			return c.out, true
		}
	}
	return nil, false
}

// reset lets c go back to a pool without keeping its last input alive.
func (c *canonWriter) reset() {
	c.in, c.spans = nil, c.spans[:0]
}

type canonWriter struct {
	in    []byte
	i     int
	out   []byte
	depth int
	spans []memberSpan // members of the objects being written (a stack)
	tmp   []byte       // scratch for reordering an object's members
}

// memberSpan is one object member already written to out: its key's raw
// bytes in[ks:ke] (no escapes, so raw = decoded) and the member text
// out[start:end]. Offsets, not slices: a span holds no pointer, so sorting
// spans moves plain words (no write barriers).
type memberSpan struct {
	ks, ke     int
	start, end int
}

// key is m's key.
func (c *canonWriter) key(m memberSpan) []byte { return c.in[m.ks:m.ke] }

func (c *canonWriter) ws() { c.i = skipWS(c.in, c.i) }

// value writes the canonical form of the value at c.i; false means "not
// on the fast path" (the caller falls back), never a verdict on validity.
func (c *canonWriter) value() bool {
	if c.i >= len(c.in) {
		return false
	}
	switch c.in[c.i] {
	case '{':
		return c.object()
	case '[':
		return c.array()
	case '"':
		_, _, ok := c.str()
		return ok
	case 't':
		return c.literal("true")
	case 'f':
		return c.literal("false")
	case 'n':
		return c.literal("null")
	}
	return c.number()
}

// terminates reports whether the byte after a literal or number ends it
// (jcs reads such tokens up to a comma, bracket, brace or whitespace).
func (c *canonWriter) terminates(j int) bool {
	if j >= len(c.in) {
		return true
	}
	switch c.in[j] {
	case ',', ']', '}', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

func (c *canonWriter) literal(lit string) bool {
	j := c.i + len(lit)
	if j > len(c.in) || string(c.in[c.i:j]) != lit || !c.terminates(j) {
		return false
	}
	c.out = append(c.out, lit...)
	c.i = j
	return true
}

func digit(b byte) bool { return '0' <= b && b <= '9' }

// number writes a JSON number as ECMAScript prints the double it denotes.
// Integers of up to 15 digits are exact doubles that print as written.
func (c *canonWriter) number() bool {
	j, simple := scanNumber(c.in, c.i)
	if j < 0 {
		return false
	}
	if !c.terminates(j) {
		return false
	}
	tok := c.in[c.i:j]
	c.i = j
	if simple {
		if string(tok) == "-0" {
			tok = tok[1:]
		}
		c.out = append(c.out, tok...)
		return true
	}
	if d, ok := plainDecimal(tok); ok {
		c.out = append(c.out, d...)
		return true
	}
	f, err := strconv.ParseFloat(string(tok), 64)
	if err != nil {
		return false
	}
	if a := math.Abs(f); a >= 1e-6 && a < 1e21 {
		// jcs.NumberToJSON's own rule for this range (ECMAScript prints
		// the shortest round-trip digits without an exponent), appended
		// rather than returned as a new string.
		if f < 0 {
			c.out = append(c.out, '-')
		}
		c.out = strconv.AppendFloat(c.out, a, 'f', -1, 64)
		return true
	}
	s, err := jcs.NumberToJSON(f)
	if err != nil {
		return false
	}
	c.out = append(c.out, s...)
	return true
}

// str writes the string at c.i in canonical form and returns its raw
// content; plain means it had no escapes (raw content = decoded content).
// \u escapes leave the fast path.
func (c *canonWriter) str() (raw []byte, plain, ok bool) {
	in := c.in
	start := c.i
	j := c.i + 1
	plain = true
	for j < len(in) {
		if j += plainLen(in[j:]); j >= len(in) {
			break
		}
		b := in[j]
		switch {
		case b == '"':
			raw = in[start+1 : j]
			c.i = j + 1
			if plain {
				c.out = append(c.out, in[start:c.i]...)
				return raw, true, true
			}
			// The short escapes are written back as they were (RFC 8785
			// uses the same ones), except \/, which is just '/'.
			c.out = append(c.out, '"')
			for k := 0; k < len(raw); k++ {
				if raw[k] == '\\' {
					k++
					if raw[k] != '/' {
						c.out = append(c.out, '\\')
					}
				}
				c.out = append(c.out, raw[k])
			}
			c.out = append(c.out, '"')
			return raw, false, true
		case b == '\\':
			if j+1 >= len(in) {
				return nil, false, false
			}
			switch in[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				plain = false
				j += 2
			default:
				return nil, false, false
			}
		case b < 0x20:
			return nil, false, false
		default:
			r, size := utf8.DecodeRune(in[j:])
			if r == utf8.RuneError && size <= 1 {
				return nil, false, false
			}
			j += size
		}
	}
	return nil, false, false
}

func (c *canonWriter) array() bool {
	if c.depth++; c.depth > maxFastDepth {
		return false
	}
	defer func() { c.depth-- }()
	c.i++
	c.out = append(c.out, '[')
	c.ws()
	if c.i < len(c.in) && c.in[c.i] == ']' {
		c.i++
		c.out = append(c.out, ']')
		return true
	}
	for {
		c.ws()
		if !c.value() {
			return false
		}
		c.ws()
		if c.i >= len(c.in) {
			return false
		}
		switch c.in[c.i] {
		case ',':
			c.out = append(c.out, ',')
		case ']':
			c.i++
			c.out = append(c.out, ']')
			return true
		default:
			return false
		}
		c.i++
	}
}

func (c *canonWriter) object() bool {
	if c.depth++; c.depth > maxFastDepth {
		return false
	}
	defer func() { c.depth-- }()
	c.i++
	open := len(c.out)
	c.out = append(c.out, '{')
	base := len(c.spans)
	defer func() { c.spans = c.spans[:base] }()
	c.ws()
	if c.i < len(c.in) && c.in[c.i] == '}' {
		c.i++
		c.out = append(c.out, '}')
		return true
	}
	for {
		c.ws()
		if c.i >= len(c.in) || c.in[c.i] != '"' {
			return false
		}
		start, ks := len(c.out), c.i+1
		key, plain, ok := c.str()
		if !ok || !plain {
			return false
		}
		c.ws()
		if c.i >= len(c.in) || c.in[c.i] != ':' {
			return false
		}
		c.i++
		c.out = append(c.out, ':')
		c.ws()
		if !c.value() {
			return false
		}
		c.spans = append(c.spans, memberSpan{ks: ks, ke: ks + len(key), start: start, end: len(c.out)})
		c.ws()
		if c.i >= len(c.in) {
			return false
		}
		if c.in[c.i] == '}' {
			c.i++
			break
		}
		if c.in[c.i] != ',' {
			return false
		}
		c.i++
		c.out = append(c.out, ',')
	}
	members := c.spans[base:]
	inOrder := true
	for k := 1; k < len(members); k++ {
		switch cmp := utf16Compare(c.key(members[k-1]), c.key(members[k])); {
		case cmp == 0:
			return false // a duplicate key: jcs rejects it
		case cmp > 0:
			inOrder = false
		}
	}
	if !inOrder {
		slices.SortFunc(members, func(a, b memberSpan) int { return utf16Compare(c.key(a), c.key(b)) })
		for k := 1; k < len(members); k++ {
			if utf16Compare(c.key(members[k-1]), c.key(members[k])) == 0 {
				return false
			}
		}
		c.tmp = append(c.tmp[:0], c.out[open:]...)
		c.out = c.out[:open+1]
		for k, m := range members {
			if k > 0 {
				c.out = append(c.out, ',')
			}
			c.out = append(c.out, c.tmp[m.start-open:m.end-open]...)
		}
	}
	c.out = append(c.out, '}')
	return true
}

// utf16Compare orders valid UTF-8 strings by their UTF-16 code units, as
// RFC 8785 sorts object keys. Byte order is code point order, which differs
// from UTF-16 order only where a character above U+FFFF meets one in
// U+E000..U+FFFF; those are compared by code unit.
func utf16Compare(a, b []byte) int {
	n := min(len(a), len(b))
	k := 0
	for k < n && a[k] == b[k] {
		k++
	}
	if k == n {
		return len(a) - len(b)
	}
	if a[k] < utf8.RuneSelf || b[k] < utf8.RuneSelf {
		return int(a[k]) - int(b[k])
	}
	// Back up to the start of the rune the strings differ in.
	for k > 0 && !utf8.RuneStart(a[k]) {
		k--
	}
	ra, _ := utf8.DecodeRune(a[k:])
	rb, _ := utf8.DecodeRune(b[k:])
	return int(firstUnit(ra)) - int(firstUnit(rb))
}

// firstUnit is the first UTF-16 code unit of r; two different runes with
// the same first unit are both above U+FFFF, where code points order like
// their second units, so the rune itself breaks the tie.
func firstUnit(r rune) rune {
	if r < 0x10000 {
		return r << 10
	}
	return (0xD800+((r-0x10000)>>10))<<10 | (r-0x10000)&0x3ff
}

func (s *skipper) ws() { s.i = skipWS(s.in, s.i) }

func (s *skipper) value() bool {
	if s.i >= len(s.in) {
		return false
	}
	switch b := s.in[s.i]; b {
	case '{', '[':
		if s.depth++; s.depth > maxFastDepth {
			return false
		}
		defer func() { s.depth-- }()
		end := byte('}')
		if b == '[' {
			end = ']'
		}
		s.i++
		s.ws()
		if s.i < len(s.in) && s.in[s.i] == end {
			s.i++
			return true
		}
		for {
			s.ws()
			if b == '{' {
				if s.i >= len(s.in) || s.in[s.i] != '"' || !s.str() {
					return false
				}
				s.ws()
				if s.i >= len(s.in) || s.in[s.i] != ':' {
					return false
				}
				s.i++
				s.ws()
			}
			if !s.value() {
				return false
			}
			s.ws()
			if s.i >= len(s.in) {
				return false
			}
			if s.in[s.i] == end {
				s.i++
				return true
			}
			if s.in[s.i] != ',' {
				return false
			}
			s.i++
		}
	case '"':
		return s.str()
	case 't':
		return s.lit("true")
	case 'f':
		return s.lit("false")
	case 'n':
		return s.lit("null")
	}
	return s.number()
}

func (s *skipper) str() bool {
	in := s.in
	for j := s.i + 1; j < len(in); j++ {
		if j += plainLen(in[j:]); j >= len(in) {
			break
		}
		switch b := in[j]; {
		case b == '"':
			s.i = j + 1
			return true
		case b == '\\':
			j++
			if j >= len(in) {
				return false
			}
			switch in[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(in) {
					return false
				}
				for _, h := range in[j+1 : j+5] {
					if !digit(h) && (h < 'a' || 'f' < h) && (h < 'A' || 'F' < h) {
						return false
					}
				}
				j += 4
			default:
				return false
			}
		case b < 0x20:
			return false
		}
	}
	return false
}

func (s *skipper) number() bool {
	j, _ := scanNumber(s.in, s.i)
	if j < 0 {
		return false
	}
	s.i = j
	return true
}
