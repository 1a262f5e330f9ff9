// Package kafkasasl is kafka.sasl: how dedup's Kafka clients authenticate
// (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, AWS_MSK_IAM). Secrets
// come inline (usually ${VAR}) or from files, which are read again when they
// change, at the next authentication: rotating a mounted Secret needs no
// restart. AWS_MSK_IAM may instead take its credentials from the
// environment, as AWS SDKs do in a pod (see awsiam.go).
package kafkasasl

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/sasl"
	mskiam "github.com/twmb/franz-go/pkg/sasl/aws"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/dedupio/dedup/connect/secretfile"
)

// The mechanisms, as Kafka names them.
const (
	Plain       = "PLAIN"
	ScramSHA256 = "SCRAM-SHA-256"
	ScramSHA512 = "SCRAM-SHA-512"
	OAuthBearer = "OAUTHBEARER"
	AWSMSKIAM   = "AWS_MSK_IAM"
)

// want lists the mechanisms, for errors.
const want = "want PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM"

// Config is the kafka.sasl section. Mechanism empty: no SASL.
type Config struct {
	Mechanism string `yaml:"mechanism"`
	// Username and Password (or PasswordFile) for PLAIN and SCRAM.
	Username     string `yaml:"username"`
	Password     string `yaml:"password"`
	PasswordFile string `yaml:"password_file"`
	// OAUTHBEARER takes either TokenFile, a token some other process keeps
	// fresh (read again when it changes), or the client-credentials grant
	// against TokenURL with ClientID and ClientSecret (or
	// ClientSecretFile) and optional Scopes; dedup refreshes the token
	// before it expires.
	TokenFile        string   `yaml:"token_file"`
	TokenURL         string   `yaml:"token_url"`
	ClientID         string   `yaml:"client_id"`
	ClientSecret     string   `yaml:"client_secret"`
	ClientSecretFile string   `yaml:"client_secret_file"`
	Scopes           []string `yaml:"scopes"`
	// Extensions are OAUTHBEARER SASL extensions (Confluent Cloud wants
	// logicalCluster and identityPoolId).
	Extensions map[string]string `yaml:"extensions"`
	// AWS_MSK_IAM (Amazon MSK's IAM access control; the only mechanism of
	// MSK Serverless) signs each login with AWS credentials: those in
	// AccessKeyIDFile and SecretAccessKeyFile, with SessionTokenFile for
	// temporary credentials, read again when they change; or, when none
	// is set, those of the environment: AWS_ACCESS_KEY_ID,
	// AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, else a web identity
	// (EKS IAM roles for service accounts: AWS_ROLE_ARN and
	// AWS_WEB_IDENTITY_TOKEN_FILE, exchanged at STS for temporary
	// credentials that are renewed before they expire), else the container
	// credentials endpoint (EKS Pod Identity: AWS_CONTAINER_CREDENTIALS_FULL_URI
	// and AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE; an ECS task's role:
	// AWS_CONTAINER_CREDENTIALS_RELATIVE_URI). Nothing else of the AWS
	// SDKs' chain is read: no ~/.aws files or profiles, no EC2 instance
	// metadata. The
	// signature's region is the one in the broker's name
	// (….kafka.us-east-1.amazonaws.com), else AWS_REGION or
	// AWS_DEFAULT_REGION.
	AccessKeyIDFile     string `yaml:"access_key_id_file"`
	SecretAccessKeyFile string `yaml:"secret_access_key_file"`
	SessionTokenFile    string `yaml:"session_token_file"`
}

// On reports whether SASL is used.
func (c Config) On() bool { return c.Mechanism != "" }

// Name is the mechanism as Kafka spells it (the config accepts any case).
func (c Config) Name() string { return strings.ToUpper(c.Mechanism) }

