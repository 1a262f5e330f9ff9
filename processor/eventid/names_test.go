package eventid

import (
	"fmt"
	"strings"
	"sync"
	"testing"
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
