package eventid

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// The records of one type and source, in each envelope, are read as the
// same strings: the second record's type and source are the first's.
func TestRecordsOfOneTypeAndSourceShareTheirStrings(t *testing.T) {
	for name, value := range map[string]func(n int) Record{
		"binary": func(n int) Record {
			return rec(`{"n":1}`, "ce_specversion", "1.0", "ce_id", fmt.Sprint("b-", n), "ce_type", "order.created", "ce_source", "shop")
		},
		"structured": func(n int) Record {
			return rec(fmt.Sprintf(`{"specversion":"1.0","id":"s-%d","type":"order.created","source":"shop","time":"2026-12-07T10:00:00Z","data":{}}`, n))
		},
		"plain": func(n int) Record {
			return rec(fmt.Sprintf(`{"id":"p-%d","type":"order.created","source":"shop","n":1}`, n))
		},
	} {
		d := mustDecoder(t, nil)
		var first Event
		for n := 0; n < 3; n++ {
			ev, err := d.Decode(value(n))
			if err != nil {
				t.Fatalf("%s %d: %v", name, n, err)
			}
			if ev.Type != "order.created" || ev.Source != "shop" {
				t.Fatalf("%s %d: type %q source %q", name, n, ev.Type, ev.Source)
			}
			if name == "structured" && ev.Time != "2026-12-07T10:00:00Z" {
				t.Fatalf("%s %d: time %q", name, n, ev.Time)
			}
			if n < 2 { // the first is read before it is kept
				first = ev
				continue
			}
			if unsafe.StringData(ev.Type) != unsafe.StringData(first.Type) || unsafe.StringData(ev.Source) != unsafe.StringData(first.Source) {
				t.Errorf("%s %d: type and source are new strings, not the second record's", name, n)
			}
		}
	}
}

// What a stream can make a Decoder keep is bounded: records of ten
// thousand types (and some types over maxNameBytes) each decode to their
// own type, and the Decoder keeps at most maxNames names of at most
// maxNameBytes each.
func TestADecoderKeepsAtMostMaxNamesNamesOfAtMostMaxNameBytes(t *testing.T) {
	d := mustDecoder(t, nil)
	for i := 0; i < 10000; i++ {
		typ := fmt.Sprintf("type-%d", i)
		if i%7 == 0 {
			typ += strings.Repeat("x", maxNameBytes)
		}
		var r Record
		switch i % 3 {
		case 0:
			r = rec(`{}`, "ce_specversion", "1.0", "ce_id", "x", "ce_type", typ, "ce_source", "src-"+typ)
		case 1:
			r = rec(fmt.Sprintf(`{"specversion":"1.0","id":"x","type":%q,"source":%q,"data":{}}`, typ, "src-"+typ))
		default:
			r = rec(fmt.Sprintf(`{"id":"x","type":%q,"source":%q}`, typ, "src-"+typ))
		}
		ev, err := d.Decode(r)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if ev.Type != typ || ev.Source != "src-"+typ {
			t.Fatalf("record %d: type %q source %q, want %q and %q", i, ev.Type, ev.Source, typ, "src-"+typ)
		}
	}
	m := *d.names.m.Load()
	if len(m) > maxNames {
		t.Errorf("the Decoder keeps %d names, more than %d", len(m), maxNames)
	}
	for k, v := range m {
		if k != v || len(k) > maxNameBytes {
			t.Errorf("kept %q as %q (%d bytes; at most %d)", k, v, len(k), maxNameBytes)
		}
	}
}

