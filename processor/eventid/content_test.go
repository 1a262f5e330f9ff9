package eventid

import (
	"fmt"
	"testing"
)

// A Decode's scratch goes back to a pool: it must keep nothing of the
// record it read, not even the members a failed fast scan wrote past the
// members it returned (release clears only up to their length).
func TestAPooledScratchKeepsNoMemberOfTheRecordItRead(t *testing.T) {
	for name, value := range map[string]string{
		"one pass":                 `{"type":"x","a":1,"b":[1,2]}`,
		"one pass fails, 2nd scan": `{"type":"x","a":1,"b":2,"c\u0041":3}`,
		"both fast scans fail":     `{"type":"x","a":1,"b":2,"c\"d":3}`,
	} {
		s := &scratch{ms: make(members, 0, 8)}
		if _, err := scanRecordObject([]byte(value), s); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		s.release()
		for i, m := range s.ms[:cap(s.ms)] {
			if m.key != nil || m.val != nil || m.canon != nil {
				t.Errorf("%s: after release, member %d still points into the record: %q", name, i, m.key)
			}
		}
	}
}

// decodeConfigs are the decoder configurations the differential tests
// read a record under: every envelope path that fills a scratch (the one
// pass, the two scans, the general path, nested field paths, Fields.Data).
func decodeConfigs(t testing.TB) []*Decoder {
	return []*Decoder{
		mustDecoder(t, nil),
		mustDecoder(t, func(c *Config) { c.Chain = []Rule{RuleContent} }),
		mustDecoder(t, func(c *Config) { c.Format = FormatPlain; c.Fields.Data = "data" }),
		mustDecoder(t, func(c *Config) {
			c.Format = FormatPlain
			c.Fields = Fields{ID: "meta.id", Type: "meta.type", Source: "meta.src", Time: "t", Data: "body.x"}
		}),
		mustDecoder(t, func(c *Config) { c.Format = FormatCloudEvents; c.Chain = []Rule{RuleField, RuleContent} }),
	}
}

// drainScratchPool empties Decode's pool (the test's goroutine sees no
// scratch a Decode released before) and restores its New.
func drainScratchPool() {
	sentinel := new(scratch)
	scratchPool.New = func() any { return sentinel }
	for i := 0; i < 1000 && scratchPool.Get() != sentinel; i++ {
	}
	scratchPool.New = func() any { return new(scratch) }
}

type decoded struct {
	ev  Event
	err string
}

func decodeOnce(d *Decoder, r Record) decoded {
	ev, err := d.Decode(r)
	out := decoded{ev: ev}
	if err != nil {
		out.err = string(ReasonOf(err)) + ": " + err.Error()
	}
	return out
}

func sameDecoded(a, b decoded) bool {
	return a.err == b.err && a.ev.ID == b.ev.ID && a.ev.Rule == b.ev.Rule && a.ev.Type == b.ev.Type &&
		a.ev.Source == b.ev.Source && a.ev.Subject == b.ev.Subject && a.ev.Time == b.ev.Time &&
		string(a.ev.Data) == string(b.ev.Data) && string(a.ev.Bytes) == string(b.ev.Bytes) &&
		a.ev.ContentType == b.ev.ContentType && a.ev.PayloadHash == b.ev.PayloadHash &&
		a.ev.Envelope == b.ev.Envelope && a.ev.IDFrom == b.ev.IDFrom && a.ev.Tenant == b.ev.Tenant
}

// withScratch runs f with Decode's pool handing out one scratch for as long
// as release would keep it (a scratch release drops is replaced, as the
// real pool would never hand it out again), and checks after every Decode
// that the scratch holds no member: neither within its length nor past it.
func withScratch(t testing.TB, f func(check func(what string))) {
	drainScratchPool()
	defer drainScratchPool()
	var shared *scratch
	fresh := func() {
		shared = &scratch{}
	}
	fresh()
	scratchPool.New = func() any {
		if cap(shared.c.out) > 64<<10 || cap(shared.buf) > 64<<10 || cap(shared.ms) > 1<<10 {
			fresh()
		}
		return shared
	}
	f(func(what string) {
		t.Helper()
		if cap(shared.c.out) > 64<<10 || cap(shared.buf) > 64<<10 || cap(shared.ms) > 1<<10 {
			return // dropped, not pooled
		}
		if len(shared.ms) != 0 || shared.once {
			t.Fatalf("%s: a released scratch has %d members, once=%v", what, len(shared.ms), shared.once)
		}
		for i, m := range shared.ms[:cap(shared.ms)] {
			if m.key != nil || m.val != nil || m.canon != nil {
				t.Fatalf("%s: after release, member %d of %d still points into a record: %q=%q", what, i, cap(shared.ms), m.key, m.val)
			}
		}
		if shared.c.in != nil {
			t.Fatalf("%s: the released canonical writer keeps its input", what)
		}
	})
}

