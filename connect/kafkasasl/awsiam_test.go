package kafkasasl

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	mskiam "github.com/twmb/franz-go/pkg/sasl/aws"

	"github.com/dedupio/dedup/connect/secretfile"
	"github.com/dedupio/dedup/internal/testsupport/mskiamtest"
)

// Example keys, in AWS's documented format; not real credentials.
const (
	keyID1, secret1 = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	keyID2, secret2 = "AKIAI44QH8DHBEXAMPLE", "je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY"
	// An MSK broker's name: the signature's region comes from it.
	mskBroker, mskHost = "b-1.mycluster.abc123.c2.kafka.eu-west-1.amazonaws.com:9098", "b-1.mycluster.abc123.c2.kafka.eu-west-1.amazonaws.com"
)

// noAWSEnv clears the AWS_* variables the credential chain and franz-go's
// signer read, so that the machine's own do not leak into a test.
func noAWSEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ROLE_ARN",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_SESSION_NAME", "AWS_REGION", "AWS_DEFAULT_REGION",
		"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_STS", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"} {
		t.Setenv(k, "")
	}
}

func TestAWSMSKIAMValidate(t *testing.T) {
	iam := func(id, secret, token string) Config {
		return Config{Mechanism: "aws_msk_iam", AccessKeyIDFile: id, SecretAccessKeyFile: secret, SessionTokenFile: token}
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"nothing: the environment's credentials", iam("", "", ""), ""},
		{"both files", iam("/k/id", "/k/secret", ""), ""},
		{"both files and a session token", iam("/k/id", "/k/secret", "/k/token"), ""},
		{"the ID alone", iam("/k/id", "", ""), "kafka.sasl.access_key_id_file, secret_access_key_file: set both, or neither"},
		{"the secret alone", iam("", "/k/secret", "/k/token"), "kafka.sasl.access_key_id_file, secret_access_key_file: set both, or neither"},
		{"a session token alone", iam("", "", "/k/token"), "kafka.sasl.session_token_file: only with access_key_id_file and secret_access_key_file"},
		{"a username", Config{Mechanism: AWSMSKIAM, Username: "u"}, "not used by AWS_MSK_IAM"},
		{"a password file", Config{Mechanism: AWSMSKIAM, PasswordFile: "/p"}, "not used by AWS_MSK_IAM"},
		{"a token_url", Config{Mechanism: AWSMSKIAM, TokenURL: "https://idp/token"}, "not used by AWS_MSK_IAM"},
		{"AWS keys with PLAIN", Config{Mechanism: Plain, Username: "u", Password: "p", AccessKeyIDFile: "/k/id"}, "kafka.sasl.access_key_id_file, secret_access_key_file, session_token_file: for AWS_MSK_IAM, not PLAIN"},
		{"AWS keys without a mechanism", Config{SecretAccessKeyFile: "/k/secret"}, "kafka.sasl.mechanism: empty, but other kafka.sasl keys are set"},
		{"a misspelt mechanism", Config{Mechanism: "AWS_IAM"}, `kafka.sasl.mechanism: "AWS_IAM", want PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM`},
	} {
		err := tc.cfg.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// login runs the mechanism's client side against a broker named host
// and checks the payload as the broker would (mskiamtest.Verify: fields,
// and the signature recomputed by AWS's own signer).
func login(t *testing.T, m sasl.Mechanism, broker, host string, secrets keys) mskiamtest.Login {
	t.Helper()
	if m.Name() != "AWS_MSK_IAM" {
		t.Fatalf("mechanism %s, want AWS_MSK_IAM", m.Name())
	}
	s, msg, err := m.Authenticate(context.Background(), broker)
	if err != nil {
		t.Fatalf("authenticate: %v", err)
	}
	l, err := mskiamtest.Verify(msg, host, secrets.secret, time.Now())
	if err != nil {
		t.Fatalf("the broker would refuse %s: %v", msg, err)
	}
	if sec, _ := secrets.secret(l.AccessKey); strings.Contains(string(msg), sec) {
		t.Fatalf("the payload carries the secret key: %s", msg)
	}
	// MSK's answer ends the exchange.
	if done, _, err := s.Challenge([]byte(`{"version":"2020_10_22","request-id":"r"}`)); !done || err != nil {
		t.Fatalf("the broker's answer: done %v, %v", done, err)
	}
	return l
}

// keys are the access keys a broker knows: their secret keys.
type keys interface {
	secret(accessKey string) (string, bool)
}

type keyMap map[string]string

func (m keyMap) secret(k string) (string, bool) { s, ok := m[k]; return s, ok }

func writeFile(t *testing.T, p, s string) {
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

// The key files are read at each login, again when they change (a
// rotated Secret is used without a restart); the signature's region is
// the broker's, from its name; the payload carries the access key and
// session token, never the secret key.
func TestAWSMSKIAMKeyFiles(t *testing.T) {
	noAWSEnv(t)
	dir := t.TempDir()
	id, secret, token := filepath.Join(dir, "id"), filepath.Join(dir, "secret"), filepath.Join(dir, "token")
	writeFile(t, id, keyID1+"\n")
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	writeFile(t, secret, secret1+"\n")
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	writeFile(t, token, "session-token-1\n")
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	c := Config{Mechanism: AWSMSKIAM, AccessKeyIDFile: id, SecretAccessKeyFile: secret, SessionTokenFile: token}
	m, err := c.Build()
	if err != nil {
		t.Fatal(err)
	}
	secrets := keyMap{keyID1: secret1, keyID2: secret2}
	l := login(t, m, mskBroker, mskHost, secrets)
	if l.AccessKey != keyID1 || l.Region != "eu-west-1" || l.SessionToken != "session-token-1" {
		t.Errorf("first login: key %s region %s token %q", l.AccessKey, l.Region, l.SessionToken)
	}
	for _, k := range []string{"user-agent", "x-amz-expires"} {
		t.Logf("%s: %s", k, l.Fields[k])
	}

	writeFile(t, id, keyID2+"\n\n")
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	writeFile(t, secret, secret2+"\n\n")
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	writeFile(t, token, "session-token-2, longer\n")
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	l = login(t, m, mskBroker, mskHost, secrets)
	if l.AccessKey != keyID2 || l.SessionToken != "session-token-2, longer" {
		t.Errorf("after rotation: key %s token %q", l.AccessKey, l.SessionToken)
	}

	// No session token file: no x-amz-security-token.
	c.SessionTokenFile = ""
	if m, err = c.Build(); err != nil {
		t.Fatal(err)
	}
	if l = login(t, m, mskBroker, mskHost, secrets); l.SessionToken != "" {
		t.Errorf("without session_token_file: token %q", l.SessionToken)
	}
	if got := c.Identity(); got != "the AWS access key in kafka.sasl.access_key_id_file" {
		t.Errorf("Identity %q", got)
	}

	// A missing file is a start-up error naming its key, not its content.
	for key, cfg := range map[string]Config{
		"kafka.sasl.access_key_id_file":     {Mechanism: AWSMSKIAM, AccessKeyIDFile: filepath.Join(dir, "missing"), SecretAccessKeyFile: secret},
		"kafka.sasl.secret_access_key_file": {Mechanism: AWSMSKIAM, AccessKeyIDFile: id, SecretAccessKeyFile: filepath.Join(dir, "missing")},
		"kafka.sasl.session_token_file":     {Mechanism: AWSMSKIAM, AccessKeyIDFile: id, SecretAccessKeyFile: secret, SessionTokenFile: filepath.Join(dir, "missing")},
	} {
		_, err := cfg.Build()
		if err == nil || !strings.HasPrefix(err.Error(), key+":") {
			t.Errorf("%s missing: %v", key, err)
		}
	}
	// A file removed after start: the login fails, naming the key.
	if err := os.Remove(secret); err != nil {
		t.Fatal(err)
	}
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	if _, _, err := m.Authenticate(context.Background(), mskBroker); err == nil || !strings.Contains(err.Error(), "kafka.sasl.secret_access_key_file") {
		t.Errorf("secret file removed: %v", err)
	}
}

// With no key file, the credentials are the environment's:
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN. A source
// half set is an error, as is no source at all. A broker whose name has
// no region signs with AWS_REGION.
func TestAWSMSKIAMEnvironment(t *testing.T) {
	noAWSEnv(t)
	secrets := keyMap{keyID1: secret1}
	c := Config{Mechanism: AWSMSKIAM}
	if _, err := c.Build(); err == nil || !strings.Contains(err.Error(), "no AWS credentials: set kafka.sasl.access_key_id_file and secret_access_key_file, or in the environment AWS_ACCESS_KEY_ID") {
		t.Errorf("no credentials anywhere: %v", err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", keyID1)
	if _, err := c.Build(); err == nil || !strings.Contains(err.Error(), "set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY") {
		t.Errorf("AWS_ACCESS_KEY_ID alone: %v", err)
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret1)
	t.Setenv("AWS_SESSION_TOKEN", "env-session-token")
	m, err := c.Build()
	if err != nil {
		t.Fatal(err)
	}
	if l := login(t, m, mskBroker, mskHost, secrets); l.AccessKey != keyID1 || l.Region != "eu-west-1" || l.SessionToken != "env-session-token" {
		t.Errorf("from the environment: key %s region %s token %q", l.AccessKey, l.Region, l.SessionToken)
	}
	if got := c.Identity(); got != "the AWS access key in AWS_ACCESS_KEY_ID" {
		t.Errorf("Identity %q", got)
	}

	// A broker name without a region (a tunnel, a test broker).
	if _, _, err := m.Authenticate(context.Background(), "127.0.0.1:9098"); err == nil || !strings.Contains(err.Error(), "region") {
		t.Errorf("no region anywhere: %v", err)
	}
	t.Setenv("AWS_REGION", "ap-southeast-2")
	if l := login(t, m, "127.0.0.1:9098", "127.0.0.1", secrets); l.Region != "ap-southeast-2" {
		t.Errorf("AWS_REGION: region %s", l.Region)
	}
}

// fakeSTS is an STS endpoint speaking AssumeRoleWithWebIdentity in the
// query protocol (the request as aws-sdk-go-v2's sts client sends it; the
// test was first run against that client), exchanging one valid web
// identity token at a time for credentials of one role.
type fakeSTS struct {
	role     string
	lifetime time.Duration

	mu     sync.Mutex
	token  string   // the token it accepts
	fail   []int    // answers before the next success: an HTTP status (503), or 400 IDPCommunicationError
	calls  []string // RoleSessionName of each request
	issued int
}

func (s *fakeSTS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		http.Error(w, "<ErrorResponse><Error><Code>InvalidRequest</Code></Error></ErrorResponse>", http.StatusBadRequest)
		return
	}
	if err := r.ParseForm(); err != nil || r.Form.Get("Action") != "AssumeRoleWithWebIdentity" || r.Form.Get("Version") != "2011-06-15" {
		http.Error(w, "<ErrorResponse><Error><Code>InvalidAction</Code></Error></ErrorResponse>", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, r.Form.Get("RoleSessionName"))
	w.Header().Set("Content-Type", "text/xml")
	if len(s.fail) > 0 {
		status := s.fail[0]
		s.fail = s.fail[1:]
		w.WriteHeader(status)
		if status == http.StatusBadRequest {
			_, _ = fmt.Fprint(w, `<ErrorResponse><Error><Type>Sender</Type><Code>IDPCommunicationError</Code><Message>the IdP did not answer</Message></Error></ErrorResponse>`)
		}
		return
	}
	if r.Form.Get("RoleArn") != s.role || r.Form.Get("WebIdentityToken") != s.token {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = fmt.Fprint(w, `<ErrorResponse><Error><Type>Sender</Type><Code>InvalidIdentityToken</Code><Message>Incorrect token audience</Message></Error></ErrorResponse>`)
		return
	}
	s.issued++
	_, _ = fmt.Fprintf(w, `<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><AssumeRoleWithWebIdentityResult>
<Credentials><AccessKeyId>ASIAFAKE%d</AccessKeyId><SecretAccessKey>sts-secret-%d</SecretAccessKey><SessionToken>sts-session-%d</SessionToken><Expiration>%s</Expiration></Credentials>
</AssumeRoleWithWebIdentityResult><ResponseMetadata><RequestId>r</RequestId></ResponseMetadata></AssumeRoleWithWebIdentityResponse>`,
		s.issued, s.issued, s.issued, time.Now().Add(s.lifetime).UTC().Format(time.RFC3339))
}

func (s *fakeSTS) set(f func(s *fakeSTS)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

func (s *fakeSTS) counts() (calls, issued int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls), s.issued
}

// secret is the secret key of a key s issued.
func (s *fakeSTS) secret(key string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int
	if _, err := fmt.Sscanf(key, "ASIAFAKE%d", &n); err != nil || n < 1 || n > s.issued {
		return "", false
	}
	return fmt.Sprintf("sts-secret-%d", n), true
}

// IRSA: AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE are exchanged at STS
// (AssumeRoleWithWebIdentity, against a fake STS at
// AWS_ENDPOINT_URL_STS) for temporary credentials, which are kept until
// five minutes before they expire; the token file is read again for each
// exchange (the kubelet rotates it); what STS asks to retry is retried,
// three tries at most; a renewal that fails while the held credentials
// are valid keeps them. A refused token is an error naming the role and
// the variables, without the token.
func TestAWSMSKIAMWebIdentity(t *testing.T) {
	noAWSEnv(t)
	const role = "arn:aws:iam::123456789012:role/dedup"
	fake := &fakeSTS{role: role, token: "jwt-one", lifetime: time.Hour}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeFile(t, tokenFile, "jwt-one\n")
	t.Setenv("AWS_ROLE_ARN", role)
	c := Config{Mechanism: AWSMSKIAM}
	if _, err := c.Build(); err == nil || !strings.Contains(err.Error(), "set both AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE") {
		t.Errorf("AWS_ROLE_ARN alone: %v", err)
	}
	t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", filepath.Join(t.TempDir(), "missing"))
	if _, err := c.Build(); err == nil || !strings.HasPrefix(err.Error(), "AWS_WEB_IDENTITY_TOKEN_FILE:") {
		t.Errorf("a missing token file: %v", err)
	}
	t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", tokenFile)
	t.Setenv("AWS_ENDPOINT_URL_STS", srv.URL)
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv("AWS_ROLE_SESSION_NAME", "dedup-test")
	m, err := c.Build()
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Identity(); got != `AWS role "`+role+`" (AWS_ROLE_ARN, web identity)` {
		t.Errorf("Identity %q", got)
	}
	for range 3 {
		if l := login(t, m, mskBroker, mskHost, fake); l.AccessKey != "ASIAFAKE1" || l.SessionToken != "sts-session-1" {
			t.Fatalf("login: key %s token %q", l.AccessKey, l.SessionToken)
		}
	}
	if len(fake.calls) != 1 || fake.calls[0] != "dedup-test" {
		t.Errorf("STS requests %q for three logins, want one, session dedup-test (credentials kept until near expiry)", fake.calls)
	}

	// The kubelet rotates the token; STS now issues credentials that
	// expire in four minutes, inside the renewal window.
	fake.set(func(s *fakeSTS) { s.lifetime, s.token = 4*time.Minute, "jwt-two, longer" })
	writeFile(t, tokenFile, "jwt-two, longer\n")
	login(t, m, mskBroker, mskHost, fake) // the hour-long ones are still held
	if _, issued := fake.counts(); issued != 1 {
		t.Errorf("%d exchanges while the first credentials are good, want 1", issued)
	}
	m2, err := c.Build() // a new client: exchanges the rotated token
	if err != nil {
		t.Fatal(err)
	}
	if l := login(t, m2, mskBroker, mskHost, fake); l.AccessKey != "ASIAFAKE2" {
		t.Errorf("with the rotated token: key %s", l.AccessKey)
	}
	if l := login(t, m2, mskBroker, mskHost, fake); l.AccessKey != "ASIAFAKE3" {
		t.Errorf("credentials 4 minutes from expiry are renewed at the next login: key %s", l.AccessKey)
	}

	// STS unavailable, then the identity provider unreachable: retried.
	fake.set(func(s *fakeSTS) { s.fail = []int{http.StatusServiceUnavailable, http.StatusBadRequest} })
	calls, _ := fake.counts()
	if l := login(t, m2, mskBroker, mskHost, fake); l.AccessKey != "ASIAFAKE4" {
		t.Errorf("after a 503 and an IDPCommunicationError: key %s", l.AccessKey)
	}
	if n, _ := fake.counts(); n-calls != 3 {
		t.Errorf("%d requests for a 503, an IDPCommunicationError and a success, want 3", n-calls)
	}
	// A renewal that fails while the held credentials (four minutes
	// left) are valid: they are used.
	fake.set(func(s *fakeSTS) { s.fail = []int{503, 503, 503} })
	if l := login(t, m2, mskBroker, mskHost, fake); l.AccessKey != "ASIAFAKE4" {
		t.Errorf("renewal failing, held credentials valid: key %s", l.AccessKey)
	}

	// A token STS refuses: tried three times (InvalidIdentityToken may
	// pass), then an error that names the role, not the token.
	writeFile(t, tokenFile, "jwt-s3cret-but-wrong-and-longer")
	m3, err := c.Build()
	if err != nil {
		t.Fatal(err)
	}
	calls, _ = fake.counts()
	_, _, err = m3.Authenticate(context.Background(), mskBroker)
	if err == nil || !strings.Contains(err.Error(), "assuming role "+role) || !strings.Contains(err.Error(), "InvalidIdentityToken: Incorrect token audience") {
		t.Fatalf("a refused token: %v", err)
	}
	if n, _ := fake.counts(); n-calls != 3 {
		t.Errorf("%d requests for a refused token, want 3", n-calls)
	}
	if strings.Contains(err.Error(), "jwt-s3cret") {
		t.Errorf("the error quotes the token: %v", err)
	}
	t.Logf("refused: %v", err)
}

// Where AssumeRoleWithWebIdentity goes: the regional endpoint of
// AWS_REGION (its partition's domain), the global one without a region,
// AWS_ENDPOINT_URL_STS or AWS_ENDPOINT_URL when set, never http:// off
// this machine (the token is a bearer credential).
func TestSTSEndpoint(t *testing.T) {
	for _, tc := range []struct {
		env       map[string]string
		want, err string
	}{
		{map[string]string{}, "https://sts.amazonaws.com/", ""},
		{map[string]string{"AWS_REGION": "eu-west-1"}, "https://sts.eu-west-1.amazonaws.com/", ""},
		{map[string]string{"AWS_DEFAULT_REGION": "us-gov-west-1"}, "https://sts.us-gov-west-1.amazonaws.com/", ""},
		{map[string]string{"AWS_REGION": "cn-north-1", "AWS_DEFAULT_REGION": "eu-west-1"}, "https://sts.cn-north-1.amazonaws.com.cn/", ""},
		{map[string]string{"AWS_REGION": "us-iso-east-1"}, "https://sts.us-iso-east-1.c2s.ic.gov/", ""},
		{map[string]string{"AWS_REGION": "us-isob-east-1"}, "https://sts.us-isob-east-1.sc2s.sgov.gov/", ""},
		{map[string]string{"AWS_REGION": "eu-west-1", "AWS_ENDPOINT_URL_STS": "https://vpce-1.sts.eu-west-1.vpce.amazonaws.com"}, "https://vpce-1.sts.eu-west-1.vpce.amazonaws.com", ""},
		{map[string]string{"AWS_ENDPOINT_URL": "http://127.0.0.1:4566"}, "http://127.0.0.1:4566", ""},
		{map[string]string{"AWS_ENDPOINT_URL_STS": "http://sts.internal:8080"}, "", "AWS_ENDPOINT_URL_STS (or AWS_ENDPOINT_URL): http:// to sts.internal would send the web identity token without TLS"},
		{map[string]string{"AWS_ENDPOINT_URL_STS": "sts.internal"}, "", "is not an http(s) URL"},
	} {
		got, err := stsEndpoint(func(k string) string { return tc.env[k] })
		if got != tc.want || tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%v: %q %v, want %q %q", tc.env, got, err, tc.want, tc.err)
		}
	}
}

// A broker whose name carries no region (an IP address, an alias) cannot
// be signed for without AWS_REGION: a start-up error naming the broker
// and the variable, not a login that fails at every retry.
func TestAWSMSKIAMCheckBrokers(t *testing.T) {
	noAWSEnv(t)
	c := Config{Mechanism: AWSMSKIAM}
	for _, tc := range []struct {
		brokers []string
		want    string
	}{
		{[]string{mskBroker, "b-2.mycluster.abc123.c2.kafka.eu-west-1.amazonaws.com:9098"}, ""},
		{[]string{"boot-abc.c2.kafka-serverless.us-east-2.amazonaws.com:9098"}, ""},
		{[]string{mskBroker, "10.0.0.7:9098"}, "kafka.sasl.mechanism AWS_MSK_IAM: broker 10.0.0.7:9098"},
		{[]string{"kafka-1"}, "broker kafka-1: "}, // named as kafka.brokers gives it
		{[]string{"127.0.0.1:9098"}, "set AWS_REGION"},
	} {
		err := c.CheckBrokers(tc.brokers)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%v: %v, want %q", tc.brokers, err, tc.want)
		}
	}
	if err := (Config{Mechanism: Plain, Username: "u", Password: "p"}).CheckBrokers([]string{"10.0.0.7:9092"}); err != nil {
		t.Errorf("PLAIN: %v", err)
	}
	t.Setenv("AWS_DEFAULT_REGION", "us-west-2")
	if err := c.CheckBrokers([]string{"10.0.0.7:9098", "kafka-1"}); err != nil {
		t.Errorf("with AWS_DEFAULT_REGION: %v", err)
	}
}

// The brokers of each AWS partition (aws-sdk-go-v2's partitions.json),
// (franz-go's signer reads a region in all of their names since v1.22.3).
// GovCloud is a partition of its own with the commercial suffix.
var partitionBrokers = []struct{ partition, region, suffix string }{
	{"aws", "eu-west-1", "amazonaws.com"},
	{"aws-us-gov", "us-gov-west-1", "amazonaws.com"},
	{"aws-cn", "cn-north-1", "amazonaws.com.cn"},
	{"aws-iso", "us-iso-east-1", "c2s.ic.gov"},
	{"aws-iso-b", "us-isob-east-1", "sc2s.sgov.gov"},
	{"aws-iso-e", "eu-isoe-west-1", "cloud.adc-e.uk"},
	{"aws-iso-f", "us-isof-south-1", "csp.hci.ic.gov"},
	{"aws-eusc", "eusc-de-east-1", "amazonaws.eu"},
}

// A router on IRSA in a region (EKS sets AWS_REGION) exchanges its web
// identity token at the STS of that region's partition, sts.REGION.SUFFIX,
// for every partition whose brokers start-up takes; before, the EU
// sovereign cloud, ISO-E and ISO-F regions went to ….amazonaws.com, a host
// of the commercial partition (adversary 45).
func TestSTSEndpointIsInThePartitionOfEveryRegionTheSignerSignsFor(t *testing.T) {
	noAWSEnv(t)
	c := Config{Mechanism: AWSMSKIAM}
	for _, tc := range partitionBrokers {
		broker := "b-1.mycluster.abc123.c2.kafka." + tc.region + "." + tc.suffix + ":9098"
		// franz-go v1.22.2's signer reads no region in an ISO-E or ISO-F
		// name: there start-up needs AWS_REGION, which it is here.
		t.Setenv("AWS_REGION", tc.region)
		if err := c.CheckBrokers([]string{broker}); err != nil {
			t.Fatalf("%s: refused at start-up: %v", broker, err)
		}
		want := "https://sts." + tc.region + "." + tc.suffix + "/"
		got, err := stsEndpoint(func(k string) string {
			if k == "AWS_REGION" {
				return tc.region
			}
			return ""
		})
		if err != nil || got != want {
			t.Errorf("AWS_REGION=%s (broker %s): STS endpoint %q %v, want %q (the region's partition)", tc.region, broker, got, err, want)
		}
	}
}

// With a web identity, start-up refuses a broker of another partition than
// the STS the token would go to: with no AWS_REGION STS's global endpoint
// (the commercial partition's), with AWS_REGION that region's. The token is
// a bearer credential, and that STS knows no role of the broker's
// partition: every login would fail after the token left. Before, a
// broker of the EU sovereign cloud, ISO-E or ISO-F (and of China or ISO
// without AWS_REGION) sent it to sts.amazonaws.com (adversary 45). The
// region of the broker's partition, or AWS_ENDPOINT_URL_STS, is taken.
func TestAWebIdentityIsRefusedAtStartUpForABrokerOfAnotherPartitionThanItsSTS(t *testing.T) {
	c := Config{Mechanism: AWSMSKIAM}
	for _, tc := range partitionBrokers {
		// The refusals are the broker's: a commercial role (irsaEnv's), of
		// the partition of the STS it would go to. Taken: a role of the
		// broker's partition. (The role's own check is
		// TestAWebIdentityWhoseRoleIsOfAnotherPartitionThanItsSTSIsRefused.)
		irsa := func(kv ...string) func(string) string {
			return irsaEnv(append([]string{"AWS_ROLE_ARN", "arn:" + tc.partition + ":iam::123456789012:role/dedup"}, kv...)...)
		}
		broker := "b-1.mycluster.abc123.c2.kafka." + tc.region + "." + tc.suffix + ":9098"
		// The signer reads the process's AWS_REGION for a name it reads no
		// region in (v1.22.2: ISO-E, ISO-F; v1.22.3 reads them all): set it
		// so that the signer signs, while the partition rule is given the
		// environment of each case.
		noAWSEnv(t)
		t.Setenv("AWS_REGION", tc.region)
		err := c.checkBrokers([]string{broker}, irsaEnv())
		if tc.partition == "aws" {
			if err != nil {
				t.Errorf("%s, no AWS_REGION: %v, want nil (STS's global endpoint is the commercial partition's)", broker, err)
			}
		} else if err == nil || !strings.Contains(err.Error(), "AWS_REGION") || !strings.Contains(err.Error(), "is in AWS partition "+tc.partition) {
			t.Errorf("%s, no AWS_REGION: %v, want a refusal naming partition %s and AWS_REGION", broker, err, tc.partition)
		}
		if tc.partition != "aws" {
			if err := c.checkBrokers([]string{broker}, irsaEnv("AWS_REGION", "us-east-1")); err == nil || !strings.Contains(err.Error(), "broker "+broker) {
				t.Errorf("%s, AWS_REGION us-east-1: %v, want a refusal naming the broker (the token would go to the commercial partition)", broker, err)
			}
		}
		if err := c.checkBrokers([]string{broker}, irsa("AWS_DEFAULT_REGION", tc.region)); err != nil {
			t.Errorf("%s, AWS_DEFAULT_REGION %s: %v, want nil", broker, tc.region, err)
		}
		if err := c.checkBrokers([]string{broker}, irsa("AWS_ENDPOINT_URL_STS", "https://sts.example.internal")); err != nil {
			t.Errorf("%s, AWS_ENDPOINT_URL_STS set: %v, want nil (the operator named the endpoint)", broker, err)
		}
		// Keys, not a token: no STS call, nothing to refuse here.
		keys := func(k string) string {
			return map[string]string{"AWS_ACCESS_KEY_ID": keyID1, "AWS_SECRET_ACCESS_KEY": secret1}[k]
		}
		if err := c.checkBrokers([]string{broker}, keys); err != nil {
			t.Errorf("%s, keys in the environment: %v, want nil", broker, err)
		}
	}
	// A name in no partition (an alias, a tunnel) has no partition to
	// compare: the signer's rule (AWS_REGION, which it reads from the
	// process's environment) is all.
	noAWSEnv(t)
	t.Setenv("AWS_REGION", "cn-north-1")
	// The signer reads the process's AWS_REGION: in a pod, the one the
	// rule reads too.
	t.Setenv("AWS_REGION", "cn-north-1")
	if err := c.checkBrokers([]string{"kafka.internal:9098"}, irsaEnv("AWS_ROLE_ARN", "arn:aws-cn:iam::123456789012:role/dedup", "AWS_REGION", "cn-north-1")); err != nil {
		t.Errorf("an alias with AWS_REGION: %v, want nil", err)
	}
}

// An AWS_MSK_IAM login payload is a bearer credential for the signature's
// lifetime, x-amz-expires: 900 s since franz-go v1.22.3 ("as in the Java
// source"; 300 before), at most fifteen minutes as docs/security.md and
// Config.Plaintext say (adversary 45 found them saying five minutes with
// v1.22.3).
func TestAnAWSMSKIAMSignatureIsABearerCredentialForFifteenMinutesAtMost(t *testing.T) {
	noAWSEnv(t)
	t.Setenv("AWS_ACCESS_KEY_ID", keyID1)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret1)
	m, err := Config{Mechanism: AWSMSKIAM}.Build()
	if err != nil {
		t.Fatal(err)
	}
	_, msg, err := m.Authenticate(context.Background(), mskBroker)
	if err != nil {
		t.Fatal(err)
	}
	l, err := mskiamtest.Verify(msg, mskHost, keyMap{keyID1: secret1}.secret, time.Now())
	if err != nil {
		t.Fatalf("the broker would refuse %s: %v", msg, err)
	}
	exp, err := strconv.Atoi(l.Fields["x-amz-expires"])
	if err != nil || exp > 900 {
		t.Errorf("x-amz-expires %q: the signature is a bearer credential for %d s, want at most 900 (fifteen minutes, as docs/security.md says)",
			l.Fields["x-amz-expires"], exp)
	}
}

// irsaEnv is the environment of a pod on EKS IAM roles for service
// accounts, plus kv (adversary 46).
func irsaEnv(kv ...string) func(string) string {
	env := map[string]string{"AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/dedup", "AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/token"}
	for i := 0; i < len(kv); i += 2 {
		env[kv[i]] = kv[i+1]
	}
	return func(k string) string { return env[k] }
}

// AWS GovCloud is a partition of its own, aws-us-gov (partitions.json:
// regionRegex ^us-gov-\w+-\d+$, ARNs arn:aws-us-gov:…), though its DNS
// suffix is the commercial one's: its brokers are
// b-N.….kafka.us-gov-west-1.amazonaws.com. With a web identity, a
// GovCloud broker and no AWS_REGION, the token goes to sts.amazonaws.com
// (commercial), which knows no GovCloud role; with AWS_REGION
// us-gov-west-1 and a commercial broker it goes to GovCloud's STS; with
// AWS_REGION us-east-1 and a GovCloud broker, to commercial STS. Start-up
// must refuse all three, as it does for China or ISO (adversary 46).
func TestAGovCloudBrokerIsInPartitionAWSUSGovNotTheCommercialOne(t *testing.T) {
	noAWSEnv(t)
	t.Setenv("AWS_REGION", "us-east-1") // the signer's, for its dry run; the rule reads irsaEnv
	c := Config{Mechanism: AWSMSKIAM}
	gov := "b-1.mycluster.abc123.c2.kafka.us-gov-west-1.amazonaws.com:9098"
	com := "b-1.mycluster.abc123.c2.kafka.us-east-1.amazonaws.com:9098"
	const govRole = "arn:aws-us-gov:iam::123456789012:role/dedup"
	for _, tc := range []struct {
		broker string
		env    func(string) string
		sts    string
	}{
		{gov, irsaEnv("AWS_ROLE_ARN", govRole), "no AWS_REGION: sts.amazonaws.com, commercial"},
		{gov, irsaEnv("AWS_ROLE_ARN", govRole, "AWS_REGION", "us-east-1"), "sts.us-east-1.amazonaws.com, commercial"},
		{com, irsaEnv("AWS_ROLE_ARN", govRole, "AWS_REGION", "us-gov-west-1"), "sts.us-gov-west-1.amazonaws.com, aws-us-gov"},
	} {
		ep, _ := stsEndpoint(tc.env)
		if err := c.checkBrokers([]string{tc.broker}, tc.env); err == nil || !strings.Contains(err.Error(), "aws-us-gov") {
			t.Errorf("broker %s, token to %s (%s): %v, want a start-up refusal naming partition aws-us-gov", tc.broker, ep, tc.sts, err)
		}
	}
	// A label that only begins like a GovCloud region is no region: a
	// commercial broker stays commercial.
	for h, want := range map[string]string{
		"us-gov-mirror.kafka.us-east-1.amazonaws.com:9098":     "aws",
		"b-1.us-gov-.kafka.us-east-1.amazonaws.com:9098":       "aws",
		"b-1.us-gov-west-x.kafka.us-east-1.amazonaws.com:9098": "aws",
		"B-1.X.KAFKA.US-GOV-EAST-1.AMAZONAWS.COM.":             "aws-us-gov",
		"b-1.x.kafka.us-gov-west-1.api.aws:9098":               "aws-us-gov",
		"[::1]:9098":                                           "",
	} {
		if p := hostPartition(h); p != want {
			t.Errorf("%s: partition %q, want %q", h, p, want)
		}
	}
	// Same partition: taken.
	if err := c.checkBrokers([]string{gov}, irsaEnv("AWS_ROLE_ARN", govRole, "AWS_REGION", "us-gov-west-1")); err != nil {
		t.Errorf("GovCloud broker, AWS_REGION us-gov-west-1: %v, want nil", err)
	}
}

// franz-go takes a bracketed IPv6 seed without a port, "[fd00::1]", at
// port 9092 (kgo's parseBrokerAddr), and its signer signs for it with
// AWS_REGION. CheckBrokers joins the port around the brackets,
// "[[fd00::1]]:9092", which the signer cannot split: start-up is refused
// with "set AWS_REGION" though AWS_REGION is set, naming a broker that is
// not in kafka.brokers (adversary 46).
func TestABracketedIPv6BrokerWithoutAPortIsTakenWithAWSRegion(t *testing.T) {
	noAWSEnv(t)
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", keyID1)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret1)
	c := Config{Mechanism: AWSMSKIAM}
	for _, b := range []string{"[fd00::1]:9098", "fd00::1", "[fd00::1]"} {
		if err := c.CheckBrokers([]string{b}); err != nil {
			t.Errorf("broker %s with AWS_REGION set: %v, want nil (franz-go dials it at port 9092 and signs for us-east-1)", b, err)
		}
	}
}

// The refusal of a broker of another partition names the variable the
// region came from: with only AWS_DEFAULT_REGION set it said "(AWS_REGION
// us-east-1)", a variable the operator's environment does not have
// (STYLE: an error names the field) (adversary 46).
func TestThePartitionRefusalNamesAWSDefaultRegionWhenTheRegionCameFromIt(t *testing.T) {
	noAWSEnv(t)
	t.Setenv("AWS_REGION", "cn-north-1") // the signer's dry run
	c := Config{Mechanism: AWSMSKIAM}
	broker := "b-1.mycluster.abc123.c2.kafka.cn-north-1.amazonaws.com.cn:9098"
	err := c.checkBrokers([]string{broker}, irsaEnv("AWS_DEFAULT_REGION", "us-east-1"))
	if err == nil || !strings.Contains(err.Error(), "AWS_DEFAULT_REGION us-east-1") || strings.Contains(err.Error(), "AWS_REGION us-east-1") {
		t.Errorf("AWS_DEFAULT_REGION us-east-1, no AWS_REGION, broker %s: %v, want a refusal naming AWS_DEFAULT_REGION us-east-1", broker, err)
	}
}

// The STS endpoint built from AWS_REGION is in the region's partition:
// https://sts.REGION.SUFFIX/ with REGION one DNS label. An AWS_REGION that
// is not one (a pasted URL, a stray '/', '?' or '#') made the token go to
// another host: "eu-west-1.evil.example/#" built
// https://sts.eu-west-1.evil.example/#.amazonaws.com/, a host in no AWS
// partition, and no start-up check refused it (adversary 46). Refusing
// the variable, naming it, is what is wanted.
func TestAnSTSEndpointBuiltFromAWSRegionIsAnAWSHost(t *testing.T) {
	for _, region := range []string{"eu-west-1.evil.example/#", "evil.example?", "eu-west-1.evil.example:443/"} {
		env := func(k string) string {
			if k == "AWS_REGION" {
				return region
			}
			return ""
		}
		ep, err := stsEndpoint(env)
		if err != nil {
			if !strings.Contains(err.Error(), "AWS_REGION") {
				t.Errorf("AWS_REGION %q: %v, want an error naming AWS_REGION", region, err)
			}
			continue
		}
		u, perr := url.Parse(ep)
		if perr != nil || !strings.HasSuffix(u.Hostname(), "."+regionPartition(region).suffixes[0]) {
			t.Errorf("AWS_REGION %q: the web identity token would go to %q (host %q), in no AWS partition; want an error naming AWS_REGION", region, ep, u.Hostname())
		}
	}
}

// AWS_ROLE_ARN names its partition (arn:PARTITION:iam::…). A web identity
// whose role is of another partition than the STS the token would go to
// is the harm the broker check exists for (a bearer token at an STS that
// knows no role of its partition, every login failing after it left), and
// start-up knows it without any broker name: with brokers that carry no
// partition (an alias, an IP) and AWS_REGION us-east-1, a China role's
// token went to sts.us-east-1.amazonaws.com; with no AWS_REGION, to
// sts.amazonaws.com for a GovCloud role (adversary 46; beyond the stated
// claim, which compares brokers only).
func TestAWebIdentityWhoseRoleIsOfAnotherPartitionThanItsSTSIsRefused(t *testing.T) {
	noAWSEnv(t)
	t.Setenv("AWS_REGION", "us-east-1") // the signer's, for the alias
	c := Config{Mechanism: AWSMSKIAM}
	for _, tc := range []struct {
		role, region string
	}{
		{"arn:aws-cn:iam::123456789012:role/dedup", "us-east-1"},
		{"arn:aws-us-gov:iam::123456789012:role/dedup", ""},
		{"arn:aws:iam::123456789012:role/dedup", "cn-north-1"},
	} {
		env := irsaEnv("AWS_ROLE_ARN", tc.role, "AWS_REGION", tc.region)
		ep, _ := stsEndpoint(env)
		if err := c.checkBrokers([]string{"kafka.internal:9098", "10.0.0.7:9098"}, env); err == nil || !strings.Contains(err.Error(), "AWS_ROLE_ARN") {
			t.Errorf("role %s, AWS_REGION %q: the token goes to %s: %v, want a start-up refusal naming AWS_ROLE_ARN", tc.role, tc.region, ep, err)
		}
	}
	// The signer reads the process's AWS_REGION: in a pod, the one the
	// rule reads too.
	t.Setenv("AWS_REGION", "cn-north-1")
	if err := c.checkBrokers([]string{"kafka.internal:9098"}, irsaEnv("AWS_ROLE_ARN", "arn:aws-cn:iam::123456789012:role/dedup", "AWS_REGION", "cn-north-1")); err != nil {
		t.Errorf("China role, AWS_REGION cn-north-1: %v, want nil", err)
	}
}

// An MSK broker's name carries its cluster's name, which the operator
// chooses (b-1.CLUSTER.ID.c2.kafka.REGION.amazonaws.com): a commercial
// cluster may be named "us-gov-west-1" (a mirror of a GovCloud one). Its
// region, the one franz-go's signer signs for, is the label before the
// suffix, us-east-1: the broker is commercial. hostPartition took the
// first region-shaped label, the cluster's name, and called it GovCloud:
// a web identity with AWS_REGION us-gov-west-1 and a GovCloud role, whose
// token goes to GovCloud's STS, was taken for the commercial broker, and
// the right set-up (AWS_REGION us-east-1, a commercial role) was refused
// (adversary 46b).
func TestAClusterNamedLikeAGovCloudRegionIsInThePartitionOfItsRegionLabel(t *testing.T) {
	noAWSEnv(t)
	t.Setenv("AWS_REGION", "us-east-1") // the signer's, for its dry run
	c := Config{Mechanism: AWSMSKIAM}
	broker := "b-1.us-gov-west-1.abc123.c2.kafka.us-east-1.amazonaws.com:9098"
	if p := hostPartition(broker); p != "aws" {
		t.Errorf("%s: partition %q, want aws (its region label, us-east-1, the one the signer signs for)", broker, p)
	}
	gov := irsaEnv("AWS_ROLE_ARN", "arn:aws-us-gov:iam::123456789012:role/dedup", "AWS_REGION", "us-gov-west-1")
	ep, _ := stsEndpoint(gov)
	if err := c.checkBrokers([]string{broker}, gov); err == nil {
		t.Errorf("commercial broker %s, token to %s (aws-us-gov): taken, want a start-up refusal", broker, ep)
	}
	if err := c.checkBrokers([]string{broker}, irsaEnv("AWS_REGION", "us-east-1")); err != nil {
		t.Errorf("commercial broker %s, commercial role, AWS_REGION us-east-1: %v, want nil", broker, err)
	}
}

// regionLabel takes upper case (AWS_REGION=US-GOV-WEST-1), and DNS names
// are case-blind: the token goes to https://sts.US-GOV-WEST-1.amazonaws.com/,
// GovCloud's STS. regionPartition matches the lower-case prefix "us-gov-"
// only, so the check compares the brokers and the role with the
// commercial partition: a commercial role and broker are taken while the
// token goes to GovCloud. The partition the check compares with must be
// the one of the host the token goes to (or the region refused, naming
// AWS_REGION) (adversary 46b).
func TestAnUpperCaseAWSRegionIsOfThePartitionOfTheSTSHostItBuilds(t *testing.T) {
	noAWSEnv(t)
	t.Setenv("AWS_REGION", "us-east-1") // the signer's, for its dry run
	c := Config{Mechanism: AWSMSKIAM}
	broker := "b-1.mycluster.abc123.c2.kafka.us-east-1.amazonaws.com:9098"
	for _, region := range []string{"US-GOV-WEST-1", "Us-Gov-East-1"} {
		env := irsaEnv("AWS_REGION", region) // a commercial role
		ep, err := stsEndpoint(env)
		if err != nil {
			if !strings.Contains(err.Error(), "AWS_REGION") {
				t.Errorf("AWS_REGION %s: %v, want an error naming AWS_REGION", region, err)
			}
			continue
		}
		u, _ := url.Parse(ep)
		sts := hostPartition(u.Host)
		if err := c.checkBrokers([]string{broker}, env); err == nil && sts != "aws" {
			t.Errorf("AWS_REGION %s, commercial role and broker: the token goes to %s (partition %s), taken; want a start-up refusal", region, ep, sts)
		}
	}
}

// regionPartition calls a region GovCloud's by its prefix alone, while
// hostPartition (93f1ec2) calls a host GovCloud's only for a label shaped
// like a GovCloud region (us-gov-WORD-N). AWS_REGION=us-gov-mirror (or
// us-gov-west-1a, us-gov-west) builds https://sts.us-gov-mirror.amazonaws.com/,
// a host of the commercial partition by hostPartition's own rule (and by
// partitions.json's regionRegex, which the AWS SDKs use), yet the check
// compares the brokers and the role with aws-us-gov: a GovCloud role and
// broker are taken while the token goes to a commercial host. The check's
// STS partition must be the one of the host the token goes to, or the
// region refused naming AWS_REGION (adversary 46b).
func TestTheSTSPartitionTheCheckComparesIsTheOneOfTheHostTheTokenGoesTo(t *testing.T) {
	noAWSEnv(t)
	t.Setenv("AWS_REGION", "us-east-1") // the signer's, for its dry run
	c := Config{Mechanism: AWSMSKIAM}
	broker := "b-1.mycluster.abc123.c2.kafka.us-gov-west-1.amazonaws.com:9098"
	for _, region := range []string{"us-gov-mirror", "us-gov-west-1a", "us-gov-west"} {
		env := irsaEnv("AWS_ROLE_ARN", "arn:aws-us-gov:iam::123456789012:role/dedup", "AWS_REGION", region)
		ep, err := stsEndpoint(env)
		if err != nil {
			if !strings.Contains(err.Error(), "AWS_REGION") {
				t.Errorf("AWS_REGION %s: %v, want an error naming AWS_REGION", region, err)
			}
			continue
		}
		u, _ := url.Parse(ep)
		sts := hostPartition(u.Host)
		if err := c.checkBrokers([]string{broker}, env); err == nil && sts != "aws-us-gov" {
			t.Errorf("AWS_REGION %s, GovCloud role and broker: the token goes to %s (partition %q), taken; want a start-up refusal", region, ep, sts)
		}
	}
}

// The role check reads a partition only in a role that begins exactly
// "arn:" and has a third field; any other AWS_ROLE_ARN passes it. A China
// role written " arn:aws-cn:iam::…" (a stray space from a manifest),
// "ARN:AWS-CN:iam::…", "arn:aws-cn" or a bare role name is taken with
// AWS_REGION us-east-1, and the web identity token (a bearer credential)
// goes to sts.us-east-1.amazonaws.com, which can only refuse it: no role
// of any partition is named so. Start-up should refuse it, naming
// AWS_ROLE_ARN (adversary 46b).
func TestAnAWSRoleARNThatIsNotAnARNIsRefusedBeforeTheTokenLeaves(t *testing.T) {
	noAWSEnv(t)
	t.Setenv("AWS_REGION", "us-east-1") // the signer's, for the alias
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeFile(t, tokenFile, "jwt\n")
	c := Config{Mechanism: AWSMSKIAM}
	for _, role := range []string{" arn:aws-cn:iam::123456789012:role/dedup", "ARN:AWS-CN:iam::123456789012:role/dedup", "arn:aws-cn", "dedup"} {
		env := irsaEnv("AWS_ROLE_ARN", role, "AWS_REGION", "us-east-1", "AWS_WEB_IDENTITY_TOKEN_FILE", tokenFile)
		_, berr := webIdentity(env)
		cerr := c.checkBrokers([]string{"kafka.internal:9098"}, env)
		refused := berr != nil && strings.Contains(berr.Error(), "AWS_ROLE_ARN") || cerr != nil && strings.Contains(cerr.Error(), "AWS_ROLE_ARN")
		if !refused {
			ep, _ := stsEndpoint(env)
			t.Errorf("AWS_ROLE_ARN %q: built (%v) and checked (%v), the token goes to %s; want a start-up refusal naming AWS_ROLE_ARN", role, berr, cerr, ep)
		}
	}
}

// dialAddr is meant to be the seed as franz-go dials it, but it is not for
// a seed net.SplitHostPort cannot split and kgo's parseBrokerAddr reads
// otherwise: "[fd00::1]9098" (a colon missing), which kgo dials at
// [fd00::1]:98 and signs for with AWS_REGION, becomes
// "[fd00::1]9098]:9092", which the signer cannot split. Start-up refuses it
// with "set AWS_REGION to the cluster's region" though AWS_REGION is set,
// quoting an address that is in neither kafka.brokers nor kgo's dial. The
// refusal, if any, must not name a cause that is not (adversary 46b).
func TestAMalformedSeedIsNotRefusedForWantOfAnAWSRegionThatIsSet(t *testing.T) {
	noAWSEnv(t)
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", keyID1)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret1)
	c := Config{Mechanism: AWSMSKIAM}
	for _, b := range []string{"[fd00::1]9098", "[fd00::1]x"} {
		if err := c.CheckBrokers([]string{b}); err != nil && (strings.Contains(err.Error(), "set AWS_REGION") || strings.Contains(err.Error(), "]:9092")) {
			t.Errorf("broker %s with AWS_REGION us-east-1: %v; want no advice to set a variable that is set, nor an address kafka.brokers does not give", b, err)
		}
	}
}

// regionLabel takes any DNS label, so an AWS_REGION that is no region of
// any partition (partitions.json's regionRegex: us|eu|ap|…-WORD-N,
// cn-WORD-N, us-gov-WORD-N, …) still builds https://sts.REGION.SUFFIX/:
// AWS_REGION=s3 sends the web identity token (a bearer credential) to
// https://sts.s3.amazonaws.com/, which is not STS but S3's virtual-hosted
// name of a bucket called "sts" (S3's *.s3.amazonaws.com certificate
// covers it; a bucket name is anyone's to take). The claim says the token
// goes only to an STS, and that a bad region is a start-up error naming
// its variable (adversary 46b).
func TestAnAWSRegionThatIsNoRegionIsRefusedNamingItsVariable(t *testing.T) {
	for _, tc := range []struct{ from, region string }{
		{"AWS_REGION", "s3"},
		{"AWS_REGION", "s3-external-1"},
		{"AWS_DEFAULT_REGION", "s3"},
	} {
		env := irsaEnv(tc.from, tc.region)
		if ep, err := stsEndpoint(env); err == nil || !strings.Contains(err.Error(), tc.from) {
			t.Errorf("%s=%s: the web identity token goes to %q (%v); want a start-up error naming %s", tc.from, tc.region, ep, err, tc.from)
		}
	}
}

// aws-global is a region of partition aws in partitions.json (its
// "regions" list, beside the regionRegex), and aws-sdk-go-v2's STS
// resolves AWS_REGION=aws-global to https://sts.amazonaws.com (service/sts
// endpoints.go: `if _Region == "aws-global"`), the commercial global
// endpoint dedup itself uses when no region is set. With MSK brokers named
// ….kafka.us-east-1.amazonaws.com the signer signs for their region, so the
// set-up works with the SDKs; regionPartition reads only the regex, and
// start-up refuses it as "no region of an AWS partition dedup knows": a
// false refusal of a valid set-up (adversary 46c).
func TestAWSRegionAWSGlobalIsSTSsGlobalEndpointNotARefusal(t *testing.T) {
	noAWSEnv(t)
	t.Setenv("AWS_REGION", "aws-global") // the signer's, for its dry run
	c := Config{Mechanism: AWSMSKIAM}
	env := irsaEnv("AWS_REGION", "aws-global")
	ep, err := stsEndpoint(env)
	if err != nil || ep != "https://sts.amazonaws.com/" {
		t.Errorf("AWS_REGION=aws-global: STS endpoint %q, %v; want https://sts.amazonaws.com/ (aws-sdk-go-v2's STS endpoint for aws-global)", ep, err)
	}
	if err := c.checkBrokers([]string{"b-1.mycluster.abc123.c2.kafka.us-east-1.amazonaws.com:9098"}, env); err != nil {
		t.Errorf("AWS_REGION=aws-global, commercial role and broker: %v; want nil", err)
	}
}

// dialAddr's contract: a bracketed seed that is neither "[IPv6]" nor
// "[IPv6]:port" is an error naming it. "[]" is taken as ":9092" (kgo's
// parseBrokerAddr dials host "" port 9092: this machine), and "[kafka.internal]"
// as kafka.internal:9092; CheckBrokers signs for both with AWS_REGION and
// says nothing (adversary 46c).
func TestABracketedSeedThatIsNoIPv6AddressIsAnErrorNamingIt(t *testing.T) {
	noAWSEnv(t)
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", keyID1)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret1)
	c := Config{Mechanism: AWSMSKIAM}
	for _, b := range []string{"[]", "[kafka.internal]", "[]:9098"} {
		addr, derr := dialAddr(b)
		cerr := c.CheckBrokers([]string{b})
		if cerr == nil || !strings.Contains(cerr.Error(), b) {
			t.Errorf("broker %q: dialAddr %q (%v), CheckBrokers %v; want an error naming %q (neither [IPv6] nor [IPv6]:port)", b, addr, derr, cerr, b)
		}
	}
}

// roleARNPartition refuses " arn:aws:iam::…" (leading space: round 2) but
// takes trailing whitespace and a role name IAM allows no such character
// in ([\w+=,.@-]+, a path of /…/): "…:role/dedup\n" (an env var from a
// ConfigMap made with kubectl --from-file keeps the file's newline),
// "…:role/dedup ", "…:role/de dup", "…:role/a/" (a path, no name). None is
// an IAM role's ARN: STS can only refuse it, after the web identity token
// (a bearer credential) has left. Round 2's rule: a role that is not a
// role's ARN is refused before the token leaves (adversary 46c).
func TestAnAWSRoleARNWithCharactersNoRoleNameHasIsRefusedBeforeTheTokenLeaves(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeFile(t, tokenFile, "jwt\n")
	for _, role := range []string{
		"arn:aws:iam::123456789012:role/dedup\n",
		"arn:aws:iam::123456789012:role/dedup ",
		"arn:aws:iam::123456789012:role/de dup",
		"arn:aws:iam::123456789012:role/a/",
	} {
		env := irsaEnv("AWS_ROLE_ARN", role, "AWS_REGION", "us-east-1", "AWS_WEB_IDENTITY_TOKEN_FILE", tokenFile)
		if _, err := webIdentity(env); err == nil || !strings.Contains(err.Error(), "AWS_ROLE_ARN") {
			t.Errorf("AWS_ROLE_ARN %q: %v; want a start-up refusal naming AWS_ROLE_ARN", role, err)
		}
	}
}

// 8befc12 refuses a malformed seed that begins with "[" (dialAddr), but
// not one that lacks it: "fd00::1]:9098" (the opening bracket forgotten)
// and "::1]" fail net.SplitHostPort, and dialAddr joins a port around
// them, "[fd00::1]:9098]:9092", which the signer cannot split. Start-up
// refuses them with "set AWS_REGION to the cluster's region" though
// AWS_REGION is set, quoting an address that is in neither kafka.brokers
// nor kgo's dial (parseBrokerAddr takes "fd00::1]:9098" whole at port
// 9092): round 2's finding, in the other bracket (adversary 46c).
func TestASeedWithAClosingBracketOnlyIsNotRefusedForWantOfAnAWSRegionThatIsSet(t *testing.T) {
	noAWSEnv(t)
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", keyID1)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret1)
	c := Config{Mechanism: AWSMSKIAM}
	for _, b := range []string{"fd00::1]:9098", "::1]"} {
		if err := c.CheckBrokers([]string{b}); err != nil && (strings.Contains(err.Error(), "set AWS_REGION") || strings.Contains(err.Error(), "]:9092")) {
			t.Errorf("broker %s with AWS_REGION us-east-1: %v; want no advice to set a variable that is set, nor an address kafka.brokers does not give", b, err)
		}
	}
}

// redirectingSTS is http.DefaultTransport for one test: the first request
// (to the STS endpoint dedup built) is answered 307 to elsewhere; every
// request is recorded with its body.
type redirectingSTS struct {
	to   string
	mu   sync.Mutex
	seen []string // "URL body"
}

func (r *redirectingSTS) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		_ = req.Body.Close()
	}
	r.mu.Lock()
	r.seen = append(r.seen, req.URL.String()+" "+string(body))
	n := len(r.seen)
	r.mu.Unlock()
	h := http.Header{}
	code := http.StatusServiceUnavailable
	if n == 1 {
		code = http.StatusTemporaryRedirect
		h.Set("Location", r.to)
	}
	return &http.Response{StatusCode: code, Status: http.StatusText(code), Header: h, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
}

