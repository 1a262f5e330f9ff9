package kafkasasl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dedupio/dedup/connect/secretfile"
)

// fakeAgent is an EKS Pod Identity agent, or an ECS task's credentials
// endpoint: a GET with the pod's token in Authorization, answered with
// temporary credentials as JSON (the fields aws-sdk-go-v2's
// credentials/endpointcreds reads; its errors as {"code","message"}).
type fakeAgent struct {
	mu       sync.Mutex
	token    string        // the Authorization it accepts ("" for none)
	lifetime time.Duration // 0: no Expiration in the answer
	fail     []int         // statuses before the next success
	calls    int
	issued   int
}

func (a *fakeAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls++
	answer := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	if r.Method != http.MethodGet {
		answer(http.StatusMethodNotAllowed, map[string]string{"code": "MethodNotAllowed", "message": r.Method})
		return
	}
	if r.Header.Get("Authorization") != a.token {
		answer(http.StatusUnauthorized, map[string]string{"code": "AccessDeniedException", "message": "the service account token is not valid"})
		return
	}
	if len(a.fail) > 0 {
		s := a.fail[0]
		a.fail = a.fail[1:]
		answer(s, map[string]string{"code": "ServiceUnavailable", "message": "try later"})
		return
	}
	a.issued++
	c := map[string]string{
		"AccessKeyId":     fmt.Sprintf("ASIAPOD%d", a.issued),
		"SecretAccessKey": fmt.Sprintf("pod-secret-%d", a.issued),
		"Token":           fmt.Sprintf("pod-session-%d", a.issued),
		"AccountId":       "123456789012",
	}
	if a.lifetime > 0 {
		c["Expiration"] = time.Now().Add(a.lifetime).UTC().Format(time.RFC3339)
	}
	answer(http.StatusOK, c)
}

func (a *fakeAgent) set(f func(a *fakeAgent)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f(a)
}

func (a *fakeAgent) counts() (calls, issued int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls, a.issued
}

func (a *fakeAgent) secret(key string) (string, bool) {
	var n int
	if _, err := fmt.Sscanf(key, "ASIAPOD%d", &n); err != nil {
		return "", false
	}
	return fmt.Sprintf("pod-secret-%d", n), true
}

// EKS Pod Identity: the agent's endpoint in
// AWS_CONTAINER_CREDENTIALS_FULL_URI, the pod's token in the file
// AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE (read again when the kubelet
// rotates it). The credentials sign the logins, are kept until five
// minutes before they expire, renewed then, fetched again after an
// agent's 5xx, and an agent's refusal is an error naming the endpoint
// and the agent's code, never the token.
func TestAnEKSPodIdentityAgentsCredentialsSignTheLogins(t *testing.T) {
	noAWSEnv(t)
	agent := &fakeAgent{token: "pod-jwt-one", lifetime: time.Hour}
	srv := httptest.NewServer(agent)
	defer srv.Close()
	tokenFile := filepath.Join(t.TempDir(), "eks-pod-identity-token")
	writeFile(t, tokenFile, "pod-jwt-one\n")
	endpoint := srv.URL + "/v1/credentials"
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", endpoint)
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", tokenFile)
	c := Config{Mechanism: AWSMSKIAM}
	m, err := c.Build()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Identity(), "the AWS container credentials endpoint "+endpoint+" (AWS_CONTAINER_CREDENTIALS_FULL_URI)"; got != want {
		t.Errorf("Identity %q, want %q", got, want)
	}
	for range 3 {
		if l := login(t, m, mskBroker, mskHost, agent); l.AccessKey != "ASIAPOD1" || l.SessionToken != "pod-session-1" || l.Region != "eu-west-1" {
			t.Fatalf("login: key %s token %q region %s", l.AccessKey, l.SessionToken, l.Region)
		}
	}
	if calls, _ := agent.counts(); calls != 1 {
		t.Errorf("%d requests to the agent for three logins, want 1 (credentials kept until near expiry)", calls)
	}

	// The kubelet rotates the token; the agent now gives credentials
	// that expire in four minutes, inside the renewal window.
	agent.set(func(a *fakeAgent) { a.token, a.lifetime = "pod-jwt-two, longer", 4*time.Minute })
	writeFile(t, tokenFile, "pod-jwt-two, longer\n")
	login(t, m, mskBroker, mskHost, agent) // the hour-long ones are still held
	m2, err := c.Build()
	if err != nil {
		t.Fatal(err)
	}
	if l := login(t, m2, mskBroker, mskHost, agent); l.AccessKey != "ASIAPOD2" {
		t.Errorf("with the rotated token: key %s", l.AccessKey)
	}
	if l := login(t, m2, mskBroker, mskHost, agent); l.AccessKey != "ASIAPOD3" {
		t.Errorf("credentials 4 minutes from expiry are renewed at the next login: key %s", l.AccessKey)
	}

	// The agent unavailable twice: tried again.
	agent.set(func(a *fakeAgent) { a.fail = []int{http.StatusServiceUnavailable, http.StatusInternalServerError} })
	calls, _ := agent.counts()
	if l := login(t, m2, mskBroker, mskHost, agent); l.AccessKey != "ASIAPOD4" {
		t.Errorf("after a 503 and a 500: key %s", l.AccessKey)
	}
	if n, _ := agent.counts(); n-calls != 3 {
		t.Errorf("%d requests for a 503, a 500 and a success, want 3", n-calls)
	}

	// A token the agent refuses: not retried (a 4xx), an error that
	// names the endpoint and the agent's answer, not the token.
	writeFile(t, tokenFile, "pod-jwt-s3cret-but-wrong-and-longer")
	m3, err := c.Build()
	if err != nil {
		t.Fatal(err)
	}
	calls, _ = agent.counts()
	_, _, err = m3.Authenticate(context.Background(), mskBroker)
	if err == nil || !strings.Contains(err.Error(), endpoint) || !strings.Contains(err.Error(), "AWS_CONTAINER_CREDENTIALS_FULL_URI") ||
		!strings.Contains(err.Error(), "AccessDeniedException: the service account token is not valid") {
		t.Fatalf("a refused token: %v", err)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("the error quotes the token: %v", err)
	}
	if n, _ := agent.counts(); n-calls != 1 {
		t.Errorf("%d requests for a refused token, want 1", n-calls)
	}
	t.Logf("refused: %v", err)
}

