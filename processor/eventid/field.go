package eventid

import (
	"encoding/json"
	"unicode/utf8"
)

// Field is the JSON value at path in data, a JSON object (each segment
// names a member of the object the path has reached; of a repeated key
// the last wins, as with encoding/json), and whether there is one. A
// path through something that is not an object, or data that is not JSON,
// has none.
//
// It reads the way json.Unmarshal into nested map[string]json.RawMessage
// values would (the template's path reader, decide.IDTemplate, does that),
// but with the decoder's one-pass scanner and without allocating for the
// JSON producers send; anything unusual (escaped or non-ASCII keys, deep
// nesting, invalid input) takes that general path. The value is a slice
// of data: the caller must not change it.
func Field(data []byte, path []string) (json.RawMessage, bool) {
	v, ok, fast := fastField(data, path)
	if fast {
		return v, ok
	}
	return slowField(data, path)
}

// fastField walks path with the skipper; fast is false when the input
// needs the general path.
func fastField(data []byte, path []string) (v []byte, ok, fast bool) {
	cur := data
	for _, seg := range path {
		s := skipper{in: cur}
		s.ws()
		if s.i >= len(cur) || cur[s.i] != '{' {
			// Not an object: no member here. Invalid JSON is the general
			// path's to judge.
			if s.value() {
				if s.ws(); s.i == len(cur) {
					return nil, false, true
				}
			}
			return nil, false, false
		}
		s.i++
		var found []byte
		s.ws()
		if s.i < len(cur) && cur[s.i] == '}' {
			s.i++
		} else {
			for {
				s.ws()
				if s.i >= len(cur) || cur[s.i] != '"' {
					return nil, false, false
				}
				ks := s.i + 1
				if !s.str() {
					return nil, false, false
				}
				key := cur[ks : s.i-1]
				for _, b := range key {
					if b == '\\' || b >= utf8.RuneSelf {
						return nil, false, false
					}
				}
				s.ws()
				if s.i >= len(cur) || cur[s.i] != ':' {
					return nil, false, false
				}
				s.i++
				s.ws()
				vs := s.i
				if !s.value() {
					return nil, false, false
				}
				if string(key) == seg {
					found = cur[vs:s.i:s.i]
				}
				s.ws()
				if s.i >= len(cur) {
					return nil, false, false
				}
				if cur[s.i] == '}' {
					s.i++
					break
				}
				if cur[s.i] != ',' {
					return nil, false, false
				}
				s.i++
			}
		}
		if s.ws(); s.i != len(cur) {
			return nil, false, false
		}
		if found == nil {
			return nil, false, true
		}
		cur = found
	}
	return cur, true, true
}

// slowField is Field by encoding/json.
func slowField(data []byte, path []string) (json.RawMessage, bool) {
	cur := json.RawMessage(data)
	for _, seg := range path {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(cur, &obj); err != nil || obj == nil {
			return nil, false
		}
		v, ok := obj[seg]
		if !ok {
			return nil, false
		}
		cur = v
	}
	return cur, true
}
