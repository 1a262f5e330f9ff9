package config

import (
	"encoding"
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// checkIntegers walks the document beside the type it decodes into, and
// refuses a value an integer field would take wrongly, naming its key:
// yaml cuts a fraction off (1.5 bytes as 1), takes -1e300 as int64's
// minimum, and names only the line of a value that is no integer at all
// ("256KiB", a list). It walks what yaml reads: of a mapping with merge
// keys (<<), the keys that win. Fields that decode themselves
// (durations, text) are left to yaml, and so is a document past a
// million nodes (yaml's own alias limits).
func checkIntegers(n *yaml.Node, t reflect.Type, path string) error {
	w := intWalk{budget: 1_000_000}
	return w.check(n, t, path)
}

type intWalk struct{ budget int }

func (w *intWalk) check(n *yaml.Node, t reflect.Type, path string) error {
	if w.budget--; w.budget < 0 {
		return nil
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if pt := reflect.PointerTo(t); t == reflect.TypeFor[time.Duration]() || pt.Implements(reflect.TypeFor[yaml.Unmarshaler]()) ||
		pt.Implements(reflect.TypeFor[encoding.TextUnmarshaler]()) {
		return nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		return w.check(n, t.Elem(), path)
	case reflect.Struct, reflect.Map:
		if n.Kind == yaml.DocumentNode {
			for _, c := range n.Content {
				if err := w.check(c, t, path); err != nil {
					return err
				}
			}
		}
		if n.Kind != yaml.MappingNode {
			return nil
		}
		for _, kv := range w.pairs(n, map[*yaml.Node]bool{}) {
			key := kv[0].Value
			var ft reflect.Type
			if t.Kind() == reflect.Map {
				ft = t.Elem()
			} else if f, ok := yamlField(t, key); ok {
				ft = f
			} else {
				continue
			}
			if path != "" {
				key = path + "." + key
			}
			if err := w.check(kv[1], ft, key); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			return nil
		}
		for i, c := range n.Content {
			if err := w.check(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return checkInteger(n, t, path)
	}
	return nil
}

// pairs are a mapping's keys and values as yaml reads them: its own keys,
// then each merged mapping's (<<: a mapping, an alias of one, or a list of
// them, the first first) that no key before it set. A mapping already on
// the way (an alias cycle) adds nothing.
func (w *intWalk) pairs(n *yaml.Node, on map[*yaml.Node]bool) [][2]*yaml.Node {
	if on[n] {
		return nil
	}
	on[n] = true
	defer delete(on, n)
	var own, merged [][2]*yaml.Node
	set := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; k.Value == "<<" && k.ShortTag() == "!!merge" {
			v := n.Content[i+1]
			if v.Kind == yaml.AliasNode && v.Alias != nil {
				v = v.Alias
			}
			from := []*yaml.Node{v}
			if v.Kind == yaml.SequenceNode {
				from = v.Content
			}
			for _, m := range from {
				if m.Kind == yaml.AliasNode && m.Alias != nil {
					m = m.Alias
				}
				if w.budget--; m.Kind == yaml.MappingNode && w.budget >= 0 {
					merged = append(merged, w.pairs(m, on)...)
				}
			}
			continue
		}
		own = append(own, [2]*yaml.Node{n.Content[i], n.Content[i+1]})
		set[n.Content[i].Value] = true
	}
	for _, kv := range merged {
		if !set[kv[0].Value] {
			set[kv[0].Value] = true
			own = append(own, kv)
		}
	}
	return own
}

// checkInteger refuses a scalar an integer field of type t would take
// wrongly. Values are quoted in its errors, so that one from ${VAR} is
// taken out (redactValues).
func checkInteger(n *yaml.Node, t reflect.Type, path string) error {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("%s (line %d): a %s, want an integer", path, n.Line, map[yaml.Kind]string{yaml.SequenceNode: "list", yaml.MappingNode: "mapping"}[n.Kind])
	}
	unsigned := t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64
	var f float64
	if n.ShortTag() == "!!float" && n.Decode(&f) == nil {
		lo, hi := -(1 << 63), float64(1<<63)
		if unsigned {
			lo, hi = 0, 1<<64
		}
		switch {
		case f != math.Trunc(f) && !math.IsInf(f, 0):
			return fmt.Errorf("%s (line %d): %q has a fraction, want an integer", path, n.Line, n.Value)
		case !(f >= float64(lo) && f < hi):
			// yaml takes -Inf and -1e300 as int64's minimum, -1 as
			// uint64's maximum.
			return fmt.Errorf("%s (line %d): %q is out of the range of a %s", path, n.Line, n.Value, t.Kind())
		}
	}
	if (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") || n.Decode(reflect.New(t).Interface()) != nil {
		return fmt.Errorf("%s (line %d): %q, want an integer that fits a %s", path, n.Line, n.Value, t.Kind())
	}
	return nil
}

// yamlField is the type of struct t's field that the YAML key key sets
// (yaml.v3's rules: its tag's name, else its name in lower case; inline
// structs' fields as t's own).
func yamlField(t reflect.Type, key string) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") {
			if ft, ok := yamlField(f.Type, key); ok {
				return ft, true
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		if name == key {
			return f.Type, true
		}
	}
	return nil, false
}
