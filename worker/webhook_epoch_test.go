package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/sink/ledger"
	"github.com/dedupio/dedup/worker"
	"github.com/dedupio/dedup/worker/idempotency"
)

// The webhook's Idempotency-Key is the step's external key: it changes
// when a re-run takes over a failure the endpoint answered (the
// TestRerun*AtAKeyedEndpoint tests), and stays when the previous call's outcome is
// unknown, so that an endpoint with Stripe's semantics (keyedEndpoint)
// drops the repeat; within a generation it stays too.

// keysSeen wraps a keyed endpoint, recording the Idempotency-Key of every
// request in order; answer, if set, replaces the endpoint's answer (a
// gateway in front of it: the endpoint ran the request, the caller gets
// the gateway's status).
type keysSeen struct {
	mu     sync.Mutex
	keys   []string
	answer int
	srv    *httptest.Server
}

func newKeysSeen(t *testing.T, ep *keyedEndpoint) *keysSeen {
	k := &keysSeen{}
	k.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k.mu.Lock()
		k.keys = append(k.keys, r.Header.Get("Idempotency-Key"))
		answer := k.answer
		k.mu.Unlock()
		if answer == 0 {
			ep.srv.Config.Handler.ServeHTTP(w, r)
			return
		}
		ep.srv.Config.Handler.ServeHTTP(httptest.NewRecorder(), r)
		w.WriteHeader(answer)
	}))
	t.Cleanup(k.srv.Close)
	return k
}

func (k *keysSeen) seen() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return fmt.Sprint(k.keys)
}

func (k *keysSeen) gateway(status int) {
	k.mu.Lock()
	k.answer = status
	k.mu.Unlock()
}

func (e *keyedEndpoint) executions() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.executed
}

// crashAfterSend is a transport whose worker dies once its request reached
// the endpoint: the endpoint runs it, the step's key is left in_progress
// with its lease run out (as a killed worker leaves it), and no outcome is
// recorded.
type crashAfterSend struct {
	pool *pgxpool.Pool
	key  string
}

func (c crashAfterSend) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		_ = resp.Body.Close()
	}
	if _, err := c.pool.Exec(context.Background(), `UPDATE idempotency_keys SET lease_token = 'crashed',
		lease_until = now() - interval '1 second' WHERE key = $1`, c.key); err != nil {
		return nil, err
	}
	return nil, errors.New("the worker died after sending")
}

// A call cut short by a crash keeps its Idempotency-Key when its key is
// taken over, by a retry of its generation or by a re-run: the endpoint
// ran it, and drops the repeat (it answers the saved 200). Here the crash
// comes in generation 2, whose call went out under {task_id}:post:1 after
// generation 1's 500: the takeover sends :1 again, not :2.
func TestWebhookTakenOverAfterACrashKeepsItsIdempotencyKey(t *testing.T) {
	for _, takeover := range []int{2, 3} {
		t.Run(fmt.Sprintf("by generation %d", takeover), func(t *testing.T) {
			ep := newKeyedEndpoint(t)
			seen := newKeysSeen(t, ep)
			l := newLab(t)
			url := seen.srv.URL + "/hook"
			in := func(gen int) worker.TaskInput { return webhookIn(url, gen, "2026-03-01T09:00:00Z", `{"user":"u1"}`) }
			key := worker.StepKey(in(1).ID, "post")

			ep.set(http.StatusInternalServerError)
			if err := l.runTask(in(1), nil); err == nil {
				t.Fatal("generation 1 against the broken endpoint succeeded")
			}
			ep.set(http.StatusOK)
			l.acts.HTTP = &http.Client{Transport: crashAfterSend{pool: l.pool, key: key}}
			if err := l.runTask(in(2), nil); err == nil {
				t.Fatal("generation 2's crashed call succeeded")
			}
			l.acts.HTTP = nil
			var out json.RawMessage
			if err := l.runTask(in(takeover), &out); err != nil {
				t.Fatalf("generation %d taking over the crashed call: %v", takeover, err)
			}
			if want := fmt.Sprint([]string{key, key + ":1", key + ":1"}); seen.seen() != want {
				t.Fatalf("Idempotency-Keys %s, want %s (the takeover of a crashed call repeats its key)", seen.seen(), want)
			}
			if n := ep.executions(); n != 2 || string(out) != `{"replayed":true}` {
				t.Fatalf("the endpoint ran %d requests and answered %s, want 2 (the 500, the crashed call) and the repeat dropped", n, out)
			}
		})
	}
}

