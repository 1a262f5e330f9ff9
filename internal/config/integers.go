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
// yaml cuts a fraction off (1.5 bytes as 1) and names only the line of a
// value that is no integer at all ("256KiB", a list, a number past
// int64). Fields that decode themselves (durations, text), are left to
// yaml.
func checkIntegers(n *yaml.Node, t reflect.Type, path string) error {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if pt := reflect.PointerTo(t); t == reflect.TypeFor[time.Duration]() || pt.Implements(reflect.TypeFor[yaml.Unmarshaler]()) ||
		pt.Implements(reflect.TypeFor[encoding.TextUnmarshaler]()) {
		return nil
	}
	each := func(key string, v *yaml.Node, t reflect.Type) error {
		if path != "" {
			key = path + "." + key
		}
		return checkIntegers(v, t, key)
	}
	switch t.Kind() {
	case reflect.Pointer:
		return checkIntegers(n, t.Elem(), path)
	case reflect.Struct:
		if n.Kind == yaml.DocumentNode {
			for _, c := range n.Content {
				if err := checkIntegers(c, t, path); err != nil {
					return err
				}
			}
		}
		if n.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i]; k.Value == "<<" && k.ShortTag() == "!!merge" {
				// A merge key: its mapping's (or each of its list's)
				// keys are this mapping's.
				v := n.Content[i+1]
				if v.Kind == yaml.AliasNode && v.Alias != nil {
					v = v.Alias
				}
				merged := []*yaml.Node{v}
				if v.Kind == yaml.SequenceNode {
					merged = v.Content
				}
				for _, m := range merged {
					if err := checkIntegers(m, t, path); err != nil {
						return err
					}
				}
				continue
			}
			if f, ok := yamlField(t, n.Content[i].Value); ok {
				if err := each(n.Content[i].Value, n.Content[i+1], f); err != nil {
					return err
				}
			}
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := each(n.Content[i].Value, n.Content[i+1], t.Elem()); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			return nil
		}
		for i, c := range n.Content {
			if err := checkIntegers(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
			return nil
		}
		v := reflect.New(t)
		var f float64
		switch {
		case n.Kind != yaml.ScalarNode:
			return fmt.Errorf("%s (line %d): a %s, want an integer", path, n.Line, map[yaml.Kind]string{yaml.SequenceNode: "list", yaml.MappingNode: "mapping"}[n.Kind])
		case n.ShortTag() == "!!float" && n.Decode(&f) == nil && f != math.Trunc(f):
			return fmt.Errorf("%s (line %d): %s has a fraction, want an integer", path, n.Line, n.Value)
		case n.ShortTag() == "!!float" && !(f >= -(1<<63) && f < 1<<63):
			// yaml takes any float up to int64's maximum, -Inf and -1e300
			// as int64's minimum.
			return fmt.Errorf("%s (line %d): %s is out of an integer's range", path, n.Line, n.Value)
		case n.ShortTag() != "!!int" && n.ShortTag() != "!!float", n.Decode(v.Interface()) != nil:
			return fmt.Errorf("%s (line %d): %q, want an integer that fits a %s", path, n.Line, n.Value, t.Kind())
		}
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
