package ingress

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/client"
	"github.com/dedupio/dedup/connect/secretfile"
	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/processor/tenantsig"
	"github.com/dedupio/dedup/sink/ledger"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const topic = "events"

type env struct {
	t       *testing.T
	url     string
	cluster *kfake.Cluster
	led     *ledger.Postgres
	c       *client.Client
	adm     *kadm.Client
	kcl     *kgo.Client
}

// testKeyring is the tests' tenant keyring (kafka.tenant_keys_file).
const testKeyring = "keys: [{id: k1, secret: dGVzdC10ZW5hbnQta2V5LTAxMjM0NTY3ODlhYmNkZWY=}]\n"

func newEnv(t *testing.T, mod func(*client.Config)) *env {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	lc := ledger.DefaultConfig()
	lc.URL = url
	led, err := ledger.Open(ctx, lc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(led.Close)
	keys, err := tenantsig.Parse("kafka.tenant_keys_file", []byte(testKeyring))
	if err != nil {
		t.Fatal(err)
	}
	cfg := client.Config{Topic: topic, EventID: eventid.DefaultConfig(), Namespace: "default", Ledger: led, TenantKeys: keys,
		Routes: decide.Routes{
			{ID: "confirm", Match: decide.Match{Type: "order.created"}, WorkflowType: "W", TaskQueue: "q"},
			{ID: "notes", Match: decide.Match{Type: "note.added"}, WorkflowType: "W", TaskQueue: "q"},
		},
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}}
	if mod != nil {
		mod(&cfg)
	}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	kcl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kcl.Close)
	return &env{t: t, url: url, cluster: cluster, led: led, c: c, adm: kadm.NewClient(kcl), kcl: kcl}
}

