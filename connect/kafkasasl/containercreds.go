package kafkasasl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	mskiam "github.com/twmb/franz-go/pkg/sasl/aws"

	"github.com/dedupio/dedup/connect/secretfile"
)

// The container credentials endpoint, as the AWS SDKs read it
// (aws-sdk-go-v2 config/resolve_credentials.go and
// credentials/endpointcreds): EKS Pod Identity's agent
// (AWS_CONTAINER_CREDENTIALS_FULL_URI, http://169.254.170.23/v1/credentials,
// and the pod's token in AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE), or an ECS
// task's role (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI, a path on
// http://169.254.170.2). A GET with the token as Authorization answers
// temporary credentials as JSON; an awsRenewal holds them.
const (
	containerFullURI     = "AWS_CONTAINER_CREDENTIALS_FULL_URI"
	containerRelativeURI = "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"
	containerToken       = "AWS_CONTAINER_AUTHORIZATION_TOKEN"
	containerTokenFile   = "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"
	ecsContainerEndpoint = "http://169.254.170.2"
)

// containerHosts are the hosts, besides this machine's, that the AWS SDKs
// send the token to over http://: ECS's endpoint and EKS Pod Identity's
// agent (IPv4 and IPv6). Link-local addresses of the node, not a network's.
var containerHosts = []netip.Addr{
	netip.MustParseAddr("169.254.170.2"),
	netip.MustParseAddr("169.254.170.23"),
	netip.MustParseAddr("fd00:ec2::23"),
}

// containerSet says whether the environment names a container endpoint.
func containerSet(getenv func(string) string) bool {
	return getenv(containerFullURI) != "" || getenv(containerRelativeURI) != ""
}

// containerEndpoint is the endpoint the environment names and the
// variable that named it. Over http:// only to a host the AWS SDKs take
// (this machine, containerHosts); any host over https://. A relative URI
// is a path on ECS's endpoint, never another host ("@host/…", "//host/…").
// Setting both is an error: the SDKs do not agree which one wins.
func containerEndpoint(getenv func(string) string) (endpoint, from string, err error) {
	full, rel := getenv(containerFullURI), getenv(containerRelativeURI)
	switch {
	case full != "" && rel != "":
		return "", "", fmt.Errorf("set %s or %s, not both", containerFullURI, containerRelativeURI)
	case rel != "":
		if !strings.HasPrefix(rel, "/") || strings.HasPrefix(rel, "//") || strings.ContainsAny(rel, "@\\ \t\r\n") {
			return "", "", fmt.Errorf("%s is not a path (/…) on %s", containerRelativeURI, ecsContainerEndpoint)
		}
		u, err := url.Parse(ecsContainerEndpoint + rel)
		if err != nil || u.Host != "169.254.170.2" {
			return "", "", fmt.Errorf("%s is not a path (/…) on %s", containerRelativeURI, ecsContainerEndpoint)
		}
		return u.String(), containerRelativeURI, nil
	}
	u, err := url.Parse(full)
	switch {
	case err != nil || u.Hostname() == "" || u.Scheme != "https" && u.Scheme != "http":
		// Not quoted: a value that is no URL may carry a password
		// where url.URL.Redacted cannot find it.
		return "", "", fmt.Errorf("%s is not an http(s) URL, http://169.254.170.23/v1/credentials or https://HOST[:PORT][/PATH] (its value is not repeated here: it may hold a password)", containerFullURI)
	case u.Scheme == "http" && !containerHTTPHost(u.Hostname()):
		return "", "", fmt.Errorf("%s: http:// to %s would send the container authorization token without TLS: the AWS SDKs take http:// only to this machine, ECS's 169.254.170.2 and EKS Pod Identity's 169.254.170.23 or fd00:ec2::23; use https://", containerFullURI, u.Hostname())
	}
	return u.String(), containerFullURI, nil // the scheme in lower case
}

// containerShown is endpoint as errors and Identity show it: no password,
// no query, and for ECS's relative URI no path (its credentials ID is
// what fetches the task role's credentials, no token asked).
func containerShown(endpoint, from string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "the container credentials endpoint"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	if from == containerRelativeURI {
		u.Path, u.RawPath = "", ""
	}
	return u.String()
}

// containerHTTPHost: a host the token may reach over http://, as an
// address or "localhost" (no name is resolved: what it resolves to can
// change after start-up).
func containerHTTPHost(host string) bool {
	if loopback(host) {
		return true
	}
	a, err := netip.ParseAddr(host)
	if err != nil || a.Zone() != "" { // a zone: not the address itself (the AWS SDKs refuse it)
		return false
	}
	for _, h := range containerHosts {
		if a.Unmap() == h {
			return true
		}
	}
	return false
}

