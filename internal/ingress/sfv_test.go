package ingress

import (
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// sfvCase is one case of the structured-field-tests corpus
// (testdata/sfv/README.md).
type sfvCase struct {
	Name       string          `json:"name"`
	Raw        []string        `json:"raw"`
	HeaderType string          `json:"header_type"`
	Expected   json.RawMessage `json:"expected"`
	MustFail   bool            `json:"must_fail"`
	CanFail    bool            `json:"can_fail"`
	Canonical  []string        `json:"canonical"`
}

func loadSFVCases(t testing.TB, path string) []sfvCase {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cases []sfvCase
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return cases
}

func decodeJSON(raw json.RawMessage) (any, error) {
	d := json.NewDecoder(strings.NewReader(string(raw)))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

// sfvItemFromJSON converts an expected Item ([bare item, parameters]).
func sfvItemFromJSON(v any) (sfItem, error) {
	pair, ok := v.([]any)
	if !ok || len(pair) != 2 {
		return sfItem{}, fmt.Errorf("an Item is [bare item, parameters], got %v", v)
	}
	bare, err := sfvBareFromJSON(pair[0])
	if err != nil {
		return sfItem{}, err
	}
	params, ok := pair[1].([]any)
	if !ok {
		return sfItem{}, fmt.Errorf("parameters are an array, got %v", pair[1])
	}
	it := sfItem{Bare: bare}
	for _, p := range params {
		kv, ok := p.([]any)
		if !ok || len(kv) != 2 {
			return sfItem{}, fmt.Errorf("a parameter is [key, value], got %v", p)
		}
		key, ok := kv[0].(string)
		if !ok {
			return sfItem{}, fmt.Errorf("a parameter key is a string, got %v", kv[0])
		}
		value, err := sfvBareFromJSON(kv[1])
		if err != nil {
			return sfItem{}, err
		}
		it.Params = append(it.Params, sfParam{Key: key, Value: value})
	}
	return it, nil
}

func sfvBareFromJSON(v any) (sfBareItem, error) {
	switch v := v.(type) {
	case json.Number:
		s := v.String()
		if !strings.ContainsAny(s, ".eE") {
			n, err := v.Int64()
			return sfBareItem{Kind: sfInteger, Int: n}, err
		}
		r, ok := new(big.Rat).SetString(s)
		if !ok {
			return sfBareItem{}, fmt.Errorf("decimal %s", s)
		}
		r.Mul(r, big.NewRat(1000, 1))
		if !r.IsInt() || !r.Num().IsInt64() {
			return sfBareItem{}, fmt.Errorf("decimal %s is not a whole number of thousandths", s)
		}
		return sfBareItem{Kind: sfDecimal, Int: r.Num().Int64()}, nil
	case string:
		return sfBareItem{Kind: sfString, Str: v}, nil
	case bool:
		return sfBareItem{Kind: sfBoolean, Bool: v}, nil
	case map[string]any:
		s, _ := v["value"].(string)
		switch v["__type"] {
		case "token":
			return sfBareItem{Kind: sfToken, Str: s}, nil
		case "binary":
			b, err := base32.StdEncoding.DecodeString(s)
			if b == nil {
				b = []byte{}
			}
			return sfBareItem{Kind: sfByteSeq, Bytes: b}, err
		}
	}
	return sfBareItem{}, fmt.Errorf("unknown bare item %v", v)
}

// checkSFVItemCase runs one Item case: must_fail fails with an
// *sfvError; a valid case parses to expected and serializes to its
// canonical form (raw when it gives none); a can_fail case may fail.
// It reports whether the parser accepted the input.
func checkSFVItemCase(t *testing.T, c sfvCase, expected json.RawMessage) (accepted bool) {
	t.Helper()
	it, err := parseSFVItem(c.Raw)
	if err != nil {
		var se *sfvError
		switch {
		case !errors.As(err, &se):
			t.Errorf("%q: error %v is not an *sfvError", c.Raw, err)
		case !c.MustFail && !c.CanFail:
			t.Errorf("%q: %v", c.Raw, err)
		}
		return false
	}
	if c.MustFail {
		t.Errorf("%q must fail, parsed as %+v", c.Raw, it)
		return true
	}
	v, err := decodeJSON(expected)
	if err != nil {
		t.Fatal(err)
	}
	want, err := sfvItemFromJSON(v)
	if err != nil {
		t.Fatalf("expected: %v", err)
	}
	if !reflect.DeepEqual(it, want) {
		t.Errorf("%q parsed as %+v, want %+v", c.Raw, it, want)
	}
	canonical := c.Canonical
	if canonical == nil {
		canonical = c.Raw
	}
	if s, err := it.serialize(); err != nil || len(canonical) != 1 || s != canonical[0] {
		t.Errorf("%q serialized as %q (%v), want %q", c.Raw, s, err, canonical)
	}
	return true
}

// rfc9651Files hold the types RFC 9651 added (Date, Display String): not
// RFC 8941 bare items, so every case must fail.
var rfc9651Files = map[string]bool{"date.json": true, "display-string.json": true}

func TestSFVCorpus(t *testing.T) {
	files, err := filepath.Glob("testdata/sfv/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus files: %v", err)
	}
	var (
		items, itemsCanFailAccepted, listsAsItems, rfc9651 int
		skippedLists, skippedDicts                         int
	)
	for _, path := range files {
		name := filepath.Base(path)
		for _, c := range loadSFVCases(t, path) {
			t.Run(name+"/"+c.HeaderType+"/"+c.Name, func(t *testing.T) {
				switch {
				case rfc9651Files[name]:
					if it, err := parseSFVItem(c.Raw); err == nil {
						t.Errorf("%q is not an RFC 8941 Item, parsed as %+v", c.Raw, it)
					}
					rfc9651++
				case c.HeaderType == "item":
					if checkSFVItemCase(t, c, c.Expected) && c.CanFail {
						itemsCanFailAccepted++
					}
					items++
				case c.HeaderType == "list":
					// A List case says the same about an Item when it
					// must fail (an Item that parses is a one-member
					// List), or when it is one line without a tab (a
					// List discards trailing tabs, an Item does not)
					// whose one member is an Item, not an Inner List.
					expected, ok := c.Expected, c.MustFail
					if !c.MustFail && len(c.Raw) == 1 && !strings.Contains(c.Raw[0], "\t") {
						var members []json.RawMessage
						if json.Unmarshal(c.Expected, &members) == nil && len(members) == 1 {
							var member []json.RawMessage
							if json.Unmarshal(members[0], &member) == nil && len(member) == 2 && !strings.HasPrefix(strings.TrimSpace(string(member[0])), "[") {
								expected, ok = members[0], true
							}
						}
					}
					if !ok {
						skippedLists++
						return
					}
					checkSFVItemCase(t, c, expected)
					listsAsItems++
				default:
					skippedDicts++
				}
			})
		}
	}
	ser := 0
	files, _ = filepath.Glob("testdata/sfv/serialisation/*.json")
	for _, path := range files {
		for _, c := range loadSFVCases(t, path) {
			if c.HeaderType != "item" {
				continue
			}
			v, err := decodeJSON(c.Expected)
			if err != nil {
				t.Fatal(err)
			}
			it, err := sfvItemFromJSON(v)
			if err != nil {
				t.Fatalf("%s %s: %v", path, c.Name, err)
			}
			s, err := it.serialize()
			switch {
			case c.MustFail && err == nil:
				t.Errorf("%s: %+v must not serialize, got %q", c.Name, it, s)
			case !c.MustFail && (err != nil || s != c.Canonical[0]):
				t.Errorf("%s: %+v serialized as %q (%v), want %q", c.Name, it, s, err, c.Canonical)
			}
			ser++
		}
	}
	t.Logf("item cases: %d (%d can_fail cases accepted); list cases run as an Item: %d; "+
		"RFC 9651 cases refused: %d; serialisation cases: %d; skipped: %d list, %d dictionary",
		items, itemsCanFailAccepted, listsAsItems, rfc9651, ser, skippedLists, skippedDicts)
	if items == 0 || listsAsItems == 0 || rfc9651 == 0 || ser == 0 {
		t.Error("a part of the corpus did not run")
	}
}

func TestParseItemParameters(t *testing.T) {
	it, err := parseSFVItem([]string{` "k";a;b=?0;c=-1.5;d=:AQ==:;e=tok/x;f="s\"";a=2;*g=042  `})
	if err != nil {
		t.Fatal(err)
	}
	want := sfItem{
		Bare: sfBareItem{Kind: sfString, Str: "k"},
		Params: []sfParam{
			{"a", sfBareItem{Kind: sfInteger, Int: 2}}, // a repeated key keeps its place, takes the last value
			{"b", sfBareItem{Kind: sfBoolean, Bool: false}},
			{"c", sfBareItem{Kind: sfDecimal, Int: -1500}},
			{"d", sfBareItem{Kind: sfByteSeq, Bytes: []byte{1}}},
			{"e", sfBareItem{Kind: sfToken, Str: "tok/x"}},
			{"f", sfBareItem{Kind: sfString, Str: `s"`}},
			{"*g", sfBareItem{Kind: sfInteger, Int: 42}},
		},
	}
	if !reflect.DeepEqual(it, want) {
		t.Fatalf("got %+v\nwant %+v", it, want)
	}
	s, err := it.serialize()
	if want := `"k";a=2;b=?0;c=-1.5;d=:AQ==:;e=tok/x;f="s\"";*g=42`; err != nil || s != want {
		t.Errorf("serialized as %q (%v), want %q", s, err, want)
	}
	for _, in := range []string{`"k";`, `"k"; `, `"k";A=1`, `"k" ;a`, `"k";a =1`, `"k";a= 1`, `"k";a=@1`, `"k";a=`} {
		if _, err := parseSFVItem([]string{in}); err == nil {
			t.Errorf("%s parsed", in)
		}
	}
}

func TestSFVErrorNamesTheRule(t *testing.T) {
	for in, want := range map[string]string{
		``:              `RFC 8941 §4.2.3.1 (Parsing a Bare Item), at offset 0: the value is empty`,
		`"a\x"`:         `RFC 8941 §4.2.5 (Parsing a String), at offset 3: a string escapes only \" and \\, not \x`,
		"\"a\tb\"":      `RFC 8941 §4.2.5 (Parsing a String), at offset 2: a string holds printable ASCII only (0x20-0x7E), not '\t'`,
		`1.2345`:        `RFC 8941 §4.2.4 (Parsing an Integer or Decimal), at offset 6: a decimal has at most 3 fractional digits`,
		`:aGVsbG8!:`:    `RFC 8941 §4.2.7 (Parsing a Byte Sequence), at offset 8: '!' is not base64`,
		`?2`:            `RFC 8941 §4.2.8 (Parsing a Boolean), at offset 1: a boolean is ?1 or ?0, not ? followed by '2'`,
		`a;B`:           `RFC 8941 §4.2.3.3 (Parsing a Key), at offset 2: a key begins with a lowercase letter or *, not 'B'`,
		`a b`:           `RFC 8941 §4.2 (Parsing Structured Fields), at offset 2: 'b' after the Item`,
		"\"f\xc3\xbc\"": `RFC 8941 §4.2 (Parsing Structured Fields), at offset 2: byte 0xc3 is not ASCII`,
	} {
		_, err := parseSFVItem([]string{in})
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q: got %v, want %s…", in, err, want)
		}
	}
}