// A name kept from a record read in one allocation (type, source and
// time together) is a copy: the Decoder does not hold on to the record's
// other strings.
func TestAKeptNameIsACopyNotPartOfTheRecordsStrings(t *testing.T) {
	d := mustDecoder(t, nil)
	ev, err := d.Decode(rec(`{"specversion":"1.0","id":"x","type":"order.created","source":"shop","time":"2026-12-07T10:00:00Z","data":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{ev.Type, ev.Source} {
		kept, ok := d.names.get([]byte(s))
		if !ok {
			t.Fatalf("%q is not kept", s)
		}
		if unsafe.StringData(kept) == unsafe.StringData(s) {
			t.Errorf("%q is kept as the record's own string (shared with its time %q)", s, ev.Time)
		}
	}
}

// Decodes on many goroutines, of records of more types than the Decoder
// keeps, each read their own record's type and source (go test -race).
func TestConcurrentDecodesReadTheirOwnRecordsTypes(t *testing.T) {
	d := mustDecoder(t, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				typ, src := fmt.Sprintf("t-%d", (g*131+i)%(2*maxNames)), fmt.Sprintf("s-%d", i%5)
				ev, err := d.Decode(rec(`{}`, "ce_specversion", "1.0", "ce_id", "x", "ce_type", typ, "ce_source", src))
				if err == nil && (ev.Type != typ || ev.Source != src) {
					err = fmt.Errorf("type %q source %q, want %q and %q", ev.Type, ev.Source, typ, src)
				}
				if err != nil {
					errs <- err
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

// Records on every path that reads a type and source (structured, plain,
// binary; absent, null, empty, escaped, invalid UTF-8, non-string, long,
// a type that is a kept source, a type kept but not its source), each
// decoded by a Decoder that has kept names (the table read before, then
// a full Decoder) decode as by a fresh Decoder, which keeps nothing
// before it reads: as 5674815 read them (no names). (Passes at f618a29:
// the same table dumped at 5674815 through go test -overlay decodes
// alike, pass for pass.)
func TestAWarmDecoderDecodesEveryRecordAsAFreshOne(t *testing.T) {
	warm := map[string]*Decoder{}
	decoder := func(c namesCase) *Decoder {
		key := "default"
		if c.cfg != nil {
			key = c.name
		}
		if warm[key] == nil {
			warm[key] = mustDecoder(t, c.cfg)
		}
		return warm[key]
	}
	check := func(pass string) {
		for _, c := range namesTable() {
			ev, err := decoder(c).Decode(c.r)
			fresh, ferr := mustDecoder(t, c.cfg).Decode(c.r)
			if got, want := describe(ev, err), describe(fresh, ferr); got != want || !reflect.DeepEqual(ev, fresh) {
				t.Errorf("%s, %s: a warm Decoder reads\n\t%s\na fresh one\n\t%s", pass, c.name, got, want)
			}
		}
	}
	check("first read")
	check("read again")
	// Full: names kept as other records' (whatever each Decoder's fields
	// are), then the table again.
	for _, d := range warm {
		for i := 0; d.names.m.Load() == nil || len(*d.names.m.Load()) < maxNames; i++ {
			d.names.keep(fmt.Sprintf("filler-%d", i), true)
		}
	}
	check("full")
}

// Every combination of type, source and time tokens (absent, null,
// empty, kept or not, a kept type as a source, escaped, invalid UTF-8,
// non-string, over maxNameBytes), in structured and plain envelopes and
// in an order that finds some of them kept and some not, decodes through
// one Decoder as through a fresh one each (5674815's reading: it kept
// nothing). (Passes at f618a29.)
func TestEveryTypeSourceAndTimeTokenDecodesAsByAFreshDecoder(t *testing.T) {
	long := `"` + strings.Repeat("l", maxNameBytes+1) + `"`
	toks := []string{"-", `null`, `""`, `"a"`, `"s"`, `"a\u0062"`, `"ab"`, "\"\xff\"", `7`, long, `"é"`}
	warm := mustDecoder(t, nil)
	fresh := func(r Record) (Event, error) { return mustDecoder(t, nil).Decode(r) }
	for _, envelope := range []string{`{"specversion":"1.0","id":"x"`, `{"id":"x"`} {
		for _, typ := range toks {
			for _, src := range toks {
				for _, tm := range toks {
					v := envelope
					for _, m := range [][2]string{{"type", typ}, {"source", src}, {"time", tm}} {
						if m[1] != "-" {
							v += `,"` + m[0] + `":` + m[1]
						}
					}
					r := rec(v + `,"data":{}}`)
					ev, err := warm.Decode(r)
					want, werr := fresh(r)
					if got, w := describe(ev, err), describe(want, werr); got != w || !reflect.DeepEqual(ev, want) {
						t.Errorf("%s: a warm Decoder reads\n\t%s\na fresh one\n\t%s", v, got, w)
					}
				}
			}
		}
	}
}

// A decode that keeps no new name takes no lock: decodes run in parallel
// (the router's parallel Decide), and 5674815's never waited on one
// another. At f618a29 a structured or plain record whose type is kept and
// whose source is over maxNameBytes (a long URI source; or the reverse)
// misses the names (plainAttrs), so it calls keep for its type, which is
// kept already, and keep takes names.mu to find that out: every such
// record takes the one mutex every decoder goroutine shares, for as long
// as the Decoder has fewer than maxNames names. Binary records do not
// (intern checks the length before the lock).
func TestADecodeThatKeepsNoNewNameTakesNoLock(t *testing.T) {
	long := strings.Repeat("u", maxNameBytes+1)
	for name, r := range map[string]Record{
		"structured, kept type, long source": rec(`{"specversion":"1.0","id":"x","type":"order.created","source":"https://shop.example/` + long + `","data":{}}`),
		"structured, long type, kept source": rec(`{"specversion":"1.0","id":"x","type":"order.created.` + long + `","source":"shop","data":{}}`),
		"plain, kept type, long source":      rec(`{"id":"x","type":"order.created","source":"https://shop.example/` + long + `"}`),
		"binary, kept type, long source":     rec(`{}`, "ce_specversion", "1.0", "ce_id", "x", "ce_type", "order.created", "ce_source", "https://shop.example/"+long),
	} {
		d := mustDecoder(t, nil)
		// The names the record can keep, kept.
		for i := 0; i < 2; i++ {
			if _, err := d.Decode(r); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		d.names.mu.Lock() // another goroutine adding a name
		done := make(chan error, 1)
		go func() {
			_, err := d.Decode(r)
			done <- err
		}()
		var err error
		select {
		case err = <-done:
			d.names.mu.Unlock()
		case <-time.After(2 * time.Second):
			t.Errorf("%s: the decode waits for names.mu, though it keeps no new name", name)
			d.names.mu.Unlock()
			err = <-done
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Decoders that WithTenantKeys made from one share its names: records of
// every envelope decoded on many goroutines, through the Decoder and its
// copies, while the names fill past maxNames, each read their own type,
// source and time, and the names stay within their bounds (go test
// -race). (Passes at f618a29; the existing concurrency test reads binary
// records through one Decoder only.)
func TestDecodersSharingNamesThroughWithTenantKeysReadTheirOwnRecords(t *testing.T) {
	base := mustDecoder(t, nil)
	decs := []*Decoder{base, base.WithTenantKeys(testKeys), base.WithTenantKeys(otherKeys)}
	var wg sync.WaitGroup
	errs := make(chan error, 9)
	for g := 0; g < 9; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := decs[g%len(decs)]
			for i := 0; i < 400; i++ {
				typ, src, tm := fmt.Sprintf("t-%d", (g*37+i)%(3*maxNames)), fmt.Sprintf("s-%d", (g+i)%(maxNames+7)), fmt.Sprint("tm-", i)
				var r Record
				switch i % 3 {
				case 0:
					r = rec(`{}`, "ce_specversion", "1.0", "ce_id", "x", "ce_type", typ, "ce_source", src, "ce_time", tm)
				case 1:
					r = rec(fmt.Sprintf(`{"specversion":"1.0","id":"x","type":%q,"source":%q,"time":%q,"data":{}}`, typ, src, tm))
				default:
					r = rec(fmt.Sprintf(`{"id":"x","type":%q,"source":%q,"time":%q}`, typ, src, tm))
				}
				ev, err := d.Decode(r)
				if err == nil && (ev.Type != typ || ev.Source != src || ev.Time != tm) {
					err = fmt.Errorf("type %q source %q time %q, want %q, %q, %q", ev.Type, ev.Source, ev.Time, typ, src, tm)
				}
				if err != nil {
					errs <- err
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
	for _, d := range decs[1:] {
		if d.names != base.names {
			t.Errorf("a WithTenantKeys copy has names of its own")
		}
	}
	if m := *base.names.m.Load(); len(m) > maxNames {
		t.Errorf("%d names kept, over %d", len(m), maxNames)
	}
}

// namesTable: records on the paths that read a type and source.
type namesCase struct {
	name string
	cfg  func(*Config)
	r    Record
}

func namesTable() []namesCase {
	long := strings.Repeat("t", maxNameBytes)
	longer := long + "u"
	s := func(typ, src, tm string) Record {
		v := `{"specversion":"1.0","id":"x"`
		if typ != "-" {
			v += `,"type":` + typ
		}
		if src != "-" {
			v += `,"source":` + src
		}
		if tm != "-" {
			v += `,"time":` + tm
		}
		return rec(v + `,"data":{"n":1}}`)
	}
	p := func(v string) Record { return rec(v) }
	b := func(typ, src string, hasSrc bool) Record {
		h := []string{"ce_specversion", "1.0", "ce_id", "x", "ce_type", typ}
		if hasSrc {
			h = append(h, "ce_source", src)
		}
		return rec(`{"n":1}`, h...)
	}
	plainFields := func(f Fields) func(*Config) {
		return func(c *Config) { c.Format = FormatPlain; c.Fields = f; c.Chain = []Rule{RuleContent} }
	}
	cs := []namesCase{
		{"s a s t", nil, s(`"a"`, `"s"`, `"2026-01-01T00:00:00Z"`)},
		{"s a s", nil, s(`"a"`, `"s"`, "-")},
		{"s a -", nil, s(`"a"`, "-", "-")},
		{"s a null", nil, s(`"a"`, `null`, `null`)},
		{"s a empty", nil, s(`"a"`, `""`, `""`)},
		{"s s a", nil, s(`"s"`, `"a"`, `"t"`)},
		{"s a s2", nil, s(`"a"`, `"s2"`, `"t"`)},
		{"s a2 s", nil, s(`"a2"`, `"s"`, `"t"`)},
		{"s escaped ab", nil, s(`"a\u0062"`, `"s"`, "-")},
		{"s ab", nil, s(`"ab"`, `"s"`, "-")},
		{"s escaped source", nil, s(`"a"`, `"s\u0032"`, `"t\u0031"`)},
		{"s invalid utf8 type", nil, s("\"\xff\"", `"s"`, "-")},
		{"s invalid utf8 source", nil, s(`"a"`, "\"\xfe\"", "-")},
		{"s number type", nil, s(`1`, `"s"`, "-")},
		{"s number source", nil, s(`"a"`, `1`, "-")},
		{"s number time", nil, s(`"a"`, `"s"`, `1`)},
		{"s empty type", nil, s(`""`, `"s"`, "-")},
		{"s null type", nil, s(`null`, `"s"`, "-")},
		{"s no type", nil, s("-", `"s"`, "-")},
		{"s object source", nil, s(`"a"`, `{"s":1}`, "-")},
		{"s non-ascii", nil, s(`"é.créé"`, `"ß"`, `"t"`)},
		{"s long", nil, s(`"`+long+`"`, `"`+long+`"`, `"t"`)},
		{"s longer", nil, s(`"`+longer+`"`, `"`+longer+`"`, `"t"`)},
		{"s long type short source", nil, s(`"`+longer+`"`, `"s"`, `"t"`)},
		{"s short type long source", nil, s(`"a"`, `"`+longer+`"`, `"t"`)},
		{"s quote in type", nil, s(`"x\"y"`, `"s"`, "-")},
		{"s control escaped", nil, s(`"x\ny"`, `"s"`, "-")},
		{"s raw control", nil, s("\"x\ny\"", `"s"`, "-")},
		{"s dup type", nil, rec(`{"specversion":"1.0","id":"x","type":"a","type":"b","source":"s","data":{}}`)},
		{"b a s", nil, b("a", "s", true)},
		{"b a -", nil, b("a", "", false)},
		{"b a empty", nil, b("a", "", true)},
		{"b s a", nil, b("s", "a", true)},
		{"b invalid type", nil, b("\xff", "s", true)},
		{"b invalid source", nil, b("a", "\xff", true)},
		{"b quote", nil, b(`x"y`, `s`, true)},
		{"b backslash", nil, b(`a\u0062`, `s`, true)},
		{"b newline", nil, b("x\ny", "s", true)},
		{"b longer", nil, b(longer, longer, true)},
		{"b empty type", nil, b("", "s", true)},
		{"p a s", nil, p(`{"id":"p","type":"a","source":"s","time":"t"}`)},
		{"p a", nil, p(`{"id":"p","type":"a"}`)},
		{"p a null", nil, p(`{"id":"p","type":"a","source":null,"time":null}`)},
		{"p x\"y", nil, p(`{"id":"p","type":"x\"y","source":"s"}`)},
		{"p a\\u0062", nil, p(`{"id":"p","type":"a\\u0062","source":"s"}`)},
		{"p nested", plainFields(Fields{Type: "m.k", Source: "m.k", Time: "m.k"}), p(`{"m":{"k":"a"}}`)},
		{"p nested s", plainFields(Fields{Type: "m.k", Source: "m.s"}), p(`{"m":{"k":"s","s":"a"}}`)},
		{"p nested missing", plainFields(Fields{Type: "m.k", Source: "m.s"}), p(`{"m":{"k":"a"}}`)},
		{"p nested notobj", plainFields(Fields{Type: "m.k", Source: "m.s.z"}), p(`{"m":{"k":"a","s":"q"}}`)},
		{"p no source field", plainFields(Fields{Type: "k"}), p(`{"k":"a","source":"zzz"}`)},
		{"p type=source field", plainFields(Fields{Type: "k", Source: "k"}), p(`{"k":"s"}`)},
	}
	return cs
}

func describe(ev Event, err error) string {
	if err != nil {
		return fmt.Sprintf("error %s: %v", ReasonOf(err), err)
	}
	return fmt.Sprintf("%#v", ev)
}
