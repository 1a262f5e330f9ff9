package decide_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
)

// A Decider is the router's decision, whoever builds it: a stranger who
// fills a decide.Config from the routers' config file by hand (routes as
// read, not validated; max_value_bytes and no_route left out, as the
// file may leave them) gets the router's decision for every record, or
// an error naming the field, never a decider that silently disagrees
// (every record dead-lettered as oversized, a route's defaults missing).
func TestNewDeciderDecidesAsTheRouterOrNamesTheField(t *testing.T) {
	raw := decide.Routes{
		{ID: "confirm", Match: decide.Match{Type: "order.created"}, WorkflowType: "ConfirmOrder", TaskQueue: "orders"},
		{ID: "track", Mode: decide.ModeSignal, Match: decide.Match{Type: "order.created"}, WorkflowType: "Order", TaskQueue: "orders",
			WorkflowIDTemplate: "order-{data.order_id}"},
	}
	// The router's: routes validated, its defaults (1 MiB, skip).
	routed := slices.Clone(raw)
	if err := routed.Validate(); err != nil {
		t.Fatal(err)
	}
	router, err := decide.NewDecider(decide.Config{EventID: eventid.DefaultConfig(), Routes: routed, MaxValueBytes: 1 << 20, NoRoute: "skip"})
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := decide.NewDecider(decide.Config{EventID: eventid.DefaultConfig(), Routes: slices.Clone(raw)})
	if err != nil {
		t.Fatalf("a config with the file's defaults left out: %v", err)
	}
	for _, value := range []string{
		`{"specversion":"1.0","id":"e-1","type":"order.created","source":"shop","data":{"order_id":"o-7"}}`,
		`{"specversion":"1.0","id":"e-2","type":"order.shipped","source":"shop","data":{}}`,
	} {
		kr := &kgo.Record{Topic: "events", Partition: 1, Offset: 42, Value: []byte(value)}
		want, got := router.Decide(kr), stranger.Decide(kr)
		if got.DeadLetter != want.DeadLetter || got.NoRoute != want.NoRoute || !reflect.DeepEqual(got.Intents, want.Intents) {
			t.Fatalf("%s: the stranger's decider: dead letter %q, no route %v, intents %+v (%v); the router's: %q, %v, %+v",
				value, got.DeadLetter, got.NoRoute, got.Intents, got.Err, want.DeadLetter, want.NoRoute, want.Intents)
		}
		for j := range want.Intents {
			if g, w := got.Start(j), want.Start(j); !reflect.DeepEqual(g, w) {
				t.Errorf("%s: start %d: the stranger's %+v, the router's %+v", value, j, g, w)
			}
		}
	}
	for _, c := range []struct {
		field string
		cfg   decide.Config
	}{
		{"MaxValueBytes", decide.Config{EventID: eventid.DefaultConfig(), Routes: slices.Clone(raw), MaxValueBytes: -1}},
		{"NoRoute", decide.Config{EventID: eventid.DefaultConfig(), Routes: slices.Clone(raw), NoRoute: "drop"}},
		{"routes[0].task_queue", decide.Config{EventID: eventid.DefaultConfig(), Routes: decide.Routes{{ID: "x", Match: decide.Match{Type: "*"}, WorkflowType: "W"}}}},
	} {
		if _, err := decide.NewDecider(c.cfg); err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("NewDecider with a bad %s: %v, want an error naming it", c.field, err)
		}
	}
}

// A decision's Routes and Intents, made in one allocation, are two
// slices a caller can append to without writing into the other.
func TestAppendingToADecisionsRoutesLeavesItsIntents(t *testing.T) {
	routes := decide.Routes{
		{ID: "one", Match: decide.Match{Type: "a"}, WorkflowType: "W", TaskQueue: "q"},
		{ID: "two", Match: decide.Match{Type: "a"}, WorkflowType: "W", TaskQueue: "q"},
		{ID: "three", Match: decide.Match{Type: "a"}, WorkflowType: "W", TaskQueue: "q"},
	}
	for n := 1; n <= len(routes); n++ {
		d, err := decide.NewDecider(decide.Config{EventID: eventid.DefaultConfig(), Routes: slices.Clone(routes[:n])})
		if err != nil {
			t.Fatal(err)
		}
		dec := d.Decide(&kgo.Record{Topic: "t", Value: []byte(`{"specversion":"1.0","id":"e","type":"a","source":"s","data":{}}`)})
		if len(dec.Routes) != n || len(dec.Intents) != n {
			t.Fatalf("%d routes: decision has %d routes, %d intents", n, len(dec.Routes), len(dec.Intents))
		}
		want := slices.Clone(dec.Intents)
		_ = append(dec.Routes, dec.Routes[0], dec.Routes[0])
		_ = append(dec.Intents, decide.Intent{WorkflowID: "x"})
		extended := append(dec.Routes, nil)
		extended[0] = nil
		if !reflect.DeepEqual(dec.Intents, want) {
			t.Errorf("%d routes: appending to Routes changed Intents: %+v, want %+v", n, dec.Intents, want)
		}
		for j, rt := range dec.Routes {
			if rt == nil || rt.ID != routes[j].ID {
				t.Errorf("%d routes: route %d is %v after appending to the decision's slices, want %s", n, j, rt, routes[j].ID)
			}
			if dec.Intents[j].WorkflowID != "activity-"+routes[j].ID+":e" {
				t.Errorf("%d routes: intent %d: %q", n, j, dec.Intents[j].WorkflowID)
			}
		}
	}
}

