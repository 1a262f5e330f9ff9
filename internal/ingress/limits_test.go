package ingress

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Guards against: one tenant takes every slot of the process.
//
// ingress.limits.max_concurrent is one pool for all tenants, and a slot is
// taken before the body is read (instrument: acquire, then events reads
// the body). A tenant well inside its own rate (here 2 requests, rate
// 100/s) that sends its headers and then trickles its body holds a slot
// per request for as long as the body takes: up to ReadTimeout (1 min)
// under dedup ingress, and again with the next request. With
// max_concurrent (64 by default) such requests, every other tenant gets
// 503 overloaded: a slow or hostile producer starves all the others,
// which the per-tenant rate limit was there to prevent.
func TestSlowTenantDoesNotStarveOtherTenants(t *testing.T) {
	e := newEnv(t, nil)
	ts := e.server(func(o *Options) {
		o.Tokens = writeTokens(t, tenantsFile)
		o.Limits = Limits{Rate: 100, Burst: 100, MaxConcurrent: 2}
	})
	addr := strings.TrimPrefix(ts.URL, "http://")
	for i := range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() }) // before the server's Close (cleanups run last first)
		// Headers, and 10 of the 100 body bytes announced.
		_, _ = fmt.Fprintf(c, "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer acme-token-0123456789\r\n"+
			"Idempotency-Key: \"slow-%d\"\r\nContent-Length: 100\r\n\r\n{\"type\":\"o", i)
	}
	time.Sleep(300 * time.Millisecond) // the two requests are in their handlers, reading
	r := do(t, "POST", ts.URL+"/v1/events", `{"type":"order.created"}`, "Content-Type", "application/json",
		"Authorization", "Bearer globex-token-0123456789", "Idempotency-Key", `"g-1"`)
	if r.code != 202 {
		t.Errorf("globex, while acme trickles two bodies: %d %s, want 202: one tenant's slow requests refuse every other tenant", r.code, r.body)
	}
}

// Guards against: a panic while a key is locked locks it forever.
//
// events() takes the key's lock (Locks.Acquire: the per-process set and a
// PostgreSQL session advisory lock) and releases it by a plain call after
// Send, not by defer. Anything that panics in between (Options.Locked,
// Send: the ledger reader, the Kafka client) is recovered by net/http,
// which keeps the process and the locking session alive, and the lock is
// never released: every later request with that key, on this replica and
// on every other (the advisory lock), is 409 in_flight "retry" until the
// process restarts. (The concurrency slot, by contrast, is released by
// defer.)
func TestPanicWhileLockedReleasesTheKeyLock(t *testing.T) {
	e := newEnv(t, nil)
	panicked := false
	ts := e.server(func(o *Options) {
		o.Locked = func(id string) {
			if id == "order-1" && !panicked {
				panicked = true
				panic("something panics while the key is locked")
			}
		}
	})
	other := e.server(nil) // another replica, same PostgreSQL
	req, _ := http.NewRequest("POST", ts.URL+"/v1/events", strings.NewReader(order))
	req.Header.Set("Content-Type", "application/cloudevents+json")
	if res, err := http.DefaultClient.Do(req); err == nil {
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
	}
	if !panicked {
		t.Fatal("the hook did not run")
	}
	for name, u := range map[string]string{"same replica": ts.URL, "other replica": other.URL} {
		r := do(t, "POST", u+"/v1/events", order, "Content-Type", "application/cloudevents+json")
		if r.code != 202 {
			t.Errorf("%s, after the request that panicked: %d %s, want 202: the key's lock outlived its request", name, r.code, r.body)
		}
	}
}

// Guards against: a body the ingress says it takes is a permanent 503.
//
// ingress.max_body_bytes defaults to kafka.max_value_bytes (1 MiB), and
// the client checks the value against it; but the record also carries its
// headers (binary mode copies every ce-* header, up to MaxHeaderBytes = 64
// KiB) and the batch overhead, while Kafka's default message.max.bytes is
// 1,048,588 bytes. A (little compressible) body of max_body_bytes, or one
// a little under it with some ce-* headers, is refused by the broker
// (MESSAGE_TOO_LARGE), which the ingress answers 503 "it may or may not
// have been written: retry with the same key", with Retry-After: 1. It is
// never written, and every retry fails alike: a permanent refusal
// presented as a transient one (the client's *ProduceError says the
// same). The documented answer for a too-large event is 413.
func TestBodyAtTheLimitIsNot503(t *testing.T) {
	e := newEnv(t, nil)
	ts := e.server(func(o *Options) { o.MaxBodyBytes = 1 << 20 }) // as dedup ingress: kafka.max_value_bytes
	pad := func(n int) string {
		b := make([]byte, n)
		_, _ = rand.Read(b)
		return base64.StdEncoding.EncodeToString(b)[:n]
	}
	plain := `{"type":"order.created","p":"` + pad(1<<20) // exactly max_body_bytes
	plain = plain[:1<<20-2] + `"}`
	binary := pad(1<<20 - 8<<10) // 8 KiB under the limit, with 16 KiB of extension attributes
	cases := []struct {
		name string
		body string
		hdrs []string
	}{
		{"plain JSON of max_body_bytes", plain, []string{"Content-Type", "application/json", "Idempotency-Key", `"big-1"`}},
		{"binary, under max_body_bytes, with ce-* headers", binary, []string{"Content-Type", "application/octet-stream", "Ce-Specversion", "1.0",
			"Ce-Id", "big-2", "Ce-Type", "order.created", "Ce-Traceparent", pad(16 << 10)}},
	}
	for _, tc := range cases {
		r := do(t, "POST", ts.URL+"/v1/events", tc.body, tc.hdrs...)
		if r.code == 503 {
			t.Errorf("%s (%d bytes): 503 %s (Retry-After %q): Kafka refuses it every time; want 413 (or 202)", tc.name, len(tc.body), r.body, r.header.Get("Retry-After"))
		}
	}
}