func TestParseIdempotencyKey(t *testing.T) {
	long := strings.Repeat("k", maxIdempotencyKeyLen)
	for _, tc := range []struct {
		lines []string
		want  string
	}{
		{[]string{`"order-123"`}, "order-123"},
		{[]string{`  "8e03978e-40d5-43e8-bc93-6894a57f9324"  `}, "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{[]string{`"order-123";v=1;retry`}, "order-123"}, // parameters are ignored
		{[]string{`"a \"b\" \\c"`}, `a "b" \c`},
		{[]string{`" "`}, " "},
		{[]string{`"` + long + `"`}, long},
		{[]string{`"` + strings.Repeat(`\"`, maxIdempotencyKeyLen) + `"`}, strings.Repeat(`"`, maxIdempotencyKeyLen)}, // the limit is on the value
	} {
		got, err := parseIdempotencyKey(tc.lines)
		if err != nil || got != tc.want {
			t.Errorf("%q: got %q, %v; want %q", tc.lines, got, err, tc.want)
		}
	}
}

func TestParseIdempotencyKeyRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string
		want  string // the message; "…" stands for any text
	}{
		{"token", []string{`order-123`},
			`Idempotency-Key must be an sf-string (RFC 8941 §3.3.3), got a token: quote it, as in Idempotency-Key: "order-123"`},
		{"token with parameters", []string{`order-123;v=1`},
			`Idempotency-Key must be an sf-string (RFC 8941 §3.3.3), got a token: quote it, as in Idempotency-Key: "order-123"`},
		{"integer", []string{`042`},
			`Idempotency-Key must be an sf-string (RFC 8941 §3.3.3), got an integer: quote it, as in Idempotency-Key: "042"`},
		{"decimal", []string{`4.5`},
			`Idempotency-Key must be an sf-string (RFC 8941 §3.3.3), got a decimal: quote it, as in Idempotency-Key: "4.5"`},
		{"byte sequence", []string{`:aGVsbG8=:`},
			`Idempotency-Key must be an sf-string (RFC 8941 §3.3.3), got a byte sequence: quote it, as in Idempotency-Key: ":aGVsbG8=:"`},
		{"boolean", []string{`?1`},
			`Idempotency-Key must be an sf-string (RFC 8941 §3.3.3), got a boolean: quote it, as in Idempotency-Key: "?1"`},
		{"bare UUID", []string{`8e03978e-40d5-43e8-bc93-6894a57f9324`},
			`Idempotency-Key must be an sf-string (RFC 8941 §3.3.3), got text that is not a Structured Field Item (RFC 8941 §4.2 (Parsing Structured Fields), at offset 1: 'e' after the Item: an Item is one bare item and its parameters): quote it, as in Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"`},
		{"bare text with a space", []string{`order 123`},
			`Idempotency-Key must be an sf-string (RFC 8941 §3.3.3), got text that is not a Structured Field Item (… quote it, as in Idempotency-Key: "order 123"`},
		{"single quotes", []string{`'order-123'`},
			`Idempotency-Key must be an sf-string (RFC 8941 §3.3.3), got text that is not a Structured Field Item (RFC 8941 §4.2.3.1 (Parsing a Bare Item), at offset 0: '\'' begins no bare item… quote it, as in Idempotency-Key: "'order-123'"`},
		{"RFC 9651 display string", []string{`%"order-123"`},
			`Idempotency-Key must be an sf-string (RFC 8941 §3.3.3), got text that is not a Structured Field Item (… quote it, as in Idempotency-Key: "order-123"`},
		{"two field lines", []string{`"a"`, `"b"`},
			`Idempotency-Key must be one sf-string (RFC 8941 §3.3.3), got 2 field lines: send the key once, as in Idempotency-Key: "order-123"`},
		{"a string split over two lines", []string{`"a`, `b"`},
			`Idempotency-Key must be one sf-string (RFC 8941 §3.3.3), got 2 field lines…`},
		{"no field line", nil, `no Idempotency-Key field`},
		{"empty field", []string{``},
			`Idempotency-Key must be an sf-string (RFC 8941 §3.3.3), got text that is not a Structured Field Item (RFC 8941 §4.2.3.1 (Parsing a Bare Item), at offset 0: the value is empty: an Item needs a bare item): quote it, as in Idempotency-Key: "order-123"`},
		{"empty string", []string{`""`},
			`Idempotency-Key is the empty string (""): a key needs at least one character, as in Idempotency-Key: "order-123"`},
		{"empty string with parameters", []string{`"";a=1`},
			`Idempotency-Key is the empty string ("")…`},
		{"non-ASCII string", []string{"\"ord\xc3\xa9r-123\""},
			`Idempotency-Key must be an sf-string (RFC 8941 §3.3.3), which holds printable ASCII only: RFC 8941 §4.2 (Parsing Structured Fields), at offset 4: byte 0xc3 is not ASCII`},
		{"non-ASCII bare text", []string{"ord\xc3\xa9r-123"},
			`Idempotency-Key must be an sf-string (RFC 8941 §3.3.3), which holds printable ASCII only: RFC 8941 §4.2 (Parsing Structured Fields), at offset 3: byte 0xc3 is not ASCII`},
		{"control character", []string{"\"order\x01\""},
			`Idempotency-Key must be an sf-string (RFC 8941 §3.3.3): RFC 8941 §4.2.5 (Parsing a String), at offset 6: a string holds printable ASCII only (0x20-0x7E), not '\x01'`},
		{"unknown escape", []string{`"order\-123"`},
			`Idempotency-Key must be an sf-string (RFC 8941 §3.3.3): RFC 8941 §4.2.5 (Parsing a String), at offset 7: a string escapes only \" and \\, not \-`},
		{"unterminated string", []string{`"order-123`},
			`Idempotency-Key must be an sf-string (RFC 8941 §3.3.3): RFC 8941 §4.2.5 (Parsing a String), at offset 10: the value ends before the string's closing "`},
		{"text after the string", []string{`"order" 123`},
			`Idempotency-Key must be an sf-string (RFC 8941 §3.3.3): RFC 8941 §4.2 (Parsing Structured Fields), at offset 8: '1' after the Item…`},
		{"tab before the string", []string{"\t\"order-123\""},
			`Idempotency-Key must be an sf-string (RFC 8941 §3.3.3), got text that is not a Structured Field Item (RFC 8941 §4.2.3.1 (Parsing a Bare Item), at offset 0: '\t' begins no bare item…: quote it, as in Idempotency-Key: "order-123"`},
		{"over-long", []string{`"` + strings.Repeat("k", maxIdempotencyKeyLen+1) + `"`},
			`Idempotency-Key is 256 bytes long, over the limit of 255 bytes`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseIdempotencyKey(tc.lines)
			if err == nil {
				t.Fatalf("%q: accepted as %q", tc.lines, got)
			}
			if !matchElided(err.Error(), tc.want) {
				t.Errorf("%q:\n got %s\nwant %s", tc.lines, err, tc.want)
			}
		})
	}
	// The split string is one Item by RFC 8941 §4.2; the key refuses it
	// by the draft's rule of one field line.
	if it, err := parseSFVItem([]string{`"a`, `b"`}); err != nil || it.Bare.Str != "a, b" {
		t.Errorf(`"a + b": got %+v, %v; want the string "a, b"`, it, err)
	}
}

