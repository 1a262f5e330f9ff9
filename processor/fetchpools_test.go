package processor

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor/decide"
)

// Every batch the router fetched goes back to its pools once its records
// ended, whichever way they ended: started, a duplicate, a dead letter, a
// record no route matches, a tombstone.
func TestEveryBatchTheRouterFetchedGoesBackToThePoolsOnceItsRecordsEnded(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for round := range 3 {
		var recs []*kgo.Record
		for i := range 10 {
			id := fmt.Sprintf("e-%d", (round*10+i)%16) // copies from the second round on
			recs = append(recs, &kgo.Record{Topic: testTopic, Partition: int32(i % 2), Value: value(id, "v")})
		}
		recs = append(recs,
			&kgo.Record{Topic: testTopic, Partition: 0, Value: []byte("{not json")},
			&kgo.Record{Topic: testTopic, Partition: 1, Value: []byte(`{"id":"x","type":"nobody.routes","data":{}}`)},
			&kgo.Record{Topic: testTopic, Partition: 0, Key: []byte("k"), Value: nil})
		if err := e.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	rn := e.start("a", e.config())
	e.waitCommittedToEnd(30 * time.Second)
	for i := range 16 { // each started once, with its own data
		id := fmt.Sprintf("e-%d", i)
		if x := e.starter.executionsOf(wid(id)); len(x) != 1 || !bytes.Equal(x[0].req.Input.Data, value(id, "v")) {
			t.Fatalf("%s: executions %+v", id, x)
		}
	}
	p := rn.r.pools
	eventually(t, 10*time.Second, func() bool { return p.lent.Load() > 0 && p.back.Load() == p.lent.Load() },
		func() string {
			return fmt.Sprintf("%d batches' records lent, %d given back", p.lent.Load(), p.back.Load())
		})
}

// A start request's data is its own, not its record's value: the value
// goes back to the fetch pools when the record ends, and a request may
// outlive it (a waiter taking the start over, a retry). JSON data,
// binary data and a signal route's data alike.
func TestAStartRequestsDataIsItsOwnNotItsRecordsValue(t *testing.T) {
	decider := func(rt decide.Route) *decide.Decider {
		cfg := DefaultConfig()
		cfg.Brokers, cfg.Group, cfg.Topics, cfg.ResetOffset = []string{"x:1"}, "g", []string{testTopic}, "earliest"
		cfg.Routes = decide.Routes{rt}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		d, err := decide.NewDecider(cfg.Decide())
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	starts := decider(decide.Route{ID: testRoute, Match: decide.Match{Type: testType}, WorkflowType: "W", TaskQueue: "q"})
	signals := decider(decide.Route{ID: "orders", Mode: decide.ModeSignal, Match: decide.Match{Type: "order.*"}, WorkflowType: "Order",
		TaskQueue: "q", WorkflowIDTemplate: "order-{data.order_id}"})
	binary := []kgo.RecordHeader{{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_id", Value: []byte("b-1")},
		{Key: "ce_type", Value: []byte(testType)}, {Key: "ce_source", Value: []byte("shop")},
		{Key: "ce_datacontenttype", Value: []byte("text/plain")}}
	for _, tc := range []struct {
		name string
		d    *decide.Decider
		kr   *kgo.Record
		data func(decide.StartRequest) []byte
	}{
		{"json", starts, &kgo.Record{Topic: testTopic, Value: value("e-1", "payload")},
			func(r decide.StartRequest) []byte { return r.Input.Data }},
		{"binary", starts, &kgo.Record{Topic: testTopic, Value: []byte("hello, world"), Headers: binary},
			func(r decide.StartRequest) []byte { return r.Input.DataBase64 }},
		{"signal", signals, &kgo.Record{Topic: testTopic, Value: orderEvent("o-1", "A", "payload")},
			func(r decide.StartRequest) []byte { return r.Signal.Input.Data }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dec := tc.d.Decide(tc.kr)
			if dec.DeadLetter != "" || len(dec.Intents) != 1 {
				t.Fatalf("decided %+v", dec)
			}
			req := startRef{d: &dec, j: 0}.request()
			want := bytes.Clone(tc.data(req))
			if len(want) == 0 {
				t.Fatal("the request carries no data")
			}
			for i := range tc.kr.Value { // the pools lend the value to the next fetch
				tc.kr.Value[i] = 'X'
			}
			if got := tc.data(req); !bytes.Equal(got, want) {
				t.Fatalf("the request's data changed with its record's value: %q, was %q", got, want)
			}
		})
	}
}
