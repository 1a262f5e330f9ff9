package srdecode_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bufbuild/protocompile"
	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/dedupio/dedup/internal/testsupport/srstandin"
	"github.com/dedupio/dedup/processor/srdecode"
)

const orderV1 = `{"type":"record","name":"Order","namespace":"shop","fields":[
 {"name":"type","type":"string"},
 {"name":"order_id","type":"string"},
 {"name":"amount","type":"long"},
 {"name":"note","type":["null","string"],"default":null}]}`

// orderV2 has the fields of v1 in another order: the same logical record.
const orderV2 = `{"type":"record","name":"Order","namespace":"shop","fields":[
 {"name":"amount","type":"long"},
 {"name":"note","type":["null","string"],"default":null},
 {"name":"order_id","type":"string"},
 {"name":"type","type":"string"}]}`

func newRegistry(t *testing.T) (*srstandin.Registry, *srdecode.Registry) {
	t.Helper()
	stand, cl := standinClient(t)
	return stand, srdecode.New(cl)
}

func frame(t testing.TB, id int, index []int, payload []byte) []byte {
	t.Helper()
	var h sr.ConfluentHeader
	b, err := h.AppendEncode(nil, id, index)
	if err != nil {
		t.Fatal(err)
	}
	return append(b, payload...)
}

func avroValue(t testing.TB, schema string, id int, v any) []byte {
	t.Helper()
	s := avro.MustParse(schema)
	b, err := avro.Marshal(s, v)
	if err != nil {
		t.Fatal(err)
	}
	return frame(t, id, nil, b)
}

func decode(t *testing.T, reg *srdecode.Registry, v []byte) string {
	t.Helper()
	if err := reg.Resolve(context.Background(), [][]byte{v}); err != nil {
		t.Fatalf("resolve: %v", err)
	}
	out, err := reg.Decode(v)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	return string(out)
}

func TestAvroValueDecodesToItsLogicalJSON(t *testing.T) {
	stand, reg := newRegistry(t)
	id, _ := stand.Register("orders-value", sr.Schema{Schema: orderV1})
	v := avroValue(t, orderV1, id, map[string]any{"type": "order.placed", "order_id": "o-1", "amount": int64(42), "note": "gift"})
	if got, want := decode(t, reg, v), `{"type":"order.placed","order_id":"o-1","amount":42,"note":"gift"}`; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

func TestAvroValuesOfTwoWriterSchemasWithTheSameFieldsDecodeEqual(t *testing.T) {
	stand, reg := newRegistry(t)
	id1, _ := stand.Register("orders-value", sr.Schema{Schema: orderV1})
	id2, _ := stand.Register("orders-value", sr.Schema{Schema: orderV2})
	if id1 == id2 {
		t.Fatal("the stand-in gave two schemas one ID")
	}
	rec := map[string]any{"type": "order.placed", "order_id": "o-1", "amount": int64(42), "note": nil}
	a := decode(t, reg, avroValue(t, orderV1, id1, rec))
	b := decode(t, reg, avroValue(t, orderV2, id2, rec))
	// In each writer's field order; one value (identity hashes its
	// canonical form).
	var va, vb any
	if err := json.Unmarshal([]byte(a), &va); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(b), &vb); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(va, vb) {
		t.Fatalf("one logical record, two values: %s and %s", a, b)
	}
}

