package decide

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/dedupio/dedup/processor/eventid"
)

// A route with match.fields matches an event only when every listed field
// of its data matches: strings by their text, numbers by their literal
// text, booleans as true/false, a trailing "*" as a prefix; a missing
// field, null, an object or an array never matches.
func TestRouteMatchesOnFieldsOfTheEventsData(t *testing.T) {
	rs := Routes{
		{ID: "paid-eu", Match: Match{Type: "order.*", Fields: map[string]string{"data.order.status": "paid", "data.region": "eu-*"}}, WorkflowType: "W", TaskQueue: "q"},
		{ID: "big", Match: Match{Type: "*", Fields: map[string]string{"data.order.amount": "1000"}}, WorkflowType: "W", TaskQueue: "q"},
		{ID: "gift", Match: Match{Type: "*", Fields: map[string]string{"data.gift": "true"}}, WorkflowType: "W", TaskQueue: "q"},
		{ID: "any-status", Match: Match{Type: "*", Fields: map[string]string{"data.order.status": "*"}}, WorkflowType: "W", TaskQueue: "q"},
	}
	if err := rs.Validate(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, typ, data, want string
	}{
		{"all fields match", "order.paid", `{"order":{"status":"paid","amount":1000},"region":"eu-west-1"}`, "paid-eu,big,any-status"},
		{"one field differs", "order.paid", `{"order":{"status":"paid"},"region":"us-east-1"}`, "any-status"},
		{"type differs", "invoice.paid", `{"order":{"status":"paid"},"region":"eu-west-1"}`, "any-status"},
		{"missing field", "order.paid", `{"order":{"status":"paid"}}`, "any-status"},
		{"missing parent", "order.paid", `{"region":"eu-west-1"}`, ""},
		{"parent not an object", "order.paid", `{"order":"paid","region":"eu-west-1"}`, ""},
		{"null never matches", "order.paid", `{"order":{"status":null},"region":"eu-1"}`, ""},
		{"object never matches", "order.paid", `{"order":{"status":{"code":"paid"}},"region":"eu-1"}`, ""},
		{"array never matches", "order.paid", `{"order":{"status":["paid"]},"region":"eu-1"}`, ""},
		{"number by its literal text", "x", `{"order":{"amount":1000.0}}`, ""},
		{"number as a string matches its text", "x", `{"order":{"amount":"1000"}}`, "big"},
		{"boolean", "x", `{"gift":true}`, "gift"},
		{"boolean false", "x", `{"gift":false}`, ""},
		{"escaped string", "order.paid", `{"order":{"status":"p\u0061id"},"region":"eu-\u0031"}`, "paid-eu,any-status"},
		{"last of repeated keys", "order.paid", `{"order":{"status":"paid","status":"refunded"},"region":"eu-1"}`, "any-status"},
		{"prefix is not a match of the shorter text", "order.paid", `{"order":{"status":"paid"},"region":"eu"}`, "any-status"},
		{"data is not an object", "order.paid", `"paid"`, ""},
		{"no data", "order.paid", ``, ""},
	}
	for _, c := range cases {
		ev := eventid.Event{Type: c.typ, Data: json.RawMessage(c.data)}
		var got []string
		for _, r := range rs.Match(&ev) {
			got = append(got, r.ID)
		}
		if strings.Join(got, ",") != c.want {
			t.Errorf("%s: %s matches %q, want %q", c.name, c.data, strings.Join(got, ","), c.want)
		}
	}
}

