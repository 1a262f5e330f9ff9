package kafkasasl

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dedupio/dedup/connect/secretfile"
)

func TestValidateNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, ""},
		{Config{Username: "u"}, "kafka.sasl.mechanism: empty"},
		{Config{Mechanism: "GSSAPI"}, `kafka.sasl.mechanism: "GSSAPI"`},
		{Config{Mechanism: "scram-sha-512", Username: "u", Password: "p"}, ""},
		{Config{Mechanism: "PLAIN", Password: "p"}, "kafka.sasl.username: empty"},
		{Config{Mechanism: "PLAIN", Username: "u"}, "kafka.sasl.password, password_file: set one"},
		{Config{Mechanism: "PLAIN", Username: "u", Password: "p", PasswordFile: "f"}, "kafka.sasl.password, password_file: set one"},
		{Config{Mechanism: "PLAIN", Username: "u", Password: "p", TokenFile: "f"}, "not PLAIN"},
		{Config{Mechanism: "OAUTHBEARER"}, "kafka.sasl.token_file, token_url: set one"},
		{Config{Mechanism: "OAUTHBEARER", TokenFile: "f", Username: "u"}, "not used by OAUTHBEARER"},
		{Config{Mechanism: "OAUTHBEARER", TokenURL: "https://idp/token"}, "kafka.sasl.client_id: empty"},
		{Config{Mechanism: "OAUTHBEARER", TokenURL: "https://idp/token", ClientID: "c"}, "kafka.sasl.client_secret, client_secret_file: set one"},
		{Config{Mechanism: "OAUTHBEARER", TokenURL: "idp/token", ClientID: "c", ClientSecret: "s"}, "kafka.sasl.token_url: want an http(s) URL"},
		{Config{Mechanism: "OAUTHBEARER", TokenFile: "f", ClientID: "c"}, "only with token_url"},
		{Config{Mechanism: "OAUTHBEARER", TokenURL: "https://idp/token", ClientID: "c", ClientSecretFile: "f", Scopes: []string{"kafka"}}, ""},
	} {
		err := tc.cfg.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// initial is the first message the mechanism sends to a broker.
func initial(t *testing.T, c Config) (string, error) {
	t.Helper()
	m, err := c.Build()
	if err != nil {
		t.Fatal(err)
	}
	_, msg, err := m.Authenticate(context.Background(), "broker:9092")
	return string(msg), err
}

// Secret files are read again when they change, at the next
// authentication.
func TestSecretFilesAreReadAgain(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "password")
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		// A new modification time even on a coarse clock.
		later := time.Now().Add(time.Duration(len(s)) * time.Second)
		if err := os.Chtimes(p, later, later); err != nil {
			t.Fatal(err)
		}
	}
	write(pw, "first\n")
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	c := Config{Mechanism: Plain, Username: "u", PasswordFile: pw}
	m, err := c.Build()
	if err != nil {
		t.Fatal(err)
	}
	_, msg, _ := m.Authenticate(context.Background(), "b")
	if string(msg) != "\x00u\x00first" {
		t.Fatalf("PLAIN message %q", msg)
	}
	write(pw, "second-one\n")
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	_, msg, _ = m.Authenticate(context.Background(), "b")
	if string(msg) != "\x00u\x00second-one" {
		t.Fatalf("after rotation: %q", msg)
	}
	if _, err := (Config{Mechanism: Plain, Username: "u", PasswordFile: filepath.Join(dir, "missing")}).Build(); err == nil ||
		!strings.Contains(err.Error(), "kafka.sasl.password_file") {
		t.Errorf("a missing file: %v", err)
	}

	tok := filepath.Join(dir, "token")
	write(tok, "tok-a")
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	msg1, err := initial(t, Config{Mechanism: OAuthBearer, TokenFile: tok, Extensions: map[string]string{"logicalCluster": "lkc-1"}})
	if err != nil || !strings.Contains(msg1, "auth=Bearer tok-a\x01") || !strings.Contains(msg1, "logicalCluster=lkc-1") {
		t.Fatalf("OAUTHBEARER token file: %q %v", msg1, err)
	}
}

