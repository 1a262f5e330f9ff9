package dial

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc/codes"

	"github.com/dedupio/dedup/connect/clienttls"
	"github.com/dedupio/dedup/connect/dialguard"
	"github.com/dedupio/dedup/internal/config"
)

// This file checks dedup's connections at start and says why a refused
// one will not heal. The options themselves are built next to their
// configs, by public code a stranger's router or starter uses too: every
// Kafka client takes processor.Config.ClientOpts, every Temporal client
// starter.Config.ClientOptions.

// CheckKafka asks each seed broker for metadata, with the clients'
// options, before any client of the router connects. A refused login
// (SASL) or a TLS handshake that fails (a certificate that does not
// verify, a client certificate the broker wants or refuses, plaintext at a
// TLS port) does not heal by retrying: it stops start-up at once with an
// error naming the broker and the mechanism, rather than a consumer that
// retries it forever. A broker that does not answer is not an error:
// dedup starts while Kafka is down, and its clients retry.
func CheckKafka(ctx context.Context, cfg config.Config, log *slog.Logger, kopts []kgo.Opt) error {
	if cfg.Kafka.TLS.InsecureSkipVerify {
		log.Warn("kafka.tls.insecure_skip_verify is set: the brokers' certificates are NOT verified; anyone on the network path can pose as Kafka, read the events and the credentials sent over it",
			"brokers", cfg.Kafka.Brokers)
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	type result struct {
		seed string
		err  error
	}
	results := make(chan result, len(cfg.Kafka.Brokers))
	for _, seed := range cfg.Kafka.Brokers {
		go func() { results <- result{seed, pingSeed(ctx, seed, kopts)} }()
	}
	var last error
	for range cfg.Kafka.Brokers {
		r := <-results
		if r.err == nil {
			return nil
		}
		if err := permanentKafkaError(cfg, r.seed, r.err); err != nil {
			return err
		}
		last = r.err
	}
	log.Warn("no kafka seed broker answered at start; starting anyway (the clients retry)", "brokers", cfg.Kafka.Brokers, "err", last)
	return nil
}

// saslFailure is the error of a SASL exchange, as the client read it.
type saslFailure struct{ err atomic.Pointer[error] }

// OnBrokerRead implements kgo.HookBrokerRead: a broker that refuses a
// login may answer with an error code or close the connection in the
// middle of the exchange (the latter reaches Ping as a bare EOF).
func (h *saslFailure) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil && (key == int16(kmsg.SASLHandshake) || key == int16(kmsg.SASLAuthenticate)) {
		h.err.CompareAndSwap(nil, &err)
	}
}

// pingSeed is one metadata request to one seed broker, on a client of
// its own: one connection attempt, no retries.
func pingSeed(ctx context.Context, seed string, kopts []kgo.Opt) error {
	h := &saslFailure{}
	cl, err := kgo.NewClient(append(slices.Clone(kopts), kgo.SeedBrokers(seed), kgo.WithHooks(h))...)
	if err != nil {
		return fmt.Errorf("creating kafka client: %w", err)
	}
	defer cl.Close()
	err = cl.Ping(ctx)
	if p := h.err.Load(); err != nil && p != nil {
		return &saslError{err: err, exchange: *p}
	}
	if err != nil {
		return err
	}
	// Every broker the seed advertises, dialled as the clients will: one
	// whose dial the guard refuses (SASL in plaintext off this machine)
	// stops start-up; one that does not answer is the clients' to retry.
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl); err != nil {
		return nil
	}
	for _, b := range cl.DiscoveredBrokers() {
		var refused *dialguard.RefusedError
		if _, err := b.Request(ctx, kmsg.NewPtrApiVersionsRequest()); errors.As(err, &refused) {
			return err
		}
	}
	return nil
}

type saslError struct{ err, exchange error }

func (e *saslError) Error() string {
	if errors.Is(e.err, e.exchange) {
		return fmt.Sprintf("the connection ended in the SASL exchange: %v", e.err)
	}
	return fmt.Sprintf("%v (during authentication: %v)", e.err, e.exchange)
}
func (e *saslError) Unwrap() error { return e.err }

