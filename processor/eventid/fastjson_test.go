package eventid

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"

	"github.com/dedupio/dedup/internal/demo/workload"
)

// The fast scanners must give the general tools' results byte for byte:
// a content ID that changed with the code path would stop deduplicating.
var fastJSONSeeds = []string{
	`{"specversion":"1.0","id":"a","type":"t","source":"s","data":{"x":1}}`,
	`{"b":1,"a":[1,2,{"z":null,"y":true}],"c":"x\ny\/z\"\\"}`,
	`{ "amount" : 12.50 , "n" : 1e21, "m": -0, "k": 0.000001, "j": 1E-7, "i": 123456789012345678 }`,
	`{"é":1,"e":2,"😀":3,"":4,"\u00e9":5}`,
	`{"a":1,"a":2}`,
	`[1, 2 ,3]`, `"x"`, `  true `, `null`, `-12`, `01`, `1.`, `{"a":tru}`, `{"a" 1}`, `{"a":1,}`,
	`{"\ud83d\ude00":"\u0041\ud800"}`, "{\"a\":\"\x7f\xff\"}", "{\"a\":\"\x01\"}", `{"a":[[[[[]]]]]}`,
	`{"type":"t","data":{"b":{"d":1,"c":2},"a":[{"y":1,"x":2}]}}`,
	"{\"\uffff\":1,\"\U00010000\":2,\"\ue000\":3,\"\U0010ffff\":4}",
}

func FuzzFastJSON(f *testing.F) {
	for _, s := range fastJSONSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		checkFastJSON(t, v)
	})
}

func TestFastJSONSeeds(t *testing.T) {
	for _, s := range fastJSONSeeds {
		checkFastJSON(t, []byte(s))
	}
}

func checkFastJSON(t *testing.T, v []byte) {
	t.Helper()
	// canonical = jcs.Transform, result and failure.
	want, werr := jcs.Transform(v)
	got, gerr := canonical(v)
	if (werr == nil) != (gerr == nil) || !bytes.Equal(got, want) {
		t.Fatalf("canonical(%q) = %q, %v; jcs.Transform = %q, %v", v, got, gerr, want, werr)
	}
	// A writer reused across inputs (Decode's pooled one) gives the
	// same: one that wrote a seed before, and one that failed on one.
	for _, before := range [][]byte{[]byte(fastJSONSeeds[len(fastJSONSeeds)-2]), []byte(`{"a":[{"b":1,"a":`)} {
		var c canonWriter
		_, _ = c.canonical(before)
		c.reset()
		if got, gerr := c.canonical(v); (werr == nil) != (gerr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("a reused writer: canonical(%q) = %q, %v; jcs.Transform = %q, %v", v, got, gerr, want, werr)
		}
	}
	// scanObject = json.Unmarshal into a map (last repeated key wins).
	var obj map[string]json.RawMessage
	uerr := json.Unmarshal(v, &obj)
	ms, serr := scanObject(v)
	if (uerr == nil) != (serr == nil) {
		t.Fatalf("scanObject(%q) error %v, json.Unmarshal %v", v, serr, uerr)
	}
	if uerr == nil {
		if obj == nil { // JSON null
			if len(ms) != 0 {
				t.Fatalf("scanObject(%q) = %d members for null", v, len(ms))
			}
		} else {
			for k, val := range obj {
				if g, ok := ms.get(k); !ok || !bytes.Equal(g, val) {
					t.Fatalf("scanObject(%q)[%q] = %q, %v; want %q", v, k, g, ok, val)
				}
			}
			for _, m := range ms {
				if _, ok := obj[string(m.key)]; !ok {
					t.Fatalf("scanObject(%q) has %q, json.Unmarshal does not", v, m.key)
				}
			}
		}
	}
	checkObjectOnce(t, v, want, werr)
	// The data reaches a start request compacted, as when the decoder
	// compacted it: encoding/json compacts a RawMessage it encodes.
	if json.Valid(v) {
		raw, rerr := json.Marshal(struct{ Data json.RawMessage }{rawJSON(v)})
		var c bytes.Buffer
		cerr := json.Compact(&c, v)
		want, werr := json.Marshal(struct{ Data json.RawMessage }{c.Bytes()})
		if rerr != nil || cerr != nil || werr != nil || !bytes.Equal(raw, want) {
			t.Fatalf("data %q encodes as %q (%v), compacted as %q (%v, %v)", v, raw, rerr, want, cerr, werr)
		}
	}
	// unquote = json.Unmarshal into a string.
	var s string
	qerr := json.Unmarshal(v, &s)
	if q, err := unquote(v); (err == nil) != (qerr == nil) || (err == nil && q != s) {
		t.Fatalf("unquote(%q) = %q, %v; json.Unmarshal = %q, %v", v, q, err, s, qerr)
	}
}

