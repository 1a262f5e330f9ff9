package eventid

import (
	"bytes"
	"strings"
	"testing"
)

// Field reads a path the way encoding/json into nested maps does, on the
// scanner's path and on the general one alike: the same value or none.
func TestFieldReadsAPathAsEncodingJSONDoes(t *testing.T) {
	cases := []struct {
		data, path, want string // want "" : no value
	}{
		{`{"a":{"b":"x"}}`, "a.b", `"x"`},
		{` { "a" : { "b" : 42 } } `, "a.b", `42`},
		{`{"a":{"b":[1,{"c":2}]}}`, "a.b", `[1,{"c":2}]`},
		{`{"a":1,"a":2}`, "a", `2`},
		{`{"a":{"b":null}}`, "a.b", `null`},
		{`{"a":{"b":1}}`, "a.c", ``},
		{`{"a":"s"}`, "a.b", ``},
		{`{"a":[{"b":1}]}`, "a.b", ``},
		{`[1]`, "a", ``},
		{`"a"`, "a", ``},
		{``, "a", ``},
		{`{"a":1`, "a", ``},
		{`{"a":1} x`, "a", ``},
		{`{"\u0061":{"b":true}}`, "a.b", `true`},
		{`{"é":{"b":false}}`, "é.b", `false`},
		{strings.Repeat(`{"a":`, 300) + `1` + strings.Repeat(`}`, 300), strings.TrimSuffix(strings.Repeat("a.", 300), "."), `1`},
	}
	for _, c := range cases {
		path := strings.Split(c.path, ".")
		got, ok := Field([]byte(c.data), path)
		slow, slowOK := slowField([]byte(c.data), path)
		if ok != (c.want != "") || string(got) != c.want {
			t.Errorf("%.60s %s: %q %v, want %q", c.data, c.path, got, ok, c.want)
		}
		if ok != slowOK || !bytes.Equal(got, slow) {
			t.Errorf("%.60s %s: %q %v, encoding/json reads %q %v", c.data, c.path, got, ok, slow, slowOK)
		}
	}
}

// FuzzField holds Field to encoding/json's reading on any input.
func FuzzField(f *testing.F) {
	f.Add([]byte(`{"a":{"b":"x"},"a":{"b":1}}`), "a.b")
	f.Add([]byte(`{"a":{"\u0062":[1,2]}}`), "a.b")
	f.Add([]byte(`{"a":{"b":tru}}`), "a.b")
	f.Fuzz(func(t *testing.T, data []byte, p string) {
		path := strings.Split(p, ".")
		got, ok := Field(data, path)
		slow, slowOK := slowField(data, path)
		if ok != slowOK || !bytes.Equal(got, slow) {
			t.Fatalf("%q %q: %q %v, encoding/json reads %q %v", data, p, got, ok, slow, slowOK)
		}
	})
}
