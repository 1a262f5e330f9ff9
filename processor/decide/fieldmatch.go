package decide

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/dedupio/dedup/processor/eventid"
)

// A route's match on fields of the event's data (match.fields): a map from
// a path, "data.<dotted path>" as in workflow ID templates (each segment
// names a member of an object), to a pattern. A route matches an event
// only when every listed field matches (and its type and source do):
//
//   - the value is a JSON string, number or boolean; a string is compared
//     as its text, a number as its literal text in the data (42 matches
//     "42", 4.50 only "4.50"), a boolean as "true" or "false";
//   - a field that is missing, null, an object or an array never matches,
//     whatever the pattern; nor does any field of an event without JSON
//     data (binary data);
//   - the pattern is the exact text, or ends in "*": any text with that
//     prefix ("eu-*"; "*" alone: any string, number or boolean). A "*"
//     anywhere else is refused at load, as are an empty pattern and a path
//     with an empty segment.
//
// Records read through a Schema Registry match on their logical JSON (an
// Avro record as the object srdecode writes), the same as JSON records.

// fieldMatch is one parsed entry of match.fields.
type fieldMatch struct {
	name    string   // as written: data.order.status
	path    []string // order, status
	pattern string   // without its trailing '*' when prefix
	prefix  bool
}

// parseFieldMatches parses match.fields in path order (at names it:
// routes[0].match.fields).
func parseFieldMatches(at string, fields map[string]string) ([]fieldMatch, error) {
	if len(fields) == 0 {
		return nil, nil
	}
	out := make([]fieldMatch, 0, len(fields))
	for name, pat := range fields {
		f := fieldMatch{name: name, pattern: pat}
		rest, ok := strings.CutPrefix(name, "data.")
		if !ok {
			return nil, fmt.Errorf("%s[%q]: not a path into the event's data (data.<dotted path>, e.g. data.order.status)", at, name)
		}
		f.path = strings.Split(rest, ".")
		if slices.Contains(f.path, "") {
			return nil, fmt.Errorf("%s[%q]: the path has an empty segment", at, name)
		}
		if !utf8.ValidString(name) || hasControl(name) {
			return nil, fmt.Errorf("%s[%q]: the path is not UTF-8 or has a control character", at, name)
		}
		switch i := strings.IndexByte(pat, '*'); {
		case pat == "":
			return nil, fmt.Errorf("%s[%q]: empty pattern (the value's text, or a prefix and \"*\")", at, name)
		case i >= 0 && i != len(pat)-1:
			return nil, fmt.Errorf("%s[%q]: %q has a \"*\" before its end; only a trailing \"*\" is a wildcard (a prefix)", at, name, pat)
		case i >= 0:
			f.pattern, f.prefix = pat[:i], true
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b fieldMatch) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// fieldsOf is m's parsed fields: those Validate parsed, else parsed now
// (a route built in code and never validated); a field that does not
// parse matches nothing.
func (m *Match) fieldsOf() ([]fieldMatch, bool) {
	if m.fields != nil || len(m.Fields) == 0 {
		return m.fields, true
	}
	fs, err := parseFieldMatches("match.fields", m.Fields)
	return fs, err == nil
}

// fieldsMatch reports whether every listed field of data matches.
func (m *Match) fieldsMatch(data json.RawMessage) bool {
	fs, ok := m.fieldsOf()
	if !ok {
		return false
	}
	for i := range fs {
		if fs[i].mismatch(data) != "" {
			return false
		}
	}
	return true
}

// Mismatch says why ev does not match m ("" when it matches): the first
// of type, source or a field (in path order) that does not, for dedup
// explain.
func (m *Match) Mismatch(ev *eventid.Event) string {
	switch {
	case m.Source != "" && m.Source != ev.Source:
		return fmt.Sprintf("source %q is not %q", ev.Source, m.Source)
	case !m.typeMatches(ev.Type):
		return fmt.Sprintf("type %q does not match %q", ev.Type, m.Type)
	}
	fs, ok := m.fieldsOf()
	if !ok {
		return "match.fields does not parse"
	}
	for i := range fs {
		if why := fs[i].mismatch(ev.Data); why != "" {
			return why
		}
	}
	return ""
}

// mismatch says why data does not match f, "" when it does. It allocates
// only for a string with escapes and for the reason.
func (f *fieldMatch) mismatch(data json.RawMessage) string {
	raw, ok := eventid.Field(data, f.path)
	if !ok {
		return f.name + " is missing"
	}
	var text []byte
	switch c := raw[0]; {
	case c == '"':
		body := raw[1 : len(raw)-1]
		if bytes.IndexByte(body, '\\') >= 0 || !utf8.Valid(body) {
			var s string
			if json.Unmarshal(raw, &s) != nil {
				return f.name + " is not a valid string"
			}
			body = []byte(s)
		}
		text = body
	case c == 't' || c == 'f' || c == '-' || '0' <= c && c <= '9':
		text = raw // true, false, or a number's literal text
	case c == 'n':
		return f.name + " is null"
	default:
		return fmt.Sprintf("%s is %s, not a string, number or boolean", f.name, kindOf(raw))
	}
	if f.prefix {
		if len(text) >= len(f.pattern) && string(text[:len(f.pattern)]) == f.pattern {
			return ""
		}
		return fmt.Sprintf("%s is %q, not %q", f.name, truncate(string(text), 80), f.pattern+"*")
	}
	if string(text) == f.pattern {
		return ""
	}
	return fmt.Sprintf("%s is %q, not %q", f.name, truncate(string(text), 80), f.pattern)
}