func TestAvroSchemaReferencesAreResolved(t *testing.T) {
	stand, reg := newRegistry(t)
	money := `{"type":"record","name":"Money","namespace":"shop","fields":[{"name":"cents","type":"long"},{"name":"currency","type":"string"}]}`
	stand.Register("shop.Money", sr.Schema{Schema: money})
	order := `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"type","type":"string"},{"name":"total","type":"shop.Money"}]}`
	id, _ := stand.Register("orders-value", sr.Schema{Schema: order, References: []sr.SchemaReference{{Name: "shop.Money", Subject: "shop.Money", Version: 1}}})
	cache := &avro.SchemaCache{}
	avro.MustParse(`{"type":"record","name":"Money","namespace":"shop","fields":[{"name":"cents","type":"long"},{"name":"currency","type":"string"}]}`)
	if _, err := avro.ParseWithCache(money, "", cache); err != nil {
		t.Fatal(err)
	}
	full, err := avro.ParseWithCache(order, "", cache)
	if err != nil {
		t.Fatal(err)
	}
	b, err := avro.Marshal(full, map[string]any{"type": "t", "total": map[string]any{"cents": int64(5), "currency": "EUR"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := decode(t, reg, frame(t, id, nil, b)), `{"type":"t","total":{"cents":5,"currency":"EUR"}}`; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

const shopProto = `syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Ping { string id = 1; }
message Order {
  string type = 1;
  string order_id = 2;
  int64 amount = 3;
  Line line = 4;
  google.protobuf.Timestamp at = 5;
  message Line { string sku = 1; int32 qty = 2; }
  message Refund { string order_id = 1; string why = 2; }
}
`

func protoMessage(t *testing.T, path []int, js string) []byte {
	t.Helper()
	c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(map[string]string{"shop.proto": shopProto})})}
	fds, err := c.Compile(context.Background(), "shop.proto")
	if err != nil {
		t.Fatal(err)
	}
	msgs := fds[0].Messages()
	var md protoreflect.MessageDescriptor
	for _, i := range path {
		md = msgs.Get(i)
		msgs = md.Messages()
	}
	m := dynamicpb.NewMessage(md)
	if err := protojson.Unmarshal([]byte(js), m); err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestProtobufValueDecodesTheMessageItsIndexesName(t *testing.T) {
	stand, reg := newRegistry(t)
	id, _ := stand.Register("orders-value", sr.Schema{Schema: shopProto, Type: sr.TypeProtobuf})
	// [1]: Order, the second top-level message (not the index-0 shortcut).
	order := protoMessage(t, []int{1}, `{"type":"order.placed","order_id":"o-1","amount":"42","line":{"sku":"s","qty":2},"at":"2026-01-02T03:04:05Z"}`)
	got := decode(t, reg, frame(t, id, []int{1}, order))
	if want := `{"type":"order.placed","order_id":"o-1","amount":"42","line":{"sku":"s","qty":2},"at":"2026-01-02T03:04:05Z"}`; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	// [1, 1]: Order.Refund, a nested message.
	refund := protoMessage(t, []int{1, 1}, `{"order_id":"o-1","why":"late"}`)
	if got, want := decode(t, reg, frame(t, id, []int{1, 1}, refund)), `{"order_id":"o-1","why":"late"}`; got != want {
		t.Fatalf("nested: got %s, want %s", got, want)
	}
	// [0] is written as the single byte 0: Ping.
	ping := protoMessage(t, []int{0}, `{"id":"p"}`)
	if got, want := decode(t, reg, frame(t, id, []int{0}, ping)), `{"id":"p"}`; got != want {
		t.Fatalf("index 0: got %s, want %s", got, want)
	}
	if _, err := reg.Decode(frame(t, id, []int{7}, ping)); err == nil || !strings.Contains(err.Error(), "schema "+itoa(id)) {
		t.Fatalf("index past the messages: %v, want an error naming the schema", err)
	}
}

func TestJSONSchemaValueIsTheJSONAfterTheHeader(t *testing.T) {
	stand, reg := newRegistry(t)
	id, _ := stand.Register("orders-value", sr.Schema{Schema: `{"type":"object"}`, Type: sr.TypeJSON})
	if got, want := decode(t, reg, frame(t, id, nil, []byte(` {"type":"t","order_id":"o-1"} `))), `{"type":"t","order_id":"o-1"}`; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	if _, err := reg.Decode(frame(t, id, nil, []byte(`{"type":`))); err == nil {
		t.Fatal("a payload that is not JSON decoded")
	}
}

func TestUnknownSchemaIDIsPermanentAndNamed(t *testing.T) {
	stand, reg := newRegistry(t)
	v := frame(t, 999, nil, []byte{2, 'x'})
	if err := reg.Resolve(context.Background(), [][]byte{v}); err != nil {
		t.Fatalf("an ID the registry does not have is no transient error: %v", err)
	}
	_, err := reg.Decode(v)
	if err == nil || !strings.Contains(err.Error(), "schema 999") || errors.Is(err, srdecode.ErrUnresolved) {
		t.Fatalf("got %v, want a permanent error naming schema 999", err)
	}
	n := stand.Requests()
	if err := reg.Resolve(context.Background(), [][]byte{v}); err != nil || stand.Requests() != n {
		t.Fatalf("the answer is not cached: %v, %d requests after %d", err, stand.Requests(), n)
	}
}

func TestRegistryDownIsTransientAndNothingIsCached(t *testing.T) {
	stand, reg := newRegistry(t)
	id, _ := stand.Register("orders-value", sr.Schema{Schema: orderV1})
	v := avroValue(t, orderV1, id, map[string]any{"type": "t", "order_id": "o", "amount": int64(1), "note": nil})
	stand.Down(true)
	if err := reg.Resolve(context.Background(), [][]byte{v}); err == nil {
		t.Fatal("resolve through a registry that is down succeeded")
	}
	if _, err := reg.Decode(v); !errors.Is(err, srdecode.ErrUnresolved) {
		t.Fatalf("decode after a failed resolve: %v, want ErrUnresolved", err)
	}
	stand.Down(false)
	if got := decode(t, reg, v); !strings.Contains(got, `"order_id":"o"`) {
		t.Fatalf("after the registry came back: %s", got)
	}
	n := stand.Requests()
	if err := reg.Resolve(context.Background(), [][]byte{v, v}); err != nil || stand.Requests() != n {
		t.Fatalf("a resolved schema is asked again: %v, %d requests after %d", err, stand.Requests(), n)
	}
}

func TestAvroPayloadThatDoesNotMatchItsSchemaIsAnError(t *testing.T) {
	stand, reg := newRegistry(t)
	id, _ := stand.Register("orders-value", sr.Schema{Schema: orderV1})
	v := frame(t, id, nil, []byte{0xff, 0xff, 0xff})
	if err := reg.Resolve(context.Background(), [][]byte{v}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Decode(v); err == nil || !strings.Contains(err.Error(), "avro schema "+itoa(id)) {
		t.Fatalf("got %v, want an error naming the avro schema", err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// A Protobuf schema's imports are its references: the registry's
// subjects, compiled under the import path the reference names.
func TestProtobufImportsAreResolvedFromReferences(t *testing.T) {
	stand, reg := newRegistry(t)
	const money = "syntax = \"proto3\";\npackage shop;\nmessage Money { int64 cents = 1; string currency = 2; }\n"
	stand.Register("shop/money.proto", sr.Schema{Schema: money, Type: sr.TypeProtobuf})
	const order = "syntax = \"proto3\";\npackage shop;\nimport \"shop/money.proto\";\nmessage Paid { string order_id = 1; Money total = 2; }\n"
	id, _ := stand.Register("paid-value", sr.Schema{Schema: order, Type: sr.TypeProtobuf,
		References: []sr.SchemaReference{{Name: "shop/money.proto", Subject: "shop/money.proto", Version: 1}}})
	// Paid{order_id: "o-1", total: {cents: 5, currency: "EUR"}}, by hand:
	// field 1 (bytes) "o-1"; field 2 (bytes) {field 1 varint 5, field 2 "EUR"}.
	msg := []byte{0x0a, 3, 'o', '-', '1', 0x12, 7, 0x08, 5, 0x12, 3, 'E', 'U', 'R'}
	if got, want := decode(t, reg, frame(t, id, []int{0}, msg)), `{"order_id":"o-1","total":{"cents":"5","currency":"EUR"}}`; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	// A reference the registry does not have: the schema is undecodable.
	bad, _ := stand.Register("bad-value", sr.Schema{Schema: order + "// another text: another ID\n", Type: sr.TypeProtobuf,
		References: []sr.SchemaReference{{Name: "shop/money.proto", Subject: "nope", Version: 1}}})
	v := frame(t, bad, []int{0}, msg)
	if err := reg.Resolve(context.Background(), [][]byte{v}); err != nil {
		t.Fatalf("a missing reference is no transient error: %v", err)
	}
	if _, err := reg.Decode(v); err == nil || !strings.Contains(err.Error(), "schema "+itoa(bad)) {
		t.Fatalf("got %v, want an error naming schema %d", err, bad)
	}
}

// A 404 that is not the registry's own answer (no 404xx error code: a
// wrong base path, a proxy) is transient, as any answer that may heal:
// nothing is cached and nothing is dead-lettered.
func TestNotFoundWithoutARegistryErrorCodeIsTransient(t *testing.T) {
	stand := srstandin.New()
	defer stand.Close()
	id, _ := stand.Register("s", sr.Schema{Schema: orderV1})
	cl, err := sr.NewClient(sr.URLs(stand.URL() + "/wrong-base"))
	if err != nil {
		t.Fatal(err)
	}
	reg := srdecode.New(cl)
	v := avroValue(t, orderV1, id, map[string]any{"type": "t", "order_id": "o", "amount": int64(1), "note": nil})
	if err := reg.Resolve(context.Background(), [][]byte{v}); err == nil {
		t.Fatal("a 404 without a registry error code was taken as the registry's answer")
	}
	if reg.Resolved(id) {
		t.Fatal("the answer was cached")
	}
}

// A producer can frame values with any schema ID: the "no such schema"
// answers the cache keeps are bounded (the registry's own schemas are
// bounded by the registry), and an answer forgotten is asked again, never
// turned into a transient error or a wrong verdict. Within one Resolve
// every ID it was given stays decodable, so a batch of more unknown IDs
// than the bound is still dead-lettered with the registry's answer.
func TestUnknownSchemaIDsTheCacheKeepsAreBounded(t *testing.T) {
	stand, reg := newRegistry(t)
	id, _ := stand.Register("orders-value", sr.Schema{Schema: orderV1})
	known := avroValue(t, orderV1, id, map[string]any{"type": "t", "order_id": "o", "amount": int64(1), "note": nil})
	decode(t, reg, known)
	n := srdecode.MaxUnknownIDs + 200
	batch := make([][]byte, 0, n)
	for i := range n {
		batch = append(batch, frame(t, 1_000_000+i, nil, []byte{2, 'x'}))
	}
	if err := reg.Resolve(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	for _, v := range batch {
		if _, err := reg.Decode(v); err == nil || errors.Is(err, srdecode.ErrUnresolved) {
			t.Fatalf("an unknown ID of the batch just resolved: %v, want the registry's answer", err)
		}
	}
	// The next batch of other unknown IDs.
	for i := range n {
		batch[i] = frame(t, 2_000_000+i, nil, []byte{2, 'x'})
	}
	if err := reg.Resolve(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	// One more unknown ID, alone: what is kept is the bound and the known schema.
	if err := reg.Resolve(context.Background(), [][]byte{frame(t, 3_000_000, nil, []byte{2, 'x'})}); err != nil {
		t.Fatal(err)
	}
	if got, max := reg.CachedIDs(), srdecode.MaxUnknownIDs+1; got > max {
		t.Fatalf("the cache holds %d schema IDs after %d unknown ones, want at most %d", got, 2*n+1, max)
	}
	if reg.Resolved(id) == false {
		t.Fatal("the known schema was forgotten for unknown ones")
	}
}

// Protobuf reads a field its message does not name as an unknown field,
// and protojson leaves unknown fields out. A value framed with the wrong
// schema ID (a producer's bug), or carrying fields its writer schema does
// not have, would decode to what the named fields say alone: {} for every
// record of another message, so under the content rule one event, every
// later record skipped as its duplicate. A value with fields its schema
// does not name is undecodable, naming them; nested messages too.
func TestProtobufValueWithFieldsItsSchemaDoesNotNameIsAnError(t *testing.T) {
	stand, reg := newRegistry(t)
	const text = "syntax = \"proto3\";\nmessage Ping { string id = 1; Inner in = 2; }\nmessage Inner { string v = 1; }\n"
	id, _ := stand.Register("ping-value", sr.Schema{Schema: text, Type: sr.TypeProtobuf})
	for name, msg := range map[string][]byte{
		"field 7, a varint":        {0x38, 5},
		"field 8, another varint":  {0x40, 6},
		"a nested unknown field 9": {0x0a, 1, 'p', 0x12, 2, 0x48, 1},
	} {
		v := frame(t, id, []int{0}, msg)
		if err := reg.Resolve(context.Background(), [][]byte{v}); err != nil {
			t.Fatal(err)
		}
		if out, err := reg.Decode(v); err == nil || !strings.Contains(err.Error(), "schema "+itoa(id)) {
			t.Errorf("%s: decoded to %s (%v), want an error naming the schema", name, out, err)
		}
	}
	if got, want := decode(t, reg, frame(t, id, []int{0}, []byte{0x0a, 1, 'p', 0x12, 3, 0x0a, 1, 'v'})), `{"id":"p","in":{"v":"v"}}`; got != want {
		t.Errorf("known fields: got %s, want %s", got, want)
	}
}

// A union that gains a branch is a compatible schema change, and the
// same value under it the same record: "x" in ["null","string"] and in
// ["null","string","long"]: a union is its branch's value, so the two
// copies are one event under the content rule and no conflict under an
// ID field.
func TestAvroUnionThatGainsABranchKeepsItsValue(t *testing.T) {
	stand, reg := newRegistry(t)
	const v1 = `{"type":"record","name":"O","fields":[{"name":"n","type":["null","string"]}]}`
	const v2 = `{"type":"record","name":"O","fields":[{"name":"n","type":["null","string","long"]}]}`
	id1, _ := stand.Register("o-value", sr.Schema{Schema: v1})
	id2, _ := stand.Register("o-value", sr.Schema{Schema: v2})
	a := decode(t, reg, avroValue(t, v1, id1, map[string]any{"n": "x"}))
	b := decode(t, reg, avroValue(t, v2, id2, map[string]any{"n": map[string]any{"string": "x"}}))
	if a != b {
		t.Fatalf("one value under two compatible schemas: %s and %s", a, b)
	}
}

// The schemas that exist are bounded by the registry, but a producer
// whose serializer registers schemas itself (auto.register.schemas, the
// serializers' default) grows the registry at will: the schemas the cache
// keeps are bounded too, one forgotten is fetched again when named, and
// none of the batch being resolved is forgotten.
func TestSchemasTheCacheKeepsAreBounded(t *testing.T) {
	stand, reg := newRegistry(t)
	n := srdecode.MaxSchemas + 100
	vs := make([][]byte, 0, n)
	for i := range n {
		schema := fmt.Sprintf(`{"type":"record","name":"R%d","fields":[{"name":"f","type":"long"}]}`, i)
		id, _ := stand.Register("r-value", sr.Schema{Schema: schema})
		vs = append(vs, frame(t, id, nil, []byte{2}))
	}
	for lo := 0; lo < n; lo += 500 {
		batch := vs[lo:min(lo+500, n)]
		if err := reg.Resolve(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
		for _, v := range batch {
			if out, err := reg.Decode(v); err != nil || string(out) != `{"f":1}` {
				t.Fatalf("a schema of the batch just resolved: %s, %v", out, err)
			}
		}
	}
	if got := reg.CachedIDs(); got > srdecode.MaxSchemas {
		t.Fatalf("the cache holds %d schemas after %d, want at most %d", got, n, srdecode.MaxSchemas)
	}
	// The first one, forgotten, is fetched again.
	if got := decode(t, reg, vs[0]); got != `{"f":1}` {
		t.Fatalf("a forgotten schema: %s", got)
	}
}

// NewBounded's cache keeps n schemas that exist and n "no such schema"
// answers (n below 1 is 1), as New's keeps its bounds: a schema resolved
// alone after n others forgets one of them, which is fetched again when a
// value names it, never answered wrongly.
func TestABoundedRegistryKeepsNOfEachKind(t *testing.T) {
	stand, cl := standinClient(t)
	for _, n := range []int{-1, 0, 1, 8} {
		keep := max(n, 1)
		reg := srdecode.NewBounded(cl, n)
		var vs [][]byte
		for i := range keep + 3 {
			schema := fmt.Sprintf(`{"type":"record","name":"B%d_%d","fields":[{"name":"f","type":"long"}]}`, n+1, i)
			id, _ := stand.Register("b-value", sr.Schema{Schema: schema})
			vs = append(vs, frame(t, id, nil, []byte{2}))
			if got := decode(t, reg, vs[i]); got != `{"f":1}` {
				t.Fatalf("n %d: schema %d decoded to %s", n, i, got)
			}
		}
		if got := reg.CachedIDs(); got != keep {
			t.Errorf("n %d: the cache holds %d schemas after %d, want %d", n, got, len(vs), keep)
		}
		for i := range keep + 3 {
			v := frame(t, 7_000_000+100*(n+1)+i, nil, []byte{2})
			if err := reg.Resolve(context.Background(), [][]byte{v}); err != nil {
				t.Fatal(err)
			}
			if _, err := reg.Decode(v); err == nil || errors.Is(err, srdecode.ErrUnresolved) {
				t.Fatalf("n %d: an unknown ID just resolved: %v, want the registry's answer", n, err)
			}
		}
		if got := reg.CachedIDs(); got != 2*keep {
			t.Errorf("n %d: the cache holds %d IDs after unknown ones, want %d schemas and as many answers", n, got, 2*keep)
		}
		// A forgotten one (which ones is the cache's choice) is fetched again.
		forgotten := -1
		for i, v := range vs {
			if id, _, _ := srdecode.SchemaID(v); !reg.Resolved(id) {
				forgotten = i
				break
			}
		}
		if forgotten < 0 {
			t.Fatalf("n %d: every one of %d schemas is still cached", n, len(vs))
		}
		before := stand.Requests()
		if got := decode(t, reg, vs[forgotten]); got != `{"f":1}` {
			t.Fatalf("n %d: a forgotten schema decoded to %s", n, got)
		}
		if stand.Requests() == before {
			t.Errorf("n %d: a forgotten schema was decoded without being fetched", n)
		}
	}
}

// gatedSource is a registry client whose SchemaByID of the gated ID waits,
// once asked, until the test releases it: a test holds a Resolve in
// flight after it looked at the cache and before it stores the answer.
type gatedSource struct {
	cl      *sr.Client
	arrived chan int // the gated ID, each time it is asked

	mu      sync.Mutex
	id      int
	release chan struct{}
}

func newGatedSource(cl *sr.Client) *gatedSource {
	return &gatedSource{cl: cl, arrived: make(chan int, 16), id: -1}
}

// gate makes SchemaByID(id) wait until release is closed.
func (g *gatedSource) gate(id int) (release chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.id, g.release = id, make(chan struct{})
	return g.release
}

func (g *gatedSource) SchemaByID(ctx context.Context, id int) (sr.Schema, error) {
	g.mu.Lock()
	gated, release := id == g.id, g.release
	g.mu.Unlock()
	if gated {
		g.arrived <- id
		<-release
	}
	return g.cl.SchemaByID(ctx, id)
}

func (g *gatedSource) SchemaByVersion(ctx context.Context, subject string, version int) (sr.SubjectSchema, error) {
	return g.cl.SchemaByVersion(ctx, subject, version)
}

// await waits until the gated ID has been asked n times.
func (g *gatedSource) await(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-g.arrived:
		case <-time.After(10 * time.Second):
			t.Fatal("the gated schema ID was not asked for")
		}
	}
}

func standinClient(t *testing.T) (*srstandin.Registry, *sr.Client) {
	t.Helper()
	stand := srstandin.New()
	t.Cleanup(stand.Close)
	cl, err := sr.NewClient(sr.URLs(stand.URL()))
	if err != nil {
		t.Fatal(err)
	}
	return stand, cl
}

// NewBounded's n bounds the schemas that exist the cache keeps, whoever
// calls Resolve (the Registry is safe for concurrent use). Two goroutines
// that resolve the same unknown ID at once (both see it missing, both
// ask, both store the registry's "no such schema") must count that answer
// once: counted twice, the cache believes it holds more "no such schema"
// answers than it does, hence fewer schemas that exist than it does, and
// every such race lets it keep one more schema past n, for the life of
// the Registry.
func TestABoundedRegistryKeepsNSchemasAfterConcurrentResolvesOfOneUnknownID(t *testing.T) {
	stand, cl := standinClient(t)
	src := newGatedSource(cl)
	reg := srdecode.NewBounded(src, 1)
	const races = 3
	for r := range races {
		unknown := 8_000_000 + r
		release := src.gate(unknown)
		v := frame(t, unknown, nil, []byte{2})
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for g := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[g] = reg.Resolve(context.Background(), [][]byte{v})
			}()
		}
		src.await(t, 2) // both asked: both saw the ID missing from the cache
		close(release)
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if _, err := reg.Decode(v); err == nil || errors.Is(err, srdecode.ErrUnresolved) {
			t.Fatalf("an unknown ID just resolved: %v, want the registry's answer", err)
		}
	}
	var ids []int
	for i := range races + 3 {
		schema := fmt.Sprintf(`{"type":"record","name":"C%d","fields":[{"name":"f","type":"long"}]}`, i)
		id, _ := stand.Register("c-value", sr.Schema{Schema: schema})
		ids = append(ids, id)
		if got := decode(t, reg, frame(t, id, nil, []byte{2})); got != `{"f":1}` {
			t.Fatalf("schema %d decoded to %s", id, got)
		}
	}
	var kept []int
	for _, id := range ids {
		if reg.Resolved(id) {
			kept = append(kept, id)
		}
	}
	if len(kept) > 1 {
		t.Fatalf("NewBounded(_, 1) keeps %d schemas that exist (IDs %v) after %d resolved one at a time, want at most 1 (%d IDs cached in all)",
			len(kept), kept, len(ids), reg.CachedIDs())
	}
}

// While a Resolve fetches, no other Resolve forgets an ID of its batch
// (the batch is pinned), so when it returns nil every value of its batch
// decodes, even if another goroutine resolved another batch meanwhile.
// Here goroutine A resolves {a, c} (a already cached, c asked for) and,
// while A waits for c, goroutine B resolves {b} on a cache of one: B must
// make room without forgetting a (unpinned, it did, and A's Decode of a,
// right after its Resolve returned nil, was ErrUnresolved).
func TestABoundedRegistryDecodesAValueRightAfterItsBatchResolvedWhileAnotherBatchResolves(t *testing.T) {
	stand, cl := standinClient(t)
	src := newGatedSource(cl)
	reg := srdecode.NewBounded(src, 1)
	var vs [3][]byte // a, b, c
	for i := range vs {
		schema := fmt.Sprintf(`{"type":"record","name":"D%d","fields":[{"name":"f","type":"long"}]}`, i)
		id, _ := stand.Register("d-value", sr.Schema{Schema: schema})
		vs[i] = frame(t, id, nil, []byte{2})
	}
	a, b, c := vs[0], vs[1], vs[2]
	if got := decode(t, reg, a); got != `{"f":1}` {
		t.Fatalf("a decoded to %s", got)
	}
	cID, _, _ := srdecode.SchemaID(c)
	release := src.gate(cID)

	type result struct {
		out []byte
		err error
	}
	done := make(chan result, 1)
	go func() { // goroutine A
		if err := reg.Resolve(context.Background(), [][]byte{a, c}); err != nil {
			done <- result{err: fmt.Errorf("resolve: %w", err)}
			return
		}
		out, err := reg.Decode(a)
		done <- result{out, err}
	}()
	src.await(t, 1) // A is resolving its batch: a was cached, c is being asked

	bDone := make(chan error, 1)
	go func() { // goroutine B
		if err := reg.Resolve(context.Background(), [][]byte{b}); err != nil {
			bDone <- err
			return
		}
		_, err := reg.Decode(b)
		bDone <- err
	}()
	if err := <-bDone; err != nil {
		t.Fatalf("goroutine B: %v", err)
	}
	close(release)
	res := <-done
	if res.err != nil || string(res.out) != `{"f":1}` {
		t.Fatalf("goroutine A decoded a value of the batch its Resolve just returned nil for: %s, %v", res.out, res.err)
	}
}

// cancellingSource answers SchemaByID, then ends the Resolve's ctx: the
// poll's ctx ending (a revoke, a shutdown, a deadline) right after the
// registry answered, while the schema is being compiled.
type cancellingSource struct {
	cl     *sr.Client
	cancel context.CancelFunc
}

func (c cancellingSource) SchemaByID(ctx context.Context, id int) (sr.Schema, error) {
	s, err := c.cl.SchemaByID(ctx, id)
	c.cancel()
	return s, err
}

func (c cancellingSource) SchemaByVersion(ctx context.Context, subject string, version int) (sr.SubjectSchema, error) {
	return c.cl.SchemaByVersion(ctx, subject, version)
}

// A Resolve whose ctx ends while it compiles a Protobuf schema that
// exists could not finish: that is transient (the caller's ctx, not the
// schema). It must not cache "does not compile" for the ID: the Registry
// is the process's (one decider for every partition), so every later
// Resolve of any partition takes the fast path and every record naming
// the schema is dead-lettered with "compiling protobuf schema: context
// canceled", a permanent verdict for a schema that exists.
func TestResolveWhoseCtxEndsWhileItCompilesCachesNoPermanentVerdict(t *testing.T) {
	stand, cl := standinClient(t)
	id, _ := stand.Register("orders-value", sr.Schema{Schema: shopProto, Type: sr.TypeProtobuf})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := srdecode.New(cancellingSource{cl: cl, cancel: cancel})
	ping := protoMessage(t, []int{0}, `{"id":"p"}`)
	v := frame(t, id, []int{0}, ping)
	first := reg.Resolve(ctx, [][]byte{v}) // nil or transient: either is fine
	// Another poll (another partition), its ctx live.
	if err := reg.Resolve(context.Background(), [][]byte{v}); err != nil {
		t.Fatalf("resolve with a live ctx: %v", err)
	}
	out, err := reg.Decode(v)
	if err != nil || string(out) != `{"id":"p"}` {
		t.Fatalf("a schema that exists, resolved after a Resolve whose ctx ended (it returned %v): %s, %v (permanent: the record is dead-lettered)", first, out, err)
	}
}

// memSource is an in-memory registry: IDs below 1000 are JSON schemas,
// others the registry's "no such schema"; every fail-th call is a
// transient error.
type memSource struct {
	mu    sync.Mutex
	calls int
	fail  int
}

func (m *memSource) SchemaByID(ctx context.Context, id int) (sr.Schema, error) {
	m.mu.Lock()
	m.calls++
	bad := m.fail > 0 && m.calls%m.fail == 0
	m.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return sr.Schema{}, err
	}
	if bad {
		return sr.Schema{}, &sr.ResponseError{StatusCode: 503}
	}
	if id >= 1000 {
		return sr.Schema{}, &sr.ResponseError{StatusCode: 404, ErrorCode: 40403, Message: "no such schema"}
	}
	return sr.Schema{Schema: `{"type":"object"}`, Type: sr.TypeJSON}, nil
}

func (m *memSource) SchemaByVersion(ctx context.Context, subject string, version int) (sr.SubjectSchema, error) {
	return sr.SubjectSchema{}, &sr.ResponseError{StatusCode: 404, ErrorCode: 40401}
}

// Many goroutines resolve mixed batches (schemas, unknown IDs, values
// not framed or with a short header), some failing mid-batch and some
// with their ctx ended: once they return, no pin is left, the "no such
// schema" count is the answers held, and a Resolve of one more of each
// kind brings the cache back to n of each.
func TestABoundedRegistrySettlesToNOfEachKindAfterConcurrentMixedResolves(t *testing.T) {
	const n = 3
	src := &memSource{fail: 7}
	reg := srdecode.NewBounded(src, n)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				ctx, cancel := context.WithCancel(context.Background())
				if (g+i)%5 == 0 {
					cancel()
				}
				var batch [][]byte
				for j := range 1 + (g*7+i)%6 {
					id := (g*31 + i*17 + j*13) % 40
					if (g+i+j)%2 == 0 {
						id += 1000
					}
					batch = append(batch, frame(t, id, nil, []byte(`{}`)))
				}
				batch = append(batch, []byte(`{"plain":1}`), []byte{0, 1})
				if reg.Resolve(ctx, batch) == nil {
					for _, v := range batch[:len(batch)-2] {
						id, _, _ := srdecode.SchemaID(v)
						out, err := reg.Decode(v)
						switch {
						case errors.Is(err, srdecode.ErrUnresolved):
							// another goroutine's Resolve forgot it since (allowed)
						case id < 1000 && (err != nil || string(out) != `{}`):
							t.Errorf("schema %d, which exists: %s, %v", id, out, err)
						case id >= 1000 && err == nil:
							t.Errorf("schema %d, which does not exist, decoded to %s", id, out)
						}
					}
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	_, unknowns, count, pinned := reg.CacheState()
	if pinned != 0 || unknowns != count {
		t.Fatalf("after every Resolve returned: %d IDs pinned, %d answers held and %d counted", pinned, unknowns, count)
	}
	src.fail = 0
	for _, id := range []int{500, 5000} {
		if err := reg.Resolve(context.Background(), [][]byte{frame(t, id, nil, []byte(`{}`))}); err != nil {
			t.Fatal(err)
		}
	}
	schemas, unknowns, count, pinned := reg.CacheState()
	if schemas > n || unknowns > n || unknowns != count || pinned != 0 {
		t.Fatalf("settled: %d schemas, %d answers (%d counted), %d pinned; want at most %d of each", schemas, unknowns, count, pinned, n)
	}
}
