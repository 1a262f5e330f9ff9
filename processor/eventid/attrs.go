package eventid

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// plainBody is the body of v when v is a JSON string token that needs no
// decoding (no escape, valid UTF-8, no control character): unquote(v) is
// then exactly these bytes.
func plainBody(v []byte) ([]byte, bool) {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		body := v[1 : len(v)-1]
		if plainLen(body) == len(body) { // printable ASCII without '"' or '\'
			return body, true
		}
		if bytes.IndexByte(body, '\\') < 0 && bytes.IndexByte(body, '"') < 0 && utf8.Valid(body) && !hasControl(body) {
			return body, true
		}
	}
	return nil, false
}

// plainAttrs reads an envelope's type, source and time from their tokens
// (nil: absent) when every token is absent, null or a plain string
// (plainBody) and the type is not empty: what asString would read one by
// one, with one allocation each. A type and source the Decoder has kept
// (names.go) cost nothing; otherwise the three are read in one allocation
// and the type and source kept. ok false means the caller reads them one
// by one, with the errors they have.
func (nm *names) plainAttrs(typ, source, time json.RawMessage) (t, s, tm string, ok bool) {
	var bs [3][]byte
	n := 0
	for i, v := range [3]json.RawMessage{typ, source, time} {
		if v == nil || string(v) == "null" {
			continue
		}
		if bs[i], ok = plainBody(v); !ok {
			return "", "", "", false
		}
		n += len(bs[i])
	}
	if len(bs[0]) == 0 {
		return "", "", "", false // missing or empty: the caller's error
	}
	if t, ok := nm.get(bs[0]); ok {
		if s, ok := nm.get(bs[1]); ok {
			return t, s, string(bs[2]), true
		}
	}
	var b strings.Builder
	b.Grow(n)
	for _, v := range bs {
		b.Write(v)
	}
	all := b.String()
	a, c := len(bs[0]), len(bs[0])+len(bs[1])
	nm.keep(all[:a], false)
	nm.keep(all[a:c], false)
	return all[:a], all[a:c], all[c:], true
}

// plainEnvelopeAttrs is plainAttrs over the plain format's configured
// fields; ok false also when a lookup fails (the caller reports it).
func (d *Decoder) plainEnvelopeAttrs(obj members) (t, s, tm string, ok bool) {
	f := d.cfg.Fields
	var toks [3]json.RawMessage
	for i, path := range [3]string{f.Type, f.Source, f.Time} {
		if path == "" {
			continue
		}
		v, err := lookup(obj, path)
		if err != nil {
			return "", "", "", false
		}
		toks[i] = v
	}
	return d.names.plainAttrs(toks[0], toks[1], toks[2])
}
