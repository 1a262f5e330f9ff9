package eventid

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"testing"

	"github.com/gowebpki/jcs"
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

// adv56aDecoders are the chains the content rule's ID and the payload hash
// are attacked under: header/field first falling back to content, content
// before field, content alone, coordinates, and tenants.
func adv56aDecoders(t testing.TB) map[string]*Decoder {
	return map[string]*Decoder{
		"default":             mustDecoder(t, nil),
		"content":             mustDecoder(t, func(c *Config) { c.Chain = []Rule{RuleContent} }),
		"content,field":       mustDecoder(t, func(c *Config) { c.Chain = []Rule{RuleContent, RuleField} }),
		"field,content":       mustDecoder(t, func(c *Config) { c.Chain = []Rule{RuleField, RuleContent} }),
		"header,content":      mustDecoder(t, func(c *Config) { c.Chain = []Rule{RuleHeader, RuleContent} }),
		"coordinates":         mustDecoder(t, func(c *Config) { c.Chain = []Rule{RuleCoordinates} }),
		"plain data field":    mustDecoder(t, func(c *Config) { c.Format = FormatPlain; c.Fields.Data = "data" }),
		"cloudevents,content": mustDecoder(t, func(c *Config) { c.Format = FormatCloudEvents; c.Chain = []Rule{RuleContent} }),
		"tenants":             mustDecoder(t, func(c *Config) { c.Chain = []Rule{RuleContent} }).WithTenantKeys(testKeys),
		"tenants default":     mustDecoder(t, nil).WithTenantKeys(testKeys),
	}
}

// adv56aRecords are records Decode accepts: every envelope, keys nil, empty,
// set and long, data across the 55/56/64/119/120-byte boundaries of the
// hashed prefix and beyond 64 KiB, escapes and unicode in source and type.
func adv56aRecords() []Record {
	var recs []Record
	srcs := []string{"s", `s\u0001\"\\\/é\u2028`, "\u00e9\U0001F600"}
	typs := []string{"t", `t\ud83d\ude00\n`, strings.Repeat("τ", 40)}
	keys := [][]byte{nil, {}, []byte("k\x00\xff"), []byte(strings.Repeat("K", 100))}
	sizes := []int{0, 1, 30, 36, 37, 38, 44, 45, 46, 47, 48, 53, 54, 55, 56, 57, 100, 101, 102, 103, 109, 110, 111, 112, 113, 118, 119, 120, 121, 200, 70 << 10}
	i := 0
	for _, n := range sizes {
		pad := strings.Repeat("x", n)
		src, typ, key := srcs[i%len(srcs)], typs[(i/3)%len(typs)], keys[i%len(keys)]
		i++
		vals := []string{
			// plain JSON, data as the whole object and under "data"
			fmt.Sprintf(`{"type":"%s","source":"%s","data":"%s"}`, typ, src, pad),
			fmt.Sprintf(`{ "z":1, "type":"%s","source":"%s","pad":"%s","a":[1.50,2e3]}`, typ, src, pad),
			// CloudEvents structured, data and data_base64
			fmt.Sprintf(`{"specversion":"1.0","id":"e%d","type":"%s","source":"%s","data":{"p":"%s","a":1}}`, n, typ, src, pad),
			fmt.Sprintf(`{"specversion":"1.0","id":"e%d","type":"%s","source":"%s","data_base64":"%s"}`, n, typ, src, base64.StdEncoding.EncodeToString([]byte(pad))),
		}
		for _, v := range vals {
			recs = append(recs, Record{Topic: "t", Partition: 1, Offset: int64(n), Key: key, Value: []byte(v)})
		}
		// CloudEvents binary mode: JSON data, then text data (Bytes)
		hdr := []Header{{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_type", Value: []byte("bin\"é" + typ)}, {Key: "ce_source", Value: []byte("src\x01" + src)}}
		recs = append(recs, Record{Topic: "t", Key: key, Value: []byte(fmt.Sprintf(`{"b":"%s","a":1}`, pad)), Headers: hdr})
		recs = append(recs, Record{Topic: "t", Key: key, Value: []byte(pad + "<>"), Headers: append(append([]Header(nil), hdr...), Header{Key: "content-type", Value: []byte("text/plain")})})
		// Schema Registry: the decoded value is read, not Value
		recs = append(recs, Record{Topic: "t", Key: key, Value: []byte{0, 0, 0, 0, 1, 2, 3}, Decoded: []byte(fmt.Sprintf(`{"type":"sr","source":"%s","data":{"v":"%s"}}`, src, pad))})
		// a header ID, that the header chain takes before the content rule
		recs = append(recs, Record{Topic: "t", Key: key, Value: []byte(fmt.Sprintf(`{"type":"h","data":"%s"}`, pad)), Headers: []Header{{Key: "ce_id", Value: []byte("hid")}}})
	}
	// a key over 64 KiB: the tail buffer grows past what release keeps
	recs = append(recs, Record{Topic: "t", Key: []byte(strings.Repeat("L", 70<<10)), Value: []byte(`{"type":"t","source":"s","data":1}`)})
	// tenant records (signed): the ID is scoped
	var tenant []Record
	for _, r := range recs[:40] {
		r.Headers = append(append([]Header(nil), r.Headers...), Header{Key: TenantHeader, Value: []byte("acme")})
		tenant = append(tenant, signed(testKeys, r))
	}
	return append(recs, tenant...)
}

