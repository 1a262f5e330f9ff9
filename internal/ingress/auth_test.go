package ingress

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dedupio/dedup/connect/secretfile"
)

// TestLoadTokensRefuses: a tokens file that is not the YAML of tenants'
// tokens (the old one-token-a-line file included), has no token, or has
// an entry without a valid tenant, event_types or token is a start-up
// error naming ingress.tokens_file and the entry, never the token.
func TestLoadTokensRefuses(t *testing.T) {
	const ok = "tokens:\n- {tenant: acme, token: 0123456789abcdef, event_types: [\"order.*\"], routes: [confirm], read_status: true}\n" +
		"- {tenant: acme, token_sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08, event_types: [\"*\"], routes: [\"*\"]}\n"
	for _, tc := range []struct {
		name, file, want string // want: a substring of the error; "" loads
	}{
		{"comments only", "# producers\n\n   \n# none yet\n", "holds no token"},
		{"empty list", "tokens: []\n", "holds no token"},
		{"the old format", "# producers\n0123456789abcdef\nshort-token-0123456789\n", "the one-token-a-line format is gone"},
		{"a short token", "tokens: [{tenant: acme, token: short-token, event_types: [\"*\"], routes: [\"*\"]}]\n", "tokens[0]: token: 11 bytes, want at least 16"},
		{"no tenant", "tokens: [{token: 0123456789abcdef, event_types: [\"*\"], routes: [\"*\"]}]\n", "tokens[0]: tenant: missing or not a tenant name"},
		{"a bad tenant", "tokens: [{tenant: Acme/x, token: 0123456789abcdef, event_types: [\"*\"], routes: [\"*\"]}]\n", "tokens[0]: tenant: missing or not a tenant name"},
		{"no event types", "tokens: [{tenant: acme, token: 0123456789abcdef}]\n", "event_types: missing"},
		{"an empty pattern", "tokens: [{tenant: acme, token: 0123456789abcdef, event_types: [\"\"], routes: [\"*\"]}]\n", "event_types[0]"},
		{"routes: []", "tokens: [{tenant: acme, token: 0123456789abcdef, event_types: [\"*\"], routes: []}]\n", "routes: missing, null or empty"},
		{"no token", "tokens: [{tenant: acme, event_types: [\"*\"], routes: [\"*\"]}]\n", "token or token_sha256: missing"},
		{"both", "tokens: [{tenant: acme, token: 0123456789abcdef, token_sha256: ab, event_types: [\"*\"], routes: [\"*\"]}]\n", "give one"},
		{"a bad hash", "tokens: [{tenant: acme, token_sha256: short-token, event_types: [\"*\"], routes: [\"*\"]}]\n", "want 64 hex digits"},
		{"one token twice", "tokens:\n- {tenant: acme, token: 0123456789abcdef, event_types: [\"*\"], routes: [\"*\"]}\n- {tenant: globex, token: 0123456789abcdef, event_types: [\"*\"], routes: [\"*\"]}\n", "tokens[1]: the same token"},
		{"an unknown key", "tokens: [{tenant: acme, token: short-token-0123456789, event_types: [\"*\"], routes: [\"*\"], admin: true}]\n", "not a tokens file"},
		{"two documents", ok + "---\ntokens: [{tenant: globex, token: 0123456789abcdef-2, event_types: [\"*\"], routes: [\"*\"]}]\n", "more than one YAML document"},
		{"a token with a space", "tokens: [{tenant: acme, token: \" 0123456789abcdef\", event_types: [\"*\"], routes: [\"*\"]}]\n", "white space"},
		{"good", ok, ""},
	} {
		path := filepath.Join(t.TempDir(), "tokens")
		if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadTokens("ingress.tokens_file", path)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "ingress.tokens_file")) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), "short-token") || strings.Contains(err.Error(), "Acme/x")) {
			t.Errorf("%s: the error shows the token: %v", tc.name, err)
		}
	}
}

func TestGlobMatch(t *testing.T) {
	for _, c := range []struct {
		pat, s string
		ok     bool
	}{
		{"*", "https://example.com/events/order", true}, {"*", "", true}, {"order.*", "order.created", true},
		{"order.*", "orders.created", false}, {"order.created", "order.created", true}, {"order.created", "order.createdx", false},
		{"com.example/*.created", "com.example/order.created", true}, {"*.created", "order.deleted", false},
		{"a*b*c", "abc", true}, {"a*b*c", "axxbyyc", true}, {"a*b*c", "acb", false}, {"ab*ba", "aba", false}, {"[", "[", true},
	} {
		if got := globMatch(c.pat, c.s); got != c.ok {
			t.Errorf("globMatch(%q, %q) = %v, want %v", c.pat, c.s, got, c.ok)
		}
	}
}

