package worker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/dedupio/dedup/schemas"
)

// webhookParams is the fingerprint of the legacy SendWebhook (legacy.go),
// kept so that the keys of workflows started before tasks had steps still
// match. (Field names without tags: they hash as they always did.)
type webhookParams struct {
	URL  string
	Body []byte
}

// webhookEffect is what identifies a webhook call's effect, and so its
// step's fingerprint: the event (its ID and a hash of its data), the step
// and the target. Never delivery metadata: the request's body is the whole
// event, whose time (and definition) a redelivered copy may change without
// being another event. A target changed after a failure (the operator's
// fix: a new URL) is a new attempt of the same effect in the next
// generation (idempotency.Store.DoKeyed), under the same store key (its
// Idempotency-Key: see webhook).
type webhookEffect struct {
	EventID string `json:"event_id"`
	Data    string `json:"data_sha256"`
	Step    string `json:"step"`
	URL     string `json:"url"`
}

// dataHash is the SHA-256 of the event's data: JSON data in a canonical
// form (object keys sorted, no insignificant space, numbers as written), so
// that a copy re-encoded by its producer hashes the same; binary data as
// its bytes.
func dataHash(ev schemas.WorkflowInput) string {
	var b []byte
	switch {
	case ev.DataBase64 != nil:
		b = append([]byte("base64:"), ev.DataBase64...)
	default:
		b = canonicalJSON(ev.Data)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// canonicalJSON re-encodes JSON with sorted object keys and no space;
// numbers keep their text. Bytes that do not decode are returned as they
// are.
func canonicalJSON(raw json.RawMessage) []byte {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil || d.More() {
		return raw
	}
	b, err := json.Marshal(v)
	if err != nil {
		return raw
	}
	return b
}

// webhook is the built-in webhook task: it POSTs the event (JSON) to the
// task's url (or the worker's webhook_url) in the step "post", under the
// key {task_id}:post, and sends the step's external key as the
// Idempotency-Key header: {task_id}:post, or {task_id}:post:{n} after n
// re-runs took over a failure the endpoint answered.
// Guarantee: a retry or re-run after the endpoint answered 2xx returns the
// stored answer without calling again; a call cut short by a crash, or
// left without an answer (no response, a timeout, a 502 or 504 from a
// gateway), is repeated with the same Idempotency-Key, for the endpoint to
// drop. A 4xx other than 408, 425 and 429 is permanent (the same request
// will be refused again): the task fails at once, and the rest of its
// generation gets the stored answer. A re-run (a newer generation) calls
// again, once, at the task's URL as the route now says it: under a new
// Idempotency-Key if the endpoint answered the failure (a 4xx, a 5xx other
// than 502 and 504), since an endpoint with Stripe's semantics replays the
// answer it saved for a key and refuses the key with another body (a
// redelivered copy's time differs: 422); under the same one otherwise.
// Within a generation retries keep the key: such an endpoint answers them
// with the 5xx it saved, until the attempts run out and a re-run comes.
func (a *Activities) webhook(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
	info, _ := TaskInfoFrom(ctx)
	url := info.URL
	if url == "" {
		url = a.WebhookURL
	}
	if url == "" {
		return nil, Permanent(fmt.Errorf("webhook task %s: no url, and the worker has no webhook_url", info.ID))
	}
	body, err := json.Marshal(info.Event)
	if err != nil {
		return nil, Permanent(err)
	}
	effect := webhookEffect{EventID: info.Event.EventID, Data: dataHash(info.Event), Step: "post", URL: url}
	out, err := Step(ctx, "post", effect, func(ctx context.Context, key string) (json.RawMessage, error) {
		return a.post(ctx, url, key, body)
	})
	if err != nil {
		return nil, err
	}
	if a.AfterWebhook != nil {
		if err := a.AfterWebhook(ctx); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// post sends one webhook request and classifies the answer: 2xx is the
// result (JSON, or the body as a JSON string), 4xx other than 408, 425 and
// 429 is Permanent, anything else (5xx, 408, 425, 429, no answer) is
// retryable. No answer, and a gateway's 502 or 504 (the endpoint behind it
// may have run the request), are Unanswered: a re-run keeps the key.
func (a *Activities) post(ctx context.Context, url, key string, body []byte) (json.RawMessage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, Permanent(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := a.httpClient().Do(req)
	if err != nil {
		return nil, Unanswered(fmt.Errorf("posting webhook: %w", err))
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	switch c := resp.StatusCode; {
	case c/100 == 2:
	case c/100 == 4 && c != http.StatusRequestTimeout && c != http.StatusTooEarly && c != http.StatusTooManyRequests:
		return nil, Permanent(fmt.Errorf("webhook answered %s", resp.Status))
	case c == http.StatusBadGateway || c == http.StatusGatewayTimeout:
		return nil, Unanswered(fmt.Errorf("webhook answered %s", resp.Status))
	default:
		return nil, fmt.Errorf("webhook answered %s", resp.Status)
	}
	if !json.Valid(b) {
		b, _ = json.Marshal(string(b))
	}
	return b, nil
}

func (a *Activities) httpClient() *http.Client {
	if a.HTTP != nil {
		return a.HTTP
	}
	return &http.Client{Timeout: 20 * time.Second}
}
