package devstack

import (
	"net/http"
	"strings"
	"testing"
)

func TestWebhooksCountDeliveriesPerKey(t *testing.T) {
	w, err := StartWebhooks()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, key := range []string{"k1", "k2", "k1", ""} {
		req, _ := http.NewRequest(http.MethodPost, w.URL(), strings.NewReader(`{}`))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	if c := w.Counts(); c != (WebhookCounts{Requests: 4, Deliveries: 2, Dropped: 1, NoKey: 1}) {
		t.Fatalf("%+v", c)
	}
}
