package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor"
)

// IngressConfig is the config file's ingress section: `dedup ingress`, the
// HTTP ingress, and the producer client (package client), which produce
// to the same topic.
type IngressConfig struct {
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
	// TokensFile holds the bearer tokens that may call the API, one a line
	// (blank lines and lines starting with # are ignored), read again when
	// the file changes. Empty: no authentication (dedup ingress warns at
	// start).
	TokensFile string `yaml:"tokens_file"`
	// TLS serves HTTPS with this certificate and key (PEM; read again when
	// they change). Neither: plain HTTP (terminate TLS in front).
	TLS IngressTLS `yaml:"tls"`
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

// IngressTLS is the ingress's server certificate.
type IngressTLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// DefaultIngressConfig is the ingress section's defaults.
func DefaultIngressConfig() IngressConfig {
	return IngressConfig{Listen: "127.0.0.1:8080", ProduceTimeout: 10 * time.Second, AdminListen: "127.0.0.1:9466"}
}

// Validate names the first invalid field; k is the validated kafka
// section.
func (c IngressConfig) Validate(k processor.Config) error {
	switch {
	case c.Topic != "" && !slices.Contains(k.Topics, c.Topic):
		return fmt.Errorf("ingress.topic: %q is not one of kafka.topics %v: no router would read it", c.Topic, k.Topics)
	case c.MaxBodyBytes < 0 || c.MaxBodyBytes > k.MaxValueBytes:
		return fmt.Errorf("ingress.max_body_bytes: %d, want 0 (kafka.max_value_bytes) up to kafka.max_value_bytes %d", c.MaxBodyBytes, k.MaxValueBytes)
	case (c.TLS.CertFile == "") != (c.TLS.KeyFile == ""):
		return errors.New("ingress.tls.cert_file, key_file: set both or neither")
	case c.ProduceTimeout <= 0:
		return fmt.Errorf("ingress.produce_timeout: %s, want > 0", c.ProduceTimeout)
	}
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("ingress.public_url: %q, want http(s)://host[/path]", c.PublicURL)
		}
	}
	return nil
}

// IngressTopic is where producers write: ingress.topic, else the first
// of kafka.topics.
func (c Config) IngressTopic() string {
	if c.Ingress.Topic != "" {
		return c.Ingress.Topic
	}
	return c.Kafka.Topics[0]
}

// IngressMaxBody is ingress.max_body_bytes with its default filled.
func (c Config) IngressMaxBody() int {
	if c.Ingress.MaxBodyBytes > 0 {
		return c.Ingress.MaxBodyBytes
	}
	return c.Kafka.MaxValueBytes
}

// CheckKafka is the start-up check of the Kafka settings (checkKafka) for
// the producers' clients: a refused login or TLS handshake stops start-up.
func CheckKafka(ctx context.Context, cfg Config, log *slog.Logger, kopts []kgo.Opt) error {
	return checkKafka(ctx, cfg, log, kopts)
}