// An endpoint whose answer has no Expiration (a credentials server of
// one's own) is asked again at each login: nothing says how long its
// credentials hold. An answer without a secret key is an error.
func TestContainerCredentialsWithoutAnExpirationAreFetchedForEachLogin(t *testing.T) {
	noAWSEnv(t)
	agent := &fakeAgent{token: "static-token"}
	srv := httptest.NewServer(agent)
	defer srv.Close()
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", srv.URL+"/creds")
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "static-token")
	m, err := Config{Mechanism: AWSMSKIAM}.Build()
	if err != nil {
		t.Fatal(err)
	}
	login(t, m, mskBroker, mskHost, agent)
	if l := login(t, m, mskBroker, mskHost, agent); l.AccessKey != "ASIAPOD2" {
		t.Errorf("second login: key %s, want ASIAPOD2 (fetched again)", l.AccessKey)
	}

	empty := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"AccessKeyId":"ASIAPOD9","Token":"t","Expiration":"2099-01-01T00:00:00Z"}`)
	}))
	defer empty.Close()
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", empty.URL)
	m, err = Config{Mechanism: AWSMSKIAM}.Build()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Authenticate(context.Background(), mskBroker); err == nil || !strings.Contains(err.Error(), "no credentials") {
		t.Errorf("an answer without SecretAccessKey: %v", err)
	}
}

// The token goes over http:// only where the AWS SDKs send it: this
// machine, ECS's 169.254.170.2, EKS Pod Identity's 169.254.170.23 and
// fd00:ec2::23; anywhere else https://. A relative URI is a path on
// 169.254.170.2, never another host. Refusals come at start-up and name
// the variable.
func TestAContainerCredentialsEndpointIsRefusedAtStartUpUnlessTheSDKsWouldUseIt(t *testing.T) {
	for _, tc := range []struct {
		full, relative, want string // want "": accepted
	}{
		{"http://169.254.170.23/v1/credentials", "", ""},
		{"http://[fd00:ec2::23]/v1/credentials", "", ""},
		{"http://169.254.170.2/v2/credentials/x", "", ""},
		{"http://127.0.0.1:2773/creds", "", ""},
		{"http://localhost:2773/creds", "", ""},
		{"https://creds.example.com/v1/credentials", "", ""},
		{"", "/v2/credentials/0f3a", ""},
		{"http://creds.example.com/v1/credentials", "", "AWS_CONTAINER_CREDENTIALS_FULL_URI: http:// to creds.example.com"},
		{"http://169.254.169.254/latest/meta-data/", "", "AWS_CONTAINER_CREDENTIALS_FULL_URI: http:// to 169.254.169.254"},
		{"http://10.0.0.7/creds", "", "AWS_CONTAINER_CREDENTIALS_FULL_URI: http:// to 10.0.0.7"},
		{"ftp://169.254.170.23/creds", "", "AWS_CONTAINER_CREDENTIALS_FULL_URI is not an http(s) URL"},
		{"/v1/credentials", "", "AWS_CONTAINER_CREDENTIALS_FULL_URI is not an http(s) URL"},
		{"", "@evil.example.com/creds", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI is not a path"},
		{"", "v2/credentials", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI is not a path"},
		{"", "//evil.example.com/creds", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI is not a path"},
		{"http://169.254.170.23/v1/credentials", "/v2/credentials/x", "set AWS_CONTAINER_CREDENTIALS_FULL_URI or AWS_CONTAINER_CREDENTIALS_RELATIVE_URI, not both"},
	} {
		t.Run(tc.full+tc.relative, func(t *testing.T) {
			noAWSEnv(t)
			t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", tc.full)
			t.Setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", tc.relative)
			_, err := Config{Mechanism: AWSMSKIAM}.Build()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Build: %v, want %q", err, tc.want)
			}
		})
	}
}

// A token is one header value: a line break inside would add headers of
// the caller's choosing. Refused at start-up naming its variable, not
// quoting it.
func TestAContainerAuthorizationTokenWithALineBreakIsRefusedNamingItsVariable(t *testing.T) {
	noAWSEnv(t)
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://169.254.170.23/v1/credentials")
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "tok-s3cret\r\nX-Other: 1")
	if _, err := (Config{Mechanism: AWSMSKIAM}).Build(); err == nil || !strings.Contains(err.Error(), "AWS_CONTAINER_AUTHORIZATION_TOKEN holds a line break") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("a token with a line break: %v", err)
	}
	f := filepath.Join(t.TempDir(), "token")
	writeFile(t, f, "tok-s3cret\nX-Other: 1\n")
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", f)
	if _, err := (Config{Mechanism: AWSMSKIAM}).Build(); err == nil || !strings.Contains(err.Error(), "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE holds a line break") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("a token file with a line break: %v", err)
	}
}

// The SDKs' order: keys in the environment, then a web identity, then the
// container endpoint. A pod with both an IRSA role (AWS_ROLE_ARN and
// AWS_WEB_IDENTITY_TOKEN_FILE) and Pod Identity uses the role, as the AWS
// SDKs would.
func TestTheEnvironmentsKeysAndAWebIdentityComeBeforeTheContainerEndpoint(t *testing.T) {
	noAWSEnv(t)
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://169.254.170.23/v1/credentials")
	t.Setenv("AWS_ACCESS_KEY_ID", keyID1)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret1)
	c := Config{Mechanism: AWSMSKIAM}
	if got := c.Identity(); got != "the AWS access key in AWS_ACCESS_KEY_ID" {
		t.Errorf("keys and a container endpoint: Identity %q", got)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	t.Setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/dedup")
	t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/secrets/eks.amazonaws.com/serviceaccount/token")
	if got := c.Identity(); !strings.Contains(got, "web identity") {
		t.Errorf("a web identity and a container endpoint: Identity %q", got)
	}
}

// The token goes to the endpoint named, and nowhere else: a redirect is
// not followed, and an http:// endpoint (EKS's 169.254.170.23) is never
// reached through HTTP_PROXY, which Go's proxy rule would use for a
// link-local address.
func TestTheContainerAuthorizationTokenGoesToTheEndpointOnly(t *testing.T) {
	noAWSEnv(t)
	var mu sync.Mutex
	var leaked []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		leaked = append(leaked, r.Header.Get("Authorization"))
		mu.Unlock()
		http.Error(w, "no", http.StatusForbidden)
	}))
	defer other.Close()
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/v1/credentials", http.StatusTemporaryRedirect)
	}))
	defer redirecting.Close()
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", redirecting.URL+"/v1/credentials")
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "pod-s3cret")
	m, err := Config{Mechanism: AWSMSKIAM}.Build()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Authenticate(context.Background(), mskBroker); err == nil || !strings.Contains(err.Error(), "redirect") {
		t.Errorf("a redirect: %v", err)
	}
	mu.Lock()
	if len(leaked) > 0 {
		t.Errorf("the token followed a redirect to another host: %q", leaked)
	}
	mu.Unlock()
}

func TestTheContainerAuthorizationTokenIsNotSentThroughHTTPProxy(t *testing.T) {
	if os.Getenv("DEDUP_PODID_CHILD") == "1" {
		creds, err := containerCredentials(os.Getenv)
		if err != nil {
			fmt.Println("refused:", err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = creds(ctx)
		fmt.Println("fetch:", err)
		return
	}
	var mu sync.Mutex
	var leaked []string
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		leaked = append(leaked, r.URL.String()+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		http.Error(w, "proxy", http.StatusForbidden)
	}))
	defer proxy.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestTheContainerAuthorizationTokenIsNotSentThroughHTTPProxy$")
	cmd.Env = append(os.Environ(), "DEDUP_PODID_CHILD=1", "HTTP_PROXY="+proxy.URL, "http_proxy="+proxy.URL,
		"NO_PROXY=", "no_proxy=", "REQUEST_METHOD=",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI=http://169.254.170.23:1/v1/credentials",
		"AWS_CONTAINER_AUTHORIZATION_TOKEN=pod-s3cret")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	t.Logf("child: %s", out)
	mu.Lock()
	defer mu.Unlock()
	if len(leaked) > 0 {
		t.Errorf("HTTP_PROXY set: the container authorization token for http://169.254.170.23 reached the proxy in clear text: %q", leaked)
	}
}

// adversary 50: the scheme of a URL is case-insensitive (RFC 3986 3.1), and
// url.Parse lowercases it: "HTTP://169.254.170.23/…" passes the http://
// host check as http, and Go's client sends it as http. The endpoint must
// then never go through HTTP_PROXY either, whatever the case of its scheme.
func TestAnUppercaseHTTPSchemeIsNotSentThroughHTTPProxy(t *testing.T) {
	if os.Getenv("DEDUP_PODID_CHILD_UPPER") == "1" {
		creds, err := containerCredentials(os.Getenv)
		if err != nil {
			fmt.Println("refused:", err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = creds(ctx)
		fmt.Println("fetch:", err)
		return
	}
	var mu sync.Mutex
	var leaked []string
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		leaked = append(leaked, r.URL.String()+" Authorization: "+r.Header.Get("Authorization"))
		mu.Unlock()
		http.Error(w, "proxy", http.StatusForbidden)
	}))
	defer proxy.Close()
	for _, full := range []string{"HTTP://169.254.170.23:1/v1/credentials", "Http://169.254.170.23:1/v1/credentials"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestAnUppercaseHTTPSchemeIsNotSentThroughHTTPProxy$")
		cmd.Env = append(os.Environ(), "DEDUP_PODID_CHILD_UPPER=1", "HTTP_PROXY="+proxy.URL, "http_proxy="+proxy.URL,
			"NO_PROXY=", "no_proxy=", "REQUEST_METHOD=",
			"AWS_CONTAINER_CREDENTIALS_FULL_URI="+full,
			"AWS_CONTAINER_AUTHORIZATION_TOKEN=pod-s3cret")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		t.Logf("%s: child: %s", full, out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(leaked) > 0 {
		t.Errorf("HTTP_PROXY set: the container authorization token for an http endpoint written with an uppercase scheme reached the proxy in clear text: %q", leaked)
	}
}

// adversary 50: an endpoint that does not answer (the Pod Identity agent
// behind a NetworkPolicy that drops the packets, an agent stuck) bounds a
// login at ~30 s, awsRenewal says. But the renewal holds its mutex across
// the 30 s, and each login that waited on it then starts a 30 s renewal of
// its own: two brokers' logins at once, the second returns after ~60 s,
// the Nth after N×30 s.
func TestConcurrentLoginsAgainstAStuckContainerEndpointReturnWithinOneRenewal(t *testing.T) {
	noAWSEnv(t)
	// A renewal's bound, shortened: the logins must return within it, not
	// one after the other (N of them, N times it).
	defer func(d time.Duration) { renewalTimeout = d }(renewalTimeout)
	renewalTimeout = 2 * time.Second
	release := make(chan struct{})
	var mu sync.Mutex
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		mu.Unlock()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", srv.URL+"/v1/credentials")
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "pod-token")
	m, err := Config{Mechanism: AWSMSKIAM}.Build()
	if err != nil {
		t.Fatal(err)
	}
	const logins = 2
	type result struct {
		took time.Duration
		err  error
	}
	done := make(chan result, logins)
	for range logins {
		go func() {
			start := time.Now()
			_, _, err := m.Authenticate(context.Background(), mskBroker)
			done <- result{time.Since(start), err}
		}()
	}
	deadline := time.After(renewalTimeout * 3 / 2)
	for i := range logins {
		select {
		case r := <-done:
			t.Logf("login returned after %v: %v", r.took.Round(time.Second), r.err)
		case <-deadline:
			mu.Lock()
			n := calls
			mu.Unlock()
			t.Fatalf("%d of %d concurrent logins still waiting after %v (the endpoint was asked %d times): a login hangs beyond the renewal's bound (%v)", logins-i, logins, renewalTimeout*3/2, n, renewalTimeout)
		}
	}
}

// adversary 50: aws-sdk-go-v2 (config/resolve_credentials.go, isAllowedHost)
// takes an http:// host that net.ParseIP reads as loopback or one of the
// three container addresses, else resolves it and checks every address
// with net.ParseIP. A host with an IPv6 zone is none of these (net.ParseIP
// gives nil for it, and net.LookupHost returns the literal as it is): the
// SDK refuses it ("invalid endpoint host … only loopback/ecs/eks hosts are
// allowed"). containerHTTPHost parses with netip and compares a.Unmap(),
// which drops the zone of an IPv4-mapped address: it takes what the SDK
// refuses. The IPv4-mapped form without a zone the SDK takes (net.IP.Equal).
func TestAContainerEndpointIsTakenOverHTTPOnlyWhereTheAWSSDKTakesIt(t *testing.T) {
	for _, tc := range []struct {
		full string
		ok   bool // what aws-sdk-go-v2's isAllowedHost says
	}{
		{"http://[::ffff:169.254.170.23]/v1/credentials", true},
		{"http://[::ffff:169.254.170.2]/v2/credentials/x", true},
		{"http://[::ffff:169.254.170.23%25eth0]/v1/credentials", false},
		{"http://[::ffff:169.254.170.2%25eth0]/v2/credentials/x", false},
		{"http://[fd00:ec2::23%25eth0]/v1/credentials", false},
		{"http://[::1%25lo]:2773/creds", false},
	} {
		t.Run(tc.full, func(t *testing.T) {
			noAWSEnv(t)
			t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", tc.full)
			_, err := Config{Mechanism: AWSMSKIAM}.Build()
			if tc.ok && err != nil {
				t.Errorf("Build: %v; the AWS SDK takes it", err)
			}
			if !tc.ok && err == nil {
				t.Errorf("Build accepted %s silently; the AWS SDK refuses it (net.ParseIP reads no address in a host with a zone: invalid endpoint host, only loopback/ecs/eks hosts are allowed)", tc.full)
			}
		})
	}
}

// adversary 50: the token file rotated after start-up to hold a line break
// (a header of the writer's choosing), or deleted, fails the login with
// an error naming the variable and never quoting the token; the agent
// never sees the injected header. An answer over 1 MiB, malformed JSON
// or a malformed Expiration is an error that quotes no secret.
func TestARotatedTokenFileWithALineBreakOrRemovedFailsTheLoginWithoutQuotingIt(t *testing.T) {
	noAWSEnv(t)
	var mu sync.Mutex
	var injected []string
	agent := &fakeAgent{token: "pod-jwt-one"} // no Expiration: fetched at each login
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Get("X-Injected"); v != "" {
			mu.Lock()
			injected = append(injected, v)
			mu.Unlock()
		}
		agent.ServeHTTP(w, r)
	}))
	defer srv.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeFile(t, tokenFile, "pod-jwt-one\n")
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", srv.URL+"/v1/credentials")
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", tokenFile)
	m, err := Config{Mechanism: AWSMSKIAM}.Build()
	if err != nil {
		t.Fatal(err)
	}
	login(t, m, mskBroker, mskHost, agent)
	for _, content := range []string{"pod-s3cret\nX-Injected: 1\n", "pod-s3cret\rX-Injected: 2", "pod-s3cret\r\nX-Injected: 3\r\n\r\n"} {
		writeFile(t, tokenFile, content)
		time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
		start := time.Now()
		_, _, err := m.Authenticate(context.Background(), mskBroker)
		if err == nil || !strings.Contains(err.Error(), "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE") || strings.Contains(err.Error(), "s3cret") || time.Since(start) > 5*time.Second {
			t.Errorf("token file rotated to %q: %v (after %v)", content, err, time.Since(start))
		}
	}
	if err := os.Remove(tokenFile); err != nil {
		t.Fatal(err)
	}
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	if _, _, err := m.Authenticate(context.Background(), mskBroker); err == nil || !strings.Contains(err.Error(), "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE") {
		t.Errorf("token file removed: %v", err)
	}
	mu.Lock()
	if len(injected) > 0 {
		t.Errorf("a header from the token file reached the agent: %q", injected)
	}
	mu.Unlock()

	for name, body := range map[string]string{
		"huge":                 `{"AccessKeyId":"ASIAX","SecretAccessKey":"sec-s3cret","Token":"` + strings.Repeat("t", 2<<20) + `"}`,
		"malformed":            `{"AccessKeyId":"ASIAX","SecretAccessKey":"sec-s3cret",`,
		"malformed expiration": `{"AccessKeyId":"ASIAX","SecretAccessKey":"sec-s3cret","Token":"tok-s3cret","Expiration":"tomorrow"}`,
		"expiration a number":  `{"AccessKeyId":"ASIAX","SecretAccessKey":"sec-s3cret","Token":"tok-s3cret","Expiration":12}`,
		"secret a number":      `{"AccessKeyId":"ASIAX","SecretAccessKey":12345678,"Token":"tok-s3cret"}`,
	} {
		bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, body) }))
		t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", bad.URL)
		t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "")
		t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "pod-s3cret")
		m, err := Config{Mechanism: AWSMSKIAM}.Build()
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = m.Authenticate(context.Background(), mskBroker)
		if err == nil || strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "12345678") || len(err.Error()) > 2000 {
			t.Errorf("%s answer: %.300v", name, err)
		} else {
			t.Logf("%s: %v", name, err)
		}
		bad.Close()
	}
}

// adversary 50: aws-sdk-go-v2's resolveLocalHTTPCredProvider refuses a
// FULL_URI whose parsed.Hostname() is empty ("unable to parse host from
// local HTTP cred provider URL"), https:// or not. containerEndpoint
// checks u.Host, which for "https://:443/…" is ":443": it takes a URL
// with no host at all, which Go's dialer turns into this machine's port.
func TestAContainerEndpointWithNoHostIsRefusedAtStartUpAsTheAWSSDKRefusesIt(t *testing.T) {
	for _, full := range []string{
		"https://:443/v1/credentials",
		"https://:8443",
		"https://user:pw@:443/v1/credentials",
	} {
		t.Run(full, func(t *testing.T) {
			noAWSEnv(t)
			t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", full)
			if _, err := (Config{Mechanism: AWSMSKIAM}).Build(); err == nil || !strings.Contains(err.Error(), "AWS_CONTAINER_CREDENTIALS_FULL_URI") {
				t.Errorf("Build: %v; want a start-up error naming AWS_CONTAINER_CREDENTIALS_FULL_URI: the URL has no host (the AWS SDK: unable to parse host from local HTTP cred provider URL)", err)
			}
		})
	}
}

// adversary 50: aws-sdk-go-v2's chain (config/resolve_credentials.go,
// resolveCredentialChain) takes a web identity only when
// AWS_WEB_IDENTITY_TOKEN_FILE is set; AWS_ROLE_ARN alone in the
// environment is not read there, and the chain goes on to the container
// endpoint. A Pod Identity pod that still carries AWS_ROLE_ARN (left over
// from an IRSA migration in a chart's env, or the application's own
// setting) logs in with the SDKs. dedup takes no source half set (a role
// whose token file went missing is not a reason to log in as another
// role): it refuses to start, and the refusal says both ways out.
func TestAPodIdentityPodWithALeftoverAWSRoleARNIsRefusedSayingWhatTheSDKsWouldDo(t *testing.T) {
	noAWSEnv(t)
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://169.254.170.23/v1/credentials")
	t.Setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/dedup")
	_, err := Config{Mechanism: AWSMSKIAM}.Build()
	if err == nil || !strings.Contains(err.Error(), "unset AWS_ROLE_ARN to use the endpoint") || !strings.Contains(err.Error(), "or set AWS_WEB_IDENTITY_TOKEN_FILE") {
		t.Errorf("Build: %v; want a refusal naming AWS_ROLE_ARN, the container endpoint and AWS_WEB_IDENTITY_TOKEN_FILE", err)
	}
}

// adversary 50: a password in the endpoint's URL (userinfo) is in neither
// Identity(), a start-up error nor a login error.
func TestAPasswordInTheContainerEndpointURLIsInNoIdentityNorError(t *testing.T) {
	for _, full := range []string{
		"https://user:pw-s3cret@127.0.0.1:1/v1/credentials",
		"http://user:pw-s3cret@169.254.170.23:1/v1/credentials",
		"http://user:pw-s3cret@creds.example.com/v1/credentials",
		"http://user:pw-s3cret@[::1/v1/credentials",
		"ftp://user:pw-s3cret@host/",
		"https://user:pw-s3cret@evil.example.com\\@169.254.170.23/",
	} {
		t.Run(full, func(t *testing.T) {
			noAWSEnv(t)
			t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", full)
			c := Config{Mechanism: AWSMSKIAM}
			if id := c.Identity(); strings.Contains(id, "s3cret") {
				t.Errorf("Identity: %s", id)
			}
			m, err := c.Build()
			if err != nil {
				if strings.Contains(err.Error(), "s3cret") {
					t.Errorf("Build: %v", err)
				}
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			if _, _, err := m.Authenticate(ctx, mskBroker); err == nil || strings.Contains(err.Error(), "s3cret") {
				t.Errorf("login: %v", err)
			}
		})
	}
}

// adversary 50: ECS's relative URI, /v2/credentials/<credentials ID>, is
// the task role's capability: the ECS agent at 169.254.170.2 answers the
// role's credentials to whoever GETs that path (no token with
// AWS_CONTAINER_CREDENTIALS_RELATIVE_URI; the ID is what an SSRF needs,
// flaws2.cloud level 3). Identity(), which goes into every SASL refusal
// logged, and each login error quote it in full.
func TestTheECSCredentialsIDIsInNoIdentityNorLoginError(t *testing.T) {
	noAWSEnv(t)
	const id = "5f9c2b1e-7d4a-4c3e-9b8f-0a1d2e3f4a5b"
	t.Setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/"+id)
	c := Config{Mechanism: AWSMSKIAM}
	if got := c.Identity(); strings.Contains(got, id) {
		t.Errorf("Identity quotes the ECS credentials ID: %s", got)
	}
	m, err := c.Build()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, _, err := m.Authenticate(ctx, mskBroker); err != nil && strings.Contains(err.Error(), id) {
		t.Errorf("a login error quotes the ECS credentials ID: %v", err)
	}
}

// adversary 50: an endless 429/5xx storm: three tries, a login fails in
// about a second, the error quotes neither token nor secret; credentials
// still valid are kept through it.
func TestA5xxStormFailsALoginQuicklyAndKeepsValidCredentials(t *testing.T) {
	noAWSEnv(t)
	agent := &fakeAgent{token: "pod-s3cret", lifetime: 4 * time.Minute}
	srv := httptest.NewServer(agent)
	defer srv.Close()
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", srv.URL+"/v1/credentials")
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "pod-s3cret")
	m, err := Config{Mechanism: AWSMSKIAM}.Build()
	if err != nil {
		t.Fatal(err)
	}
	login(t, m, mskBroker, mskHost, agent) // held, inside the renewal window
	storm := make([]int, 0, 100)
	for i := range 100 {
		storm = append(storm, []int{http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusInternalServerError}[i%3])
	}
	agent.set(func(a *fakeAgent) { a.fail = append([]int(nil), storm...) })
	start := time.Now()
	if l := login(t, m, mskBroker, mskHost, agent); l.AccessKey != "ASIAPOD1" || time.Since(start) > 5*time.Second {
		t.Errorf("a storm with valid credentials held: key %s after %v", l.AccessKey, time.Since(start))
	}
	m2, err := Config{Mechanism: AWSMSKIAM}.Build()
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	_, _, err = m2.Authenticate(context.Background(), mskBroker)
	if err == nil || strings.Contains(err.Error(), "s3cret") || time.Since(start) > 5*time.Second {
		t.Errorf("a storm with nothing held: %v after %v", err, time.Since(start))
	}
	t.Logf("%v after %v", err, time.Since(start).Round(time.Millisecond))
}

// adversary 50e: the fix makes concurrent logins share one renewal, but a
// renewal that failed while the held credentials are still valid leaves
// nothing behind but s.err: the very next login (franz-go's context, no
// deadline) starts a new renewal and waits its whole renewalTimeout
// again. With the agent stuck (a NetworkPolicy dropping packets) during
// the held credentials' last five minutes, each login — each broker
// connection, each re-authentication, with the requests queued behind it —
// waits 30 s, one after the other: N sequential logins, N x 30 s, though
// every one of them is answered with the same still-valid credentials.
func TestSequentialLoginsHoldingValidCredentialsWaitAtMostOneStuckRenewal(t *testing.T) {
	noAWSEnv(t)
	defer func(d time.Duration) { renewalTimeout = d }(renewalTimeout)
	renewalTimeout = time.Second
	var mu sync.Mutex
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n == 1 { // valid for four more minutes: within the renewal window
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]string{
				"AccessKeyId": "ASIAPOD1", "SecretAccessKey": "pod-secret-1", "Token": "pod-session-1",
				"Expiration": time.Now().Add(4 * time.Minute).UTC().Format(time.RFC3339),
			})
			return
		}
		<-r.Context().Done() // stuck: answers nothing
	}))
	defer srv.Close()
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", srv.URL+"/v1/credentials")
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "pod-token")
	m, err := Config{Mechanism: AWSMSKIAM}.Build()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Authenticate(context.Background(), mskBroker); err != nil {
		t.Fatal(err)
	}
	const logins = 3
	start := time.Now()
	for i := range logins {
		s := time.Now()
		_, _, err := m.Authenticate(context.Background(), mskBroker)
		t.Logf("login %d, credentials valid ~4 min, agent stuck: %v after %v", i+1, err, time.Since(s).Round(10*time.Millisecond))
		if err != nil {
			t.Errorf("login %d: %v; want the still-valid credentials", i+1, err)
		}
	}
	if took := time.Since(start); took > renewalTimeout*3/2 {
		mu.Lock()
		n := calls
		mu.Unlock()
		t.Errorf("%d sequential logins holding valid credentials took %v against a stuck agent (asked %d times): each waited a whole renewal (%v), N logins N x renewalTimeout", logins, took.Round(10*time.Millisecond), n, renewalTimeout)
	}
}

// adversary 50e: containerShown hides the endpoint's query and ECS's
// credentials ID (the path of AWS_CONTAINER_CREDENTIALS_RELATIVE_URI), but
// fetch wraps net/http's error as it is ("calling it: %w"): a *url.Error,
// whose text is `Get "<the whole URL>": …` (net/http strips only the
// password). An agent that does not answer (ECS's agent restarting, a
// NetworkPolicy, the stuck endpoint the renewal bound is for) puts the ID
// and the query into the login error, and so into the logs. The earlier
// test of the ID gave its login a 2 s context, shorter than the renewal:
// it saw only "context deadline exceeded". franz-go's login context is the
// client's, with no deadline: the login sees the renewal's own error.
func TestATransportErrorOfTheContainerEndpointQuotesNeitherTheECSCredentialsIDNorTheQuery(t *testing.T) {
	defer func(d time.Duration) { renewalTimeout = d }(renewalTimeout)
	renewalTimeout = 500 * time.Millisecond
	const id = "5f9c2b1e-7d4a-4c3e-9b8f-0a1d2e3f4a5b"
	for _, env := range [][2]string{
		{"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/" + id},
		{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:1/v1/credentials?X-Amz-Signature=" + id},
	} {
		t.Run(env[0], func(t *testing.T) {
			noAWSEnv(t)
			t.Setenv(env[0], env[1])
			m, err := Config{Mechanism: AWSMSKIAM}.Build()
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = m.Authenticate(context.Background(), mskBroker) // franz-go's: the client's context
			if err == nil {
				t.Fatal("a login succeeded against no endpoint")
			}
			t.Logf("login error: %v", err)
			if strings.Contains(err.Error(), id) {
				t.Errorf("a login error quotes %s's secret part (%s): %v", env[0], id, err)
			}
		})
	}
}

// adversary 50e: the stuck fetch of the test above, through the
// production path. containerEndpointCreds.fetch reads the token file
// (secretfile.File.Get: os.ReadFile) with no regard for its context: a
// token path that blocks on read (here a FIFO with no writer; a hung
// network or FUSE mount does the same) holds the renewal past
// renewalTimeout, and every later login waits on that renewal until its
// own context ends, even once the token file is a plain file again.
func TestABlockingTokenFileReadDoesNotHoldLoginsPastTheRenewalBound(t *testing.T) {
	noAWSEnv(t)
	defer func(d time.Duration) { renewalTimeout = d }(renewalTimeout)
	renewalTimeout = 300 * time.Millisecond
	agent := &fakeAgent{token: "pod-token"} // no Expiration: fetched at each login
	srv := httptest.NewServer(agent)
	defer srv.Close()
	dir := t.TempDir()
	p := filepath.Join(dir, "token")
	if err := os.WriteFile(p, []byte("pod-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", srv.URL+"/v1/credentials")
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", p)
	m, err := Config{Mechanism: AWSMSKIAM}.Build()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Authenticate(context.Background(), mskBroker); err != nil {
		t.Fatal(err)
	}
	// The token path blocks on read.
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skip("no FIFO here:", err)
	}
	fifo := filepath.Join(dir, "fifo")
	defer func() { // release the blocked read
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_, _ = w.WriteString("pod-token\n")
			_ = w.Close()
		}
		// Wait for the released renewal to end (it read renewalTimeout).
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _, _ = m.Authenticate(ctx, mskBroker)
	}()
	login := func() (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		start := time.Now()
		_, _, err := m.Authenticate(ctx, mskBroker)
		return time.Since(start), err
	}
	took, err := login()
	t.Logf("login with the token path blocking: %v after %v", err, took.Round(10*time.Millisecond))
	if took > 4*renewalTimeout {
		t.Errorf("a login with the token file's read blocked returned after %v, not at the renewal's bound %v: %v", took.Round(10*time.Millisecond), renewalTimeout, err)
	}
	// The read returns (the mount answers again: the FIFO is written and
	// replaced by a plain file); the renewal's bound holds meanwhile
	// (above), and the logins recover. (secretfile reads a FIFO without
	// blocking now, and gives up a read hung on a mount after HungAfter:
	// TestAFIFOAtThePathIsAnErrorAndHoldsNoRead,
	// TestAGetIsNotHeldByAnotherGetsReadThatNeverReturns.)
	if err := os.Rename(p, fifo); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("pod-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
		_, _ = w.WriteString("pod-token\n")
		_ = w.Close()
	}
	took, err = login()
	calls, _ := agent.counts()
	if err != nil {
		t.Errorf("with the token file readable again, a login failed after %v (the agent asked %d times in all): %v: the renewal blocked on the old read is never replaced", took.Round(10*time.Millisecond), calls, err)
	}
}

// adversary 51: ECS's relative URI's path is the credentials ID, the task
// role's capability, which no error may quote (containerShown drops it;
// TestTheECSCredentialsIDIsInNoIdentityNorLoginError). A redirect answered
// by the endpoint (a trailing-slash redirect, an http->https upgrade) names
// that same path, and the redirect error quotes it: containerShown is
// called with from "" for the redirect's target.
func TestARedirectOfTheECSEndpointDoesNotQuoteTheCredentialsID(t *testing.T) {
	noAWSEnv(t)
	const id = "5f9c2b1e-7d4a-4c3e-9b8f-0a1d2e3f4a5b"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Path+"/", http.StatusMovedPermanently) // as http.ServeMux does
	}))
	defer srv.Close()
	// 169.254.170.2 is ECS's, not this machine's: every dial of the
	// transport Build clones goes to the test server instead.
	orig := http.DefaultTransport
	tr := orig.(*http.Transport).Clone()
	tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, srv.Listener.Addr().String())
	}
	http.DefaultTransport = tr
	defer func() { http.DefaultTransport = orig }()
	t.Setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/"+id)
	m, err := Config{Mechanism: AWSMSKIAM}.Build()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, err = m.Authenticate(ctx, mskBroker)
	if err == nil {
		t.Fatal("a login succeeded against an endpoint that only redirects")
	}
	if !strings.Contains(err.Error(), "redirect") {
		t.Fatalf("the login error is not the redirect's (the test server was not reached?): %v", err)
	}
	if strings.Contains(err.Error(), id) {
		t.Errorf("a login error quotes the ECS credentials ID: %v", err)
	}
}

// adversary 51: containerEndpointCreds.fetch says retry is for "no
// answer, a 5xx, 429", as the AWS SDKs' endpointcreds retries. A redirect
// is an answer, refused for good (CheckRedirect): it is not tried again.
// It is: every *url.Error is retried, so a login against an endpoint that
// answers 307 sends the pod's token three times and waits 600ms of pauses
// for a refusal that cannot change.
func TestARefusedRedirectOfTheContainerEndpointIsNotTriedAgain(t *testing.T) {
	noAWSEnv(t)
	var calls atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the redirect was followed")
	}))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Redirect(w, r, other.URL+"/v1/credentials", http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", srv.URL+"/v1/credentials")
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "pod-token")
	m, err := Config{Mechanism: AWSMSKIAM}.Build()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, _, err = m.Authenticate(ctx, mskBroker)
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "redirect") {
		t.Fatalf("a login against a redirecting endpoint: %v", err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("one login asked the redirecting endpoint %d times in %v (the token sent each time), want once: a refused redirect is no missing answer", n, took.Round(10*time.Millisecond))
	}
}

// adversary 51: the production face of secretfile reading under its lock
// (2657305): EKS Pod Identity's token path blocks on a read that never
// returns (a hung mount; here a FIFO with no writer), then is a plain file
// again (the mount replaced; the FIFO moved aside, its reader still
// blocked). The logins never recover: every fetch waits on the token
// File's lock held by the read that never returns. This is what 50e's
// TestABlockingTokenFileReadDoesNotHoldLoginsPastTheRenewalBound asserted
// before 2657305 rewrote it to release the blocked read first.
func TestLoginsRecoverOnceTheTokenPathIsReadableAgainWhileAnOldReadStillHangs(t *testing.T) {
	noAWSEnv(t)
	defer func(d time.Duration) { renewalTimeout = d }(renewalTimeout)
	renewalTimeout = 300 * time.Millisecond
	agent := &fakeAgent{token: "pod-token"} // no Expiration: fetched at each login
	srv := httptest.NewServer(agent)
	defer srv.Close()
	dir := t.TempDir()
	p := filepath.Join(dir, "token")
	if err := os.WriteFile(p, []byte("pod-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", srv.URL+"/v1/credentials")
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", p)
	m, err := Config{Mechanism: AWSMSKIAM}.Build()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Authenticate(context.Background(), mskBroker); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skip("no FIFO here:", err)
	}
	fifo := filepath.Join(dir, "fifo")
	defer func() { // at the end, release the read that hung (EOF) and let its renewal end
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			if err := w.Close(); err != nil {
				t.Errorf("closing the FIFO's writer: %v", err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _, _ = m.Authenticate(ctx, mskBroker)
	}()
	login := func() (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		start := time.Now()
		_, _, err := m.Authenticate(ctx, mskBroker)
		return time.Since(start), err
	}
	if _, err := login(); err == nil {
		t.Fatal("a login succeeded with the token path blocking")
	}
	// The read never returns; the path is a plain file again.
	if err := os.Rename(p, fifo); err != nil {
		t.Fatal(err)
	}
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	if err := os.WriteFile(p, []byte("pod-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	var lastErr error
	for i := 0; i < 5; i++ {
		if _, lastErr = login(); lastErr == nil {
			return
		}
	}
	calls, _ := agent.counts()
	t.Errorf("with the token file readable again, 5 logins failed (the agent asked %d times in all; last: %v): the token File's lock is held by the read that never returns", calls, lastErr)
}
