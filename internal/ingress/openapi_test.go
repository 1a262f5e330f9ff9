package ingress

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/dedupio/dedup/schemas"
)

// The OpenAPI description is YAML of version 3.1 and documents every
// status and reason the handlers answer with.
func TestOpenAPIDescribesTheAPI(t *testing.T) {
	var doc struct {
		OpenAPI string `yaml:"openapi"`
		Paths   map[string]map[string]struct {
			Responses map[string]any `yaml:"responses"`
		} `yaml:"paths"`
	}
	if err := yaml.Unmarshal(schemas.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi %q", doc.OpenAPI)
	}
	want := map[string][]string{
		"/v1/events":         {"202", "400", "401", "403", "409", "413", "415", "422", "429", "503"},
		"/v1/workflows/{id}": {"200", "401", "403", "404", "429", "503"},
	}
	for path, codes := range want {
		ops := doc.Paths[path]
		for method, op := range ops {
			for _, c := range codes {
				if op.Responses[c] == nil {
					t.Errorf("%s %s: no %s response", method, path, c)
				}
			}
		}
		if len(ops) == 0 {
			t.Errorf("%s: not described", path)
		}
	}
	for _, reason := range []string{"undecodable", "missing_type", "invalid_id", "no_id", "no_route", "oversized", "key_mismatch",
		"conflict", "in_flight", "unsupported_media_type", "unauthorized", "unavailable", "unknown_workflow",
		"no_key", "forbidden", "rate_limited", "overloaded"} {
		if !strings.Contains(string(schemas.OpenAPI), reason) {
			t.Errorf("reason %s is not documented", reason)
		}
	}
}

// The served description publishes this ingress's key expiry (the
// draft's §2.3), and every problem links to it (§2.7).
func TestOpenAPIPublishesKeyExpiry(t *testing.T) {
	for retention, want := range map[time.Duration]string{0: `"never: postgres.retention is 0"`, 720 * time.Hour: `"720h0m0s after the workflow started (postgres.retention)"`} {
		var doc struct {
			Paths map[string]map[string]struct {
				Parameters []map[string]any `yaml:"parameters"`
			} `yaml:"paths"`
		}
		b := openAPI(retention)
		if err := yaml.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		got := doc.Paths["/v1/events"]["post"].Parameters[0]
		if got["name"] != "Idempotency-Key" || !strings.Contains(string(b), "x-idempotency-key-expiry: "+want) {
			t.Errorf("retention %s: %v", retention, got["x-idempotency-key-expiry"])
		}
	}
	rec := httptest.NewRecorder()
	writeProblem(rec, 400, "no_key", "x", nil)
	if l := rec.Header().Get("Link"); !strings.Contains(l, "</v1/openapi.yaml>") || !strings.Contains(l, `rel="describedby"`) {
		t.Errorf("Link %q", l)
	}
}
