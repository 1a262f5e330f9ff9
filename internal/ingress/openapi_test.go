package ingress

import (
	"strings"
	"testing"

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
		"/v1/events":         {"202", "400", "401", "409", "413", "415", "422", "503"},
		"/v1/workflows/{id}": {"200", "401", "404", "503"},
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
		"conflict", "in_flight", "unsupported_media_type", "unauthorized", "unavailable", "unknown_workflow"} {
		if !strings.Contains(string(schemas.OpenAPI), reason) {
			t.Errorf("reason %s is not documented", reason)
		}
	}
}