// TestFastJSONRandomDocuments checks generated documents (nested objects
// with unsorted, non-ASCII and astral keys, escapes, numbers of every
// shape, insignificant whitespace) against the general tools: random bytes
// rarely make valid JSON, these mostly stay on the fast path.
func TestFastJSONRandomDocuments(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	runes := []rune{'a', 'b', 'z', 'A', '0', '_', ' ', '"', '\\', '/', '\n', '\t', 0x7f, 'é', 'ß', 0x2028, 0xe000, 0xffff, 0x10000, 0x1f600, 0x10ffff}
	numbers := []string{"0", "-0", "7", "-42", "123456789012345", "1234567890123456789", "1.5", "-0.0", "12.50", "1e3", "1E-7", "2.5e+20", "1e21", "0.000001", "5e-324", "1.7976931348623157e308"}
	ws := func() string { return []string{"", "", "", " ", "\n  ", "\t"}[rng.IntN(6)] }
	str := func() string {
		var b strings.Builder
		for n := rng.IntN(6); n > 0; n-- {
			b.WriteRune(runes[rng.IntN(len(runes))])
		}
		q, _ := json.Marshal(b.String()) // escapes '"', '\\', controls, and HTML characters as \u
		s := string(q)
		if rng.IntN(2) == 0 {
			s = strings.ReplaceAll(s, `/`, `\/`)
		}
		return s
	}
	var value func(depth int) string
	value = func(depth int) string {
		switch k := rng.IntN(8); {
		case k < 2 && depth < 5:
			var b strings.Builder
			b.WriteString("{" + ws())
			for i, n := 0, rng.IntN(6); i < n; i++ {
				if i > 0 {
					b.WriteString("," + ws())
				}
				b.WriteString(str() + ws() + ":" + ws() + value(depth+1) + ws())
			}
			return b.String() + "}"
		case k < 3 && depth < 5:
			var b strings.Builder
			b.WriteString("[" + ws())
			for i, n := 0, rng.IntN(5); i < n; i++ {
				if i > 0 {
					b.WriteString(ws() + "," + ws())
				}
				b.WriteString(value(depth + 1))
			}
			return b.String() + ws() + "]"
		case k < 5:
			return str()
		case k < 7:
			return numbers[rng.IntN(len(numbers))]
		}
		return []string{"true", "false", "null"}[rng.IntN(3)]
	}
	fast := 0
	for i := 0; i < 20000; i++ {
		doc := []byte(ws() + value(0) + ws())
		checkFastJSON(t, doc)
		c := canonWriter{in: doc}
		c.ws()
		if c.value() {
			fast++
		}
	}
	// Most documents must take the fast path, or this test proves little.
	if fast < 10000 {
		t.Fatalf("only %d of 20000 documents took the fast path", fast)
	}
	t.Logf("%d of 20000 documents on the fast path", fast)
}

// checkObjectOnce: what objectOnce accepts, the two scans it replaces
// accept alike: appendMembers's members, each value's canonical form
// (jcs.Transform), and the whole object's (want, werr: jcs of v), on a
// fresh writer and on one that wrote before.
func checkObjectOnce(t *testing.T, v, want []byte, werr error) {
	t.Helper()
	var reused canonWriter
	_, _ = reused.objectOnce(nil, []byte(fastJSONSeeds[len(fastJSONSeeds)-2]))
	_, _ = reused.wholeObject()
	for _, c := range []*canonWriter{{}, &reused} {
		ms, ok := c.objectOnce(members{{key: []byte("before")}}, v)
		if !ok {
			continue
		}
		ms = ms[1:] // appended after what was there
		two, ok := appendMembers(nil, v)
		if !ok || len(two) != len(ms) {
			t.Fatalf("objectOnce(%q) = %d members; appendMembers %d (%v)", v, len(ms), len(two), ok)
		}
		for k, m := range ms {
			jv, err := jcs.Transform(two[k].val)
			if !bytes.Equal(m.key, two[k].key) || !bytes.Equal(m.val, two[k].val) || err != nil || !bytes.Equal(m.canon, jv) {
				t.Fatalf("objectOnce(%q) member %d = %q: %q (canonical %q); appendMembers %q: %q (jcs %q, %v)",
					v, k, m.key, m.val, m.canon, two[k].key, two[k].val, jv, err)
			}
		}
		whole, ok := c.wholeObject()
		if ok != (werr == nil) || (ok && !bytes.Equal(whole, want)) {
			t.Fatalf("wholeObject after objectOnce(%q) = %q, %v; jcs.Transform = %q, %v", v, whole, ok, want, werr)
		}
	}
}

