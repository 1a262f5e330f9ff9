package ingress

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
)

// A made-up workflow ID under a real route prefix is as unknown as one
// under no route: the same 404, body and all (the status answers only IDs
// the ledger or Temporal knows).
func TestMadeUpWorkflowIs404(t *testing.T) {
	e := newEnv(t, nil)
	ts := e.server(nil)
	made := do(t, "GET", ts.URL+"/v1/workflows/activity-confirm:never-sent", "")
	none := do(t, "GET", ts.URL+"/v1/workflows/activity-nosuchroute:never-sent", "")
	if made.code != 404 || none.code != 404 {
		t.Fatalf("made-up ID under a route: %d %s; under none: %d %s", made.code, made.body, none.code, none.body)
	}
	if !bytes.Equal(bytes.ReplaceAll(made.body, []byte("activity-confirm"), nil), bytes.ReplaceAll(none.body, []byte("activity-nosuchroute"), nil)) {
		t.Errorf("the two 404s differ:\n%s\n%s", made.body, none.body)
	}
}

func writeTokens(t *testing.T, content string) *Tokens {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := LoadTokens("ingress.tokens_file", path)
	if err != nil {
		t.Fatal(err)
	}
	return tokens
}

const tenantsFile = `tokens:
- {tenant: acme, token: acme-token-0123456789, event_types: ["order.*"], routes: ["*"], read_status: true}
- {tenant: globex, token: globex-token-0123456789, event_types: ["*"], routes: ["*"], read_status: true}
- {tenant: initech, token: initech-token-0123456789, event_types: ["*"], routes: [notes]}
`

