package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dedup validate checks kafka.schema_registry: a credential only over
// https off this machine, both halves of basic auth, and the secret files
// it names (read now, as at start).
func TestValidateChecksTheSchemaRegistrySection(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := func(sr string) string {
		p := filepath.Join(dir, "dedup.yaml")
		body := "kafka: {brokers: [b:9092], group: g, topics: [t], reset_offset: earliest, schema_registry: " + sr + "}\n" +
			"routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]\n" +
			"postgres: {url: \"postgres://127.0.0.1/d\"}\n"
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, good := range []string{
		`{url: "https://registry.example.com", basic_auth: {username: u, password_file: ` + pw + `}}`,
		`{url: "http://127.0.0.1:8081", bearer_token_file: ` + pw + `}`,
		`{url: "http://registry.example.com:8081"}`,
	} {
		if code, stderr := runValidate(cfg(good)); code != 0 {
			t.Errorf("%s: exit %d: %s", good, code, stderr)
		}
	}
	for _, c := range []struct{ sr, want string }{
		{`{url: "http://registry.example.com", basic_auth: {username: u, password_file: ` + pw + `}}`, "kafka.schema_registry.url"},
		{`{url: "https://registry.example.com", basic_auth: {username: u}}`, "kafka.schema_registry.basic_auth"},
		{`{url: "https://registry.example.com", bearer_token_file: ` + filepath.Join(dir, "missing") + `}`, "kafka.schema_registry.bearer_token_file"},
		{`{url: "registry:8081"}`, "kafka.schema_registry.url"},
		{`{bearer_token_file: ` + pw + `}`, "kafka.schema_registry.url"},
		{`{url: "https://r.example.com", tls: {insecure_skip_verify: true}, bearer_token_file: ` + pw + `}`, "kafka.schema_registry.tls.insecure_skip_verify"},
		{`{url: "https://r.example.com", colour: red}`, "colour"},
	} {
		code, stderr := runValidate(cfg(c.sr))
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("schema_registry %s: exit %d: %s, want exit 2 and an error naming %s", c.sr, code, stderr, c.want)
		}
	}
}

// runValidate runs dedup validate on the config file at path: its exit
// code and what it wrote to stderr.
func runValidate(path string) (int, string) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"validate", "--config", path}, &stdout, &stderr)
	return code, stderr.String()
}