// With a web identity, AWS_REGION us-east-1 and no AWS_ENDPOINT_URL_STS,
// stsEndpoint builds https://sts.us-east-1.amazonaws.com/ and start-up
// checks that host's partition; but the STS client is an http.Client
// with no CheckRedirect, which follows a 307/308 with the POST body, the
// web identity token in it, to any Location: http:// (the token in clear
// text, which stsEndpoint refuses but to loopback), another partition's
// STS (https://sts.us-gov-west-1.amazonaws.com/), or a host of no AWS
// partition. Nothing checks the second URL: the claim "the token goes only
// to an STS of the same partition" holds for the first request only
// (adversary 46d). (aws-sdk-go-v2 follows 307/308 as well; dedup states a
// stricter rule than the SDK, and only its first hop keeps it.)
func TestTheWebIdentityTokenDoesNotFollowARedirectAwayFromTheSTSEndpoint(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeFile(t, tokenFile, "jwt-secret-token\n")
	for _, to := range []string{
		"http://sts.us-east-1.amazonaws.com/",      // same host, no TLS
		"https://sts.us-gov-west-1.amazonaws.com/", // another partition's STS
		"https://sts-mirror.example/",              // no AWS host
	} {
		rt := &redirectingSTS{to: to}
		saved := http.DefaultTransport
		http.DefaultTransport = rt
		env := irsaEnv("AWS_REGION", "us-east-1", "AWS_WEB_IDENTITY_TOKEN_FILE", tokenFile)
		if err := (Config{Mechanism: AWSMSKIAM}).checkBrokers([]string{"b-1.mycluster.abc123.c2.kafka.us-east-1.amazonaws.com:9098"}, env); err != nil {
			t.Fatalf("a commercial set-up is refused: %v", err)
		}
		creds, err := webIdentity(env)
		if err != nil {
			http.DefaultTransport = saved
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = creds(ctx)
		cancel()
		http.DefaultTransport = saved
		rt.mu.Lock()
		for _, s := range rt.seen {
			if !strings.HasPrefix(s, "https://sts.us-east-1.amazonaws.com/ ") && strings.Contains(s, "jwt-secret-token") {
				t.Errorf("STS endpoint https://sts.us-east-1.amazonaws.com/ answered 307 to %s: the web identity token was sent there (%s); want it sent to the checked endpoint only", to, s)
			}
		}
		rt.mu.Unlock()
	}
	// The same through real sockets, whatever transport the client has:
	// AWS_ENDPOINT_URL_STS http://127.0.0.1 (loopback, which stsEndpoint
	// allows over http) answers 307 to another listener.
	var got sync.Map
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Store("other", string(b))
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer other.Close()
	first := httptest.NewServer(http.RedirectHandler(other.URL+"/", http.StatusTemporaryRedirect))
	defer first.Close()
	creds, err := webIdentity(irsaEnv("AWS_ENDPOINT_URL_STS", first.URL, "AWS_WEB_IDENTITY_TOKEN_FILE", tokenFile))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = creds(ctx)
	if b, ok := got.Load("other"); ok && strings.Contains(b.(string), "jwt-secret-token") {
		t.Errorf("AWS_ENDPOINT_URL_STS %s answered 307 to %s: the web identity token was sent there; want it sent to the named endpoint only", first.URL, other.URL)
	}
}

// regionPartition reads partitions.json's regionRegex, ^(us|eu|…)\-\w+\-\d+$,
// and Go's \w is [0-9A-Za-z_]: "us-east_1-1", "us-_-1", a 70-character
// "us-aaaa…-1" match it, yet none is a DNS label (an underscore; over 63
// characters). aws-sdk-go-v2's STS refuses each before any call ("invalid
// input region": bindRegion's rulesfn.IsValidHostLabel, letters, digits
// and '-', 63 at most); dedup takes it at start-up and builds
// https://sts.us-east_1-1.amazonaws.com/, and the operator learns of the
// typo at the first login, from a DNS error, not from a start-up error
// naming the variable (the claim: a bad region is a start-up error naming
// its variable; round 1: the region must be one DNS label) (adversary 46d).
func TestAnAWSRegionThatIsNoDNSLabelIsAStartUpErrorNamingItsVariable(t *testing.T) {
	long := "us-" + strings.Repeat("a", 70) + "-1"
	for _, r := range []string{"us-east_1-1", "us-_-1", long} {
		for _, v := range []string{"AWS_REGION", "AWS_DEFAULT_REGION"} {
			ep, err := stsEndpoint(irsaEnv(v, r))
			if err == nil || !strings.Contains(err.Error(), v) {
				t.Errorf("%s=%q: STS endpoint %q, %v; want a start-up error naming %s (aws-sdk-go-v2's STS: invalid input region)", v, r, ep, err, v)
			}
		}
	}
}

// The AWS SDKs' FIPS pseudo-regions, "fips-us-gov-west-1",
// "us-gov-west-1-fips", "us-east-1-fips" (aws-sdk-go-v2's STS:
// MapFIPSRegion strips fips-/-fips and turns FIPS on, giving
// https://sts.us-gov-west-1.amazonaws.com and
// https://sts-fips.us-east-1.amazonaws.com), are refused at start-up as
// "no region of an AWS partition dedup knows": a GovCloud set-up that
// works with the SDKs (MSK broker names, which the signer signs for,
// a GovCloud role) does not start. A false refusal (adversary 46d).
func TestAnAWSFIPSPseudoRegionIsTheSTSOfItsRegionsPartitionNotARefusal(t *testing.T) {
	noAWSEnv(t)
	c := Config{Mechanism: AWSMSKIAM}
	gov := "b-1.mycluster.abc123.c2.kafka.us-gov-west-1.amazonaws.com:9098"
	com := "b-1.mycluster.abc123.c2.kafka.us-east-1.amazonaws.com:9098"
	const govRole = "arn:aws-us-gov:iam::123456789012:role/dedup"
	for _, tc := range []struct{ region, broker, role, partition string }{
		{"fips-us-gov-west-1", gov, govRole, "aws-us-gov"},
		{"us-gov-west-1-fips", gov, govRole, "aws-us-gov"},
		{"us-east-1-fips", com, "arn:aws:iam::123456789012:role/dedup", "aws"},
	} {
		env := irsaEnv("AWS_REGION", tc.region, "AWS_ROLE_ARN", tc.role)
		ep, err := stsEndpoint(env)
		u, _ := url.Parse(ep)
		if err != nil || u == nil || hostPartition(u.Host) != tc.partition {
			t.Errorf("AWS_REGION=%s: STS endpoint %q, %v; want an STS of partition %s (aws-sdk-go-v2: the FIPS endpoint of the region)", tc.region, ep, err, tc.partition)
		}
		if err := c.checkBrokers([]string{tc.broker}, env); err != nil {
			t.Errorf("AWS_REGION=%s, broker %s, role %s: %v; want nil", tc.region, tc.broker, tc.role, err)
		}
	}
}

// An IAM path is "/" or "/" + printable ASCII + "/" (IAM's pattern
// (\u002F)|(\u002F[\u0021-\u007E]+\u002F)), so a role's ARN is
// role/NAME or role/P/NAME with P not empty: "role//dedup" (a path "//",
// a doubled slash from a template joining "role/" and "/dedup") names no
// role that can exist. roleResource's (?:[!-~]*/)? takes an empty P and
// the token leaves for an STS that can only refuse it: round 3's rule
// (a role's ARN that is none is refused before the token leaves) for the
// path. ("role///dedup" is path "///", which the pattern takes.) (adversary 46d).
func TestAnAWSRoleARNWithAnEmptyPathSegmentIsRefusedBeforeTheTokenLeaves(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeFile(t, tokenFile, "jwt\n")
	for _, role := range []string{
		"arn:aws:iam::123456789012:role//dedup",
	} {
		env := irsaEnv("AWS_ROLE_ARN", role, "AWS_REGION", "us-east-1", "AWS_WEB_IDENTITY_TOKEN_FILE", tokenFile)
		if _, err := webIdentity(env); err == nil || !strings.Contains(err.Error(), "AWS_ROLE_ARN") {
			t.Errorf("AWS_ROLE_ARN %q: %v; want a start-up refusal naming AWS_ROLE_ARN", role, err)
		}
	}
	// Valid paths stay valid.
	for _, role := range []string{"arn:aws:iam::123456789012:role/dedup", "arn:aws:iam::123456789012:role/service-role/dedup", "arn:aws:iam::123456789012:role/a/b/dedup"} {
		if _, err := roleARNPartition(role); err != nil {
			t.Errorf("AWS_ROLE_ARN %q: %v; want it taken", role, err)
		}
	}
}

// AWS_USE_FIPS_ENDPOINT=true, which the AWS SDKs read (aws-sdk-go-v2's
// STS: https://sts-fips.us-east-1.amazonaws.com for us-east-1), is ignored:
// stsEndpoint sends the web identity token to the non-FIPS
// https://sts.us-east-1.amazonaws.com/ with nothing said, where an
// operator who set it requires FIPS-validated endpoints for credentials.
// Same partition, so beyond the claim's letter; the start-up rule dedup
// keeps elsewhere (an endpoint setting it cannot honour is refused, not
// passed over) wants the FIPS endpoint or a refusal naming the variable
// (adversary 46d).
func TestAWSUseFIPSEndpointIsHonouredOrRefusedNotIgnored(t *testing.T) {
	ep, err := stsEndpoint(irsaEnv("AWS_REGION", "us-east-1", "AWS_USE_FIPS_ENDPOINT", "true"))
	if err == nil && ep != "https://sts-fips.us-east-1.amazonaws.com/" {
		t.Errorf("AWS_USE_FIPS_ENDPOINT=true, AWS_REGION us-east-1: the token goes to %q; want https://sts-fips.us-east-1.amazonaws.com/ (as the AWS SDKs) or a start-up error naming AWS_USE_FIPS_ENDPOINT", ep)
	} else if err != nil && !strings.Contains(err.Error(), "AWS_USE_FIPS_ENDPOINT") {
		t.Errorf("AWS_USE_FIPS_ENDPOINT=true: %v; want the error to name AWS_USE_FIPS_ENDPOINT", err)
	}
}

// AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true tells the AWS SDKs to pass
// over AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_<SERVICE> (aws-sdk-go-v2/config
// env_config.go, GetIgnoreConfiguredEndpoints): with it, the SDKs' STS is
// the regional one. dedup reads AWS_ENDPOINT_URL regardless: the web
// identity token goes to the endpoint the operator turned off (here a
// LocalStack host set for other tools), and CheckBrokers, taking it for
// "an STS endpoint the operator named", skips the partition checks, so a
// GovCloud broker with a commercial role and AWS_REGION is not refused
// (adversary 46d).
func TestAWSIgnoreConfiguredEndpointURLsSendsTheTokenToTheRegionalSTS(t *testing.T) {
	noAWSEnv(t)
	env := irsaEnv("AWS_REGION", "us-east-1", "AWS_ENDPOINT_URL", "https://localstack.dev.example:4566",
		"AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true")
	if ep, err := stsEndpoint(env); err != nil || ep != "https://sts.us-east-1.amazonaws.com/" {
		t.Errorf("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true, AWS_ENDPOINT_URL set: the token goes to %q (%v); want https://sts.us-east-1.amazonaws.com/, as the AWS SDKs", ep, err)
	}
	gov := "b-1.mycluster.abc123.c2.kafka.us-gov-west-1.amazonaws.com:9098"
	if err := (Config{Mechanism: AWSMSKIAM}).checkBrokers([]string{gov}, env); err == nil {
		t.Errorf("GovCloud broker, commercial role, AWS_REGION us-east-1, AWS_ENDPOINT_URL ignored by AWS_IGNORE_CONFIGURED_ENDPOINT_URLS: nil; want the partition refusal")
	}
}

// STS's RoleSessionName is 2 to 64 of [\w+=,.@-]
// (API_AssumeRoleWithWebIdentity: "Length Constraints: Minimum length of
// 2. Maximum length of 64. Pattern: [\w+=,.@-]*"). AWS_ROLE_SESSION_NAME
// taken from the pod's name by the downward API (a StatefulSet's pod
// name runs to 253 characters), with a space, or of one character, is
// passed to STS as it is: each AssumeRoleWithWebIdentity, the web
// identity token with it, is refused with a ValidationError, every login
// fails, and start-up said nothing. Round 3's rule for AWS_ROLE_ARN (a
// value STS can only refuse is refused before the token leaves), for
// the other field dedup sends with the token (adversary 46d).
func TestAnAWSRoleSessionNameSTSCannotTakeIsRefusedBeforeTheTokenLeaves(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeFile(t, tokenFile, "jwt\n")
	for _, name := range []string{
		"dedup-" + strings.Repeat("x", 59), // 65
		"dedup worker",
		"d",
	} {
		env := irsaEnv("AWS_ROLE_SESSION_NAME", name, "AWS_REGION", "us-east-1", "AWS_WEB_IDENTITY_TOKEN_FILE", tokenFile)
		if _, err := webIdentity(env); err == nil || !strings.Contains(err.Error(), "AWS_ROLE_SESSION_NAME") {
			t.Errorf("AWS_ROLE_SESSION_NAME %q: %v; want a start-up refusal naming AWS_ROLE_SESSION_NAME", name, err)
		}
	}
	env := irsaEnv("AWS_ROLE_SESSION_NAME", "dedup-7d9f8c6b5-xk2lp", "AWS_REGION", "us-east-1", "AWS_WEB_IDENTITY_TOKEN_FILE", tokenFile)
	if _, err := webIdentity(env); err != nil {
		t.Errorf("a pod's name as AWS_ROLE_SESSION_NAME: %v; want it taken", err)
	}
}

// stsEndpoint lets AWS_ENDPOINT_URL_STS be http:// "but to a loopback
// host", and loopback takes "localhost" in any case (strings.EqualFold).
// Go's proxy rule (net/http ProxyFromEnvironment, x/net httpproxy
// useProxy) exempts only the exact "localhost" and loopback IPs: with
// AWS_ENDPOINT_URL_STS=http://LOCALHOST:PORT/ and HTTP_PROXY set (common
// in corporate and air-gapped clusters), the AssumeRoleWithWebIdentity
// POST, web identity token in its body, goes in clear text to the proxy,
// off the machine. The token must go over TLS or stay on this machine:
// refuse such an endpoint at start-up, or never proxy it. Run in a child
// process: net/http reads the proxy variables once per process
// (adversary 46e).
func TestAnHTTPLoopbackSTSEndpointIsNotReachedThroughHTTPProxyInClearText(t *testing.T) {
	if os.Getenv("DEDUP_ADV46E_CHILD") == "1" {
		tokenFile := filepath.Join(t.TempDir(), "token")
		writeFile(t, tokenFile, "adv46e-secret-jwt\n")
		env := irsaEnv("AWS_WEB_IDENTITY_TOKEN_FILE", tokenFile, "AWS_ENDPOINT_URL_STS", "http://LOCALHOST:1/")
		creds, err := webIdentity(env)
		if err != nil {
			return // refused at start-up: the token never left
		}
		_, _ = creds(context.Background())
		return
	}
	var mu sync.Mutex
	var leaked []string
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), "adv46e-secret-jwt") {
			mu.Lock()
			leaked = append(leaked, r.URL.String())
			mu.Unlock()
		}
		http.Error(w, "proxy", http.StatusForbidden)
	}))
	defer proxy.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestAnHTTPLoopbackSTSEndpointIsNotReachedThroughHTTPProxyInClearText$")
	cmd.Env = append(os.Environ(), "DEDUP_ADV46E_CHILD=1", "HTTP_PROXY="+proxy.URL, "http_proxy="+proxy.URL,
		"NO_PROXY=", "no_proxy=", "REQUEST_METHOD=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(leaked) > 0 {
		t.Errorf("AWS_ENDPOINT_URL_STS=http://LOCALHOST:1/, HTTP_PROXY set: the web identity token reached the HTTP proxy in clear text (%v); want it refused at start-up or sent to loopback only", leaked)
	}
}

