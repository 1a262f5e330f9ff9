package worker_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Guards against: a re-run retries a failed webhook "under the same key"
// (docs/worker.md: a newer generation "takes the step's key over and calls
// again, once, under the same key"; webhook.go: "a re-run (a newer
// generation) calls again, once, under the same key"). The key is sent as
// the Idempotency-Key header. But the endpoints that honour that header
// bind a key to its first request for good:
//
//   - Stripe (whose design worker/idempotency follows, by its own package
//     doc): "Stripe's idempotency works by saving the resulting status code
//     and body of the first request made for any given idempotency key,
//     regardless of whether it succeeds or fails. Subsequent requests with
//     the same key return the same result, including 500 errors." and "The
//     idempotency layer compares incoming parameters to those of the
//     original request and errors if they're not the same"
//     (docs.stripe.com/idempotency);
//   - draft-ietf-httpapi-idempotency-key-header §2.7, which dedup's own
//     ingress implements (docs/idempotency-key.md): "If there is an attempt
//     to reuse an idempotency key with a different request payload, the
//     resource server SHOULD reply with a HTTP 422 status code".
//
// So against such an endpoint the re-run the docs promise cannot succeed:
// the same key replays the saved 500 even after the endpoint was fixed,
// and a redelivered copy whose CloudEvents `time` differs (the case the
// docs call out as supported: the webhook's body is the whole event, time
// included, while its fingerprint leaves time out) is a different payload
// under the same key: 422, which the worker stores as a permanent failure.
// Every later generation sends the same key again: the run can never
// complete, and the effect is never made. The fix is not in the endpoint:
// a generation that retries a *failed* call must send a key the endpoint
// has not bound to a failure (e.g. the key with the generation that made
// the attempt), or the very same request bytes.

// keyedEndpoint is an endpoint with Stripe's (API v1) Idempotency-Key
// semantics: the first request of a key is executed and its answer saved
// with the request's body; a later request with the key gets the saved
// answer if its body is the same, and 422 (the draft's answer; Stripe
// answers 400 idempotency_error, also a 4xx) if it is not.
type keyedEndpoint struct {
	mu       sync.Mutex
	status   int // the answer of an execution (the endpoint's health)
	saved    map[string]savedAnswer
	executed int // requests that reached the endpoint's logic
	srv      *httptest.Server
}

type savedAnswer struct {
	body   []byte
	status int
}

func newKeyedEndpoint(t *testing.T) *keyedEndpoint {
	e := &keyedEndpoint{status: http.StatusOK, saved: map[string]savedAnswer{}}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		key := r.Header.Get("Idempotency-Key")
		e.mu.Lock()
		defer e.mu.Unlock()
		if s, ok := e.saved[key]; ok && key != "" {
			if !bytes.Equal(s.body, body) {
				w.WriteHeader(http.StatusUnprocessableEntity)
				_, _ = io.WriteString(w, `{"error":"idempotency key reused with a different request payload"}`)
				return
			}
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(s.status)
			_, _ = io.WriteString(w, `{"replayed":true}`)
			return
		}
		e.executed++
		e.saved[key] = savedAnswer{body: body, status: e.status}
		w.WriteHeader(e.status)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *keyedEndpoint) set(status int) {
	e.mu.Lock()
	e.status = status
	e.mu.Unlock()
}

// Generation 1 meets the endpoint while it is broken (500: saved for the
// key, as Stripe saves it). The operator fixes the endpoint and the event
// is redelivered: generation 2 takes the failed key over and calls again,
// under the same key, with the same body. The endpoint replays the saved
// 500: the re-run fails, and so will every later one.
func TestRerunAfterASaved500SucceedsAtAKeyedEndpoint(t *testing.T) {
	ep := newKeyedEndpoint(t)
	ep.set(http.StatusInternalServerError)
	l := newLab(t)
	url := ep.srv.URL + "/hook"
	if err := l.runTask(webhookIn(url, 1, "2026-03-01T09:00:00Z", `{"user":"u1"}`), nil); err == nil || nonRetryable(err, "Permanent") {
		t.Fatalf("generation 1 against the broken endpoint: %v, want a retryable failure", err)
	}
	ep.set(http.StatusOK) // fixed
	var out json.RawMessage
	err := l.runTask(webhookIn(url, 2, "2026-03-01T09:00:00Z", `{"user":"u1"}`), &out)
	if err != nil {
		t.Fatalf("generation 2 (the re-run after the endpoint was fixed): %v\n"+
			"the re-run sent the generation-1 Idempotency-Key again, and an endpoint with Stripe's semantics "+
			"replays the 500 it saved for that key: no re-run can ever complete (executed %d time(s))", err, ep.executed)
	}
}

// Generation 1's call fails (503: the endpoint saved the key with its
// payload). The event is redelivered with another CloudEvents `time` (the
// broker re-stamped it: docs/worker.md names this very case among those a
// re-run handles) and re-run in generation 2. The webhook's fingerprint
// ignores `time`, but the request body is the whole event, time included:
// the same Idempotency-Key now comes with a different payload, which the
// draft's endpoint answers 422, stored by the worker as a permanent
// failure. The re-run fails for good, and so does every later one.
func TestRerunOfARestampedCopySucceedsAtAKeyedEndpoint(t *testing.T) {
	ep := newKeyedEndpoint(t)
	ep.set(http.StatusServiceUnavailable)
	l := newLab(t)
	url := ep.srv.URL + "/hook"
	if err := l.runTask(webhookIn(url, 1, "2026-03-01T09:00:00Z", `{"user":"u1"}`), nil); err == nil || nonRetryable(err, "Permanent") {
		t.Fatalf("generation 1 against the unavailable endpoint: %v, want a retryable failure", err)
	}
	ep.set(http.StatusOK)
	var out json.RawMessage
	err := l.runTask(webhookIn(url, 2, "2026-03-01T09:05:00Z", `{"user":"u1"}`), &out)
	if err != nil {
		t.Fatalf("generation 2 (a re-run of a redelivered copy with another time): %v (permanent: %v)\n"+
			"the same Idempotency-Key went out with a different body (the event's time is in it): "+
			"the endpoint answered 422 and the step stored it as a permanent failure", err, nonRetryable(err, "Permanent"))
	}
}