// Check: a tokens file naming a route no route has is refused, at start
// and after a change (then nobody is let in until it is fixed).
func TestTokensCheckRoutes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("tokens: [{tenant: acme, token: 0123456789abcdef, event_types: [\"*\"], routes: [confirm]}]\n")
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	tokens, err := LoadTokens("ingress.tokens_file", path)
	if err != nil {
		t.Fatal(err)
	}
	known := func(r string) bool { return r == "confirm" }
	if err := tokens.Check(known, nil); err != nil {
		t.Fatal(err)
	}
	if p := tokens.principal("Bearer 0123456789abcdef"); p == nil || p.Tenant != "acme" {
		t.Fatalf("principal %v", p)
	}
	time.Sleep(10 * time.Millisecond)
	write("tokens: [{tenant: acme, token: 0123456789abcdef, event_types: [\"*\"], routes: [confrim]}]\n")
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	if p := tokens.principal("Bearer 0123456789abcdef"); p != nil {
		t.Errorf("a file naming route confrim after a change: %v let in", p.Tenant)
	}
	if _, err := tokens.current(); err == nil || !strings.Contains(err.Error(), `routes[0]: no route has the ID "confrim"`) {
		t.Errorf("err %v", err)
	}
}

// routes is default deny: an entry whose routes is absent, null (routes:
// with no value, routes: ~, what a template rendering an empty value or a
// file read half written gives) or an empty list is refused naming the
// entry; ["*"] is every route.
func TestTokenRoutesDefaultDeny(t *testing.T) {
	for name, entry := range map[string]string{
		"absent":   `{tenant: acme, token: 0123456789abcdef, event_types: ["*"]}`,
		"no value": "\n  tenant: acme\n  token: 0123456789abcdef\n  event_types: [\"*\"]\n  routes:\n",
		"~":        `{tenant: acme, token: 0123456789abcdef, event_types: ["*"], routes: ~}`,
		"null":     `{tenant: acme, token: 0123456789abcdef, event_types: ["*"], routes: null}`,
		"[]":       `{tenant: acme, token: 0123456789abcdef, event_types: ["*"], routes: []}`,
	} {
		file := "tokens:\n- " + entry + "\n"
		if strings.HasPrefix(entry, "\n") {
			file = "tokens:\n-" + entry
		}
		if _, err := parseTokens("ingress.tokens_file", []byte(file), nil); err == nil || !strings.Contains(err.Error(), "tokens[0]") || !strings.Contains(err.Error(), "routes") {
			t.Errorf("routes %s: %v, want an error naming tokens[0] and routes", name, err)
		}
	}
	table, err := parseTokens("ingress.tokens_file", []byte(`tokens: [{tenant: acme, token: 0123456789abcdef, event_types: ["*"], routes: ["*"]}]`), func(r string) bool { return r == "confirm" })
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range table {
		if !p.MayRoute("confirm") || !p.MayRoute("notes") {
			t.Errorf(`routes ["*"]: may not start every route`)
		}
	}
}

// A presented token shorter than MinTokenBytes is refused whatever the
// file holds: a token_sha256 of "a" never authenticates.
func TestShortPresentedTokenIsRefused(t *testing.T) {
	tokens := writeTokens(t, `tokens: [{tenant: acme, token_sha256: ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb, event_types: ["*"], routes: ["*"]}]`+"\n")
	if p := tokens.principal("Bearer a"); p != nil {
		t.Errorf("the 1-byte token \"a\" (its sha256 in the file) authenticates as %q", p.Tenant)
	}
}

// A token pasted into tenant: by mistake is never echoed by the error.
func TestTokenInTenantIsNotEchoed(t *testing.T) {
	const tok = "Xy7-pasted-token-0123456789abcdef"
	// A lowercase hex token is a valid tenant name: it must not be echoed
	// by the errors of the entry's other fields either.
	const hexTok = "0f3a9c5e7b1d2468ace0f3a9c5e7b1d2"
	for _, file := range []string{
		"tokens: [{tenant: " + tok + ", token: 0123456789abcdef, event_types: [\"*\"], routes: [\"*\"]}]\n",
		"tokens: [{tenant: " + tok + ", event_types: [\"*\"], routes: [\"*\"]}]\n",
		"tokens: [{tenant: " + hexTok + ", token: short, event_types: [\"*\"], routes: [\"*\"]}]\n",
		"tokens: [{tenant: " + hexTok + ", token: 0123456789abcdef, routes: [\"*\"]}]\n",
	} {
		_, err := parseTokens("ingress.tokens_file", []byte(file), nil)
		if err == nil || strings.Contains(err.Error(), "pasted") || strings.Contains(err.Error(), hexTok) || !strings.Contains(err.Error(), "tokens[0]") {
			t.Errorf("%v, want an error naming tokens[0] without the value", err)
		}
	}
}

// A tokens file rewritten at the same size and modification time is read
// again: a revoked token stops working. Bound: the file's content is
// compared at least once a second (secretfile), so within 5 s.
func TestTokensRewrittenAtSameSizeAndMtimeAreReread(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	const file = "tokens: [{tenant: acme, token: %s, event_types: [\"*\"], routes: [\"*\"]}]\n"
	write := func(tok string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(strings.Replace(file, "%s", tok, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("old-token-0123456789")
	tokens, err := LoadTokens("ingress.tokens_file", path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if tokens.principal("Bearer old-token-0123456789") == nil {
		t.Fatal("the old token does not authenticate")
	}
	write("new-token-0123456789") // the same size
	if err := os.Chtimes(path, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for tokens.principal("Bearer old-token-0123456789") != nil {
		if time.Now().After(deadline) {
			t.Fatal("the revoked token still authenticates 5 s after the file was rewritten at the same size and mtime")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if tokens.principal("Bearer new-token-0123456789") == nil {
		t.Error("the new token does not authenticate")
	}
}