// A record decodes the same after any other record (the scratch its Decode
// reuses) as with a scratch of its own: ID, rule, type, source, hash, error.
func testDecodeAfter(t testing.TB, prev, value []byte, hk string, hv []byte) {
	mk := func(v []byte) Record {
		r := Record{Topic: "t", Partition: 1, Offset: 2, Key: []byte("k"), Value: v}
		if hk != "" {
			r.Headers = []Header{{Key: hk, Value: hv}}
		}
		return r
	}
	for i, d := range decodeConfigs(t) {
		drainScratchPool() // a scratch of its own
		want := decodeOnce(d, mk(value))
		withScratch(t, func(check func(string)) {
			for _, p := range [][]byte{prev, bigObject(40), prev, []byte(`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":{"type":"x"},"\u0074ype":"y"}`)} {
				for _, pd := range decodeConfigs(t) {
					decodeOnce(pd, mk(p))
					check("after a previous record")
				}
				got := decodeOnce(d, mk(value))
				check("after the record")
				if !sameDecoded(got, want) {
					t.Fatalf("config %d: %q after %q decodes as\n%+v\nwith a fresh scratch as\n%+v", i, value, p, got, want)
				}
			}
		})
	}
}

func bigObject(n int) []byte {
	b := []byte(`{`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, fmt.Sprintf(`"k%d":{"type":"p%d","id":"i%d","data":[%d]}`, i, i, i, i)...)
	}
	b = append(b, `,"type":"big","id":"big-id","source":"s","data":{"x":1},"meta":{"id":"m","type":"mt"},"body":{"x":2}}`...)
	return b
}

var differentialSeeds = []string{
	`{"type":"x","a":1,"b":[1,2]}`,
	`{"type":"x","a":1,"b":2,"c\u0041":3}`,
	`{"type":"x","a":1,"b":2,"c\"d":3}`,
	`{"a":1}`,
	`{}`,
	`{"specversion":"1.0","id":"a","type":"t","source":"s","data":{"x":1}}`,
	`{"specversion":"1.0","id":"a","type":"t","data_base64":"AAEC"}`,
	`{"specversion":"1.0","id":"a","type":"t","source":"s","data":{"x":"\u00e9"}}`,
	`{"meta":{"id":"m1","type":"mt","src":"ms"},"body":{"x":[1,2,3]},"t":"now"}`,
	`{"meta":{"id":"m1","type":"mt"},"body":{"x":{"b":1,"a":2}},"t":"now","meta":{"type":"again"}}`,
	`{"id":"p1","type":"t","x":[1,2],"type":"t2"}`,
	`{"id":"p1","type":"t","n":1e400}`,
	`{"type":"t","data":1.50}`,
	"{\"type\":\"t\",\"data\":{\"a\":1}}\v",
	`{"type":"t","é":1}`,
	`{"type":"t","data":{"z":1,"a":[{"q":1}]},"x":"\ud800"}`,
	`[1,2]`,
	`{"type":"t",`,
}

func TestADecodeNeverReadsMembersOfThePreviousRecord(t *testing.T) {
	for _, prev := range differentialSeeds {
		for _, v := range differentialSeeds {
			testDecodeAfter(t, []byte(prev), []byte(v), "", nil)
			testDecodeAfter(t, []byte(prev), []byte(v), "ce_type", []byte("bin"))
		}
	}
	testDecodeAfter(t, bigObject(200), []byte(`{"type":"t","a":1,"b\u0041":2}`), "", nil)
	testDecodeAfter(t, bigObject(2000), []byte(`{"type":"t","a":1}`), "", nil)
}

func FuzzADecodeNeverReadsMembersOfThePreviousRecord(f *testing.F) {
	for i, prev := range differentialSeeds {
		v := differentialSeeds[(i*7+3)%len(differentialSeeds)]
		f.Add([]byte(prev), []byte(v), "", []byte(nil))
		f.Add([]byte(v), []byte(prev), "ce_type", []byte("t"))
	}
	f.Fuzz(func(t *testing.T, prev, value []byte, hk string, hv []byte) {
		testDecodeAfter(t, prev, value, hk, hv)
	})
}
