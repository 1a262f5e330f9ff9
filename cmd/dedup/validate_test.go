package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dedup validate runs what dedup ingress checks at start: the exposure
// rule (no tokens file on a non-loopback listen), the tokens file (routes
// it names exist, default deny) and the tenant keyring; and it refuses a
// public_url with user info, without echoing it.
func TestValidateRunsTheIngressChecks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keys := write("keys.yaml", "keys: [{id: k1, secret: dGVzdC10ZW5hbnQta2V5LTAxMjM0NTY3ODlhYmNkZWY=}]\n")
	good := write("tokens.yaml", "tokens: [{tenant: acme, token: acme-token-0123456789, event_types: [\"*\"], routes: [a]}]\n")
	typo := write("typo.yaml", "tokens: [{tenant: acme, token: acme-token-0123456789, event_types: [\"*\"], routes: [b]}]\n")
	noRoutes := write("open.yaml", "tokens: [{tenant: acme, token: acme-token-0123456789, event_types: [\"*\"]}]\n")
	badKeys := write("badkeys.yaml", "keys: [{id: k1, secret: c2hvcnQ=}]\n")
	base := "kafka: {brokers: [b:9092], group: g, topics: [t], reset_offset: earliest, tenant_keys_file: %KEYS%}\n" +
		"routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]\n" +
		"postgres: {url: \"postgres://127.0.0.1/d\"}\n"
	cfg := func(keysFile, ingress string) string {
		return write("dedup.yaml", strings.Replace(base, "%KEYS%", keysFile, 1)+"ingress: "+ingress+"\n")
	}
	if code, _, err := dedup("validate", "--config", cfg(keys, `{listen: "0.0.0.0:8080", tokens_file: `+good+`}`)); code != 0 {
		t.Fatalf("a good config: %d %s", code, err)
	}
	for _, c := range []struct{ keys, ingress, want string }{
		{keys, `{listen: "0.0.0.0:8080"}`, "ingress.listen"},
		{keys, `{listen: "0.0.0.0:8080", tokens_file: ` + typo + `}`, `no route has the ID "b"`},
		{keys, `{listen: "0.0.0.0:8080", tokens_file: ` + noRoutes + `}`, "routes: missing"},
		{keys, `{listen: "0.0.0.0:8080", tokens_file: ` + filepath.Join(dir, "missing") + `}`, "ingress.tokens_file"},
		{badKeys, `{listen: "0.0.0.0:8080", tokens_file: ` + good + `}`, "kafka.tenant_keys_file"},
		{keys, `{public_url: "https://user:hunter2@events.example.com"}`, "ingress.public_url"},
	} {
		code, _, err := dedup("validate", "--config", cfg(c.keys, c.ingress))
		if code != 2 || !strings.Contains(err, c.want) {
			t.Errorf("ingress %s: %d %s, want an error naming %s", c.ingress, code, err, c.want)
		}
		if strings.Contains(err, "hunter2") {
			t.Errorf("the error shows the public_url's password: %v", err)
		}
	}
}