// The client-credentials grant against a token endpoint (a real HTTP
// server speaking RFC 6749): the token is fetched once and reused until
// it expires; a refused client is an error that names the key and never
// quotes the secret.
func TestClientCredentials(t *testing.T) {
	var issued atomic.Int64
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil || r.Form.Get("grant_type") != "client_credentials" {
			http.Error(w, `{"error":"unsupported_grant_type"}`, http.StatusBadRequest)
			return
		}
		id, sec, ok := r.BasicAuth()
		if !ok {
			id, sec = r.Form.Get("client_id"), r.Form.Get("client_secret")
		}
		if id != "dedup" || sec != "cl1ent-s3cret" || r.Form.Get("scope") != "kafka" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"invalid_client"}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": "tok-" + string(rune('0'+issued.Add(1))), "token_type": "Bearer", "expires_in": 3600})
	}))
	defer idp.Close()
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretFile, []byte("cl1ent-s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Config{Mechanism: OAuthBearer, TokenURL: idp.URL, ClientID: "dedup", ClientSecretFile: secretFile, Scopes: []string{"kafka"}}
	m, err := c.Build()
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_, msg, err := m.Authenticate(context.Background(), "b")
		if err != nil || !strings.Contains(string(msg), "auth=Bearer tok-1\x01") {
			t.Fatalf("%q %v", msg, err)
		}
	}
	if issued.Load() != 1 {
		t.Errorf("%d tokens issued for three logins, want one (reused until it expires)", issued.Load())
	}
	c.ClientSecretFile, c.ClientSecret = "", "wr0ng-s3cret"
	_, err = initial(t, c)
	if err == nil || !strings.Contains(err.Error(), "kafka.sasl.token_url") || !strings.Contains(err.Error(), "invalid_client") {
		t.Fatalf("a refused client: %v", err)
	}
	if strings.Contains(err.Error(), "wr0ng-s3cret") {
		t.Errorf("the error quotes the secret: %v", err)
	}
}

// TestPlaintext: where a credential would cross a network unencrypted
// (SASL to a broker off this machine without TLS; a token_url over http://
// to a host off this machine), Plaintext names the key; loopback
// (127.0.0.0/8, ::1, localhost) is this machine.
func TestPlaintext(t *testing.T) {
	plainCfg := Config{Mechanism: "plain", Username: "u", Password: "p"}
	idp := func(u string) Config {
		return Config{Mechanism: OAuthBearer, TokenURL: u, ClientID: "c", ClientSecret: "s"}
	}
	for _, tc := range []struct {
		cfg     Config
		brokers []string
		tls     bool
		want    string
	}{
		{Config{}, []string{"kafka:9092"}, false, ""},
		{plainCfg, []string{"kafka:9092"}, false, "kafka.sasl.mechanism PLAIN sends credentials to kafka:9092 without TLS"},
		{plainCfg, []string{"127.0.0.1:9092", "[::1]:9092", "localhost:9092", "127.9.9.9"}, false, ""},
		{plainCfg, []string{"127.0.0.1:9092", "[2001:db8::1]:9092"}, false, "[2001:db8::1]:9092"},
		{plainCfg, []string{"kafka:9092"}, true, ""},
		{Config{Mechanism: ScramSHA256, Username: "u", Password: "p"}, []string{"10.0.0.1:9092"}, false, "SCRAM-SHA-256"},
		{idp("http://idp.example.com/token"), []string{"kafka:9092"}, true, "kafka.sasl.token_url: http:// to idp.example.com"},
		{idp("HTTP://idp.example.com/token"), []string{"kafka:9092"}, true, "kafka.sasl.token_url"},
		{idp("http://localhost:8080/token"), []string{"kafka:9092"}, true, ""},
		{idp("http://[::1]:8080/token"), []string{"kafka:9092"}, true, ""},
		{idp("https://idp.example.com/token"), []string{"kafka:9092"}, true, ""},
	} {
		err := tc.cfg.Plaintext(tc.brokers, tc.tls)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v %v tls=%v: %v, want %q", tc.cfg, tc.brokers, tc.tls, err, tc.want)
		}
	}
}