// matchElided reports whether s is pattern, where "…" in pattern stands
// for any text.
func matchElided(s, pattern string) bool {
	parts := strings.Split(pattern, "…")
	if len(parts) == 1 {
		return s == pattern
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return strings.HasSuffix(s, parts[len(parts)-1])
}

func FuzzParseItem(f *testing.F) {
	files, _ := filepath.Glob("testdata/sfv/*.json")
	for _, path := range files {
		if strings.Contains(path, "-generated") {
			continue // hundreds of variations on one character: slow to baseline, no new coverage
		}
		for _, c := range loadSFVCases(f, path) {
			if c.HeaderType == "item" {
				f.Add(strings.Join(c.Raw, "\n"))
			}
		}
	}
	for _, s := range []string{`"order-123"`, `"a\"b\\c";x=1;y`, "\"a\nb\"", `order-123`, `1.5;a=:AQ==:`, `*tok;k=?0`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		lines := strings.Split(data, "\n") // "\n" separates field lines
		combined := strings.Join(lines, ", ")
		it, err := parseSFVItem(lines)
		if err != nil {
			var se *sfvError
			if !errors.As(err, &se) || se.Offset < 0 || se.Offset > len(combined) || sfvSections[se.Section] == "" {
				t.Fatalf("%q: error %v (%#v) names no rule or offset", data, err, se)
			}
		} else {
			if firstNonASCII(combined) >= 0 {
				t.Fatalf("%q: not ASCII, parsed as %+v", data, it)
			}
			s, err := it.serialize()
			if err != nil {
				t.Fatalf("%q parsed as %+v, which does not serialize: %v", data, it, err)
			}
			back, err := parseSFVItem([]string{s})
			if err != nil || !reflect.DeepEqual(back, it) {
				t.Fatalf("%q parsed as %+v, serialized as %q, parsed back as %+v (%v)", data, it, s, back, err)
			}
			if s2, _ := back.serialize(); s2 != s {
				t.Fatalf("%q: serialized as %q, then as %q", data, s, s2)
			}
		}
		key, err := parseIdempotencyKey(lines)
		if err != nil {
			return
		}
		if it.Bare.Kind != sfString || it.Bare.Str != key || len(lines) != 1 {
			t.Fatalf("%q: key %q, but the Item is %+v", data, key, it)
		}
		if key == "" || len(key) > maxIdempotencyKeyLen {
			t.Fatalf("%q: key %q of %d bytes", data, key, len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("%q: key %q holds byte 0x%02x", data, key, key[i])
			}
		}
		quoted, err := sfItem{Bare: sfBareItem{Kind: sfString, Str: key}}.serialize()
		if err != nil {
			t.Fatal(err)
		}
		if again, err := parseIdempotencyKey([]string{quoted}); err != nil || again != key {
			t.Fatalf("%q: key %q, quoted %s, read back as %q (%v)", data, key, quoted, again, err)
		}
	})
}
