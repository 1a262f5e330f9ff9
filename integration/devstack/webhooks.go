package devstack

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// Webhooks is a local webhook endpoint for the dev stack's demo routes. It
// behaves as an endpoint that honours Idempotency-Key (as Stripe's does):
// the first request of a key is a delivery (its effect applied); a repeat
// of the key (a call the worker could not know had arrived, cut short by a
// crash) gets the first answer again and is counted as dropped.
type Webhooks struct {
	srv      *http.Server
	addr     string
	mu       sync.Mutex
	requests int
	keys     map[string]int // requests per Idempotency-Key
	nokey    int            // requests without a key
}

// WebhookCounts are what the endpoint has seen.
type WebhookCounts struct {
	Requests   int // every request
	Deliveries int // distinct keys: effects applied
	Dropped    int // repeats of a key already delivered
	NoKey      int // requests without an Idempotency-Key (each applied)
}

// StartWebhooks listens on 127.0.0.1, on any free port.
func StartWebhooks() (*Webhooks, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("starting the webhook endpoint: %w", err)
	}
	w := &Webhooks{addr: l.Addr().String(), keys: map[string]int{}}
	w.srv = &http.Server{Handler: http.HandlerFunc(w.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = w.srv.Serve(l) }()
	return w, nil
}

func (w *Webhooks) serve(rw http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	w.mu.Lock()
	w.requests++
	if key == "" {
		w.nokey++
	} else {
		w.keys[key]++
	}
	w.mu.Unlock()
	rw.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(rw, `{"delivered":%q}`, key)
}

// URL is the endpoint's address.
func (w *Webhooks) URL() string { return "http://" + w.addr + "/hooks" }

// Counts returns the counts so far.
func (w *Webhooks) Counts() WebhookCounts {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := WebhookCounts{Requests: w.requests, Deliveries: len(w.keys), NoKey: w.nokey}
	for _, n := range w.keys {
		c.Dropped += n - 1
	}
	return c
}

// Close stops the endpoint.
func (w *Webhooks) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = w.srv.Shutdown(ctx)
}
