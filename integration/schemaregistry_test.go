package integration

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/dedupio/dedup/internal/testsupport/srstandin"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
)

// An Avro topic behind a Schema Registry (the stand-in: none runs here),
// with only config: the router decodes each record with its writer's
// schema, takes its type from a field, signals the entity workflow its
// template names from another field, and the content rule makes the same
// order written under two schema versions one event: each order reaches
// its entity once, nothing is dead-lettered, everything is committed.
func TestAvroTopicBehindASchemaRegistrySignalsItsEntities(t *testing.T) {
	e := newEnv(t, 1)
	queue := "sr-" + e.namespace
	startEntityWorker(t, e, queue)
	stand := srstandin.New()
	defer stand.Close()
	v1 := `{"type":"record","name":"Order","namespace":"shop","fields":[
 {"name":"type","type":"string"},{"name":"entity","type":"string"},{"name":"order_id","type":"string"},{"name":"amount","type":"long"}]}`
	v2 := `{"type":"record","name":"Order","namespace":"shop","fields":[
 {"name":"order_id","type":"string"},{"name":"amount","type":"long"},{"name":"entity","type":"string"},{"name":"type","type":"string"}]}`
	id1, _ := stand.Register(e.topic+"-value", sr.Schema{Schema: v1})
	id2, _ := stand.Register(e.topic+"-value", sr.Schema{Schema: v2})

	encode := func(schema string, id int, rec map[string]any) []byte {
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
	var recs []*kgo.Record
	const orders = 4
	for i := range orders {
		rec := map[string]any{"type": "entity.event", "entity": "1", "order_id": string(rune('a' + i)), "amount": int64(i)}
		// Every order twice: under each writer schema.
		recs = append(recs, &kgo.Record{Topic: e.topic, Key: []byte("k"), Value: encode(v1, id1, rec)},
			&kgo.Record{Topic: e.topic, Key: []byte("k"), Value: encode(v2, id2, rec)})
	}
	// An order under a schema ID the registry does not have: undecodable.
	recs = append(recs, &kgo.Record{Topic: e.topic, Key: []byte("k"), Value: encode(v1, 9999, map[string]any{"type": "entity.event", "entity": "1", "order_id": "z", "amount": int64(0)})})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.kcl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	cfg := e.config()
	cfg.Kafka.SchemaRegistry.URL = stand.URL()
	cfg.EventID.Format, cfg.EventID.Chain = eventid.FormatPlain, []eventid.Rule{eventid.RuleContent}
	cfg.Routes = decide.Routes{signalRoute(queue, "")}
	r := e.startRouter(cfg)
	e.waitCommitted(2 * time.Minute)
	r.stop(t)

	run, ok := e.currentRun("ent-1")
	if !ok {
		t.Fatal("the entity workflow ent-1 was never started")
	}
	got := e.settledSignals("ent-1", run)
	ids := eventIDs(got)
	if len(got) != orders || len(slices.Compact(slices.Clone(ids))) != orders {
		t.Fatalf("ent-1 received %d signals (%v), want %d: one per order, whatever schema it was written with", len(got), ids, orders)
	}
	if dl := e.dlqReasons(); dl["undecodable"] != 1 || len(dl) != 1 {
		t.Fatalf("dead letters %v, want the one record of an unknown schema ID as undecodable", dl)
	}
}
