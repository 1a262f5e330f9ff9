// Package tracing sets up dedup's OpenTelemetry tracing (the `tracing:`
// section) and carries a W3C trace context (traceparent, tracestate,
// baggage) across the two seams dedup owns: a Kafka record's headers
// (kafkaheaders.Carrier) and a Temporal request's header, in the format of
// Temporal's OpenTelemetry interceptor (TemporalHeader).
//
// Off by default (exporter: none): New then returns nil and no caller
// creates a span, extracts or injects anything. Importing the package has
// no side effects: the global tracer provider and propagator are never set.
package tracing

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/dedupio/dedup/connect/dialguard"
)

// Config is the `tracing:` section of dedup run, ingress and worker.
type Config struct {
	// Exporter is none (the default: no spans, no propagation) or otlp
	// (OTLP over gRPC to OTLP.Endpoint, an OpenTelemetry collector).
	Exporter string `yaml:"exporter"`
	OTLP     OTLP   `yaml:"otlp"`
	// SampleRatio is the share of new traces sampled (0..1, default 1),
	// decided where a trace starts; a record or request that carries a
	// traceparent follows its sampled flag (parent-based sampling), so a
	// producer's sampled trace is continued whole.
	SampleRatio *float64 `yaml:"sample_ratio"`
	// ServiceName is the service.name resource attribute; empty: the
	// command's (dedup-router, dedup-worker). dedup ingress makes no
	// spans: it passes the request's context into the record.
	ServiceName string `yaml:"service_name"`
}

// OTLP says where spans go.
type OTLP struct {
	// Endpoint is the collector's gRPC address, host:port (4317).
	Endpoint string `yaml:"endpoint"`
	// Insecure sends spans in plaintext; by default the connection is
	// TLS that verifies the collector.
	Insecure bool `yaml:"insecure"`
	// HeadersFile holds request headers (an API key: "name: value" per
	// line), read at start; a vendor's collector endpoint needs one.
	HeadersFile string `yaml:"headers_file"`
	// AllowInsecure lets the headers file's credential go to a collector
	// off this machine in plaintext (Insecure). Without it that is refused
	// at start, as kafka.allow_insecure and temporal.allow_insecure do; a
	// collector on this machine (localhost, a loopback IP: a sidecar's
	// port-forward) needs neither.
	AllowInsecure bool `yaml:"allow_insecure"`
}

// Exporters.
const (
	ExporterNone = "none"
	ExporterOTLP = "otlp"
)

// Enabled reports whether spans are made and contexts propagated.
func (c Config) Enabled() bool { return c.Exporter == ExporterOTLP }

// ratio is SampleRatio, 1 when unset.
func (c Config) ratio() float64 {
	if c.SampleRatio == nil {
		return 1
	}
	return *c.SampleRatio
}

// Validate names the first invalid field.
func (c Config) Validate() error {
	switch c.Exporter {
	case "", ExporterNone:
		return nil
	case ExporterOTLP:
	default:
		return fmt.Errorf("tracing.exporter: %q: want none or otlp", c.Exporter)
	}
	if r := c.ratio(); r < 0 || r > 1 {
		return fmt.Errorf("tracing.sample_ratio: %v: want 0 to 1", r)
	}
	if c.OTLP.Endpoint == "" {
		return errors.New("tracing.otlp.endpoint: empty (host:port of an OTLP gRPC collector) with tracing.exporter: otlp")
	}
	hostPort := c.OTLP.Endpoint
	if strings.Contains(c.OTLP.Endpoint, "://") {
		u, err := url.Parse(c.OTLP.Endpoint)
		if err != nil || u.Host == "" {
			return fmt.Errorf("tracing.otlp.endpoint: %s: want host:port", quotedEndpoint(c.OTLP.Endpoint))
		}
		hostPort = u.Host
	} else if strings.Contains(hostPort, "@") && !strings.HasPrefix(hostPort, "unix:") && !strings.HasPrefix(hostPort, "unix-abstract:") {
		// User info, which gRPC would dial as part of the address and
		// quote in every failed export. A socket path may hold an '@'.
		return fmt.Errorf("tracing.otlp.endpoint: %s: want host:port, without user info (credentials go in tracing.otlp.headers_file)", quotedEndpoint(c.OTLP.Endpoint))
	}
	host := hostPort
	if h, _, err := net.SplitHostPort(hostPort); err == nil {
		host = h
	}
	if c.OTLP.Insecure && c.OTLP.HeadersFile != "" && !c.OTLP.AllowInsecure && !dialguard.LoopbackHost(host) {
		shown := "the endpoint's host"
		if ShownEndpoint(c.OTLP.Endpoint) == c.OTLP.Endpoint {
			shown = host
		}
		return fmt.Errorf("tracing.otlp.insecure: tracing.otlp.headers_file's credential would go to %s (not this machine) in plaintext: "+
			"drop insecure (TLS that verifies the collector), or accept the risk with tracing.otlp.allow_insecure: true", shown)
	}
	return nil
}

// ShownEndpoint is an OTLP endpoint as errors and logs show it: whole
// when it cannot carry a credential, else not at all. User info (a
// password, a token as user name) needs an '@', and a query or a fragment
// may carry one; in a malformed endpoint where such a part begins and
// ends is not sure (url.Parse may take half a token for the host), so no
// part of it is shown. A unix: socket path with an '@' is hidden too.
func ShownEndpoint(e string) string {
	if strings.ContainsAny(e, "@?#") {
		return "(not shown: it has an @, ? or #, which may carry a credential)"
	}
	return e
}

// quotedEndpoint is ShownEndpoint for an error: the endpoint quoted, or
// why it is not shown.
func quotedEndpoint(e string) string {
	if s := ShownEndpoint(e); s != e {
		return s
	}
	return strconv.Quote(e)
}