// A call without an answer from the endpoint itself (here a gateway's 504;
// the endpoint behind it ran the request) is of unknown outcome: the
// re-run sends the same Idempotency-Key, and the endpoint drops it.
func TestWebhookUnansweredCallKeepsItsIdempotencyKeyInTheRerun(t *testing.T) {
	ep := newKeyedEndpoint(t)
	seen := newKeysSeen(t, ep)
	l := newLab(t)
	url := seen.srv.URL + "/hook"
	seen.gateway(http.StatusGatewayTimeout)
	err := l.runTask(webhookIn(url, 1, "2026-03-01T09:00:00Z", `{"user":"u1"}`), nil)
	if err == nil || nonRetryable(err, "Permanent") {
		t.Fatalf("generation 1 behind the timing-out gateway: %v, want a retryable failure", err)
	}
	seen.gateway(0)
	var out json.RawMessage
	if err := l.runTask(webhookIn(url, 2, "2026-03-01T09:00:00Z", `{"user":"u1"}`), &out); err != nil {
		t.Fatalf("generation 2: %v", err)
	}
	key := worker.StepKey(webhookIn(url, 1, "", "{}").ID, "post")
	if want := fmt.Sprint([]string{key, key}); seen.seen() != want || ep.executions() != 1 {
		t.Fatalf("Idempotency-Keys %s, %d executions; want %s and 1 (the repeat dropped)", seen.seen(), ep.executions(), want)
	}
}

// Within a generation the key stays: an endpoint that saved a 500 answers
// the generation's retries with it, even once it is fixed (Stripe's
// documented behaviour); the re-run calls under a new key and completes.
func TestWebhookRetriesWithinAGenerationKeepTheKey(t *testing.T) {
	ep := newKeyedEndpoint(t)
	seen := newKeysSeen(t, ep)
	l := newLab(t)
	url := seen.srv.URL + "/hook"
	ep.set(http.StatusInternalServerError)
	for i := 0; i < 3; i++ {
		if i == 2 {
			ep.set(http.StatusOK)
		}
		if err := l.runTask(webhookIn(url, 1, "2026-03-01T09:00:00Z", `{"user":"u1"}`), nil); err == nil {
			t.Fatalf("generation 1, attempt %d: the saved 500 was not replayed", i+1)
		}
	}
	if err := l.runTask(webhookIn(url, 2, "2026-03-01T09:00:00Z", `{"user":"u1"}`), nil); err != nil {
		t.Fatalf("generation 2: %v", err)
	}
	key := worker.StepKey(webhookIn(url, 1, "", "{}").ID, "post")
	if want := fmt.Sprint([]string{key, key, key, key + ":1"}); seen.seen() != want || ep.executions() != 2 {
		t.Fatalf("Idempotency-Keys %s, %d executions; want %s and 2", seen.seen(), ep.executions(), want)
	}
}

// A step name that ends in a colon and digits would read as another step's
// external key ("send" at epoch 2 is {task_id}:send:2): refused.
func TestStepNameMayNotLookLikeAnEpoch(t *testing.T) {
	var calls int
	tt := worker.NewTaskType("epochy", func(ctx context.Context, in json.RawMessage) (string, error) {
		return worker.Step(ctx, "send:2", nil, func(ctx context.Context, key string) (string, error) { calls++; return key, nil })
	})
	l := newLab(t, tt)
	if err := l.runTask(taskInput("epochy", `{}`), nil); !nonRetryable(err, "Permanent") || calls != 0 {
		t.Fatalf("step send:2: %v after %d calls, want a permanent error and no call", err, calls)
	}
}

// Keys from before migration 00011: a permanent failure was the endpoint's
// answer (the re-run sends a new key); a retryable one counts as of unknown
// outcome (the re-run sends the key again, as the worker did before).
func TestKeysFromBeforeEpochsAfterTheMigration(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	if _, err := migrations(t, url).UpTo(ctx, 10); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	in := func(i int) worker.TaskInput {
		in := webhookIn(srv.URL, 2, "", `{}`)
		in.ID = worker.TaskID(in.RunID, "webhook", i)
		return in
	}
	for i, status := range []string{idempotency.StatusFailedPermanent, idempotency.StatusFailed} {
		if _, err := pool.Exec(ctx, `INSERT INTO idempotency_keys (key, fingerprint, status, error, expires_at, generation)
			VALUES ($1, 'old', $2, 'webhook answered 5xx/4xx', now() + interval '1 day', 1)`, worker.StepKey(in(i).ID, "post"), status); err != nil {
			t.Fatal(err)
		}
	}
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	keys, err := idempotency.New(pool, idempotency.DefaultOptions(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := newLab(t)
	l.acts.Keys = keys
	for i := 0; i < 2; i++ {
		if err := l.runTask(in(i), nil); err != nil {
			t.Fatalf("task %d in generation 2: %v", i, err)
		}
	}
	want := fmt.Sprint([]string{worker.StepKey(in(0).ID, "post") + ":1", worker.StepKey(in(1).ID, "post")})
	if fmt.Sprint(got) != want {
		t.Fatalf("Idempotency-Keys %v, want %s", got, want)
	}
}