// Validate names the first invalid field.
func (c Config) Validate() error {
	one := func(a, b string) bool { return (a == "") != (b == "") }
	userPass := c.Username != "" || c.Password != "" || c.PasswordFile != ""
	oauthAny := c.TokenFile != "" || c.TokenURL != "" || c.ClientID != "" || c.ClientSecret != "" ||
		c.ClientSecretFile != "" || len(c.Scopes) > 0 || len(c.Extensions) > 0
	awsAny := c.AccessKeyIDFile != "" || c.SecretAccessKeyFile != "" || c.SessionTokenFile != ""
	if awsAny && c.Name() != AWSMSKIAM && c.Name() != "" {
		return fmt.Errorf("kafka.sasl.access_key_id_file, secret_access_key_file, session_token_file: for AWS_MSK_IAM, not %s", c.Name())
	}
	switch c.Name() {
	case "":
		if userPass || oauthAny || awsAny {
			return errors.New("kafka.sasl.mechanism: empty, but other kafka.sasl keys are set: " + want)
		}
	case Plain, ScramSHA256, ScramSHA512:
		switch {
		case c.Username == "":
			return fmt.Errorf("kafka.sasl.username: empty (mechanism %s)", c.Name())
		case !one(c.Password, c.PasswordFile):
			return fmt.Errorf("kafka.sasl.password, password_file: set one (mechanism %s)", c.Name())
		case oauthAny:
			return fmt.Errorf("kafka.sasl: token and client keys are for OAUTHBEARER, not %s", c.Name())
		}
	case OAuthBearer:
		switch {
		case userPass:
			return errors.New("kafka.sasl.username, password: not used by OAUTHBEARER (token_file, or token_url with client_id and client_secret)")
		case !one(c.TokenFile, c.TokenURL):
			return errors.New("kafka.sasl.token_file, token_url: set one (OAUTHBEARER)")
		case c.TokenFile != "" && (c.ClientID != "" || c.ClientSecret != "" || c.ClientSecretFile != "" || len(c.Scopes) > 0):
			return errors.New("kafka.sasl.client_id, client_secret, scopes: only with token_url")
		case c.TokenURL != "" && c.ClientID == "":
			return errors.New("kafka.sasl.client_id: empty (token_url)")
		case c.TokenURL != "" && !one(c.ClientSecret, c.ClientSecretFile):
			return errors.New("kafka.sasl.client_secret, client_secret_file: set one (token_url)")
		case c.TokenURL != "" && !strings.HasPrefix(c.TokenURL, "https://") && !strings.HasPrefix(c.TokenURL, "http://"):
			return errors.New("kafka.sasl.token_url: want an http(s) URL")
		}
	case AWSMSKIAM:
		switch {
		case userPass || oauthAny:
			return errors.New("kafka.sasl: username, password, token and client keys are not used by AWS_MSK_IAM (access_key_id_file and secret_access_key_file, or the AWS credentials of the environment)")
		case c.SessionTokenFile != "" && c.AccessKeyIDFile == "" && c.SecretAccessKeyFile == "":
			return errors.New("kafka.sasl.session_token_file: only with access_key_id_file and secret_access_key_file")
		case (c.AccessKeyIDFile == "") != (c.SecretAccessKeyFile == ""):
			return errors.New("kafka.sasl.access_key_id_file, secret_access_key_file: set both, or neither for the AWS credentials of the environment (AWS_MSK_IAM)")
		}
	default:
		return fmt.Errorf("kafka.sasl.mechanism: %q, %s", c.Mechanism, want)
	}
	return nil
}

// Plaintext says where a credential of c would cross a network
// unencrypted, naming the key: SASL (any mechanism: PLAIN sends the
// password itself, SCRAM's exchange and an OAUTHBEARER token can be
// replayed or downgraded, an AWS_MSK_IAM signature is a bearer credential
// for up to fifteen minutes, and MSK's IAM listener is TLS-only anyway) to a
// broker not on this machine when tls is off,
// or a token_url over http:// to a host not on this machine (the client
// secret goes in the request). On this machine is a loopback address
// (127.0.0.0/8, ::1) or localhost. nil when nothing would.
func (c Config) Plaintext(brokers []string, tls bool) error {
	if !c.On() {
		return nil
	}
	if !tls {
		for _, b := range brokers {
			host := b
			if addr, err := dialAddr(b); err == nil { // "[::1]": franz-go's default port
				host, _, _ = net.SplitHostPort(addr)
			}
			if !loopback(host) {
				return fmt.Errorf("kafka.sasl.mechanism %s sends credentials to %s without TLS: turn kafka.tls on (enabled: true, or its files)", c.Name(), b)
			}
		}
	}
	if c.TokenURL != "" {
		u, err := url.Parse(c.TokenURL)
		if err == nil && u.Scheme == "http" && !httpLoopback(u.Hostname()) {
			return fmt.Errorf("kafka.sasl.token_url: http:// to %s sends the client secret without TLS: use https://", u.Hostname())
		}
	}
	return nil
}

// httpLoopback: a host an http:// request reaches on this machine, never
// through HTTP_PROXY: "localhost" as Go's proxy rule spells it (it
// proxies "LOCALHOST"), or a loopback address.
func httpLoopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || ip != nil && ip.IsLoopback()
}

