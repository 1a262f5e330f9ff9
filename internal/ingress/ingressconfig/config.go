// Package ingressconfig is the config file's ingress section (dedup
// ingress and the producer client), next to the ingress's code; internal/config
// reads it with the rest of the file.
package ingressconfig

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"time"

	"github.com/dedupio/dedup/processor"
)

// Config is the config file's ingress section: `dedup ingress`, the
// HTTP ingress, and the producer client (package client), which produce
// to the same topic.
type Config struct {
	// Listen is the ingress's HTTP address (POST /v1/events, GET
	// /v1/workflows/{id}). Behind a load balancer, or with tls and
	// tokens_file set, it may face the public; keep it on 127.0.0.1
	// otherwise.
	Listen string `yaml:"listen"`
	// Topic is where events are produced; empty: the first of
	// kafka.topics. It must be one of kafka.topics (the routers consume
	// it).
	Topic string `yaml:"topic"`
	// MaxBodyBytes refuses larger request bodies (413, nothing produced);
	// 0: kafka.max_value_bytes, which it may not exceed (the router would
	// dead-letter the record as oversized).
	MaxBodyBytes int `yaml:"max_body_bytes"`
	// TokensFile holds the bearer tokens that may call the API, each with
	// its tenant and what it may do (YAML, see docs/ingress.md), read again
	// when the file changes. A tenant's idempotency keys are its own: its
	// event IDs are @{tenant}/{key}. Empty: no authentication and no
	// tenants, which dedup ingress accepts only on a loopback listen
	// address unless AllowUnauthenticated.
	TokensFile string `yaml:"tokens_file"`
	// AllowUnauthenticated lets an ingress without tokens_file listen on
	// a non-loopback address (behind an authenticating proxy, say).
	// Default false: such a config is refused at start.
	AllowUnauthenticated bool `yaml:"allow_unauthenticated"`
	// RequireKey (default true) refuses (400) an event that carries no
	// key: neither an Idempotency-Key header nor a CloudEvents id nor an
	// event_id.fields.id field. false lets the routers' event_id chain
	// derive IDs from content (two identical events are then one event).
	RequireKey bool `yaml:"require_key"`
	// Limits bound what one tenant and one process take.
	Limits Limits `yaml:"limits"`
	// LookupTimeout bounds each PostgreSQL and Temporal call a request
	// makes (the ledger lookup of a POST, a status). Default 2s.
	LookupTimeout time.Duration `yaml:"lookup_timeout"`
	// TLS serves HTTPS with this certificate and key (PEM; read again when
	// they change). Neither: plain HTTP (terminate TLS in front).
	TLS TLS `yaml:"tls"`
	// PublicURL prefixes the status URLs of 202 answers
	// (https://events.example.com); empty: absolute paths
	// (/v1/workflows/...).
	PublicURL string `yaml:"public_url"`
	// ProduceTimeout bounds the wait for Kafka's acknowledgement. Past it
	// the request is answered 503: the record may or may not be in Kafka,
	// and a retry with the same key is safe (one workflow either way).
	ProduceTimeout time.Duration `yaml:"produce_timeout"`
	// AdminListen serves the ingress's /metrics, /healthz and /readyz: a
	// key of its own, not admin.listen, so that a router and an ingress
	// can share a host and a config file. Empty disables it.
	AdminListen string `yaml:"admin_listen"`
}

// Limits are the ingress's limits. Memory: at most MaxConcurrent
// requests are answered at once, each body at most max_body_bytes and held
// twice at most (as read, and in the producer's batch), so the answered
// requests' bodies take at most 2 x MaxConcurrent x max_body_bytes (128
// MiB with the defaults and 1 MiB bodies) on top of the process's baseline
// (about 64 MiB); the k8s pod's GOMEMLIMIT is checked against it
// (deploy/deploy_test.go) and the load test measures it (internal/ingress
// TestLoad). A body is read before its request takes a slot (so that slow
// senders hold none), within 10 s, and the bodies being read have a cap of
// their own, 2 x MaxConcurrent (MaxConcurrentPerTenant of one tenant): all
// bodies together take at most 4 x MaxConcurrent x max_body_bytes.
type Limits struct {
	// Rate is each tenant's requests per second (the anonymous caller's
	// without tokens_file); past it and Burst: 429 with Retry-After.
	Rate float64 `yaml:"rate"`
	// Burst is how many requests a tenant may send at once above Rate.
	Burst int `yaml:"burst"`
	// MaxConcurrent is how many requests one process answers at once;
	// more: 503 with Retry-After, at once.
	MaxConcurrent int `yaml:"max_concurrent"`
	// MaxConcurrentPerTenant is one tenant's share of MaxConcurrent, so
	// that a tenant sending its bodies slowly cannot take every slot;
	// default 32 (half of 64).
	MaxConcurrentPerTenant int `yaml:"max_concurrent_per_tenant"`
}