// AWS_USE_DUALSTACK_ENDPOINT=true, which the AWS SDKs read (aws-sdk-go-v2
// config env_config.go; STS's endpoint rules: https://sts.REGION.
// DUALSTACKSUFFIX, with FIPS https://sts-fips.REGION.DUALSTACKSUFFIX,
// GovCloud included), is ignored as AWS_USE_FIPS_ENDPOINT was in round 4:
// the web identity token goes to the IPv4-only
// https://sts.us-east-1.amazonaws.com/, which a pod of an IPv6-only
// network the operator set it for cannot reach (every login then fails
// with a timeout, start-up said nothing), and with FIPS in GovCloud to
// sts.us-gov-west-1.amazonaws.com instead of
// sts-fips.us-gov-west-1.api.aws. Same partition, beyond the claim's
// letter; the rule round 4 set (an endpoint setting is honoured or
// refused naming its variable, not passed over) wants the dual-stack
// endpoint or a refusal (adversary 46e).
func TestAWSUseDualStackEndpointIsHonouredOrRefusedNotIgnored(t *testing.T) {
	for _, c := range []struct{ region, fips, want string }{
		{"us-east-1", "", "https://sts.us-east-1.api.aws/"},
		{"cn-north-1", "", "https://sts.cn-north-1.api.amazonwebservices.com.cn/"},
		{"us-east-1", "true", "https://sts-fips.us-east-1.api.aws/"},
		{"us-gov-west-1", "true", "https://sts-fips.us-gov-west-1.api.aws/"},
	} {
		ep, err := stsEndpoint(irsaEnv("AWS_REGION", c.region, "AWS_USE_FIPS_ENDPOINT", c.fips, "AWS_USE_DUALSTACK_ENDPOINT", "true"))
		if err == nil && ep != c.want {
			t.Errorf("AWS_USE_DUALSTACK_ENDPOINT=true, AWS_REGION %s, AWS_USE_FIPS_ENDPOINT %q: the token goes to %q; want %s (as the AWS SDKs) or a start-up error naming AWS_USE_DUALSTACK_ENDPOINT", c.region, c.fips, ep, c.want)
		} else if err != nil && !strings.Contains(err.Error(), "AWS_USE_DUALSTACK_ENDPOINT") {
			t.Errorf("AWS_USE_DUALSTACK_ENDPOINT=true, AWS_REGION %s: %v; want the error to name AWS_USE_DUALSTACK_ENDPOINT", c.region, err)
		}
	}
}