// Two tenants with one Idempotency-Key are two events and two workflows
// (@{tenant}/{key}); each reads its own status only, and another tenant's
// workflow answers the same 404 as one that does not exist.
func TestTenantsScopeKeysAndStatus(t *testing.T) {
	e := newEnv(t, nil)
	ts := e.server(func(o *Options) { o.Tokens = writeTokens(t, tenantsFile) })
	post := func(token, body string, headers ...string) resp {
		t.Helper()
		return do(t, "POST", ts.URL+"/v1/events", body, append([]string{"Content-Type", "application/json", "Authorization", "Bearer " + token}, headers...)...)
	}
	const plain = `{"type":"order.created","total":3}`
	a := post("acme-token-0123456789", plain, "Idempotency-Key", `"order-123"`)
	g := post("globex-token-0123456789", plain, "Idempotency-Key", `"order-123"`)
	if a.code != 202 || g.code != 202 {
		t.Fatalf("acme %d %s; globex %d %s", a.code, a.body, g.code, g.body)
	}
	wa := a.json(t)["workflows"].([]any)[0].(map[string]any)["workflow_id"]
	wg := g.json(t)["workflows"].([]any)[0].(map[string]any)["workflow_id"]
	if a.json(t)["event_id"] != "@acme/order-123" || wa != "activity-confirm:@acme/order-123" || wg != "activity-confirm:@globex/order-123" {
		t.Fatalf("acme %s; globex %s", a.body, g.body)
	}
	recs := e.records(2)
	for i, tenant := range []string{"acme", "globex"} {
		if hdr(recs[i])[eventid.TenantHeader] != tenant || string(recs[i].Key) != "@"+tenant+"/order-123" {
			t.Errorf("record %d: key %q headers %v", i, recs[i].Key, hdr(recs[i]))
		}
	}
	// A router claims both (as the ledger sees them).
	ctx := context.Background()
	for _, tenant := range []string{"acme", "globex"} {
		p, err := e.c.Prepare(&kgo.Record{Value: []byte(plain), Headers: []kgo.RecordHeader{
			{Key: "idempotency-key", Value: []byte("order-123")}, {Key: eventid.TenantHeader, Value: []byte(tenant)}}})
		if err != nil {
			t.Fatal(err)
		}
		in := decide.Intent{WorkflowID: p.Targets[0].WorkflowID, ActivityID: "confirm", EventID: p.Event.ID, IDRule: "header", PayloadHash: p.Event.PayloadHash, Topic: topic}
		if _, err := e.led.Claim(ctx, []decide.Intent{in}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(token, id string) resp {
		t.Helper()
		return do(t, "GET", ts.URL+"/v1/workflows/"+id, "", "Authorization", "Bearer "+token)
	}
	if r := get("acme-token-0123456789", "activity-confirm:@acme/order-123"); r.code != 200 || r.json(t)["ledger_state"] != "pending" {
		t.Errorf("acme's own: %d %s", r.code, r.body)
	}
	if r := get("globex-token-0123456789", "activity-confirm:@globex/order-123"); r.code != 200 || r.json(t)["event_id"] != "@globex/order-123" {
		t.Errorf("globex's own: %d %s", r.code, r.body)
	}
	other := get("acme-token-0123456789", "activity-confirm:@globex/order-123")
	madeUp := get("acme-token-0123456789", "activity-confirm:@acme/never-sent")
	unscoped := get("acme-token-0123456789", "activity-confirm:order-123")
	for name, r := range map[string]resp{"another tenant's": other, "made up": madeUp, "unscoped": unscoped} {
		if r.code != 404 {
			t.Errorf("%s: %d %s", name, r.code, r.body)
		}
	}
	strip := func(r resp, id string) string { return strings.ReplaceAll(string(r.body), id, "ID") }
	if strip(other, "activity-confirm:@globex/order-123") != strip(madeUp, "activity-confirm:@acme/never-sent") {
		t.Errorf("another tenant's workflow and a made-up one answer differently:\n%s\n%s", other.body, madeUp.body)
	}
	// What a token may do: acme sends order.* only; initech starts route
	// notes only and may not read status.
	if r := post("acme-token-0123456789", `{"type":"note.added"}`, "Idempotency-Key", `"n-1"`); r.code != 403 || r.json(t)["reason"] != "forbidden" {
		t.Errorf("acme, note.added: %d %s", r.code, r.body)
	}
	if r := post("initech-token-0123456789", plain, "Idempotency-Key", `"o-1"`); r.code != 403 || !strings.Contains(r.json(t)["detail"].(string), "route confirm") {
		t.Errorf("initech, route confirm: %d %s", r.code, r.body)
	}
	if r := post("initech-token-0123456789", `{"type":"note.added"}`, "Idempotency-Key", `"n-1"`); r.code != 202 {
		t.Errorf("initech, route notes: %d %s", r.code, r.body)
	}
	if r := get("initech-token-0123456789", "activity-notes:@initech/n-1"); r.code != 403 {
		t.Errorf("initech reads status: %d %s", r.code, r.body)
	}
	// A CloudEvent's id is its key, scoped alike; an Idempotency-Key must
	// be that id (unscoped, as the caller wrote it).
	if r := post("globex-token-0123456789", order, "Content-Type", "application/cloudevents+json", "Idempotency-Key", `"order-1"`); r.code != 202 || r.json(t)["event_id"] != "@globex/order-1" {
		t.Errorf("globex CloudEvent: %d %s", r.code, r.body)
	}
	if r := post("globex-token-0123456789", order, "Content-Type", "application/cloudevents+json", "Idempotency-Key", `"order-2"`); r.code != 400 || r.json(t)["reason"] != "key_mismatch" {
		t.Errorf("globex CloudEvent, other key: %d %s", r.code, r.body)
	}
}

// Without a key, a plain event is refused (400 no_key) unless the ingress
// allows content-derived IDs (ingress.require_key: false).
func TestKeyRequired(t *testing.T) {
	e := newEnv(t, nil)
	strict := e.server(nil)
	lax := e.server(func(o *Options) { o.AllowNoKey = true })
	const plain = `{"type":"order.created","total":3}`
	if r := do(t, "POST", strict.URL+"/v1/events", plain, "Content-Type", "application/json"); r.code != 400 || r.json(t)["reason"] != "no_key" {
		t.Errorf("strict: %d %s", r.code, r.body)
	}
	if n := e.written(); n != 0 {
		t.Errorf("%d records written for a refused request", n)
	}
	if r := do(t, "POST", lax.URL+"/v1/events", plain, "Content-Type", "application/json"); r.code != 202 || r.json(t)["id_rule"] != "content" {
		t.Errorf("lax: %d %s", r.code, r.body)
	}
	// A CloudEvent carries its key (id): accepted without the header.
	if r := do(t, "POST", strict.URL+"/v1/events", order, "Content-Type", "application/cloudevents+json"); r.code != 202 {
		t.Errorf("CloudEvent without the header: %d %s", r.code, r.body)
	}
}

// Past a tenant's rate: 429 with Retry-After, nothing written, and another
// tenant is not slowed. Past the process's cap on requests at once: 503.
func TestLimits(t *testing.T) {
	e := newEnv(t, nil)
	hold, held := make(chan struct{}), make(chan struct{}, 4)
	ts := e.server(func(o *Options) {
		o.Tokens = writeTokens(t, tenantsFile)
		o.Limits = Limits{Rate: 1, Burst: 3, MaxConcurrent: 2, MaxConcurrentPerTenant: 2}
		o.Locked = func(id string) {
			if strings.HasPrefix(id, "@globex/hold") {
				held <- struct{}{}
				<-hold
			}
		}
	})
	letGo := letGoAtCleanup(t, hold)
	post := func(token, key string) resp {
		t.Helper()
		return do(t, "POST", ts.URL+"/v1/events", `{"type":"order.created"}`, "Content-Type", "application/json",
			"Authorization", "Bearer "+token, "Idempotency-Key", `"`+key+`"`)
	}
	codes := map[int]int{}
	var limited resp
	for i := range 6 {
		r := post("acme-token-0123456789", "o-"+string(rune('a'+i)))
		codes[r.code]++
		if r.code == 429 {
			limited = r
		}
	}
	if codes[202] < 3 || codes[429] < 2 || codes[202]+codes[429] != 6 {
		t.Fatalf("acme, 6 requests at rate 1/s burst 3: %v", codes)
	}
	if ra := limited.header.Get("Retry-After"); ra != "1" || limited.json(t)["reason"] != "rate_limited" {
		t.Errorf("429: Retry-After %q %s", ra, limited.body)
	}
	if n := e.written(); n != int64(codes[202]) {
		t.Errorf("%d records for %d accepted", n, codes[202])
	}
	if r := post("globex-token-0123456789", "g-1"); r.code != 202 {
		t.Errorf("globex after acme's burst: %d %s", r.code, r.body)
	}
	// Two requests held in flight fill the cap: a third is 503 at once.
	done := make(chan resp, 2)
	for _, k := range []string{"hold-1", "hold-2"} {
		go func() { done <- post("globex-token-0123456789", k) }()
		reached(t, held, done, "held request "+k)
	}
	if r := post("initech-token-0123456789", "x"); r.code != 503 || r.header.Get("Retry-After") == "" || r.json(t)["reason"] != "overloaded" {
		t.Errorf("over the cap: %d %s", r.code, r.body)
	}
	letGo()
	for range 2 {
		if r := within(t, done, handlerPatience, "a held request's answer once let go"); r.code != 202 {
			t.Errorf("held: %d %s", r.code, r.body)
		}
	}
}

func hdr(r *kgo.Record) map[string]string {
	m := map[string]string{}
	for _, h := range r.Headers {
		m[h.Key] = string(h.Value)
	}
	return m
}

// Over HTTP, the Idempotency-Key is one RFC 8941 sf-string: bare text, a
// token, a number are 400 invalid_id naming the rule; parameters are
// ignored; nothing is written for a refusal.
func TestIdempotencyKeyOverHTTP(t *testing.T) {
	e := newEnv(t, nil)
	ts := e.server(nil)
	const plain = `{"type":"order.created","total":3}`
	post := func(keys ...string) resp {
		t.Helper()
		req := []string{"Content-Type", "application/json"}
		r, err := http.NewRequest("POST", ts.URL+"/v1/events", strings.NewReader(plain))
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set(req[0], req[1])
		for _, k := range keys {
			r.Header.Add("Idempotency-Key", k)
		}
		res, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = res.Body.Close() }()
		b, _ := io.ReadAll(res.Body)
		return resp{code: res.StatusCode, header: res.Header, body: b}
	}
	for _, bad := range [][]string{{"order-123"}, {"8e03978e-40d5-43e8-bc93-6894a57f9324"}, {"123"}, {"?1"}, {":b3JkZXI=:"}, {`"a"`, `"b"`}, {`""`}, {`"caf` + "\u00e9" + `"`}} {
		r := post(bad...)
		if r.code != 400 || r.json(t)["reason"] != "invalid_id" || !strings.Contains(r.json(t)["detail"].(string), "Idempotency-Key") {
			t.Errorf("Idempotency-Key %q: %d %s", bad, r.code, r.body)
		}
	}
	if n := e.written(); n != 0 {
		t.Errorf("%d records written for refused keys", n)
	}
	if r := post(`"order-123";client=7`); r.code != 202 || r.json(t)["event_id"] != "order-123" {
		t.Errorf("a key with parameters: %d %s", r.code, r.body)
	}
	if r := post(`"a \"quoted\" key"`); r.code != 202 || r.json(t)["event_id"] != `a "quoted" key` {
		t.Errorf("escapes: %d %s", r.code, r.body)
	}
}

// A repeat of an accepted request gets the first one's 202 with
// Idempotent-Replayed: true once the ledger holds the event with this
// payload; the first answer (and one the ledger cannot know yet) has no
// such header.
func TestReplayedHeader(t *testing.T) {
	e := newEnv(t, nil)
	ts := e.server(nil)
	first := do(t, "POST", ts.URL+"/v1/events", order, "Content-Type", "application/cloudevents+json")
	early := do(t, "POST", ts.URL+"/v1/events", order, "Content-Type", "application/cloudevents+json")
	if first.code != 202 || first.header.Get("Idempotent-Replayed") != "" || early.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d %q; before a router claimed it: %q", first.code, first.header.Get("Idempotent-Replayed"), early.header.Get("Idempotent-Replayed"))
	}
	p, err := e.c.Prepare(&kgo.Record{Value: []byte(order), Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/cloudevents+json")}}})
	if err != nil {
		t.Fatal(err)
	}
	in := decide.Intent{WorkflowID: p.Targets[0].WorkflowID, ActivityID: "confirm", EventID: p.Event.ID, IDRule: "field", PayloadHash: p.Event.PayloadHash, Topic: topic}
	ctx := context.Background()
	if _, err := e.led.Claim(ctx, []decide.Intent{in}); err != nil {
		t.Fatal(err)
	}
	if err := e.led.MarkStarted(ctx, []processor.Started{{WorkflowID: in.WorkflowID, RunID: "run-1", Generation: 1}}); err != nil {
		t.Fatal(err)
	}
	again := do(t, "POST", ts.URL+"/v1/events", order, "Content-Type", "application/cloudevents+json")
	if again.code != 202 || again.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.body, first.body) {
		t.Errorf("repeat: %d %q %s, want the first body %s", again.code, again.header.Get("Idempotent-Replayed"), again.body, first.body)
	}
}

// Two tenants sending their bodies slowly cannot take every slot: a body
// is read (within Options.BodyTimeout) before its request takes one, so a
// third tenant's request is answered while the two are still sending.
// Bound: the two slow requests have reached the handler (arrived) before
// the third is sent; before the fix they took their slots right after,
// a few instructions against the third request's round trip.
func TestSlowBodiesTakeNoSlot(t *testing.T) {
	e := newEnv(t, nil)
	arrived := make(chan string, 2)
	ts := e.server(func(o *Options) {
		o.Tokens = writeTokens(t, tenantsFile)
		o.Limits = Limits{Rate: 100, Burst: 100, MaxConcurrent: 2, MaxConcurrentPerTenant: 1}
	})
	inner := ts.Config.Handler
	ts.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tok := r.Header.Get("Authorization"); tok != "Bearer initech-token-0123456789" {
			arrived <- tok
		}
		inner.ServeHTTP(w, r)
	})
	const body = `{"type":"order.created"}`
	for _, tok := range []string{"acme-token-0123456789", "globex-token-0123456789"} {
		c, err := net.Dial("tcp", ts.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		// The headers and half the body; the rest never comes (until the
		// connection closes at the end of the test).
		_, _ = fmt.Fprintf(c, "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer %s\r\n"+
			"Idempotency-Key: \"slow\"\r\nContent-Length: %d\r\n\r\n%s", tok, len(body), body[:10])
	}
	within(t, arrived, handlerPatience, "the first slow request at the handler")
	within(t, arrived, handlerPatience, "the second slow request at the handler")
	r := do(t, "POST", ts.URL+"/v1/events", `{"type":"note.added"}`, "Content-Type", "application/json",
		"Authorization", "Bearer initech-token-0123456789", "Idempotency-Key", `"n-slow"`)
	if r.code != 202 {
		t.Errorf("a third tenant while two send their bodies slowly: %d %s, want 202", r.code, r.body)
	}
}