// loopback: localhost, or an address in 127.0.0.0/8 or ::1.
func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Build builds the franz-go mechanism. Secret files are read once here
// (a missing file is a start-up error naming its key) and again, when they
// changed, at each authentication. nil when SASL is off.
func (c Config) Build() (sasl.Mechanism, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	switch c.Name() {
	case "":
		return nil, nil
	case Plain, ScramSHA256, ScramSHA512:
		password, err := value("kafka.sasl.password_file", c.Password, c.PasswordFile)
		if err != nil {
			return nil, err
		}
		switch c.Name() {
		case Plain:
			return plain.Plain(func(context.Context) (plain.Auth, error) {
				p, err := password()
				return plain.Auth{User: c.Username, Pass: p}, err
			}), nil
		case ScramSHA256:
			return scram.Sha256(func(context.Context) (scram.Auth, error) {
				p, err := password()
				return scram.Auth{User: c.Username, Pass: p}, err
			}), nil
		default:
			return scram.Sha512(func(context.Context) (scram.Auth, error) {
				p, err := password()
				return scram.Auth{User: c.Username, Pass: p}, err
			}), nil
		}
	}
	if c.Name() == AWSMSKIAM {
		creds, err := c.awsCredentials(os.Getenv)
		if err != nil {
			return nil, err
		}
		return mskiam.ManagedStreamingIAM(creds), nil
	}
	token, err := c.tokens()
	if err != nil {
		return nil, err
	}
	return oauth.Oauth(func(ctx context.Context) (oauth.Auth, error) {
		t, err := token(ctx)
		return oauth.Auth{Token: t, Extensions: c.Extensions}, err
	}), nil
}

// Identity says whose credentials c sends, for errors: a user, an OAuth
// client, where AWS credentials come from. It quotes no secret.
func (c Config) Identity() string {
	switch c.Name() {
	case OAuthBearer:
		if c.ClientID != "" {
			return fmt.Sprintf("client %q", c.ClientID)
		}
		return "an OAuth token"
	case AWSMSKIAM:
		return c.awsIdentity(os.Getenv)
	}
	return fmt.Sprintf("user %q", c.Username)
}

// tokens is where OAUTHBEARER's token comes from.
func (c Config) tokens() (func(context.Context) (string, error), error) {
	if c.TokenFile != "" {
		f, err := secretfile.NewFile("kafka.sasl.token_file", c.TokenFile)
		if err != nil {
			return nil, err
		}
		return func(context.Context) (string, error) { return f.Get() }, nil
	}
	clientSecret, err := value("kafka.sasl.client_secret_file", c.ClientSecret, c.ClientSecretFile)
	if err != nil {
		return nil, err
	}
	src := oauth2.ReuseTokenSource(nil, &clientCredentials{
		cfg:    clientcredentials.Config{ClientID: c.ClientID, TokenURL: c.TokenURL, Scopes: c.Scopes},
		secret: clientSecret,
	})
	return func(context.Context) (string, error) {
		t, err := src.Token()
		if err != nil {
			return "", fmt.Errorf("kafka.sasl.token_url: getting a token: %w", err)
		}
		return t.AccessToken, nil
	}, nil
}

// clientCredentials runs the client-credentials grant with the client
// secret as it is now (its file may have been rotated).
type clientCredentials struct {
	cfg    clientcredentials.Config
	secret func() (string, error)
}

func (s *clientCredentials) Token() (*oauth2.Token, error) {
	sec, err := s.secret()
	if err != nil {
		return nil, err
	}
	cfg := s.cfg
	cfg.ClientSecret = sec
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = context.WithValue(ctx, oauth2.HTTPClient, &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		// A 307/308 would send the client secret again (in the form, on
		// oauth2's retry), to a host Plaintext never saw.
		return fmt.Errorf("kafka.sasl.token_url answered a redirect to %s: not followed (the client secret goes to token_url only)", req.URL.Redacted())
	}})
	t, err := cfg.Token(ctx)
	if err != nil {
		return nil, err
	}
	// oauth2 reuses a token until expires_in, forever without it (RFC
	// 6749 only recommends it). A JWT's exp bounds it too, the earlier
	// wins (an IdP may re-serve a cached token with a fixed expires_in);
	// with neither, it is fetched again at each login.
	exp, ok := jwtExpiry(t.AccessToken)
	switch {
	case ok && (t.Expiry.IsZero() || exp.Before(t.Expiry)):
		t.Expiry = exp
	case !ok && t.Expiry.IsZero():
		t.Expiry = time.Now()
	}
	return t, nil
}

// jwtExpiry is the exp claim of token if it is a JWT with one: "exp"
// exactly (claim names are case-sensitive, RFC 7519 10.1.1; encoding/json
// would take "EXP" for it), a number.
func jwtExpiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, false
	}
	var claims map[string]json.RawMessage
	var exp float64
	if json.Unmarshal(b, &claims) != nil || json.Unmarshal(claims["exp"], &exp) != nil {
		return time.Time{}, false
	}
	return time.Unix(int64(exp), 0), true
}

// value is an inline secret or a file's, read again when it changes.
func value(fileKey, inline, path string) (func() (string, error), error) {
	if path == "" {
		return func() (string, error) { return inline, nil }, nil
	}
	f, err := secretfile.NewFile(fileKey, path)
	if err != nil {
		return nil, err
	}
	return f.Get, nil
}