// adv56aFailing are records Decode refuses at every point: a tombstone,
// a bad UTF-8 type, an invalid header ID (after the hashes), a refused
// tenant, undecodable data, and one so large its scratch is not pooled.
func adv56aFailing() []Record {
	big := fmt.Sprintf(`{"type":"t","source":"s","data":{"pad":"%s","bad":"\ud800`, strings.Repeat("y", 80<<10))
	return []Record{
		{Topic: "t", Value: nil},
		{Topic: "t", Value: []byte("{\"type\":\"\xff\",\"data\":1}")},
		{Topic: "t", Value: []byte(`{"type":"t","data":{"x":"` + strings.Repeat("q", 90) + `"}}`), Headers: []Header{{Key: "ce_id", Value: []byte("bad\x01id")}}},
		{Topic: "t", Value: []byte(`{"type":"t","data":{"x":2}}`), Headers: []Header{{Key: "ce_id", Value: []byte("")}}},
		{Topic: "t", Value: []byte(`{"type":"t","data":{"x":3}}`), Headers: []Header{{Key: TenantHeader, Value: []byte("acme")}}},
		{Topic: "t", Value: []byte(`{"type":"t","data":[1,2`)},
		{Topic: "t", Value: []byte(big)},
		{Topic: "t", Value: []byte(`{"type":"t","data":{"a":1e400}}`)},
	}
}

// adv56aWant checks ev against SHA-256 of the assembled forms computed
// here with crypto/sha256 directly.
func adv56aWant(r Record, ev Event) error {
	data := []byte(ev.Data)
	if ev.Bytes != nil {
		data = []byte(`"` + base64.StdEncoding.EncodeToString(ev.Bytes) + `"`)
	}
	cd, err := jcs.Transform(data)
	if err != nil {
		return fmt.Errorf("%q: %v", data, err)
	}
	if want := sha256.Sum256(assemble(cd, ev.Source, ev.Type, nil)); ev.PayloadHash != want {
		return fmt.Errorf("%.80q (%s, %d bytes): payload hash %x, want %x", r.Value, ev.Envelope, len(cd), ev.PayloadHash, want)
	}
	if ev.Rule == RuleContent {
		key := r.Key
		if key == nil {
			key = []byte{}
		}
		if want := ScopedID(ev.Tenant, contentID(sha256.Sum256(assemble(cd, ev.Source, ev.Type, key)))); ev.ID != want {
			return fmt.Errorf("%.80q (%s, key %d bytes): ID %s, want %s", r.Value, ev.Envelope, len(r.Key), ev.ID, want)
		}
	}
	return nil
}