// franz-go's signer signs a seed whose name carries no region (an IP
// address, a DNS alias, a tunnel) for AWS_REGION as it is (aws.go
// challenge: os.Getenv("AWS_REGION")). Rounds 3 and 4 made the
// pseudo-regions aws-global, fips-REGION and REGION-fips valid for STS;
// nothing keeps them from the signer: with AWS_REGION us-east-1-fips (or
// fips-us-east-1, aws-global) and a seed 10.0.1.5:9098, CheckBrokers
// passes, the web identity token is exchanged, and every login is signed
// for region "us-east-1-fips", which MSK's kafka-cluster service refuses
// (a SigV4 scope names a real region): every login fails, start-up said
// nothing. Such a region is a start-up error naming AWS_REGION for a seed
// that takes its region from it (adversary 46e).
func TestAnAWSPseudoRegionIsNotWhatASeedWithoutARegionIsSignedFor(t *testing.T) {
	for _, region := range []string{"us-east-1-fips", "fips-us-east-1", "aws-global"} {
		noAWSEnv(t)
		t.Setenv("AWS_REGION", region) // franz-go's signer reads the process's
		env := irsaEnv("AWS_REGION", region)
		err := (Config{Mechanism: AWSMSKIAM}).checkBrokers([]string{"10.0.1.5:9098"}, env)
		if err == nil || !strings.Contains(err.Error(), "AWS_REGION") {
			t.Errorf("AWS_REGION %s, seed 10.0.1.5:9098 (signed for AWS_REGION): %v; want a start-up error naming AWS_REGION (MSK refuses a signature for region %q)", region, err, region)
		}
	}
}

