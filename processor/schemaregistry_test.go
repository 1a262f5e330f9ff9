package processor

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/dedupio/dedup/internal/testsupport/srstandin"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
)

// orderAvro is an order event as an Avro record; orderAvroV2 is the same
// record under a newer writer schema (fields in another order: the same
// fields and values).
const (
	orderAvro = `{"type":"record","name":"Order","namespace":"shop","fields":[
 {"name":"type","type":"string"},{"name":"order_id","type":"string"},{"name":"amount","type":"long"}]}`
	orderAvroV2 = `{"type":"record","name":"Order","namespace":"shop","fields":[
 {"name":"order_id","type":"string"},{"name":"amount","type":"long"},{"name":"type","type":"string"}]}`
)

// avroRecord is rec written with schema (registered as id) in the
// Schema Registry wire format.
func avroRecord(t testing.TB, schema string, id int, rec map[string]any) []byte {
	t.Helper()
	b, err := avro.Marshal(avro.MustParse(schema), rec)
	if err != nil {
		t.Fatal(err)
	}
	var h sr.ConfluentHeader
	v, err := h.AppendEncode(nil, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	return append(v, b...)
}

// registryConfig is a decider config reading plain records (no
// CloudEvents) through the stand-in: type from the record's "type" field,
// the content rule for IDs, one signal route on order_id.
func registryConfig(t testing.TB, url string) Config {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Brokers, cfg.Group, cfg.Topics, cfg.ResetOffset = []string{"x:1"}, "g", []string{testTopic}, "earliest"
	cfg.SchemaRegistry.URL = url
	cfg.EventID.Format, cfg.EventID.Chain = eventid.FormatPlain, []eventid.Rule{eventid.RuleContent}
	cfg.Routes = decide.Routes{{ID: "orders", Mode: decide.ModeSignal, Match: decide.Match{Type: "order.*"}, WorkflowType: "Order", TaskQueue: "q",
		WorkflowIDTemplate: "order-{data.order_id}"}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func decideResolved(t *testing.T, d *decide.Decider, vs ...[]byte) []decide.Decision {
	t.Helper()
	krs := make([]*kgo.Record, len(vs))
	for i, v := range vs {
		krs[i] = &kgo.Record{Topic: testTopic, Key: []byte("k"), Value: v}
	}
	if err := d.Resolve(context.Background(), krs); err != nil {
		t.Fatalf("resolving: %v", err)
	}
	out := make([]decide.Decision, len(krs))
	for i, kr := range krs {
		out[i] = d.Decide(kr)
	}
	return out
}

// An Avro record behind a registry is an event like a JSON one: its type
// from a field, the signal route's template on another, and the content
// rule over the decoded value, so the same record written under another
// writer schema is the same event.
func TestDecideReadsAvroRecordsThroughTheSchemaRegistry(t *testing.T) {
	stand := srstandin.New()
	defer stand.Close()
	id1, _ := stand.Register("events-value", sr.Schema{Schema: orderAvro})
	id2, _ := stand.Register("events-value", sr.Schema{Schema: orderAvroV2})
	d, err := NewDecider(registryConfig(t, stand.URL()))
	if err != nil {
		t.Fatal(err)
	}
	rec := map[string]any{"type": "order.placed", "order_id": "o-7", "amount": int64(12)}
	ds := decideResolved(t, d, avroRecord(t, orderAvro, id1, rec), avroRecord(t, orderAvroV2, id2, rec),
		[]byte(`{"type":"order.placed","order_id":"o-7","amount":12}`))
	for i, dc := range ds {
		if dc.DeadLetter != "" || len(dc.Intents) != 1 {
			t.Fatalf("record %d: dead letter %q (%v), %d intents; want one intent", i, dc.DeadLetter, dc.Err, len(dc.Intents))
		}
		if dc.Entities[0] != "order-o-7" || dc.Event.Type != "order.placed" {
			t.Errorf("record %d: entity %q type %q, want order-o-7, order.placed", i, dc.Entities[0], dc.Event.Type)
		}
	}
	if ds[0].Event.ID != ds[1].Event.ID || ds[0].Event.PayloadHash != ds[1].Event.PayloadHash {
		t.Errorf("one record under two writer schemas is two events: %s and %s", ds[0].Event.ID, ds[1].Event.ID)
	}
	// The JSON copy of the same logical value is the same event too.
	if ds[0].Event.ID != ds[2].Event.ID {
		t.Errorf("the Avro record and its JSON are two events: %s and %s", ds[0].Event.ID, ds[2].Event.ID)
	}
}

// A schema ID the registry does not have is dead-lettered undecodable,
// with the ID in the reason; so is a payload its schema does not read.
func TestDecideDeadLettersAnUnknownSchemaIDAsUndecodable(t *testing.T) {
	stand := srstandin.New()
	defer stand.Close()
	id, _ := stand.Register("events-value", sr.Schema{Schema: orderAvro})
	d, err := NewDecider(registryConfig(t, stand.URL()))
	if err != nil {
		t.Fatal(err)
	}
	unknown := avroRecord(t, orderAvro, 4242, map[string]any{"type": "order.placed", "order_id": "o", "amount": int64(1)})
	bad := append(avroRecord(t, orderAvro, id, map[string]any{"type": "order.placed", "order_id": "o", "amount": int64(1)}), 0x01)
	for i, dc := range decideResolved(t, d, unknown, bad) {
		want := []string{"schema 4242", "schema " + strconv.Itoa(id)}[i]
		if dc.DeadLetter != decide.ReasonUndecodable || dc.Err == nil || !strings.Contains(dc.Err.Error(), want) {
			t.Errorf("record %d: dead letter %q err %v, want undecodable naming %q", i, dc.DeadLetter, dc.Err, want)
		}
	}
}

// A registry that cannot answer is a dependency that is down, not a bad
// record: the router keeps the batch (no dead letter, no start, nothing
// committed past it), reports schema_registry down, and goes on when the
// registry answers again; each event is then delivered once.
func TestRouterWaitsForASchemaRegistryThatIsDown(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	stand := srstandin.New()
	defer stand.Close()
	id, _ := stand.Register("events-value", sr.Schema{Schema: orderAvro})
	cfg := registryConfig(t, stand.URL())
	cfg.Brokers, cfg.Group = e.cluster.ListenAddrs(), e.group
	base := e.config()
	cfg.SessionTimeout, cfg.RebalanceTimeout, cfg.CommitInterval = base.SessionTimeout, base.RebalanceTimeout, base.CommitInterval
	cfg.Starts, cfg.Retry, cfg.RevokeTimeout, cfg.DrainTimeout, cfg.LagInterval = base.Starts, base.Retry, base.RevokeTimeout, base.DrainTimeout, base.LagInterval
	const n = 3
	for i := range n {
		e.produceRaw(0, avroRecord(t, orderAvro, id, map[string]any{"type": "order.placed", "order_id": "o-7", "amount": int64(i)}))
	}
	stand.Down(true)
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return slices.Contains(rn.r.Health().Down, DepSchemaRegistry) },
		func() string { return fmt.Sprintf("schema_registry never reported down; health %+v", rn.r.Health()) })
	// Down is reported after retry.max of failed resolves of the batch:
	// by then the batch was polled and held.
	if got := e.committed()[0]; got > 0 {
		t.Fatalf("committed %d while the registry is down, want nothing past the held batch", got)
	}
	if dl := e.dlqReasons(); len(dl) != 0 {
		t.Fatalf("dead letters %v while the registry is down, want none", dl)
	}
	if c := len(e.starter.swsCalls()); c != 0 {
		t.Fatalf("%d deliveries while the registry is down", c)
	}
	stand.Down(false)
	e.waitCommittedToEnd(10 * time.Second)
	if runs := e.starter.signalsOf("order-o-7"); len(runs) != 1 || len(runs[0]) != n {
		t.Fatalf("order-o-7 received %v, want one run with %d events", runs, n)
	}
	if dl := e.dlqReasons(); len(dl) != 0 {
		t.Fatalf("dead letters %v, want none", dl)
	}
	if slices.Contains(rn.r.Health().Down, DepSchemaRegistry) {
		t.Fatalf("schema_registry still down after the batch resolved: %+v", rn.r.Health())
	}
}

// In CloudEvents binary mode an Avro value behind the registry is the
// event's data as JSON, whatever content type the record declares: its
// fields feed the templates, and the workflow gets the JSON.
func TestDecideReadsABinaryModeCloudEventsAvroValueAsJSONData(t *testing.T) {
	stand := srstandin.New()
	defer stand.Close()
	id, _ := stand.Register("events-value", sr.Schema{Schema: orderAvro})
	cfg := registryConfig(t, stand.URL())
	cfg.EventID = eventid.DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	d, err := NewDecider(cfg)
	if err != nil {
		t.Fatal(err)
	}
	kr := &kgo.Record{Topic: testTopic, Value: avroRecord(t, orderAvro, id, map[string]any{"type": "ignored", "order_id": "o-9", "amount": int64(3)}),
		Headers: []kgo.RecordHeader{{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_id", Value: []byte("e-9")},
			{Key: "ce_type", Value: []byte("order.placed")}, {Key: "content-type", Value: []byte("application/avro")}}}
	if err := d.Resolve(context.Background(), []*kgo.Record{kr}); err != nil {
		t.Fatal(err)
	}
	dc := d.Decide(kr)
	if dc.DeadLetter != "" || len(dc.Intents) != 1 {
		t.Fatalf("dead letter %q (%v), %d intents", dc.DeadLetter, dc.Err, len(dc.Intents))
	}
	if dc.Event.ID != "e-9" || dc.Event.Bytes != nil || string(dc.Event.Data) != `{"type":"ignored","order_id":"o-9","amount":3}` || dc.Entities[0] != "order-o-9" {
		t.Fatalf("event %s data %s bytes %d entity %s", dc.Event.ID, dc.Event.Data, len(dc.Event.Bytes), dc.Entities[0])
	}
}

// An Avro long is exact, but the content rule's canonical form (RFC 8785)
// reads a JSON number as a double: 2^53 and 2^53+1, or two snowflake
// IDs a unit apart, are one number there. Two records that differ only there must
// stay two events with two payloads, not one event whose second copy is
// skipped as a duplicate.
func TestDecideKeepsAvroLongsBeyondDoublePrecisionApart(t *testing.T) {
	stand := srstandin.New()
	defer stand.Close()
	id, _ := stand.Register("events-value", sr.Schema{Schema: orderAvro})
	d, err := NewDecider(registryConfig(t, stand.URL()))
	if err != nil {
		t.Fatal(err)
	}
	rec := func(amount int64) []byte {
		return avroRecord(t, orderAvro, id, map[string]any{"type": "order.placed", "order_id": "o-7", "amount": amount})
	}
	ds := decideResolved(t, d, rec(1<<53), rec(1<<53+1), rec(1234567890123456789), rec(1234567890123456790))
	for i, dc := range ds {
		if dc.DeadLetter != "" || len(dc.Intents) != 1 {
			t.Fatalf("record %d: dead letter %q (%v), %d intents; want one intent", i, dc.DeadLetter, dc.Err, len(dc.Intents))
		}
	}
	for _, p := range [][2]int{{0, 1}, {2, 3}} {
		a, b := ds[p[0]].Event, ds[p[1]].Event
		if a.ID == b.ID || a.PayloadHash == b.PayloadHash {
			t.Errorf("records %d and %d (amounts a unit apart, beyond 2^53) are one event %s, payload hashes equal: %v", p[0], p[1], a.ID, a.PayloadHash == b.PayloadHash)
		}
	}
}

// A registry that accepts the request and never answers (a hung proxy)
// holds the batch, but not the router's shutdown: Run returns within its
// drain_timeout of being stopped, not after the registry's request
// timeout (a minute here). Bound: drain_timeout plus 5s of slack for the
// shared machine.
func TestRouterStopsWithinItsDrainTimeoutWhileTheRegistryHangs(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	asked := make(chan struct{}, 1)
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		select {
		case asked <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-req.Context().Done():
		}
	}))
	defer hung.Close()
	defer close(release)
	cfg := registryConfig(t, hung.URL)
	cfg.SchemaRegistry.Timeout = time.Minute
	cfg.Brokers, cfg.Group = e.cluster.ListenAddrs(), e.group
	base := e.config()
	cfg.SessionTimeout, cfg.RebalanceTimeout, cfg.CommitInterval = base.SessionTimeout, base.RebalanceTimeout, base.CommitInterval
	cfg.Starts, cfg.Retry, cfg.RevokeTimeout, cfg.DrainTimeout, cfg.LagInterval = base.Starts, base.Retry, base.RevokeTimeout, base.DrainTimeout, base.LagInterval
	e.produceRaw(0, avroRecord(t, orderAvro, 1, map[string]any{"type": "order.placed", "order_id": "o-7", "amount": int64(1)}))
	rn := e.start("r1", cfg)
	select {
	case <-asked:
	case <-time.After(20 * time.Second):
		t.Fatal("the router never asked the registry")
	}
	t0 := time.Now()
	err := rn.stop()
	if took, bound := time.Since(t0), cfg.DrainTimeout+5*time.Second; took > bound {
		t.Fatalf("Run returned %s after stop (error %v), want within %s", took, err, bound)
	}
	if got := e.committed()[0]; got > 0 {
		t.Fatalf("committed %d past a batch whose schema never resolved", got)
	}
	if dl := e.dlqReasons(); len(dl) != 0 {
		t.Fatalf("dead letters %v while the registry hung", dl)
	}
}
