package worker_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/worker"
)

// A re-run retries what failed (the activity level; the lab's
// TestRerunRetriesWhatFailed runs it end to end): a webhook step's
// failure belongs to its generation, and its fingerprint is the effect's
// identity, not the delivery's.

// counter is an endpoint whose answer per path can be changed, counting
// requests per path.
type counter struct {
	mu     sync.Mutex
	status map[string]int
	hits   map[string]int
	srv    *httptest.Server
}

func newCounter(t *testing.T) *counter {
	c := &counter{status: map[string]int{}, hits: map[string]int{}}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.hits[r.URL.Path]++
		code := c.status[r.URL.Path]
		c.mu.Unlock()
		if code == 0 {
			code = http.StatusOK
		}
		w.WriteHeader(code)
		_, _ = fmt.Fprintf(w, `{"path":%q}`, r.URL.Path)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *counter) set(path string, code int) {
	c.mu.Lock()
	c.status[path] = code
	c.mu.Unlock()
}

func (c *counter) count(path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits[path]
}

func webhookIn(url string, gen int, time, data string) worker.TaskInput {
	in := taskInput("webhook", data)
	in.URL, in.Generation, in.Event.Time = url, gen, time
	return in
}

// Generation 1's 400 is answered once, whatever its retries and resets do;
// generation 2 calls again, once, and completes; generation 3 (an extra
// execution) gets the stored success.
func TestWebhook400IsRetriedByTheNextGenerationOnly(t *testing.T) {
	ep := newCounter(t)
	ep.set("/hook", http.StatusBadRequest)
	l := newLab(t)
	url := ep.srv.URL + "/hook"
	for i := 0; i < 3; i++ {
		if err := l.runTask(webhookIn(url, 1, "2026-03-01T09:00:00Z", `{"user":"u1"}`), nil); !nonRetryable(err, "Permanent") {
			t.Fatalf("generation 1, attempt %d: %v, want the permanent 400", i+1, err)
		}
	}
	if n := ep.count("/hook"); n != 1 {
		t.Fatalf("generation 1 called %d times, want 1", n)
	}
	ep.set("/hook", http.StatusOK)
	var out json.RawMessage
	if err := l.runTask(webhookIn(url, 2, "2026-03-01T09:00:00Z", `{"user":"u1"}`), &out); err != nil || string(out) != `{"path":"/hook"}` {
		t.Fatalf("generation 2: %s %v, want the 200", out, err)
	}
	for _, gen := range []int{2, 3, 1} {
		if err := l.runTask(webhookIn(url, gen, "2026-03-01T09:00:00Z", `{"user":"u1"}`), &out); err != nil {
			t.Fatalf("generation %d after the success: %v, want the stored answer", gen, err)
		}
	}
	if n := ep.count("/hook"); n != 2 {
		t.Fatalf("%d calls, want 2 (one per generation that tried, none after the success)", n)
	}
}

// A redelivered copy re-stamped with another CloudEvents time, with its
// data re-encoded (other key order and spacing), or under another
// definition is the same effect: within one generation it is no mismatch
// (a retryable failure is retried, a success is returned).
func TestWebhookFingerprintIsTheEffectNotTheDelivery(t *testing.T) {
	ep := newCounter(t)
	ep.set("/hook", http.StatusServiceUnavailable)
	l := newLab(t)
	url := ep.srv.URL + "/hook"
	first := webhookIn(url, 1, "2026-03-01T09:00:00Z", `{"user":"u1","plan":"pro"}`)
	if err := l.runTask(first, nil); err == nil || nonRetryable(err, "Permanent") {
		t.Fatalf("503: %v, want a retryable error", err)
	}
	ep.set("/hook", http.StatusOK)
	copyIn := webhookIn(url, 1, "2026-03-01T09:05:00Z", `{ "plan": "pro", "user": "u1" }`)
	copyIn.Event.Definition = &schemas.ActivityDefinition{MaxAttempts: 3, Tasks: []schemas.TaskSpec{{Type: "webhook", URL: url}}}
	if err := l.runTask(copyIn, nil); err != nil {
		t.Fatalf("the re-stamped copy: %v, want it to run (the same effect)", err)
	}
	if err := l.runTask(first, nil); err != nil {
		t.Fatalf("the first copy again: %v, want the stored answer", err)
	}
	if n := ep.count("/hook"); n != 2 {
		t.Fatalf("%d calls, want 2 (the 503 and the 200)", n)
	}

	// Other data for the same event ID in the same generation is another
	// effect: a mismatch, not a stale answer.
	other := webhookIn(url, 1, "2026-03-01T09:00:00Z", `{"user":"u2","plan":"pro"}`)
	if err := l.runTask(other, nil); !nonRetryable(err, "BadTask") {
		t.Fatalf("other data, same generation: %v, want a mismatch (BadTask)", err)
	}
}

// The operator's fix is a new URL: within the failed generation it is a
// mismatch (the generation keeps its outcome); the next generation calls
// the new URL once, under the same key.
func TestWebhookNewURLIsANewAttemptInTheNextGeneration(t *testing.T) {
	ep := newCounter(t)
	ep.set("/broken", http.StatusBadRequest)
	l := newLab(t)
	if err := l.runTask(webhookIn(ep.srv.URL+"/broken", 1, "", `{}`), nil); !nonRetryable(err, "Permanent") {
		t.Fatalf("generation 1: %v", err)
	}
	if err := l.runTask(webhookIn(ep.srv.URL+"/fixed", 1, "", `{}`), nil); !nonRetryable(err, "BadTask") {
		t.Fatalf("generation 1 at the new URL: %v, want a mismatch", err)
	}
	if err := l.runTask(webhookIn(ep.srv.URL+"/fixed", 2, "", `{}`), nil); err != nil {
		t.Fatalf("generation 2 at the new URL: %v", err)
	}
	if b, f := ep.count("/broken"), ep.count("/fixed"); b != 1 || f != 1 {
		t.Fatalf("/broken %d, /fixed %d calls; want 1 and 1", b, f)
	}
}

// A stale execution (an older generation than the step's key) runs
// nothing and fails for good.
func TestStaleGenerationRunsNoStep(t *testing.T) {
	ep := newCounter(t)
	ep.set("/hook", http.StatusServiceUnavailable)
	l := newLab(t)
	url := ep.srv.URL + "/hook"
	_ = l.runTask(webhookIn(url, 3, "", `{}`), nil)
	if err := l.runTask(webhookIn(url, 2, "", `{}`), nil); !nonRetryable(err, "Superseded") {
		t.Fatalf("generation 2 after generation 3: %v, want Superseded", err)
	}
	if n := ep.count("/hook"); n != 1 {
		t.Fatalf("%d calls, want 1", n)
	}
}