// An STS endpoint the operator names may carry a password
// (AWS_ENDPOINT_URL_STS=https://user:password@sts-gateway…/, an
// authenticating gateway; Go's client sends it as basic auth). Go's
// client redacts it from its own errors (url.Error), but the
// CheckRedirect refusal added in round 4 quotes the endpoint whole:
// "(the web identity token goes to http://dedup:s3cr3t-gateway-pass@…
// only)", and that error is returned by the credentials callback to
// franz-go, which logs it at each failed login. A secret of the
// environment reaches the logs; the error should name the endpoint
// redacted (url.URL.Redacted), as the redirect target is (adversary 46e).
func TestTheRedirectRefusalDoesNotLogAPasswordOfTheSTSEndpoint(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeFile(t, tokenFile, "jwt\n")
	srv := httptest.NewServer(http.RedirectHandler("http://127.0.0.1:1/", http.StatusTemporaryRedirect))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	ep := "http://dedup:s3cr3t-gateway-pass@" + u.Host + "/"
	creds, err := webIdentity(irsaEnv("AWS_WEB_IDENTITY_TOKEN_FILE", tokenFile, "AWS_ENDPOINT_URL_STS", ep))
	if err != nil {
		t.Fatal(err)
	}
	_, err = creds(context.Background())
	if err == nil {
		t.Fatal("STS answered a redirect: nil error")
	}
	if strings.Contains(err.Error(), "s3cr3t-gateway-pass") {
		t.Errorf("the credentials error, logged at each login, carries AWS_ENDPOINT_URL_STS's password: %v", err)
	}
}