// Bodies still arriving are capped too, so that memory stays bounded: a
// tenant reads at most max_concurrent_per_tenant bodies at once (and the
// process 2 x max_concurrent); one more slow body of that tenant is a 503
// at once, before any of its body is read, not a connection held open
// (with the buffer it fills) until the body timeout.
func TestSlowBodiesOfOneTenantAreCapped(t *testing.T) {
	e := newEnv(t, nil)
	ts := e.server(func(o *Options) {
		o.Tokens = writeTokens(t, tenantsFile)
		o.Limits = Limits{Rate: 100, Burst: 100, MaxConcurrent: 2, MaxConcurrentPerTenant: 1}
	})
	const body = `{"type":"order.created"}`
	slow := func(key string) net.Conn {
		c, err := net.Dial("tcp", ts.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		_, _ = fmt.Fprintf(c, "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer acme-token-0123456789\r\n"+
			"Idempotency-Key: %q\r\nContent-Length: %d\r\n\r\n%s", key, len(body), body[:10])
		return c
	}
	slow("slow-1")
	time.Sleep(200 * time.Millisecond) // the first body is being read (bound: stated)
	c := slow("slow-2")
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.Contains(line, " 503 ") {
		t.Fatalf("a second slow body of one tenant (share 1): %q, %v; want a 503 at once", line, err)
	}
}