// adversary 56a: the content rule's ID and the payload hash are SHA-256 of
// their assembled forms for every envelope, chain, tenant, key and size,
// whether the record follows a refused one, a very large one, or is decoded
// from many goroutines at once.
func TestContentIDAndPayloadHashMatchTheAssembledFormsAfterAnyRecord(t *testing.T) {
	recs, failing := adv56aRecords(), adv56aFailing()
	decs := adv56aDecoders(t)
	contentRules := 0
	for name, d := range decs {
		drainScratchPool()
		fresh := make([]decoded, len(recs))
		for i, r := range recs {
			drainScratchPool()
			fresh[i] = decodeOnce(d, r)
			if fresh[i].err != "" {
				if name == "default" && i < len(recs)-40 {
					t.Fatalf("%s: record %d %.80q refused: %s", name, i, r.Value, fresh[i].err)
				}
				continue
			}
			if fresh[i].ev.Rule == RuleContent {
				contentRules++
			}
			if err := adv56aWant(r, fresh[i].ev); err != nil {
				t.Fatalf("%s fresh: %v", name, err)
			}
		}
		// one after another, after each refused record and after the large ones
		for round := range 3 {
			for i, r := range recs {
				for _, f := range failing[(i+round)%len(failing):][:1] {
					if _, err := d.Decode(f); err == nil && name == "default" {
						t.Fatalf("%s: %.80q decoded", name, f.Value)
					}
				}
				if got := decodeOnce(d, r); !sameDecoded(got, fresh[i]) {
					t.Fatalf("%s round %d: record %d %.80q decodes as\n%+v\nfresh as\n%+v", name, round, i, r.Value, got.ev, fresh[i].ev)
				}
			}
		}
		// from goroutines at once, refused records between
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range 3 * len(recs) {
					i := (k*7 + g*13) % len(recs)
					if k%5 == g%5 {
						_, _ = d.Decode(failing[(k+g)%len(failing)])
					}
					if got := decodeOnce(d, recs[i]); !sameDecoded(got, fresh[i]) {
						errs <- fmt.Errorf("%s goroutine %d: record %d %.80q decodes as %+v, fresh as %+v", name, g, i, recs[i].Value, got.ev, fresh[i].ev)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
	if contentRules < 500 {
		t.Fatalf("only %d decodes took the content rule", contentRules)
	}
}

// adversary 56a: one scratch shared Decode after Decode (as the pool hands
// it out on one P), whatever the previous record was: refused after its
// hashes (invalid header ID), large, of another decoder.
func TestASharedScratchGivesEveryRecordTheHashesOfAFreshOne(t *testing.T) {
	recs, failing := adv56aRecords(), adv56aFailing()
	decs := adv56aDecoders(t)
	d := decs["default"]
	c := decs["content"]
	want := make([]decoded, len(recs))
	for i, r := range recs {
		drainScratchPool()
		want[i] = decodeOnce(c, r)
	}
	withScratch(t, func(check func(string)) {
		for i, r := range recs {
			for _, f := range failing {
				_, _ = d.Decode(f)
				check("after a refused record")
				_, _ = c.Decode(recs[(i*11+3)%len(recs)])
				_, _ = d.Decode(f)
			}
			got := decodeOnce(c, r)
			check("after the record")
			if !sameDecoded(got, want[i]) {
				t.Fatalf("record %d %.80q decodes as\n%+v\nfresh as\n%+v", i, r.Value, got.ev, want[i].ev)
			}
			if got.err == "" {
				if err := adv56aWant(r, got.ev); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}

// adversary 56a: Decode allocates no more per record than before 92b5962.
// The counts are the parent's (0722b46), measured with the same records
// and testing.AllocsPerRun: a record over 64 KiB, whose scratch release
// does not pool, and a small record decoded with a scratch of its own (as
// after the GC empties the pool). 92b5962 costs each new scratch its own
// SHA-256 digest, the saved state grown from nil by append (about five
// allocations) and the tail buffer grown from nil (two): 13 -> 21, 7 ->
// 15, 15 -> 22 (the pooled small record holds at 2).
func TestDecodeAllocatesNoMoreThanBeforeForLargeRecordsAndFreshScratches(t *testing.T) {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-race" && s.Value == "true" {
				t.Skip("under -race sync.Pool drops what it is given at random: the parent's counts do not hold either")
			}
		}
	}
	ceText := []Header{{Key: "ce_type", Value: []byte("t")}, {Key: "ce_source", Value: []byte("s")}, {Key: "ce_specversion", Value: []byte("1.0")}, {Key: "content-type", Value: []byte("text/plain")}}
	d := mustDecoder(t, nil)
	small := Record{Topic: "t", Key: []byte("k"), Value: []byte(`{"type":"t","source":"s","data":{"b":1,"a":2}}`)}
	bigPlain := Record{Topic: "t", Key: []byte("k"), Value: adv56aBigPlain}
	bigText := Record{Topic: "t", Key: []byte("k"), Value: adv56aBigText, Headers: ceText}
	cases := []struct {
		name   string
		before float64 // allocations per Decode at 0722b46
		f      func()
	}{
		{"plain JSON over 64 KiB", 13, func() {
			_, _ = d.Decode(bigPlain)
		}},
		{"binary text over 64 KiB", 7, func() {
			_, _ = d.Decode(bigText)
		}},
		{"small record, a scratch of its own", 15, func() {
			_ = scratchPool.Get() // AllocsPerRun runs on one P: the scratch the last Decode released
			_, _ = d.Decode(small)
		}},
		{"small record, pooled scratch", 2, func() {
			_, _ = d.Decode(small)
		}},
	}
	for _, c := range cases {
		c.f()
		if n := testing.AllocsPerRun(200, c.f); n > c.before {
			t.Errorf("%s: %v allocations per Decode, %v before 92b5962", c.name, n, c.before)
		}
	}
}

var (
	adv56aBigPlain = []byte(fmt.Sprintf(`{"type":"t","source":"s","data":{"pad":%q}}`, strings.Repeat("x", 70<<10)))
	adv56aBigText  = []byte(strings.Repeat("z", 80<<10))
)
