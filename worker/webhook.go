package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// webhookParams fingerprint a webhook call (field names without tags:
// keys stored before tasks had steps hash the same).
type webhookParams struct {
	URL  string
	Body []byte
}

// webhook is the built-in webhook task: it POSTs the event (JSON) to the
// task's url (or the worker's webhook_url) in the step "post", under the
// key {task_id}:post, which it sends as the Idempotency-Key header.
// Guarantee: a retry or re-run after the endpoint answered 2xx returns the
// stored answer without calling again; a call cut short by a crash is
// repeated with the same key, for the endpoint to drop. A 4xx other than
// 408, 425 and 429 is permanent (the same request will be refused again):
// the task fails at once.
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
	out, err := Step(ctx, "post", webhookParams{URL: url, Body: body}, func(ctx context.Context, key string) (json.RawMessage, error) {
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
// retryable.
func (a *Activities) post(ctx context.Context, url, key string, body []byte) (json.RawMessage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, Permanent(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := a.httpClient().Do(req)
	if err != nil {
		return nil, fmt.Errorf("posting webhook: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	switch c := resp.StatusCode; {
	case c/100 == 2:
	case c/100 == 4 && c != http.StatusRequestTimeout && c != http.StatusTooEarly && c != http.StatusTooManyRequests:
		return nil, Permanent(fmt.Errorf("webhook answered %s", resp.Status))
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