// A seed reached through an interface VPC endpoint (MSK behind an NLB and
// a PrivateLink endpoint service, AWS's documented cross-VPC pattern) is
// named vpce-….vpce-svc-….us-east-1.vpce.amazonaws.com. franz-go v1.22.2's
// signer took the label right before .amazonaws.com as the region and
// signed every login for region "vpce", which MSK refuses; start-up
// refused such a seed, naming it (adversary 46e). v1.22.3's signer takes
// the last region label before a partition's DNS suffix: it signs for
// us-east-1, the region the partition rule reads too, and start-up takes
// the seed. What start-up holds is that it agrees with the signer: a
// login signed for what is no region is refused, naming the seed
// (TestAnAWSRegionThatIsNoRegionIsRefusedNamingItsVariable for AWS_REGION).
func TestASeedReachedThroughAVPCEndpointIsSignedForTheRegionInItsName(t *testing.T) {
	noAWSEnv(t)
	t.Setenv("AWS_REGION", "eu-west-1") // not the seed's: the signer must read the name
	seed := "vpce-0a1b2c3d4e5f67890-abcdefgh.vpce-svc-0123456789abcdef0.us-east-1.vpce.amazonaws.com:9098"
	if r := signedFor(t, seed); r != "us-east-1" {
		t.Errorf("seed %s: franz-go signs its logins for region %q, want us-east-1", seed, r)
	}
	if err := (Config{Mechanism: AWSMSKIAM}).checkBrokers([]string{seed}, irsaEnv("AWS_REGION", "us-east-1")); err != nil {
		t.Errorf("seed %s (signed for us-east-1, STS us-east-1): %v; want it taken", seed, err)
	}
}

