package decide_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/internal/demo/workload"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite testdata/decisions.golden from the current code")

// corpusFile holds the recorded decisions of corpusRecords: what a
// ledger row, a workflow ID and a dead letter were made of when it was
// written. Event IDs and payload hashes are stored in ledgers and
// workflow IDs in Temporal, so a change of any of them is a change of
// identity (every event after an upgrade is new), never an optimisation.
const corpusFile = "testdata/decisions.golden"

// Every record of the corpus is decided exactly as recorded: its event
// (ID, rule, where the ID came from, type, source, time, data, bytes,
// content type, payload hash, envelope), its intents (workflow IDs, hashes,
// coordinates), its signal entities, its start requests, and why a record
// is dead-lettered, skipped or a tombstone. The corpus is the benchmark's
// workload shapes (CloudEvents structured and binary, plain JSON with and
// without an ID, reshaped duplicates) plus every shape the eventid and
// decide tests and the fuzz seeds use.
func TestDecideKeepsTheRecordedDecisionOfEveryCorpusRecord(t *testing.T) {
	d := corpusDecider(t)
	var got bytes.Buffer
	for _, kr := range corpusRecords() {
		got.Write(renderDecision(kr, d.Decide(kr)))
		got.WriteByte('\n')
	}
	if *updateCorpus {
		if err := os.WriteFile(corpusFile, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(corpusFile)
	if err != nil {
		t.Fatal(err)
	}
	gs, ws := bufio.NewScanner(&got), bufio.NewScanner(bytes.NewReader(want))
	gs.Buffer(nil, 1<<20)
	ws.Buffer(nil, 1<<20)
	n, bad := 0, 0
	for ws.Scan() {
		n++
		if !gs.Scan() {
			t.Fatalf("%d decisions, %d recorded", n-1, bytes.Count(want, []byte("\n")))
		}
		if gs.Text() != ws.Text() {
			if bad++; bad <= 5 {
				t.Errorf("record %d:\n got  %s\n want %s", n, gs.Text(), ws.Text())
			}
		}
	}
	if gs.Scan() {
		t.Fatalf("more decisions than the %d recorded", n)
	}
	if bad > 0 {
		t.Fatalf("%d of %d decisions differ from the recorded ones", bad, n)
	}
	if n < 500 {
		t.Fatalf("only %d recorded decisions", n)
	}
}

func corpusDecider(t *testing.T) *decide.Decider {
	t.Helper()
	routes := decide.Routes{
		{ID: "order-confirmation", Match: decide.Match{Type: workload.TypeOrder}, WorkflowType: "W", TaskQueue: "q"},
		{ID: "welcome-email", Match: decide.Match{Type: workload.TypeSignup}, WorkflowType: "W", TaskQueue: "q"},
		{ID: "crm-sync", Match: decide.Match{Type: workload.TypeSignup}, WorkflowType: "W", TaskQueue: "q",
			IDReusePolicy: decide.ReuseAllowDuplicateFailedOnly},
		{ID: "track", Mode: decide.ModeSignal, Match: decide.Match{Type: "order.*"}, WorkflowType: "Order", TaskQueue: "orders",
			WorkflowIDTemplate: "order-{data.order_id}"},
		{ID: "paid-eu", Match: decide.Match{Type: "t", Fields: map[string]string{"data.x": "1"}}, WorkflowType: "W", TaskQueue: "q"},
		{ID: "any-t", Match: decide.Match{Type: "t", Source: "s"}, WorkflowType: "W", TaskQueue: "q"},
		{ID: "tick", Match: decide.Match{Type: "cron.tick"}, Key: decide.KeyScheduledFor, WorkflowType: "W", TaskQueue: "q"},
	}
	if err := routes.Validate(); err != nil {
		t.Fatal(err)
	}
	d, err := decide.NewDecider(decide.Config{EventID: eventid.DefaultConfig(), Routes: routes, MaxValueBytes: 4096, NoRoute: "dead_letter"})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// corpusRecords are the benchmark's workloads and the hand-made shapes.
func corpusRecords() []*kgo.Record {
	var out []*kgo.Record
	for _, s := range []workload.Spec{
		{Topic: "t", Partitions: 8, Records: 250, DupRatio: 0.3, Seed: 1, PayloadBytes: 96},
		{Topic: "t", Partitions: 4, Records: 250, DupRatio: 0.5, Conflicts: 10, Seed: 7, PayloadBytes: 0},
	} {
		out = append(out, workload.Generate(s).Records...)
	}
	type shape struct {
		value string
		hs    []string // key, value pairs
		key   string
	}
	shapes := []shape{
		// The fuzz seeds (processor/eventid/fuzz_test.go).
		{`{"specversion":"1.0","id":"a","type":"t","source":"s","data":{"x":1}}`, nil, "key"},
		{`{"type":"t","x":[1,2,{"y":null}]}`, nil, "key"},
		{`{"id":12,"type":"t"}`, []string{"idempotency-key", "k"}, "key"},
		{`{"x":1}`, []string{"ce_type", "t"}, "key"},
		{`garbage`, []string{"ce_specversion", "1.0"}, "key"},
		{`{"type":"t","n":1e400}`, nil, "key"},
		{`{"type":"\ud800"}`, nil, "key"},
		{``, []string{"ce_type", "t"}, "key"},
		{"\x08\x96\x01", []string{"ce_type", "t"}, "key"},
		{`{"a":1}`, []string{"content-type", "text/plain", "ce_type", "t"}, "key"},
		// Plain JSON: IDs as strings, numbers, null, escapes; numbers the
		// canonical form rewrites; keys out of order; nested and unicode.
		{`{"id":"o-1","type":"order.created","data":{"order_id":"o-1","total":12.50}}`, nil, ""},
		{`{"id":7.0,"type":"order.created","order_id":7}`, nil, ""},
		{`{"id":null,"type":"order.created","order_id":"x","amount":1e21,"tiny":1e-7,"neg":-0}`, nil, "k"},
		{`{ "type" : "user.signed_up" , "z":"\u00e9\/\n", "a":[true,false,null,{"b":"c"}] }`, nil, "k"},
		{`{"type":"user.signed_up","id":"a\u0000b"}`, nil, ""},
		{`{"type":"user.signed_up","id":""}`, nil, ""},
		{`{"type":"user.signed_up","id":{"x":1}}`, nil, ""},
		{`{"type":"user.signed_up","id":"ok","type":"order.created"}`, nil, ""},
		{`{"type":"t","source":"s","x":"1","é":"\ud83d\ude00","\u0061":2}`, nil, "k"},
		{`{"type":"t","source":"s","data":{"x":"1"}}`, nil, "k"},
		{`{"type":"cron.tick","id":"c1","data":{"scheduled_for":"2026-03-01T10:00:00+01:00"}}`, nil, ""},
		{`{"type":"cron.tick","id":"c2","data":{"scheduled_for":"2026-03-01T09:00:00.5Z"}}`, nil, ""},
		{`{"type":"cron.tick","id":"c3","data":{}}`, nil, ""},
		{`{"type":"audit.logged","id":"u1"}`, nil, ""},
		{`{"type":42}`, nil, ""},
		{`{"type":""}`, nil, ""},
		{`[1,2]`, nil, ""},
		{`{"type":"t","id":"` + string(bytes.Repeat([]byte("x"), 1200)) + `"}`, nil, ""},
		// Structured mode: data_base64, no data, subject, content type.
		{`{"specversion":"1.0","id":"b64","type":"order.created","source":"s","data_base64":"AAEC","subject":"sub","datacontenttype":"application/octet-stream"}`, nil, ""},
		{`{"specversion":"1.0","id":"nod","type":"order.created","source":"s","time":"2026-01-01T00:00:00Z"}`, nil, ""},
		{`{"specversion":"1.0","type":"order.created","source":"s","data":{"order_id":"o-9"}}`, nil, "k9"},
		{`{"specversion":"1.0","id":"ent","type":"order.created","source":"s","data":{"order_id":"activity-x"}}`, nil, ""},
		{`{"specversion":"1.0","id":"ent2","type":"order.created","source":"s","data":{}}`, nil, ""},
		{`{"specversion":"1.0","id":"s1","type":"order.created","source":7,"data":{}}`, nil, ""},
		// Binary mode: JSON and not, declared or not, empty, ID headers.
		{`{"order_id":"o-3"}`, []string{"ce_specversion", "1.0", "ce_id", "h1", "ce_type", "order.created", "ce_source", "s", "ce_time", "t0", "ce_subject", "sj", "content-type", "application/json; charset=utf-8"}, ""},
		{`  `, []string{"ce_specversion", "1.0", "ce_id", "h2", "ce_type", "order.created"}, ""},
		{`not json`, []string{"ce_specversion", "1.0", "ce_type", "order.created"}, "kk"},
		{`not json`, []string{"ce_specversion", "1.0", "ce_type", "order.created", "content-type", "application/json"}, ""},
		{`{"x":1}`, []string{"ce_type", "order.created", "ce_datacontenttype", "application/cloudevents+json", "idempotency-key", "ik"}, ""},
		{`{"x":1}`, []string{"ce_type", "order.created", "ce_id", "a\x01b"}, ""},
		{`{"x":1}`, []string{"ce_type", "\xff"}, ""},
		// Attributes: null, empty, escaped, not strings, control characters.
		{`{"specversion":"1.0","id":"a1","type":"order.created","source":null,"time":null,"data":{}}`, nil, ""},
		{`{"specversion":"1.0","id":"a2","type":"order.created","source":"a\/b","time":"\u0074","data":{}}`, nil, ""},
		{`{"specversion":"1.0","id":"a3","type":"order.\"x","source":"","time":"","data":{}}`, nil, ""},
		{`{"specversion":"1.0","id":"a4","type":"order.created","source":"s","time":5,"data":{}}`, nil, ""},
		{"{\"specversion\":\"1.0\",\"id\":\"a5\",\"type\":\"order.created\",\"source\":\"a\tb\",\"data\":{}}", nil, ""},
		{`{"specversion":"1.0","id":"a6","type":null,"data":{}}`, nil, ""},
		{`{"specversion":"1.0","id":"a7","type":"order.créé","source":"ß","data":{}}`, nil, ""},
		{`{"type":"order.created","id":"p1","source":null,"time":"now"}`, nil, ""},
		{`{"type":"order.created","id":"p2","source":{"x":1}}`, nil, ""},
		{`{"type":"order.\u0063reated","id":"p3","time":""}`, nil, ""},
		{`{"type":null,"id":"p4"}`, nil, ""},
		{`{"id":"p5"}`, nil, ""},
		{`{"type":"order.created","id":"p6","n":[1.5,-2.25e3,3e-7,1e21,0.1,100,-0]}`, nil, ""},
		// Tombstones and the coordinates of a replayed dead letter.
		{"", nil, "k"},
		{`{"type":"t","source":"s"}`, []string{"dedup-origin-topic", "o", "dedup-origin-partition", "3", "dedup-origin-offset", "9"}, ""},
		{`{"type":"t","source":"s"}`, []string{"dedup-tenant", "acme"}, ""},
	}
	for i, s := range shapes {
		kr := &kgo.Record{Topic: "shapes", Partition: int32(i % 3), Offset: int64(i)}
		if s.value != "" || s.hs != nil {
			kr.Value = []byte(s.value)
		}
		if s.key != "" {
			kr.Key = []byte(s.key)
		}
		for j := 0; j+1 < len(s.hs); j += 2 {
			kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: s.hs[j], Value: []byte(s.hs[j+1])})
		}
		out = append(out, kr)
	}
	return out
}

// renderDecision is every field of dec that leaves the decider, as one
// line of JSON.
func renderDecision(kr *kgo.Record, dec decide.Decision) []byte {
	ev := dec.Event
	errText := ""
	if dec.Err != nil {
		errText = dec.Err.Error()
	}
	type intent struct {
		decide.Intent
		PayloadHash string
		Start       decide.StartRequest
	}
	intents := make([]intent, len(dec.Intents))
	for j, in := range dec.Intents {
		intents[j] = intent{Intent: in, PayloadHash: hex.EncodeToString(in.PayloadHash[:]), Start: dec.Start(j)}
	}
	routes := make([]string, len(dec.Routes))
	for j, rt := range dec.Routes {
		routes[j] = rt.ID
	}
	b, err := json.Marshal(map[string]any{
		"record": []any{kr.Topic, kr.Partition, kr.Offset},
		"id":     ev.ID, "rule": ev.Rule, "id_from": ev.IDFrom, "type": ev.Type, "source": ev.Source, "subject": ev.Subject,
		"time": ev.Time, "data": string(ev.Data), "bytes": base64.StdEncoding.EncodeToString(ev.Bytes), "bytes_nil": ev.Bytes == nil,
		"content_type": ev.ContentType, "payload_hash": hex.EncodeToString(ev.PayloadHash[:]), "envelope": ev.Envelope, "tenant": ev.Tenant,
		"dead_letter": dec.DeadLetter, "err": errText, "no_route": dec.NoRoute, "tombstone": dec.Tombstone,
		"routes": routes, "intents": intents, "entities": dec.Entities,
	})
	if err != nil {
		panic(err)
	}
	return b
}

// A Decision is the record's alone: every corpus record decided first,
// then each rendered, gives the recorded decisions, so none of a
// Decision's strings, slices or hashes shares a buffer that a later
// Decide writes (the decoder's pooled scratch, a match's stack buffer).
func TestDecisionsStayTheirsAfterLaterDecides(t *testing.T) {
	d := corpusDecider(t)
	krs := corpusRecords()
	decs := make([]decide.Decision, len(krs))
	for i, kr := range krs {
		decs[i] = d.Decide(kr)
	}
	for range 3 { // and again, over the pool's reused scratch
		for _, kr := range krs {
			d.Decide(kr)
		}
	}
	var got bytes.Buffer
	for i, kr := range krs {
		got.Write(renderDecision(kr, decs[i]))
		got.WriteByte('\n')
	}
	want, err := os.ReadFile(corpusFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		gl, wl := bytes.Split(got.Bytes(), []byte("\n")), bytes.Split(want, []byte("\n"))
		for i := range min(len(gl), len(wl)) {
			if !bytes.Equal(gl[i], wl[i]) {
				t.Fatalf("record %d, decided before the others:\n got  %s\n want %s", i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("%d decisions, %d recorded", len(gl), len(wl))
	}
}