// A decision's Routes are the routes the record matches, in table order,
// with one intent each, for any number of them (none, the one or two
// routesAndIntents makes in one allocation, more, more than Decide's
// eight on the stack), interleaved with routes it does not match; and a
// decision dead-lettered by a route (a scheduled_for route without
// data.scheduled_for) still names every matched route, with no intents,
// as 5674815's Routes.Match did. No decision shares its slices with
// another's. (Passes at f618a29; the existing test covers one to three
// routes.)
func TestADecisionsRoutesAreTheMatchedRoutesForAnyNumber(t *testing.T) {
	const value = `{"specversion":"1.0","id":"e","type":"a","source":"s","data":{}}`
	for _, scheduled := range []bool{false, true} {
		for n := 0; n <= 11; n++ {
			var routes decide.Routes
			var want []string
			for j := 0; j < n; j++ {
				routes = append(routes, decide.Route{ID: "other" + string(rune('a'+j)), Match: decide.Match{Type: "b"}, WorkflowType: "W", TaskQueue: "q"})
				id := "r" + string(rune('a'+j))
				rt := decide.Route{ID: id, Match: decide.Match{Type: "a"}, WorkflowType: "W", TaskQueue: "q"}
				if scheduled && j == n-1 {
					rt.Key = decide.KeyScheduledFor
				}
				routes = append(routes, rt)
				want = append(want, id)
			}
			if n == 0 {
				routes = decide.Routes{{ID: "other", Match: decide.Match{Type: "b"}, WorkflowType: "W", TaskQueue: "q"}}
			}
			d, err := decide.NewDecider(decide.Config{EventID: eventid.DefaultConfig(), Routes: routes})
			if err != nil {
				t.Fatal(err)
			}
			first := d.Decide(&kgo.Record{Topic: "t", Value: []byte(value)})
			dec := d.Decide(&kgo.Record{Topic: "t", Value: []byte(value)})
			var got []string
			for _, rt := range dec.Routes {
				got = append(got, rt.ID)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("scheduled %v, %d routes: decision's routes %v, want %v", scheduled, n, got, want)
			}
			switch {
			case n == 0:
				if !dec.NoRoute || dec.Routes != nil || dec.Intents != nil {
					t.Errorf("no route: %+v", dec)
				}
			case scheduled:
				if dec.DeadLetter != decide.ReasonUndecodable || dec.Intents != nil {
					t.Errorf("scheduled, %d routes: dead letter %q, intents %+v", n, dec.DeadLetter, dec.Intents)
				}
			default:
				if len(dec.Intents) != n || cap(dec.Intents) != n {
					t.Errorf("%d routes: %d intents (cap %d)", n, len(dec.Intents), cap(dec.Intents))
				}
				for j := range dec.Intents {
					if dec.Intents[j].ActivityID != want[j] || dec.Intents[j].WorkflowID != "activity-"+want[j]+":e" {
						t.Errorf("%d routes: intent %d is %+v, want route %s's", n, j, dec.Intents[j], want[j])
					}
				}
			}
			if n > 0 {
				dec.Routes[0] = nil
				if len(dec.Intents) > 0 {
					dec.Intents[0].WorkflowID = "x"
				}
				if first.Routes[0] == nil || (len(first.Intents) > 0 && first.Intents[0].WorkflowID == "x") {
					t.Errorf("scheduled %v, %d routes: two decisions share their slices", scheduled, n)
				}
			}
		}
	}
}