// Mismatch says which part of a route's match an event fails, for dedup
// explain.
func TestMatchMismatchNamesTheFieldThatDoesNotMatch(t *testing.T) {
	m := Match{Type: "order.*", Fields: map[string]string{"data.order.status": "paid", "data.region": "eu-*"}}
	cases := []struct{ typ, data, want string }{
		{"order.paid", `{"order":{"status":"paid"},"region":"eu-1"}`, ""},
		{"invoice.paid", `{}`, `type "invoice.paid" does not match "order.*"`},
		{"order.paid", `{"order":{"status":"open"},"region":"eu-1"}`, `data.order.status is "open", not "paid"`},
		{"order.paid", `{"order":{"status":"paid"},"region":"us-1"}`, `data.region is "us-1", not "eu-*"`},
		{"order.paid", `{"order":{"status":"paid"}}`, `data.region is missing`},
		{"order.paid", `{"order":{"status":7},"region":"eu-1"}`, `data.order.status is "7", not "paid"`},
		{"order.paid", `{"order":{"status":[]},"region":"eu-1"}`, `data.order.status is an array, not a string, number or boolean`},
	}
	for _, c := range cases {
		ev := eventid.Event{Type: c.typ, Data: json.RawMessage(c.data)}
		if got := m.Mismatch(&ev); got != c.want {
			t.Errorf("%s %s: %q, want %q", c.typ, c.data, got, c.want)
		}
	}
}

// A bad match.fields entry is refused at load, naming
// routes[i].match.fields and the path.
func TestRouteFieldsAreCheckedAtLoad(t *testing.T) {
	for fields, want := range map[string]map[string]string{
		`routes[0].match.fields["order.status"]: not a path into the event's data`:    {"order.status": "paid"},
		`routes[0].match.fields["data"]: not a path`:                                  {"data": "paid"},
		`routes[0].match.fields["data.order..status"]: the path has an empty segment`: {"data.order..status": "paid"},
		`routes[0].match.fields["data.order."]: the path has an empty segment`:        {"data.order.": "paid"},
		`routes[0].match.fields["data.region"]: empty pattern`:                        {"data.region": ""},
		`routes[0].match.fields["data.region"]: "e*u" has a "*" before its end`:       {"data.region": "e*u"},
	} {
		rs := Routes{{ID: "a", Match: Match{Type: "*", Fields: want}, WorkflowType: "W", TaskQueue: "q"}}
		err := rs.Validate()
		if err == nil || !strings.Contains(err.Error(), fields) {
			t.Errorf("fields %v: %v, want an error with %q", want, err, fields)
		}
	}
}

// Matching a route on fields allocates nothing for the JSON producers
// send (unescaped strings, numbers, booleans): Decide runs it on every
// record.
func TestRouteFieldMatchAllocatesNothing(t *testing.T) {
	rs := Routes{{ID: "a", Match: Match{Type: "order.*", Fields: map[string]string{"data.order.status": "paid", "data.region": "eu-*", "data.n": "7"}}, WorkflowType: "W", TaskQueue: "q"}}
	if err := rs.Validate(); err != nil {
		t.Fatal(err)
	}
	ev := eventid.Event{Type: "order.paid", Data: json.RawMessage(`{"id":"o-1","order":{"items":[1,2,{"a":null}],"status":"paid"},"region":"eu-west-1","n":7}`)}
	var n int
	allocs := testing.AllocsPerRun(100, func() {
		if rs[0].Match.matches(&ev) {
			n++
		}
	})
	if n == 0 || allocs != 0 {
		t.Errorf("matched %d times with %.1f allocations per match, want a match with 0", n, allocs)
	}
}

// BenchmarkRouteFieldMatch is one route's match on two fields of a
// 256-byte payload (the benchmark workload's shape): the cost match.fields
// adds to Decide per route of the event's type.
func BenchmarkRouteFieldMatch(b *testing.B) {
	rs := Routes{{ID: "a", Match: Match{Type: "order.*", Fields: map[string]string{"data.customer": "customer-*", "data.amount": "*"}}, WorkflowType: "W", TaskQueue: "q"}}
	if err := rs.Validate(); err != nil {
		b.Fatal(err)
	}
	ev := eventid.Event{Type: "order.created", Data: json.RawMessage(`{"amount":123.45,"customer":"customer-17","n":42,"pad":"` + strings.Repeat("x", 170) + `"}`)}
	b.SetBytes(int64(len(ev.Data)))
	b.ReportAllocs()
	for b.Loop() {
		if !rs[0].Match.matches(&ev) {
			b.Fatal("no match")
		}
	}
}
