package eventid

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// The decoder's one-pass JSON scanners: an object's members (here) and the
// canonical form (canonical.go).
//
// The decoder's hot path: every record is scanned for its envelope members
// and its payload canonicalised (RFC 8785) for the payload hash and content
// IDs. The general tools (encoding/json into a map, gowebpki/jcs) build
// trees and allocate per member; the scanners here do one pass over the
// bytes for the JSON that producers actually send, and hand anything
// unusual (\u escapes, escaped or non-ASCII keys, duplicate keys, deep
// nesting, malformed input) to those general tools. The results are the
// same bytes either way: IDs derived from content must never change with
// the code path (FuzzFastJSON checks it against the general tools).

// maxFastDepth bounds the scanners' recursion; deeper input takes the
// general path (which has its own, larger, limits).
const maxFastDepth = 256

// skipWS returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipWS(in []byte, i int) int {
	for i < len(in) {
		switch in[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// member is one top-level member of a JSON object, as json.Unmarshal into
// a map[string]json.RawMessage would keep it.
type member struct {
	key []byte
	val json.RawMessage
	// canon is val's canonical form when one pass read both
	// (canonWriter.objectOnce), else nil.
	canon []byte
}

// members is a JSON object's members in document order; a repeated key's
// last value wins, as with encoding/json.
type members []member

func (m members) get(name string) (json.RawMessage, bool) {
	if k := m.last(name); k >= 0 {
		return m[k].val, true
	}
	return nil, false
}

// canonOf is the canonical form of name's value when the scan wrote it,
// else nil (the caller canonicalises the value itself).
func (m members) canonOf(name string) []byte {
	if k := m.last(name); k >= 0 {
		return m[k].canon
	}
	return nil
}

func (m members) last(name string) int {
	for k := len(m) - 1; k >= 0; k-- {
		if string(m[k].key) == name {
			return k
		}
	}
	return -1
}

// scanObject splits a JSON object into its members, accepting exactly what
// json.Unmarshal into a map accepts; anything the scanner does not handle
// itself (escaped or non-ASCII keys, deep nesting, invalid input) goes to
// json.Unmarshal, whose error is the one returned.
func scanObject(v []byte) (members, error) {
	if ms, ok := fastMembers(v); ok {
		return ms, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(v, &obj); err != nil {
		return nil, err
	}
	ms := make(members, 0, len(obj))
	for k, val := range obj {
		ms = append(ms, member{key: []byte(k), val: val})
	}
	return ms, nil
}

func fastMembers(v []byte) (members, bool) {
	return appendMembers(make(members, 0, 8), v)
}

// appendMembers is fastMembers appending to ms (a reused buffer).
func appendMembers(ms members, v []byte) (members, bool) {
	s := skipper{in: v}
	s.ws()
	if s.i >= len(v) || v[s.i] != '{' {
		return nil, false
	}
	s.i++
	s.ws()
	if s.i < len(v) && v[s.i] == '}' {
		s.i++
	} else {
		for {
			s.ws()
			if s.i >= len(v) || v[s.i] != '"' {
				return nil, false
			}
			ks := s.i + 1
			if !s.str() {
				return nil, false
			}
			key := v[ks : s.i-1]
			for _, b := range key {
				if b == '\\' || b >= utf8.RuneSelf {
					return nil, false
				}
			}
			s.ws()
			if s.i >= len(v) || v[s.i] != ':' {
				return nil, false
			}
			s.i++
			s.ws()
			vs := s.i
			if !s.value() {
				return nil, false
			}
			ms = append(ms, member{key: key, val: v[vs:s.i:s.i]})
			s.ws()
			if s.i >= len(v) {
				return nil, false
			}
			if v[s.i] == '}' {
				s.i++
				break
			}
			if v[s.i] != ',' {
				return nil, false
			}
			s.i++
		}
	}
	s.ws()
	return ms, s.i == len(v)
}

// skipper validates and skips JSON values by encoding/json's grammar: any
// \uXXXX escape, and bytes above ASCII unchecked, in strings.
type skipper struct {
	in    []byte
	i     int
	depth int
}

func (s *skipper) lit(l string) bool {
	if !bytes.HasPrefix(s.in[s.i:], []byte(l)) {
		return false
	}
	s.i += len(l)
	return true
}

// scanNumber returns the end of the JSON number at in[i:] (-1 if there is
// none) and whether it is an integer of at most 15 digits, which a double
// holds exactly and ECMAScript prints as written.
func scanNumber(in []byte, i int) (end int, simple bool) {
	j := i
	if j < len(in) && in[j] == '-' {
		j++
	}
	digits := j
	switch {
	case j < len(in) && in[j] == '0':
		j++
	case j < len(in) && '1' <= in[j] && in[j] <= '9':
		for j < len(in) && digit(in[j]) {
			j++
		}
	default:
		return -1, false
	}
	simple = j-digits <= 15
	if j < len(in) && in[j] == '.' {
		simple = false
		j++
		if j >= len(in) || !digit(in[j]) {
			return -1, false
		}
		for j < len(in) && digit(in[j]) {
			j++
		}
	}
	if j < len(in) && (in[j] == 'e' || in[j] == 'E') {
		simple = false
		j++
		if j < len(in) && (in[j] == '+' || in[j] == '-') {
			j++
		}
		if j >= len(in) || !digit(in[j]) {
			return -1, false
		}
		for j < len(in) && digit(in[j]) {
			j++
		}
	}
	return j, simple
}

// rawJSON is the data as the record carries it (capacity capped: nothing
// appends into the record). It is not compacted here: the payload hash
// comes from its canonical form, and encoding/json compacts it when a
// start request is encoded, so a duplicate (most records of a replay)
// never pays for a compaction.
func rawJSON(v []byte) json.RawMessage {
	return v[:len(v):len(v)]
}

// unquote is json.Unmarshal of a JSON string token into a string.
func unquote(v []byte) (string, error) {
	if body, ok := plainBody(v); ok {
		return string(body), nil
	}
	var s string
	err := json.Unmarshal(v, &s)
	return s, err
}

func hasControl(b []byte) bool {
	for _, c := range b {
		if c < 0x20 {
			return true
		}
	}
	return false
}