// containerAuthorization is the token for Authorization:
// AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE, read again when it changes (the
// kubelet rotates EKS Pod Identity's), else
// AWS_CONTAINER_AUTHORIZATION_TOKEN; nil for none (ECS needs none). A
// token is one header value: a line break in it is an error naming its
// variable.
func containerAuthorization(getenv func(string) string) (func() (string, error), error) {
	oneLine := func(name, v string) error {
		if strings.ContainsAny(v, "\r\n") {
			return fmt.Errorf("%s holds a line break: a token is one header value", name)
		}
		return nil
	}
	if path := getenv(containerTokenFile); path != "" {
		f, err := secretfile.NewFile(containerTokenFile, path)
		if err != nil {
			return nil, err
		}
		get := func() (string, error) {
			v, err := f.Get()
			if err != nil {
				return "", err
			}
			return v, oneLine(containerTokenFile, v)
		}
		if _, err := get(); err != nil {
			return nil, err
		}
		return get, nil
	}
	if v := getenv(containerToken); v != "" {
		if err := oneLine(containerToken, v); err != nil {
			return nil, err
		}
		return func() (string, error) { return v, nil }, nil
	}
	return nil, nil
}

// containerCredentials is the credentials callback for the container
// endpoint: errors at start-up name the variable, errors at a login the
// endpoint and the variable, never the token.
func containerCredentials(getenv func(string) string) (func(context.Context) (mskiam.Auth, error), error) {
	endpoint, from, err := containerEndpoint(getenv)
	if err != nil {
		return nil, fmt.Errorf("kafka.sasl.mechanism AWS_MSK_IAM: %w", err)
	}
	token, err := containerAuthorization(getenv)
	if err != nil {
		return nil, fmt.Errorf("kafka.sasl.mechanism AWS_MSK_IAM: %w", err)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if u, err := url.Parse(endpoint); err != nil || u.Scheme != "https" {
		// Go's proxy rule would send a link-local address's request
		// through HTTP_PROXY, token and all, in clear text.
		transport.Proxy = nil
	}
	c := &containerEndpointCreds{endpoint: endpoint, from: from, token: token, client: &http.Client{
		Transport: transport,
		Timeout:   30 * time.Second,
		CheckRedirect: func(req *http.Request, _ []*http.Request) error {
			// Where it points is shown without its path and query: a
			// redirect of ECS's endpoint keeps its credentials ID.
			to := (&url.URL{Scheme: req.URL.Scheme, Host: req.URL.Host}).String()
			return &refusedRedirect{fmt.Sprintf("the endpoint answered a redirect to %s (path not shown): not followed (the token goes to %s only)", to, containerShown(endpoint, from))}
		},
	}}
	r := newAWSRenewal(c.fetch)
	return func(ctx context.Context) (mskiam.Auth, error) {
		a, err := r.get(ctx)
		if err != nil {
			return mskiam.Auth{}, fmt.Errorf("kafka.sasl.mechanism AWS_MSK_IAM: getting credentials from the container credentials endpoint %s (%s): %w", containerShown(endpoint, from), from, err)
		}
		return a, nil
	}, nil
}

// containerEndpointCreds fetches credentials from one endpoint.
type containerEndpointCreds struct {
	endpoint string
	from     string                 // the variable that named it
	token    func() (string, error) // nil: no Authorization
	client   *http.Client
}

// fetch is one GET; retry says whether to try again (no answer, a 5xx,
// 429, not a refused redirect), as the AWS SDKs' endpointcreds retries. An answer without an
// Expiration expires at once: it is fetched again at the next login.
func (c *containerEndpointCreds) fetch(ctx context.Context) (mskiam.Auth, time.Time, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.endpoint, nil)
	if err != nil {
		return mskiam.Auth{}, time.Time{}, false, err
	}
	req.Header.Set("Accept", "application/json")
	if c.token != nil {
		t, err := c.token()
		if err != nil {
			return mskiam.Auth{}, time.Time{}, false, err
		}
		req.Header.Set("Authorization", t)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		// net/http's error quotes the whole URL: its query, ECS's
		// credentials ID. Shown as containerShown shows it.
		var ue *url.Error
		if errors.As(err, &ue) {
			return mskiam.Auth{}, time.Time{}, retriable(err), fmt.Errorf("calling it: %s %s: %w", ue.Op, containerShown(c.endpoint, c.from), ue.Err)
		}
		return mskiam.Auth{}, time.Time{}, retriable(err), fmt.Errorf("calling it: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return mskiam.Auth{}, time.Time{}, true, fmt.Errorf("reading its answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(body, &e)
		retry := resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests
		if e.Code == "" {
			return mskiam.Auth{}, time.Time{}, retry, fmt.Errorf("it answered %s", resp.Status)
		}
		return mskiam.Auth{}, time.Time{}, retry, fmt.Errorf("it answered %s: %s: %s", resp.Status, e.Code, e.Message)
	}
	var r struct {
		AccessKeyID     string     `json:"AccessKeyId"`
		SecretAccessKey string     `json:"SecretAccessKey"`
		Token           string     `json:"Token"`
		Expiration      *time.Time `json:"Expiration"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return mskiam.Auth{}, time.Time{}, false, fmt.Errorf("reading its answer: %w", err)
	}
	if r.AccessKeyID == "" || r.SecretAccessKey == "" {
		return mskiam.Auth{}, time.Time{}, false, errors.New("its answer has no credentials (AccessKeyId, SecretAccessKey)")
	}
	var expires time.Time
	if r.Expiration != nil {
		expires = *r.Expiration
	}
	return mskiam.Auth{AccessKey: r.AccessKeyID, SecretKey: r.SecretAccessKey, SessionToken: r.Token}, expires, false, nil
}
