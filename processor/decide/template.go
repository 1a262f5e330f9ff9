package decide

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// IDTemplate is a signal route's workflow ID template (workflow_id_template):
// literal text and placeholders, which name the entity workflow an event is
// delivered to:
//
//   - {activity_id}: the route's ID;
//   - {data.<dotted path>}: the string or integer at that path of the
//     event's data (a JSON object; each segment names a member), e.g.
//     {data.order.id}.
//
// "order-{data.order_id}" sends every event of one order to the workflow
// order-42. A template is checked when the config is loaded
// (ParseIDTemplate: known placeholders, no control characters, no stray
// braces, not dedup's own activity- prefix); an event it cannot render
// (the path is missing, empty, or not a string or integer; a control
// character in the value) is dead-lettered as undecodable, naming the path
// (ErrTemplate), and one that renders over MaxWorkflowIDBytes as
// invalid_id (ErrWorkflowIDTooLong).
type IDTemplate struct {
	src   string
	parts []templatePart
}

// templatePart is literal text, or a placeholder: {activity_id} (activity)
// or {data.a.b} (path a, b).
type templatePart struct {
	lit      string
	activity bool
	path     []string
}

// ErrTemplate is the error of an event a signal route's template cannot
// render into a workflow ID: the router dead-letters it as undecodable.
var ErrTemplate = errors.New("workflow ID template")

// ParseIDTemplate parses and checks a workflow ID template.
func ParseIDTemplate(s string) (IDTemplate, error) {
	t := IDTemplate{src: s}
	if s == "" {
		return t, errors.New("empty")
	}
	if strings.HasPrefix(s, startPrefix) {
		// dedup's start routes own activity-{route}:{key}; an entity
		// workflow there would share IDs with them.
		return t, fmt.Errorf("%q starts with activity-, the prefix of start routes' workflow IDs", s)
	}
	rest := s
	static := 0
	for rest != "" {
		open := strings.IndexAny(rest, "{}")
		if open < 0 {
			t.parts = append(t.parts, templatePart{lit: rest})
			static += len(rest)
			break
		}
		if rest[open] == '}' {
			return t, fmt.Errorf("%q: a '}' without its '{'", s)
		}
		if open > 0 {
			t.parts = append(t.parts, templatePart{lit: rest[:open]})
			static += open
		}
		end := strings.IndexAny(rest[open+1:], "{}")
		if end < 0 || rest[open+1+end] != '}' {
			return t, fmt.Errorf("%q: a '{' without its '}'", s)
		}
		name := rest[open+1 : open+1+end]
		rest = rest[open+1+end+1:]
		switch {
		case name == "activity_id":
			t.parts = append(t.parts, templatePart{activity: true})
		case strings.HasPrefix(name, "data."):
			path := strings.Split(strings.TrimPrefix(name, "data."), ".")
			for _, seg := range path {
				if seg == "" {
					return t, fmt.Errorf("%q: {%s} has an empty path segment", s, name)
				}
			}
			t.parts = append(t.parts, templatePart{path: path})
		default:
			return t, fmt.Errorf("%q: unknown placeholder {%s} (activity_id, data.<dotted path>)", s, name)
		}
	}
	if hasControl(s) {
		return t, fmt.Errorf("%q has a control character", s)
	}
	if !utf8.ValidString(s) {
		return t, fmt.Errorf("%q is not UTF-8", s)
	}
	if static > MaxWorkflowIDBytes {
		return t, fmt.Errorf("its literal text is %d bytes, over Temporal's %d", static, MaxWorkflowIDBytes)
	}
	return t, nil
}

// String is the template as written.
func (t IDTemplate) String() string { return t.src }

// Render is the entity workflow ID of an event of route activityID with
// data. Its errors wrap ErrTemplate (the data lacks a usable value at a
// path: undecodable) or ErrWorkflowIDTooLong (invalid_id).
func (t IDTemplate) Render(activityID string, data json.RawMessage) (string, error) {
	var b strings.Builder
	var obj map[string]json.RawMessage // data, decoded once when a path needs it
	decoded := false
	for _, p := range t.parts {
		switch {
		case p.activity:
			b.WriteString(activityID)
		case p.path != nil:
			if !decoded {
				decoded = true
				if err := json.Unmarshal(data, &obj); err != nil || obj == nil {
					return "", fmt.Errorf("%w %s: data.%s: the event's data is not a JSON object", ErrTemplate, t.src, strings.Join(p.path, "."))
				}
			}
			v, err := lookupPath(obj, p.path)
			if err != nil {
				return "", fmt.Errorf("%w %s: data.%s: %v", ErrTemplate, t.src, strings.Join(p.path, "."), err)
			}
			b.WriteString(v)
		default:
			b.WriteString(p.lit)
		}
	}
	id := b.String()
	if Reserved(id) {
		// The event's data would choose a workflow ID of dedup's own:
		// a start route's (activity-{route}:{key}) or a ledger delivery
		// key's form. Refused, so that no event can take over another
		// route's workflow.
		return "", fmt.Errorf("%w: template %s renders %q, which has the prefix of dedup's own IDs (activity-, signal-)",
			ErrWorkflowIDReserved, t.src, truncate(id, 80))
	}
	if len(id) > MaxWorkflowIDBytes {
		return "", fmt.Errorf("%w: template %s makes a workflow ID of %d bytes, over Temporal's %d (limit.maxIDLength)",
			ErrWorkflowIDTooLong, t.src, len(id), MaxWorkflowIDBytes)
	}
	return id, nil
}

// lookupPath is the value at path in obj: a non-empty string without
// control characters, as it is, or an integer, as written (42, -7; not
// 4.2, 1e3 or "").
func lookupPath(obj map[string]json.RawMessage, path []string) (string, error) {
	var raw json.RawMessage
	for i, seg := range path {
		v, ok := obj[seg]
		if !ok {
			return "", errors.New("missing")
		}
		if i == len(path)-1 {
			raw = v
			break
		}
		obj = nil
		if err := json.Unmarshal(v, &obj); err != nil || obj == nil {
			return "", fmt.Errorf("%s is not an object", strings.Join(path[:i+1], "."))
		}
	}
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) > 0 && raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		switch {
		case s == "":
			return "", errors.New("empty string")
		case hasControl(s):
			return "", errors.New("has a control character")
		case !utf8.ValidString(s):
			return "", errors.New("not UTF-8")
		}
		return s, nil
	case isInteger(raw):
		return string(raw), nil
	}
	return "", fmt.Errorf("%s is not a string or an integer", kindOf(raw))
}

// isInteger reports whether raw is a JSON integer: -?(0|[1-9][0-9]*).
func isInteger(raw []byte) bool {
	s := raw
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
	}
	if len(s) == 0 || len(s) > 1 && s[0] == '0' {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// kindOf names a JSON value's kind for an error message.
func kindOf(raw []byte) string {
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a non-integer number"
}

// hasControl reports whether s has a control character (C0, DEL, C1),
// which Temporal's UI and CLI cannot show and an operator cannot type.
func hasControl(s string) bool {
	return strings.ContainsFunc(s, unicode.IsControl)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