// permanentKafkaError says, naming the broker and the setting, why err
// will not heal by retrying; nil when it may.
func permanentKafkaError(cfg config.Config, seed string, err error) error {
	var (
		se       *saslError
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		op       *net.OpError
		record   tls.RecordHeaderError
		eof      *kgo.ErrFirstReadEOF
	)
	sasl := cfg.Kafka.SASL
	who := sasl.Identity()
	var refused *dialguard.RefusedError
	switch {
	case errors.As(err, &refused):
		return fmt.Errorf("kafka: a broker that seed %s advertises: %w", seed, refused)
	case errors.As(err, &verify), errors.As(err, &unknown), errors.As(err, &hostname), errors.As(err, &invalid):
		return fmt.Errorf("kafka.tls: broker %s: its certificate does not verify against %s: %w", seed, caName(cfg.Kafka.TLS), err)
	case errors.As(err, &op) && op.Op == "remote error": // a TLS alert from the broker
		return fmt.Errorf("kafka.tls: broker %s refused the TLS handshake (does it want a client certificate, kafka.tls.cert_file and key_file, or another one?): %w", seed, err)
	case errors.As(err, &record):
		return fmt.Errorf("kafka.tls: broker %s does not speak TLS at this address: %w", seed, err)
	case sasl.On() && (errors.As(err, &se) || errors.Is(err, kerr.SaslAuthenticationFailed) ||
		errors.Is(err, kerr.UnsupportedSaslMechanism) || errors.Is(err, kerr.IllegalSaslState)):
		return fmt.Errorf("kafka.sasl: broker %s refused %s authentication of %s (wrong credentials, or a mechanism the broker does not enable): %w",
			seed, sasl.Name(), who, err)
	case errors.As(err, &eof):
		hint := "kafka.sasl and kafka.tls"
		if !sasl.On() && !cfg.Kafka.TLS.On() {
			hint = "kafka.sasl or kafka.tls: the broker may require either"
		}
		return fmt.Errorf("kafka: broker %s closed the connection at once (check %s): %w", seed, hint, err)
	}
	return nil
}

func caName(c clienttls.Config) string {
	if c.CAFile != "" {
		return "kafka.tls.ca_file " + c.CAFile
	}
	return "the system's CA roots (set kafka.tls.ca_file for a private CA)"
}

// TemporalOptions are the SDK client options for cfg's Temporal
// (starter.Config.ClientOptions), with the metrics handler mh (nil: none).
func TemporalOptions(cfg config.Config, log *slog.Logger, mh client.MetricsHandler) (client.Options, error) {
	o, err := cfg.Temporal.ClientOptions(log)
	if err == nil && mh != nil {
		o.MetricsHandler = mh
	}
	return o, err
}

// DialTemporal connects an SDK client to cfg's Temporal. When the dial
// fails over TLS, a TLS handshake of its own says why, in terms of
// temporal.tls: gRPC reports a refused client certificate as whatever its
// next write met (a broken pipe).
func DialTemporal(ctx context.Context, cfg config.Config, log *slog.Logger, mh client.MetricsHandler) (client.Client, error) {
	o, err := TemporalOptions(cfg, log, mh)
	if err != nil {
		return nil, err
	}
	tc, err := client.DialContext(ctx, o)
	if err != nil {
		why := ""
		if o.ConnectionOptions.TLS != nil {
			why = tlsRefusal(ctx, cfg.Temporal.HostPort, o.ConnectionOptions.TLS, cfg.Temporal.TLS)
		}
		switch serviceerror.ToStatus(err).Code() {
		case codes.Unauthenticated, codes.PermissionDenied:
			why = "temporal.api_key or the client certificate (temporal.tls) is not accepted for namespace " + cfg.Temporal.Namespace + ": "
		}
		return nil, fmt.Errorf("dialing temporal at %s: %s%w", cfg.Temporal.HostPort, why, err)
	}
	return tc, nil
}

// tlsRefusal shakes hands with addr as the client does and says, naming
// the temporal.tls setting, why the handshake fails; "" when it does not.
func tlsRefusal(ctx context.Context, addr string, tc *tls.Config, c clienttls.Config) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := (&tls.Dialer{Config: tc.Clone()}).DialContext(ctx, "tcp", addr)
	if err == nil {
		// TLS 1.3: the server judges the client certificate after the
		// client's side of the handshake; its verdict comes with the
		// first read.
		defer func() { _ = conn.Close() }()
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		_, err = conn.Read(make([]byte, 1))
	}
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		op       *net.OpError
		record   tls.RecordHeaderError
	)
	switch {
	case err == nil:
	case errors.As(err, &verify), errors.As(err, &unknown), errors.As(err, &hostname):
		roots := "the system's CA roots (set temporal.tls.ca_file for a private CA)"
		if c.CAFile != "" {
			roots = "temporal.tls.ca_file " + c.CAFile
		}
		return fmt.Sprintf("temporal.tls: the server's certificate does not verify against %s (or temporal.tls.server_name): %v: ", roots, err)
	case errors.As(err, &op) && op.Op == "remote error":
		if c.CertFile == "" {
			return fmt.Sprintf("temporal.tls: the server refused the TLS handshake (%v): it wants a client certificate, temporal.tls.cert_file and key_file: ", err)
		}
		return fmt.Sprintf("temporal.tls: the server refused the TLS handshake (%v): it does not accept the client certificate %s: ", err, c.CertFile)
	case errors.As(err, &record):
		return "temporal.tls: the server does not speak TLS at this address: "
	}
	return ""
}
