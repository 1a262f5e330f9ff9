// Package schemaregistry is how dedup connects to a Confluent-compatible
// Schema Registry (Confluent, Redpanda, Apicurio's ccompat API, Karapace):
// its settings (kafka.schema_registry) and the REST client they build,
// franz-go's pkg/sr. Like the other connect packages it holds settings and
// their builder only; what is fetched, cached and decoded is
// processor/srdecode.
//
// Credentials follow the rule of every other connection of dedup
// (connect/dialguard): a password or token goes to a registry off this
// machine only over TLS that verifies it, unless allow_insecure says so.
// Secrets come from files (connect/secretfile) and are read again when
// the file changes, per request.
package schemaregistry

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/dedupio/dedup/connect/clienttls"
	"github.com/dedupio/dedup/connect/dialguard"
	"github.com/dedupio/dedup/connect/secretfile"
)

// Config is the kafka.schema_registry section. The zero value is off: a
// value framed for a registry is then read as any other value.
type Config struct {
	// URL is the registry's base URL (https://registry:8081). Empty: off.
	URL string `yaml:"url"`
	// BasicAuth: HTTP basic authentication (Confluent Cloud's API key and
	// secret), the password from a file.
	BasicAuth BasicAuth `yaml:"basic_auth"`
	// BearerTokenFile holds a bearer token (an OAuth access token another
	// process keeps fresh: the file is read again when it changes).
	BearerTokenFile string `yaml:"bearer_token_file"`
	// TLS as for the other connections: CA, client certificate, server
	// name; required for a credential to a host not on this machine.
	TLS clienttls.Config `yaml:"tls"`
	// Timeout bounds one request to the registry (default 10s); a request
	// that times out is retried like any transient error.
	Timeout time.Duration `yaml:"timeout"`
	// AllowInsecure lets a credential go to a registry off this machine
	// over plain http or TLS that does not verify it. As kafka.allow_insecure.
	AllowInsecure bool `yaml:"allow_insecure"`
}

// BasicAuth is a user name and the file of its password.
type BasicAuth struct {
	Username     string `yaml:"username"`
	PasswordFile string `yaml:"password_file"`
}

// On reports whether a registry is configured.
func (c Config) On() bool { return c.URL != "" }

// Validate names the first invalid field under prefix
// (kafka.schema_registry).
func (c Config) Validate(prefix string) error {
	if !c.On() {
		if c.BasicAuth != (BasicAuth{}) || c.BearerTokenFile != "" || c.TLS.On() {
			return fmt.Errorf("%s.url: empty while credentials or TLS are set", prefix)
		}
		return nil
	}
	u, err := url.Parse(c.URL)
	if err != nil {
		return fmt.Errorf("%s.url: %w", prefix, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("%s.url: %q is not an http:// or https:// URL", prefix, c.URL)
	}
	if u.User != nil {
		return fmt.Errorf("%s.url: credentials in the URL; use %s.basic_auth", prefix, prefix)
	}
	if (c.BasicAuth.Username == "") != (c.BasicAuth.PasswordFile == "") {
		return fmt.Errorf("%s.basic_auth: set username and password_file, or neither", prefix)
	}
	if c.BasicAuth.Username != "" && c.BearerTokenFile != "" {
		return fmt.Errorf("%s.bearer_token_file: set basic_auth or a bearer token, not both", prefix)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("%s.timeout: %s is negative", prefix, c.Timeout)
	}
	if err := c.TLS.Validate(prefix + ".tls"); err != nil {
		return err
	}
	if u.Scheme == "http" && c.TLS.On() {
		return fmt.Errorf("%s.tls: set while %s.url is http://", prefix, prefix)
	}
	credential := c.BasicAuth.Username != "" || c.BearerTokenFile != ""
	host := u.Hostname()
	if credential && !c.AllowInsecure && !dialguard.LoopbackHost(host) {
		switch {
		case u.Scheme == "http":
			return fmt.Errorf("%s.url: a credential over plain http to %s (not this machine): use https, or set %s.allow_insecure", prefix, host, prefix)
		case c.TLS.InsecureSkipVerify:
			return fmt.Errorf("%s.tls.insecure_skip_verify: a credential to %s over TLS that does not verify it: set %s.allow_insecure to allow", prefix, host, prefix)
		}
	}
	return nil
}

// NewClient builds the registry's client from c (which must be valid and
// on). It reads the secret files once (a missing one is an error now) and
// again per request when they change; it does no network I/O.
func NewClient(c Config, prefix string) (*sr.Client, error) {
	if !c.On() {
		return nil, errors.New(prefix + ".url: empty")
	}
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if c.TLS.On() {
		files, err := clienttls.Load(c.TLS, prefix+".tls")
		if err != nil {
			return nil, err
		}
		u, _ := url.Parse(c.URL)
		host := u.Hostname()
		if ip := net.ParseIP(host); ip != nil {
			host = ip.String()
		}
		tr.TLSClientConfig = files.ClientConfig(host)
	}
	opts := []sr.ClientOpt{
		sr.URLs(c.URL),
		sr.HTTPClient(&http.Client{Transport: limitedTransport{tr}, Timeout: timeout, CheckRedirect: checkRedirect(c, prefix)}),
		sr.UserAgent("dedup"),
	}
	switch {
	case c.BasicAuth.Username != "":
		pw, err := secretfile.NewFile(prefix+".basic_auth.password_file", c.BasicAuth.PasswordFile)
		if err != nil {
			return nil, err
		}
		user := c.BasicAuth.Username
		opts = append(opts, sr.PreReq(func(req *http.Request) error {
			p, err := pw.Get()
			if err != nil {
				return err
			}
			req.SetBasicAuth(user, p)
			return nil
		}))
	case c.BearerTokenFile != "":
		tok, err := secretfile.NewFile(prefix+".bearer_token_file", c.BearerTokenFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, sr.PreReq(func(req *http.Request) error {
			t, err := tok.Get()
			if err != nil {
				return err
			}
			req.Header.Set("Authorization", "Bearer "+t)
			return nil
		}))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("building the schema registry client: %w", err)
	}
	return cl, nil
}