// signedFor is the region franz-go's signer puts in the credential scope
// of a login to addr.
func signedFor(t *testing.T, addr string) string {
	t.Helper()
	_, msg, err := mskiam.Auth{AccessKey: "check", SecretKey: "check"}.AsManagedStreamingIAMMechanism().Authenticate(context.Background(), addr)
	if err != nil {
		t.Fatalf("signing a login to %s: %v", addr, err)
	}
	return signedRegion(msg)
}

// The same password, at start-up: an AWS_ENDPOINT_URL_STS stsEndpoint
// refuses (here without its scheme, or with one it does not take) is
// quoted whole in the start-up error, password included, where the
// value's password should be redacted as url.URL.Redacted does
// (adversary 46e).
func TestTheStartUpRefusalOfAnSTSEndpointDoesNotLogItsPassword(t *testing.T) {
	for _, ep := range []string{"dedup:s3cr3t-gateway-pass@sts-gateway.internal.example", "ftp://dedup:s3cr3t-gateway-pass@sts-gateway.internal.example/"} {
		_, err := stsEndpoint(irsaEnv("AWS_ENDPOINT_URL_STS", ep))
		if err == nil {
			t.Errorf("AWS_ENDPOINT_URL_STS %s: taken; want a refusal", ep)
		} else if strings.Contains(err.Error(), "s3cr3t-gateway-pass") {
			t.Errorf("the start-up error carries AWS_ENDPOINT_URL_STS's password: %v", err)
		}
	}
}

func base64URL(s string) string { return base64.URLEncoding.EncodeToString([]byte(s)) }

// Go's regexp \w is [0-9A-Za-z_]: partitions.json's regionRegex
// ^(us|eu|…)\-\w+\-\d+$ takes "us-East-1", which no region is. With it in
// AWS_REGION and a seed whose name has no region (an IP address), the
// STS exchange works (sts.us-East-1.amazonaws.com is, to DNS and TLS,
// sts.us-east-1), but franz-go's signer puts "us-East-1" in every
// login's credential scope, which SigV4 compares exactly: MSK refuses
// each login. A bad region is a start-up error naming its variable
// (adversary 46f). An MSK name in mixed case
// (….kafka.us-East-1.amazonaws.com), which v1.22.2's signer signed as
// written (refused at start-up then), is signed for us-east-1 from
// v1.22.3 on (it reads a name in lower case, as DNS does): taken.
func TestARegionInMixedCaseIsNotWhatALoginIsSignedFor(t *testing.T) {
	noAWSEnv(t)
	t.Setenv("AWS_REGION", "us-East-1") // franz-go's signer reads the process's
	env := irsaEnv("AWS_REGION", "us-East-1")
	err := (Config{Mechanism: AWSMSKIAM}).checkBrokers([]string{"10.0.1.5:9098"}, env)
	if err == nil || !strings.Contains(err.Error(), "AWS_REGION") {
		t.Errorf("AWS_REGION us-East-1, seed 10.0.1.5:9098 (signed for region \"us-East-1\"): %v; want a start-up error naming AWS_REGION", err)
	}
	noAWSEnv(t)
	seed := "b-1.mycluster.abc123.c2.kafka.us-East-1.amazonaws.com:9098"
	if r := signedFor(t, seed); r != "us-east-1" {
		t.Errorf("seed %s: franz-go signs its logins for region %q, want us-east-1", seed, r)
	}
	if err := (Config{Mechanism: AWSMSKIAM}).checkBrokers([]string{seed}, irsaEnv()); err != nil {
		t.Errorf("seed %s (signed for us-east-1, STS's global endpoint, commercial): %v; want it taken", seed, err)
	}
}

// AWS_REGION aws-global with AWS_USE_FIPS_ENDPOINT=true is refused
// ("STS has no global FIPS or dual-stack endpoint"), but the same asked
// as a FIPS pseudo-region, aws-global-fips or fips-aws-global, is cut to
// aws-global, which regionPartition takes for the commercial partition,
// and builds https://sts-fips.aws-global.amazonaws.com/, a host that
// does not exist: with MSK-named seeds (signed for their own region)
// start-up passes and every login fails resolving STS. A bad region is a
// start-up error naming its variable.
func TestAWSGlobalAsAFIPSPseudoRegionIsAStartUpErrorNamingAWSRegion(t *testing.T) {
	for _, region := range []string{"aws-global-fips", "fips-aws-global"} {
		noAWSEnv(t)
		t.Setenv("AWS_REGION", region)
		env := irsaEnv("AWS_REGION", region)
		ep, err := stsEndpoint(env)
		if err == nil {
			t.Errorf("AWS_REGION %s: STS endpoint %s, want an error naming AWS_REGION", region, ep)
		}
		err = (Config{Mechanism: AWSMSKIAM}).checkBrokers([]string{mskBroker}, env)
		if err == nil || !strings.Contains(err.Error(), "AWS_REGION") {
			t.Errorf("AWS_REGION %s, seed %s: %v; want a start-up error naming AWS_REGION (the token would go to %s)", region, mskBroker, err, ep)
		}
	}
}

// hostPartition claims to read the region the signer signs for, but it
// picks its own label: the last one that is a region of a partition
// sharing the host's DNS suffix, skipping a region label of another
// partition, where franz-go v1.22.3's signer takes the last region-shaped
// label, whatever its partition. For a name whose last region label is of
// another partition than its suffix, start-up compares the STS with a
// partition the signer does not sign for: a GovCloud token is taken for a
// seed every login to which is signed for cn-north-1, a China token for
// one signed for us-east-1. The partition compared must be the one of the
// region the signer signs for (adversary 50).
func TestTheBrokerPartitionTheCheckComparesIsTheOneOfTheRegionTheSignerSignsFor(t *testing.T) {
	c := Config{Mechanism: AWSMSKIAM}
	for _, tc := range []struct {
		broker, role, region string
	}{
		{"b-1.mycluster.abc123.c2.kafka.us-gov-west-1.cn-north-1.amazonaws.com:9098", "arn:aws-us-gov:iam::123456789012:role/dedup", "us-gov-west-1"},
		{"b-1.mycluster.abc123.c2.kafka.us-east-1.amazonaws.com.cn:9098", "arn:aws-cn:iam::123456789012:role/dedup", "cn-north-1"},
		{"b-1.mycluster.abc123.c2.kafka.us-east-1.us-gov-west_1-1.amazonaws.com:9098", "arn:aws-us-gov:iam::123456789012:role/dedup", "us-gov-west-1"},
	} {
		noAWSEnv(t)
		signed := signedFor(t, tc.broker)
		env := irsaEnv("AWS_ROLE_ARN", tc.role, "AWS_REGION", tc.region)
		sts, ep, _, _ := regionalSTS(env)
		if regionPartition(signed).name == sts.name {
			t.Fatalf("%s: signed for %s, of the STS's partition: no case", tc.broker, signed)
		}
		if err := c.checkBrokers([]string{tc.broker}, env); err == nil {
			t.Errorf("seed %s: hostPartition %s, but franz-go signs every login for %s (partition %s) with credentials from %s (partition %s): taken at start-up, want a refusal naming the seed",
				tc.broker, hostPartition(tc.broker), signed, regionPartition(signed).name, ep, sts.name)
		}
	}
}