func (e *env) server(mod func(*Options)) *httptest.Server {
	e.t.Helper()
	o := Options{MaxBodyBytes: 1024, Locks: NewLocks(e.url, slog.New(slog.DiscardHandler), nil), Registry: prometheus.NewRegistry()}
	e.t.Cleanup(o.Locks.Close)
	if mod != nil {
		mod(&o)
	}
	s, err := NewServer(e.c, o)
	if err != nil {
		e.t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	e.t.Cleanup(ts.Close)
	return ts
}

// written is how many records the topic holds.
func (e *env) written() int64 {
	e.t.Helper()
	ends, err := e.adm.ListEndOffsets(context.Background(), topic)
	if err != nil {
		e.t.Fatal(err)
	}
	n := int64(0)
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// last reads the topic's records.
func (e *env) records(n int) []*kgo.Record {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n && ctx.Err() == nil {
		e.kcl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

type resp struct {
	code   int
	header http.Header
	body   []byte
}

func (r resp) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body %s: %v", r.body, err)
	}
	return m
}

func do(t *testing.T, method, url, body string, headers ...string) resp {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	b, _ := io.ReadAll(res.Body)
	return resp{code: res.StatusCode, header: res.Header, body: b}
}

const order = `{"specversion":"1.0","id":"order-1","type":"order.created","source":"shop","data":{"total":12.5}}`

// The three request forms are translated into their Kafka binding, and
// answered with the IDs a router gives them; the same request again gets
// the same 202.
func TestPostEvents(t *testing.T) {
	e := newEnv(t, nil)
	ts := e.server(nil)
	structured := do(t, "POST", ts.URL+"/v1/events", order, "Content-Type", "application/cloudevents+json")
	if structured.code != 202 {
		t.Fatalf("structured: %d %s", structured.code, structured.body)
	}
	again := do(t, "POST", ts.URL+"/v1/events", " "+order, "Content-Type", "application/cloudevents+json; charset=utf-8", "Idempotency-Key", `"order-1"`)
	if again.code != 202 || !bytes.Equal(again.body, structured.body) {
		t.Fatalf("the same event again: %d %s, first %s", again.code, again.body, structured.body)
	}
	m := structured.json(t)
	wf := m["workflows"].([]any)[0].(map[string]any)
	if m["event_id"] != "order-1" || m["id_rule"] != "field" || wf["workflow_id"] != "activity-confirm:order-1" ||
		wf["status_url"] != "/v1/workflows/activity-confirm:order-1" || structured.header.Get("Location") != wf["status_url"] {
		t.Errorf("202 body %s, Location %q", structured.body, structured.header.Get("Location"))
	}
	binary := do(t, "POST", ts.URL+"/v1/events", "hello, world", "Content-Type", "text/plain", "Ce-Specversion", "1.0",
		"Ce-Id", "note-1", "Ce-Type", "note.added", "Ce-Source", "/notes%20app", "Ce-Traceparent", "00-abc")
	if binary.code != 202 || binary.json(t)["event_id"] != "note-1" || binary.json(t)["id_rule"] != "header" {
		t.Fatalf("binary: %d %s", binary.code, binary.body)
	}
	plain := do(t, "POST", ts.URL+"/v1/events", `{"type":"order.created","total":3}`, "Content-Type", "application/json", "Idempotency-Key", `"order-2"`)
	if plain.code != 202 || plain.json(t)["event_id"] != "order-2" {
		t.Fatalf("plain: %d %s", plain.code, plain.body)
	}
	recs := e.records(4)
	if len(recs) != 4 {
		t.Fatalf("%d records, want 4", len(recs))
	}
	hdr := func(r *kgo.Record) map[string]string {
		m := map[string]string{}
		for _, h := range r.Headers {
			m[h.Key] = string(h.Value)
		}
		return m
	}
	if b := recs[2]; string(b.Value) != "hello, world" || hdr(b)["ce_id"] != "note-1" || hdr(b)["ce_source"] != "/notes app" ||
		hdr(b)["content-type"] != "text/plain" || hdr(b)["ce_traceparent"] != "00-abc" || string(b.Key) != "note-1" {
		t.Errorf("binary record: key %q value %q headers %v", b.Key, b.Value, hdr(b))
	}
	if p := recs[3]; string(p.Key) != "order-2" || hdr(p)["idempotency-key"] != "order-2" || string(p.Value) != `{"type":"order.created","total":3}` {
		t.Errorf("plain record: key %q value %q headers %v", p.Key, p.Value, hdr(p))
	}
	if s := recs[0]; string(s.Key) != "order-1" || string(s.Value) != order {
		t.Errorf("structured record: key %q value %q", s.Key, s.Value)
	}
	// Status of a workflow the ledger does not know yet (no router here):
	// as unknown as a made-up one until a router claims it.
	st := do(t, "GET", ts.URL+"/v1/workflows/activity-confirm:order-1", "")
	if st.code != 404 || st.json(t)["reason"] != "unknown_workflow" {
		t.Errorf("status: %d %s", st.code, st.body)
	}
	if nf := do(t, "GET", ts.URL+"/v1/workflows/activity-nope:x", ""); nf.code != 404 || nf.header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("unknown workflow: %d %s", nf.code, nf.body)
	}
}

// Requests that can never start a workflow get the documented status and
// a problem+json body, and nothing is written.
func TestPostEventsRefused(t *testing.T) {
	e := newEnv(t, func(c *client.Config) { c.EventID.Chain = []eventid.Rule{eventid.RuleHeader, eventid.RuleField} })
	ts := e.server(nil)
	big := `{"type":"order.created","pad":"` + strings.Repeat("x", 1100) + `"}`
	cases := []struct {
		name   string
		body   string
		hdrs   []string
		code   int
		reason string
	}{
		{"oversized", big, []string{"Content-Type", "application/json", "Idempotency-Key", `"k"`}, 413, "oversized"},
		{"malformed JSON", `{"type":"order.created",`, []string{"Content-Type", "application/json", "Idempotency-Key", `"k"`}, 400, "undecodable"},
		{"malformed structured", `{"specversion":"1.0","type":`, []string{"Content-Type", "application/cloudevents+json"}, 400, "undecodable"},
		{"JSON binary data that is not JSON", `{x`, []string{"Content-Type", "application/json", "Ce-Specversion", "1.0", "Ce-Id", "b1", "Ce-Type", "order.created"}, 400, "undecodable"},
		{"no key, nothing to derive", `{"type":"order.created"}`, []string{"Content-Type", "application/json"}, 400, "no_id"},
		{"no type", `{"total":1}`, []string{"Content-Type", "application/json", "Idempotency-Key", `"k"`}, 400, "missing_type"},
		{"no route", `{"type":"invoice.paid"}`, []string{"Content-Type", "application/json", "Idempotency-Key", `"k"`}, 400, "no_route"},
		{"key and id disagree", order, []string{"Content-Type", "application/cloudevents+json", "Idempotency-Key", `"other"`}, 400, "key_mismatch"},
		{"binary id and key disagree", "x", []string{"Content-Type", "text/plain", "Ce-Specversion", "1.0", "Ce-Id", "a", "Ce-Type", "note.added", "Idempotency-Key", `"b"`}, 400, "key_mismatch"},
		{"bad key", `{"type":"order.created"}`, []string{"Content-Type", "application/json", "Idempotency-Key", `"unterminated`}, 400, "invalid_id"},
		{"bad percent-encoding", "x", []string{"Content-Type", "text/plain", "Ce-Specversion", "1.0", "Ce-Id", "b2", "Ce-Type", "note.added", "Ce-Source", "%zz"}, 400, "undecodable"},
		{"text without ce headers", "hello", []string{"Content-Type", "text/plain", "Idempotency-Key", `"k"`}, 415, "unsupported_media_type"},
		{"no content type", `{"type":"order.created"}`, []string{"Idempotency-Key", `"k"`}, 415, "unsupported_media_type"},
		{"batch", `[` + order + `]`, []string{"Content-Type", "application/cloudevents-batch+json"}, 415, "unsupported_media_type"},
	}
	for _, tc := range cases {
		r := do(t, "POST", ts.URL+"/v1/events", tc.body, tc.hdrs...)
		if r.code != tc.code || r.header.Get("Content-Type") != "application/problem+json" || r.json(t)["reason"] != tc.reason {
			t.Errorf("%s: %d %s %s, want %d %s", tc.name, r.code, r.header.Get("Content-Type"), r.body, tc.code, tc.reason)
		}
	}
	// A body over the limit without a Content-Length (chunked).
	req, _ := http.NewRequest("POST", ts.URL+"/v1/events", io.MultiReader(strings.NewReader(big)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", `"k"`)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != 413 || req.ContentLength != 0 {
		t.Errorf("chunked oversized body: %d (content length %d)", res.StatusCode, req.ContentLength)
	}
	if r := do(t, "GET", ts.URL+"/v1/events", ""); r.code != 405 || r.header.Get("Allow") != "POST" {
		t.Errorf("GET /v1/events: %d %v", r.code, r.header)
	}
	if n := e.written(); n != 0 {
		t.Errorf("%d records written, want 0", n)
	}
}

// Bearer tokens from a file, read again when it changes.
func TestBearerTokens(t *testing.T) {
	e := newEnv(t, nil)
	path := filepath.Join(t.TempDir(), "tokens")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("# producers\ntokens:\n- {tenant: shop, token: s3cret-0123456789, event_types: [\"*\"], routes: [\"*\"]}\n- {tenant: shop, token: other-token-0123456789, event_types: [\"*\"], routes: [\"*\"]}\n")
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	tokens, err := LoadTokens("ingress.tokens_file", path)
	if err != nil {
		t.Fatal(err)
	}
	ts := e.server(func(o *Options) { o.Tokens = tokens })
	for _, auth := range []string{"", "Bearer nope", "Basic s3cret-0123456789", "Bearer ", "Bearer # producers", "Bearer shop"} {
		r := do(t, "POST", ts.URL+"/v1/events", order, "Content-Type", "application/cloudevents+json", "Authorization", auth)
		if r.code != 401 || r.header.Get("WWW-Authenticate") == "" || r.json(t)["reason"] != "unauthorized" {
			t.Errorf("Authorization %q: %d %s", auth, r.code, r.body)
		}
	}
	if r := do(t, "GET", ts.URL+"/v1/workflows/activity-confirm:x", ""); r.code != 401 {
		t.Errorf("status without a token: %d", r.code)
	}
	if r := do(t, "POST", ts.URL+"/v1/events", order, "Content-Type", "application/cloudevents+json", "Authorization", "Bearer s3cret-0123456789"); r.code != 202 {
		t.Errorf("good token: %d %s", r.code, r.body)
	}
	if n := e.written(); n != 1 {
		t.Errorf("%d records, want 1", n)
	}
	// Rotated: the old token no longer works, the new one does.
	time.Sleep(10 * time.Millisecond)
	write("tokens: [{tenant: shop, token: n3w-token-0123456789, event_types: [\"*\"], routes: [\"*\"]}]\n")
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	if r := do(t, "POST", ts.URL+"/v1/events", order, "Content-Type", "application/cloudevents+json", "Authorization", "Bearer s3cret-0123456789"); r.code != 401 {
		t.Errorf("old token after rotation: %d", r.code)
	}
	if r := do(t, "POST", ts.URL+"/v1/events", order, "Content-Type", "application/cloudevents+json", "Authorization", "bearer n3w-token-0123456789"); r.code != 202 {
		t.Errorf("new token: %d %s", r.code, r.body)
	}
	// An edit that breaks the file lets nobody in (no revoked token stays
	// valid), until it is fixed.
	time.Sleep(10 * time.Millisecond)
	write("tokens: [{tenant: shop, token: n3w-token-0123456789}]\n") // no event_types
	time.Sleep(secretfile.StatInterval)                              // the next look at the file (secretfile.StatInterval)
	if r := do(t, "POST", ts.URL+"/v1/events", order, "Content-Type", "application/cloudevents+json", "Authorization", "Bearer n3w-token-0123456789"); r.code != 401 {
		t.Errorf("broken file: %d", r.code)
	}
}

// A second request with a key in flight is a 409, on the same replica and
// on another (two servers, two lock sessions, one PostgreSQL); once the
// first is answered, the same request gets the same 202.
func TestInFlightIsAConflict(t *testing.T) {
	e := newEnv(t, nil)
	hold, held := make(chan struct{}), make(chan struct{}, 1)
	var once sync.Once
	a := e.server(func(o *Options) {
		o.Locked = func(string) { once.Do(func() { held <- struct{}{}; <-hold }) }
	})
	b := e.server(nil)
	letGo := letGoAtCleanup(t, hold)
	first := make(chan resp, 1)
	go func() {
		first <- do(t, "POST", a.URL+"/v1/events", order, "Content-Type", "application/cloudevents+json")
	}()
	reached(t, held, first, "the first request")
	for name, ts := range map[string]*httptest.Server{"same replica": a, "other replica": b} {
		r := do(t, "POST", ts.URL+"/v1/events", order, "Content-Type", "application/cloudevents+json")
		if r.code != 409 || r.json(t)["reason"] != "in_flight" || r.header.Get("Retry-After") == "" {
			t.Errorf("%s: %d %s, want 409 in_flight", name, r.code, r.body)
		}
	}
	// Another key is not held up.
	if r := do(t, "POST", b.URL+"/v1/events", strings.Replace(order, "order-1", "order-9", 1), "Content-Type", "application/cloudevents+json"); r.code != 202 {
		t.Errorf("another key: %d %s", r.code, r.body)
	}
	letGo()
	r1 := within(t, first, handlerPatience, "the first request's answer once let go")
	if r1.code != 202 {
		t.Fatalf("first: %d %s", r1.code, r1.body)
	}
	if r := do(t, "POST", b.URL+"/v1/events", order, "Content-Type", "application/cloudevents+json"); r.code != 202 || !bytes.Equal(r.body, r1.body) {
		t.Errorf("after the first was answered: %d %s, want the first's 202 %s", r.code, r.body, r1.body)
	}
}

// The same key with another payload, once the ledger holds the first: 422
// with the workflow IDs; the record is written so that a router records
// the conflict. The first payload's status says started.
func TestConflictIs422(t *testing.T) {
	e := newEnv(t, nil)
	ts := e.server(nil)
	if r := do(t, "POST", ts.URL+"/v1/events", order, "Content-Type", "application/cloudevents+json"); r.code != 202 {
		t.Fatalf("first: %d %s", r.code, r.body)
	}
	// A router claims and starts it (as the ledger sees it).
	rec := &kgo.Record{Value: []byte(order), Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/cloudevents+json")}}}
	p, err := e.c.Prepare(rec)
	if err != nil {
		t.Fatal(err)
	}
	in := decide.Intent{WorkflowID: "activity-confirm:order-1", ActivityID: "confirm", EventID: "order-1", IDRule: "field", PayloadHash: p.Event.PayloadHash, Topic: topic}
	ctx := context.Background()
	if _, err := e.led.Claim(ctx, []decide.Intent{in}); err != nil {
		t.Fatal(err)
	}
	if err := e.led.MarkStarted(ctx, []processor.Started{{WorkflowID: in.WorkflowID, RunID: "run-1", Generation: 1}}); err != nil {
		t.Fatal(err)
	}
	before := e.written()
	r := do(t, "POST", ts.URL+"/v1/events", strings.Replace(order, "12.5", "99", 1), "Content-Type", "application/cloudevents+json")
	m := r.json(t)
	if r.code != 422 || m["reason"] != "conflict" || m["event_id"] != "order-1" || len(m["workflow_ids"].([]any)) != 1 {
		t.Fatalf("other payload: %d %s", r.code, r.body)
	}
	if e.written() != before+1 {
		t.Errorf("the conflicting record was not written (the router records conflicts)")
	}
	// The first payload again: 202, and nothing written (started).
	before = e.written()
	if r := do(t, "POST", ts.URL+"/v1/events", order, "Content-Type", "application/cloudevents+json"); r.code != 202 || e.written() != before {
		t.Errorf("first payload again: %d %s, %d records (was %d)", r.code, r.body, e.written(), before)
	}
	st := do(t, "GET", ts.URL+"/v1/workflows/activity-confirm:order-1", "").json(t)
	if st["ledger_state"] != "started" || st["run_id"] != "run-1" || st["event_id"] != "order-1" {
		t.Errorf("status %v", st)
	}
}