// OAUTHBEARER's client-credentials grant sends the client secret (HTTP
// Basic, or in the form when the server refuses that) to kafka.sasl.token_url
// only: a 307 from the token endpoint (a compromised or misrouted IdP, a
// path moved to another host) must not make the client POST the secret
// again to a host no start-up check saw, as the STS client of round 4
// no longer does with the web identity token.
func TestTheTokenURLClientDoesNotResendTheClientSecretOnARedirect(t *testing.T) {
	var leaked sync.Mutex
	var got []string
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		_, sec, _ := r.BasicAuth()
		leaked.Lock()
		got = append(got, sec+"|"+r.Form.Get("client_secret"))
		leaked.Unlock()
		if sec == "" && r.Form.Get("client_secret") == "" {
			http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"access_token":"tok-from-elsewhere","token_type":"Bearer","expires_in":3600}`))
	}))
	defer elsewhere.Close()
	// Another host than the token_url's (localhost, not 127.0.0.1).
	u, _ := url.Parse(elsewhere.URL)
	target := "http://localhost:" + u.Port() + "/steal"
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target, http.StatusTemporaryRedirect)
	}))
	defer idp.Close()
	c := Config{Mechanism: OAuthBearer, TokenURL: idp.URL + "/token", ClientID: "dedup", ClientSecret: "cl1ent-s3cret"}
	if err := c.Plaintext([]string{"127.0.0.1:9092"}, true); err != nil {
		t.Fatal(err)
	}
	m, err := c.Build()
	if err != nil {
		t.Fatal(err)
	}
	_, msg, err := m.Authenticate(context.Background(), "broker:9092")
	leaked.Lock()
	defer leaked.Unlock()
	for _, g := range got {
		if strings.Contains(g, "cl1ent-s3cret") {
			t.Errorf("the client secret was sent to %s after the token_url %s answered 307 (login: %q, %v)", target, c.TokenURL, msg, err)
			break
		}
	}
	if err == nil {
		t.Errorf("a token from %s, where token_url only redirected, was taken: %q", target, msg)
	}
}

// An IdP may answer the client-credentials grant without expires_in (RFC
// 6749 only recommends it): the access token is then a JWT whose own exp
// says when it stops working. golang.org/x/oauth2 takes a token with no
// Expiry as valid forever, so ReuseTokenSource hands the same token to
// every login after the broker started refusing it: no login succeeds
// again until a restart. A token past its exp must not be sent again.
func TestAnOAuthTokenWithoutExpiresInIsNotReusedPastItsJWTExpiry(t *testing.T) {
	var issued sync.Mutex
	n := 0
	jwt := func(exp time.Time) string {
		enc := func(s string) string {
			return strings.TrimRight(base64URL(s), "=")
		}
		return enc(`{"alg":"none","typ":"JWT"}`) + "." + enc(fmt.Sprintf(`{"sub":"dedup","exp":%d}`, exp.Unix())) + "."
	}
	var tokens []string
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		issued.Lock()
		defer issued.Unlock()
		n++
		tok := jwt(time.Now().Add(time.Second))
		tokens = append(tokens, tok)
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer"}`, tok)
	}))
	defer idp.Close()
	c := Config{Mechanism: OAuthBearer, TokenURL: idp.URL, ClientID: "dedup", ClientSecret: "s"}
	m, err := c.Build()
	if err != nil {
		t.Fatal(err)
	}
	_, first, err := m.Authenticate(context.Background(), "broker:9092")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2100 * time.Millisecond) // the JWT's exp (whole seconds) has passed
	_, again, err := m.Authenticate(context.Background(), "broker:9092")
	if err != nil {
		t.Fatal(err)
	}
	if string(first) == string(again) {
		issued.Lock()
		defer issued.Unlock()
		t.Errorf("the login after the token's exp sent the same, expired token (%d issued): a broker refuses it, and every later login sends it again", n)
	}
}