// TLS is the ingress's server certificate.
type TLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// Default is the ingress section's defaults.
func Default() Config {
	return Config{Listen: "127.0.0.1:8080", ProduceTimeout: 10 * time.Second, AdminListen: "127.0.0.1:9466",
		RequireKey: true, LookupTimeout: 2 * time.Second,
		Limits: Limits{Rate: 100, Burst: 200, MaxConcurrent: 64, MaxConcurrentPerTenant: 32}}
}

// Validate names the first invalid field; k is the validated kafka
// section.
func (c Config) Validate(k processor.Config) error {
	switch {
	case c.Topic != "" && !slices.Contains(k.Topics, c.Topic):
		return fmt.Errorf("ingress.topic: %q is not one of kafka.topics %v: no router would read it", c.Topic, k.Topics)
	case c.MaxBodyBytes < 0 || c.MaxBodyBytes > k.MaxValueBytes:
		return fmt.Errorf("ingress.max_body_bytes: %d, want 0 (kafka.max_value_bytes) up to kafka.max_value_bytes %d", c.MaxBodyBytes, k.MaxValueBytes)
	case c.TokensFile != "" && k.TenantKeysFile == "":
		return errors.New("kafka.tenant_keys_file: empty while ingress.tokens_file names tenants: the routers take a tenant's record " +
			"only signed with a key of that file, which the ingress and the routers read (docs/security.md, Tenant identity)")
	case (c.TLS.CertFile == "") != (c.TLS.KeyFile == ""):
		return errors.New("ingress.tls.cert_file, key_file: set both or neither")
	case c.ProduceTimeout <= 0:
		return fmt.Errorf("ingress.produce_timeout: %s, want > 0", c.ProduceTimeout)
	case c.LookupTimeout <= 0:
		return fmt.Errorf("ingress.lookup_timeout: %s, want > 0", c.LookupTimeout)
	case c.Limits.Rate <= 0:
		return fmt.Errorf("ingress.limits.rate: %g, want > 0 (requests per second per tenant)", c.Limits.Rate)
	case c.Limits.Burst < 1:
		return fmt.Errorf("ingress.limits.burst: %d, want >= 1", c.Limits.Burst)
	case c.Limits.MaxConcurrent < 1:
		return fmt.Errorf("ingress.limits.max_concurrent: %d, want >= 1", c.Limits.MaxConcurrent)
	case c.Limits.MaxConcurrentPerTenant < 1 || c.Limits.MaxConcurrentPerTenant > c.Limits.MaxConcurrent:
		return fmt.Errorf("ingress.limits.max_concurrent_per_tenant: %d, want 1 to max_concurrent %d", c.Limits.MaxConcurrentPerTenant, c.Limits.MaxConcurrent)
	}
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err == nil && u.User != nil {
			// Every 202 would publish it in its status URLs: never, and
			// never in this error either.
			return errors.New("ingress.public_url: has user info (user:password@): the status URLs of every answer would carry it; want http(s)://host[/path]")
		}
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("ingress.public_url: %q, want http(s)://host[/path]", c.PublicURL)
		}
	}
	return nil
}

// CheckExposure is dedup ingress's start-up check (not Validate's: the
// routers share the file): without tokens_file it listens on loopback
// addresses only, unless allow_unauthenticated.
func (c Config) CheckExposure() error {
	if c.TokensFile == "" && !c.AllowUnauthenticated && !loopback(c.Listen) {
		return fmt.Errorf("ingress.listen: %s is not a loopback address and ingress.tokens_file is empty: "+
			"anyone who reaches it could enqueue events; set ingress.tokens_file, or ingress.allow_unauthenticated: true "+
			"when something in front authenticates", c.Listen)
	}
	return nil
}

// loopback says whether listen (host:port) binds loopback addresses only:
// 127.0.0.0/8, ::1 or localhost. An empty host or 0.0.0.0 binds every
// interface; any other name may resolve to anything.
func loopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