// TestPayloadHashIsOverTheCanonicalDataWhicheverPassWroteIt decodes a mixed
// workload (structured, binary, plain; reordered and re-spaced re-sends)
// and checks each payload hash against jcs.Transform of the event's data:
// the one-pass scan's canonical data is what a separate pass would write.
func TestPayloadHashIsOverTheCanonicalDataWhicheverPassWroteIt(t *testing.T) {
	w := workload.Generate(workload.Spec{Topic: "t", Partitions: 4, Records: 400, DupRatio: 0.3, Seed: 3, PayloadBytes: 256})
	d, err := NewDecoder(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	extra := []string{
		`{"specversion":"1.0","id":"a","type":"t","source":"s","data_base64":"AAEC"}`,
		`{"type":"t","id":"x","b":[1.0,2e3],"a":{"y":1,"x":"\/"}}`,
	}
	recs := make([]Record, 0, len(w.Records)+len(extra))
	for _, kr := range w.Records {
		recs = append(recs, toRecord(kr))
	}
	for _, v := range extra {
		recs = append(recs, Record{Topic: "t", Value: []byte(v)})
	}
	for _, r := range recs {
		ev, err := d.Decode(r)
		if err != nil {
			t.Fatalf("%s: %v", r.Value, err)
		}
		data := []byte(ev.Data)
		if ev.Bytes != nil {
			data = []byte(`"` + base64.StdEncoding.EncodeToString(ev.Bytes) + `"`)
		}
		cd, err := jcs.Transform(data)
		if err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		if want := sha256.Sum256(assemble(cd, ev.Source, ev.Type, nil)); ev.PayloadHash != want {
			t.Fatalf("%s (%s): payload hash is not over the canonical data %s", r.Value, ev.Envelope, cd)
		}
	}
}

// TestTheContentIDAndThePayloadHashAreOverTheirAssembledForms decodes
// records whose IDs the content rule derives (keys nil, empty and set;
// data of every size around SHA-256's 64-byte block), one after another
// and from goroutines at once: each ID is SHA-256 of the assembled form
// with the record's key, each payload hash of the form without it, and
// no record's hash carries the state of one decoded before it.
func TestTheContentIDAndThePayloadHashAreOverTheirAssembledForms(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Chain = []Rule{RuleContent}
	d, err := NewDecoder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var recs []Record
	for n := range 200 {
		v := fmt.Sprintf(`{"type":"t%d","source":"s\u0001%d","data":{"pad":%q}}`, n%3, n%5, strings.Repeat("x", n))
		var key []byte
		switch n % 3 {
		case 1:
			key = []byte{}
		case 2:
			key = []byte(fmt.Sprintf("k\x00%d", n))
		}
		recs = append(recs, Record{Topic: "t", Key: key, Value: []byte(v)})
	}
	check := func(r Record) error {
		ev, err := d.Decode(r)
		if err != nil {
			return fmt.Errorf("%s: %v", r.Value, err)
		}
		cd, err := jcs.Transform(ev.Data)
		if err != nil {
			return fmt.Errorf("%s: %v", ev.Data, err)
		}
		key := r.Key
		if key == nil {
			key = []byte{}
		}
		if want := contentID(sha256.Sum256(assemble(cd, ev.Source, ev.Type, key))); ev.ID != want {
			return fmt.Errorf("%s (key %q): ID %s, want %s", r.Value, r.Key, ev.ID, want)
		}
		if want := sha256.Sum256(assemble(cd, ev.Source, ev.Type, nil)); ev.PayloadHash != want {
			return fmt.Errorf("%s: payload hash %x, want %x", r.Value, ev.PayloadHash, want)
		}
		return nil
	}
	for _, r := range recs {
		if err := check(r); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, 4)
	for g := range 4 {
		go func() {
			for i := range 2000 {
				if err := check(recs[(i*7+g*13)%len(recs)]); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