// kafka.brokers "[::1]" (bracketed IPv6, no port: franz-go dials
// [::1]:9092, as dialAddr says) is this machine, as "::1" and
// "[::1]:9092" are, which Plaintext lets SASL reach without TLS; it takes
// "[::1]" whole for a host name and refuses it: a false refusal of a
// local set-up (a sidecar or tunnel on IPv6 loopback).
func TestPlaintextTakesABracketedLoopbackSeedWithoutAPortForThisMachine(t *testing.T) {
	c := Config{Mechanism: Plain, Username: "u", Password: "p"}
	for _, b := range []string{"::1", "[::1]:9092", "[::1]"} {
		if err := c.Plaintext([]string{b}, false); err != nil {
			t.Errorf("broker %s (IPv6 loopback), tls off: %v; want nil as for ::1", b, err)
		}
	}
}

// An IdP that answers expires_in may still hand out a JWT whose own exp is
// earlier (a cached token re-served with a fixed expires_in, or an
// expires_in that is a policy ceiling): oauth2 takes expires_in alone, so
// ReuseTokenSource hands the token, already past its exp, to every login
// until expires_in runs out; the broker refuses each of them. The JWT's
// exp must bound the reuse whether or not expires_in is there.
func TestAnOAuthTokenIsNotReusedPastItsJWTExpiryWhenExpiresInIsLonger(t *testing.T) {
	var issued sync.Mutex
	n := 0
	jwt := func(exp time.Time) string {
		enc := func(s string) string {
			return strings.TrimRight(base64URL(s), "=")
		}
		return enc(`{"alg":"none","typ":"JWT"}`) + "." + enc(fmt.Sprintf(`{"sub":"dedup","exp":%d,"n":%d}`, exp.Unix(), n)) + "."
	}
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		issued.Lock()
		defer issued.Unlock()
		n++
		tok := jwt(time.Now().Add(-time.Minute))
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":3600}`, tok)
	}))
	defer idp.Close()
	c := Config{Mechanism: OAuthBearer, TokenURL: idp.URL, ClientID: "dedup", ClientSecret: "s"}
	m, err := c.Build()
	if err != nil {
		t.Fatal(err)
	}
	_, first, err := m.Authenticate(context.Background(), "broker:9092")
	if err != nil {
		t.Fatal(err)
	}
	_, again, err := m.Authenticate(context.Background(), "broker:9092")
	if err != nil {
		t.Fatal(err)
	}
	if string(first) == string(again) {
		issued.Lock()
		defer issued.Unlock()
		t.Errorf("the second login sent the same token, past its JWT exp, because expires_in said 3600s (%d issued): every login for an hour is refused", n)
	}
}

// JWT claim names are case-sensitive (RFC 7519 §10.1.1: "exp" is the
// expiry; "Exp" or "EXP" is another, private claim). jwtExpiry decodes
// with encoding/json, which matches field names case-insensitively and
// lets a later duplicate win, so a token without expires_in whose payload
// is {"exp":<in 1s>,"EXP":<far future>} is reused, past its real exp, by
// every login until a restart.
func TestAJWTsExpiryIsItsExpClaimOnlyNotAClaimNamedLikeItInAnotherCase(t *testing.T) {
	enc := func(s string) string { return strings.TrimRight(base64URL(s), "=") }
	tok := enc(`{"alg":"none","typ":"JWT"}`) + "." + enc(`{"sub":"dedup","exp":1800000001,"EXP":4102444800}`) + "."
	got, _ := jwtExpiry(tok)
	if want := time.Unix(1_800_000_001, 0); !got.Equal(want) {
		t.Errorf("jwtExpiry of a JWT with exp 1800000001 and a private claim EXP 4102444800 = %v, want its exp %v: the token is reused past its exp", got.UTC(), want.UTC())
	}
}