// GovCloud shares the commercial DNS suffixes (amazonaws.com, api.aws):
// awsPartitions says a host of them "is told apart by the region label in
// its name". A seed under them with no region label (an alias such as
// kafka.amazonaws.com, an EC2-style name) tells nothing apart, and
// franz-go's signer signs its logins for AWS_REGION; hostPartition calls
// it commercial anyway. With a GovCloud role and AWS_REGION us-gov-west-1
// (EKS's, in GovCloud) the token goes to GovCloud's STS and every login is
// signed for us-gov-west-1 with GovCloud credentials: a working set-up,
// refused at start-up as "in AWS partition aws" (adversary 50).
func TestARegionlessSeedUnderTheSuffixGovCloudSharesIsSignedForAWSRegionNotRefusedAsCommercial(t *testing.T) {
	noAWSEnv(t)
	t.Setenv("AWS_REGION", "us-gov-west-1") // the signer's: the seed names no region
	gov := irsaEnv("AWS_ROLE_ARN", "arn:aws-us-gov:iam::123456789012:role/dedup", "AWS_REGION", "us-gov-west-1")
	for _, seed := range []string{"kafka.amazonaws.com:9098", "kafka.api.aws:9098"} {
		if r := signedFor(t, seed); r != "us-gov-west-1" {
			t.Fatalf("seed %s: signed for %q, want us-gov-west-1 (AWS_REGION)", seed, r)
		}
		if err := (Config{Mechanism: AWSMSKIAM}).checkBrokers([]string{seed}, gov); err != nil {
			t.Errorf("seed %s (signed for us-gov-west-1, GovCloud role, GovCloud STS): %v; want it taken", seed, err)
		}
	}
}

// kafka.brokers are the seeds of one cluster, in one region. EKS sets
// AWS_REGION to the pod's region; a router in eu-west-1 reading a cluster
// in us-east-1 lists its MSK names and an alias (a PrivateLink or NLB
// name, kafka-bootstrap.internal). The signer signs the MSK names' logins
// for us-east-1 and the alias's for AWS_REGION, eu-west-1: MSK refuses
// every login to the alias (a SigV4 scope names the cluster's region).
// Start-up takes it, though the brokers' own names say AWS_REGION is not
// the cluster's: the mismatch of AWS_REGION with the brokers is a
// start-up error naming AWS_REGION (adversary 50).
func TestSeedsOfOneClusterSignedForTwoRegionsAreAStartUpErrorNamingAWSRegion(t *testing.T) {
	noAWSEnv(t)
	t.Setenv("AWS_REGION", "eu-west-1") // the signer's, for the alias
	t.Setenv("AWS_ACCESS_KEY_ID", keyID1)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret1)
	named := "b-1.mycluster.abc123.c2.kafka.us-east-1.amazonaws.com:9098"
	alias := "kafka-bootstrap.internal:9098"
	if a, b := signedFor(t, named), signedFor(t, alias); a == b {
		t.Fatalf("both seeds signed for %s: no case", a)
	}
	for _, env := range []func(string) string{
		func(k string) string {
			return map[string]string{"AWS_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": keyID1, "AWS_SECRET_ACCESS_KEY": secret1}[k]
		},
		irsaEnv("AWS_REGION", "eu-west-1"),
	} {
		err := (Config{Mechanism: AWSMSKIAM}).checkBrokers([]string{named, alias}, env)
		if err == nil || !strings.Contains(err.Error(), "AWS_REGION") {
			t.Errorf("seeds %s (signed for us-east-1) and %s (signed for AWS_REGION eu-west-1): %v; want a start-up error naming AWS_REGION (every login to %s is signed for another region than the cluster's)", named, alias, err, alias)
		}
	}
}

// What holds of the rule (adversary 50): for seeds that name their
// region, in every partition, as an MSK broker, an interface VPC endpoint
// or a dual-stack name, in upper case with the root's trailing dot, and
// for IP seeds (signed for AWS_REGION), a web identity is taken at
// start-up exactly when the region franz-go signs every login for is of
// the partition of the STS the token goes to.
func TestAWebIdentityIsTakenExactlyWhenTheSignedRegionIsOfItsSTSsPartition(t *testing.T) {
	var seeds []string
	for _, p := range partitionBrokers {
		s := awsPartitions[0].suffixes
		for _, q := range awsPartitions {
			if q.name == p.partition {
				s = q.suffixes
			}
		}
		seeds = append(seeds,
			"vpce-0a1b2c3d4e5f67890-abcdefgh.vpce-svc-0123456789abcdef0."+p.region+".vpce."+s[0]+":9098",
			"b-1.mycluster.abc123.c2.kafka."+p.region+"."+s[1]+":9098",
			strings.ToUpper("b-2.mycluster.abc123.c2.kafka."+p.region+"."+s[0])+".:9098",
			"boot-abc.c1.kafka-serverless."+p.region+"."+s[0])
	}
	c := Config{Mechanism: AWSMSKIAM}
	for _, seed := range seeds {
		for _, p := range partitionBrokers {
			noAWSEnv(t)
			t.Setenv("AWS_REGION", p.region)
			signed := signedFor(t, mustDialAddr(t, seed))
			env := irsaEnv("AWS_ROLE_ARN", "arn:"+p.partition+":iam::123456789012:role/dedup", "AWS_REGION", p.region)
			err := c.checkBrokers([]string{seed}, env)
			if want := regionPartition(signed).name == p.partition; want != (err == nil) {
				t.Errorf("seed %s (signed for %s), STS of %s: %v; want taken %v", seed, signed, p.region, err, want)
			}
		}
	}
	for _, seed := range []string{"10.0.1.5:9098", "[fd00::1]:9098", "fd00::1", "kafka.internal"} {
		for _, p := range partitionBrokers {
			noAWSEnv(t)
			t.Setenv("AWS_REGION", p.region)
			env := irsaEnv("AWS_ROLE_ARN", "arn:"+p.partition+":iam::123456789012:role/dedup", "AWS_REGION", p.region)
			if r := signedFor(t, mustDialAddr(t, seed)); r != p.region {
				t.Errorf("seed %s: signed for %s, want AWS_REGION %s", seed, r, p.region)
			}
			if err := c.checkBrokers([]string{seed}, env); err != nil {
				t.Errorf("seed %s, AWS_REGION %s: %v; want taken", seed, p.region, err)
			}
		}
	}
}

func mustDialAddr(t *testing.T, b string) string {
	t.Helper()
	a, err := dialAddr(b)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// What holds (adversary 50): the host CheckBrokers has franz-go's signer
// sign for is the one the client dials and signs for at run time (kgo's
// parseBrokerAddr, then net.JoinHostPort), for each spelling of a seed:
// without a port, with a zero-padded one, IPv6 bare or bracketed, upper
// case, the root's trailing dot.
func TestTheSeedCheckedIsTheAddressFranzGoDialsAndSigns(t *testing.T) {
	noAWSEnv(t)
	t.Setenv("AWS_REGION", "eu-central-1") // for the seeds that name none
	for _, b := range []string{
		mskBroker, mskHost, mskHost + ".", strings.ToUpper(mskHost) + ".:9098", mskHost + ":09098",
		"vpce-0a1b-abcd.vpce-svc-0123.cn-north-1.vpce.amazonaws.com.cn",
		"[fd00::1]", "fd00::1", "[fd00::1]:9098", "10.0.1.5", "10.0.1.5:9098", "kafka.internal",
	} {
		dialed := make(chan string, 1)
		cl, err := kgo.NewClient(kgo.SeedBrokers(b), kgo.Dialer(func(_ context.Context, _, host string) (net.Conn, error) {
			select {
			case dialed <- host:
			default:
			}
			return nil, errors.New("not dialing")
		}))
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = cl.Ping(ctx)
		cancel()
		cl.Close()
		var runtime string
		select {
		case runtime = <-dialed:
		default:
			t.Fatalf("%s: franz-go dialed nothing", b)
		}
		checked, err := dialAddr(b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		hc, _, _ := net.SplitHostPort(checked)
		hr, _, _ := net.SplitHostPort(runtime)
		if hc != hr || signedFor(t, checked) != signedFor(t, runtime) {
			t.Errorf("seed %s: checked %s (signed for %s), franz-go dials %s (signed for %s)", b, checked, signedFor(t, checked), runtime, signedFor(t, runtime))
		}
	}
}

// hostPartition is the name of the partition a host (host:port) is in
// by its DNS suffix (the tests' check of STS hosts; checkBrokers goes by
// the region a broker's logins are signed for), "" when it is in none (an IP address, an alias). Of
// the partitions that share a suffix (aws, aws-us-gov), the one of the
// last label before it that is a region's name: the region the signer
// signs for in an MSK broker's name (….kafka.us-gov-west-1.amazonaws.com),
// not a cluster's name the operator chose (b-1.us-gov-west-1.….kafka.us-east-1.…).
func hostPartition(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, p := range awsPartitions {
		for _, s := range p.suffixes {
			if !strings.HasSuffix(host, "."+s) { // no suffix ends another
				continue
			}
			labels := strings.Split(strings.TrimSuffix(host, "."+s), ".")
			for i := len(labels) - 1; i >= 0; i-- {
				if q := regionPartition(labels[i]); q.name != "" && q.suffixes == p.suffixes {
					return q.name
				}
			}
			return p.name
		}
	}
	return ""
}

// adversary 50e, holds: one MSK cluster's seeds written every way an
// operator may write them (broker names, upper case with the root's dot,
// an interface VPC endpoint, a dual-stack api.aws name, a serverless
// bootstrap name, IP addresses and an alias) are taken with a web identity
// when AWS_REGION (or AWS_DEFAULT_REGION alone) is the cluster's region;
// a seed signed for any other region, or of another partition, is refused.
func TestOneClustersSeedsWrittenDifferentlyAreTakenAndAnotherRegionsSeedIsRefused(t *testing.T) {
	cluster := []string{
		"b-1.mycluster.abc123.c2.kafka.eu-central-1.amazonaws.com:9098",
		"B-2.MYCLUSTER.ABC123.C2.KAFKA.EU-CENTRAL-1.AMAZONAWS.COM.:9098",
		"vpce-0a1b2c3d4e5f67890-12345678.kafka.eu-central-1.vpce.amazonaws.com:9098",
		"b-3.mycluster.abc123.c2.kafka.eu-central-1.api.aws:9098",
		"boot-abcd1234.c2.kafka-serverless.eu-central-1.amazonaws.com:9098",
		"10.0.1.5:9098",
		"[fd00::5]:9098",
		"kafka-bootstrap.internal:9098",
	}
	c := Config{Mechanism: AWSMSKIAM}
	for _, regionVar := range []string{"AWS_REGION", "AWS_DEFAULT_REGION"} {
		noAWSEnv(t)
		t.Setenv(regionVar, "eu-central-1")
		t.Setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/dedup")
		t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/token")
		if err := c.checkBrokers(cluster, os.Getenv); err != nil {
			t.Errorf("%s eu-central-1, one cluster's seeds: %v; want taken", regionVar, err)
		}
		for _, other := range []string{
			"b-1.other.abc123.c2.kafka.eu-west-1.amazonaws.com:9098",
			"vpce-0a1b2c3d4e5f67890-12345678.kafka.eu-west-1.vpce.amazonaws.com:9098",
			"b-1.gov.abc123.c2.kafka.us-gov-west-1.amazonaws.com:9098",
			"b-1.cn.abc123.c2.kafka.cn-north-1.amazonaws.com.cn:9098",
		} {
			if err := c.checkBrokers(append(append([]string(nil), cluster...), other), os.Getenv); err == nil {
				t.Errorf("%s eu-central-1, one cluster's seeds and %s: taken; want refused", regionVar, other)
			}
		}
	}
	noAWSEnv(t)
	t.Setenv("AWS_REGION", "eu-west-1") // the IP seeds signed for eu-west-1, the named ones for eu-central-1
	t.Setenv("AWS_ACCESS_KEY_ID", keyID1)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret1)
	if err := c.checkBrokers(cluster, os.Getenv); err == nil || strings.Contains(err.Error(), secret1) {
		t.Errorf("AWS_REGION eu-west-1 with eu-central-1's seeds: %v; want refused, quoting no secret", err)
	}
}

// A redirect STS answers is refused (the web identity token goes to the
// endpoint checked at start-up only) and not asked again: a refusal
// cannot change, and each try would send the token.
func TestARefusedRedirectOfSTSIsNotTriedAgain(t *testing.T) {
	noAWSEnv(t)
	var calls atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the redirect was followed")
	}))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Redirect(w, r, other.URL+"/", http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeFile(t, tokenFile, "jwt-one\n")
	t.Setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/dedup")
	t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", tokenFile)
	t.Setenv("AWS_ENDPOINT_URL_STS", srv.URL)
	t.Setenv("AWS_REGION", "eu-west-1")
	m, err := Config{Mechanism: AWSMSKIAM}.Build()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := m.Authenticate(ctx, mskBroker); err == nil || !strings.Contains(err.Error(), "redirect") {
		t.Fatalf("a login against a redirecting STS: %v, want the redirect's error", err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("one login asked the redirecting STS %d times, want once", n)
	}
}
