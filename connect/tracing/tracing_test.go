package tracing

import (
	"strings"
	"testing"
)

func ratio(r float64) *float64 { return &r }

// A bad tracing section is refused naming its field; the default is off.
func TestConfigValidateNamesTheField(t *testing.T) {
	if (Config{}).Enabled() || (Config{}).Validate() != nil {
		t.Fatal("the zero section: want off and valid")
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Exporter: "jaeger"}, "tracing.exporter"},
		{Config{Exporter: ExporterOTLP}, "tracing.otlp.endpoint"},
		{Config{Exporter: ExporterOTLP, OTLP: OTLP{Endpoint: "c:4317"}, SampleRatio: ratio(1.5)}, "tracing.sample_ratio"},
		{Config{Exporter: ExporterOTLP, OTLP: OTLP{Endpoint: "http://"}}, "tracing.otlp.endpoint"},
	} {
		err := c.cfg.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %s", c.cfg, err, c.want)
		}
	}
	if err := (Config{Exporter: ExporterOTLP, OTLP: OTLP{Endpoint: "collector:4317"}, SampleRatio: ratio(0.1)}).Validate(); err != nil {
		t.Errorf("a valid section: %v", err)
	}
}

// A headers file holds a credential (a vendor's API key): with
// otlp.insecure it would go in plaintext, which is refused for a collector
// off this machine unless tracing.otlp.allow_insecure accepts the risk,
// as for Kafka, Temporal, PostgreSQL and the Schema Registry.
func TestConfigRefusesACredentialInPlaintextOffThisMachine(t *testing.T) {
	cfg := Config{Exporter: ExporterOTLP, OTLP: OTLP{Endpoint: "collector.example.com:4317", Insecure: true, HeadersFile: "/run/secrets/otlp"}}
	if err := cfg.Validate(); err == nil || !strings.HasPrefix(err.Error(), "tracing.otlp.insecure") || !strings.Contains(err.Error(), "tracing.otlp.allow_insecure") {
		t.Fatalf("headers_file over plaintext to collector.example.com: %v, want an error naming tracing.otlp.insecure and allow_insecure", err)
	}
	for _, ok := range []OTLP{
		{Endpoint: "collector.example.com:4317", Insecure: true, HeadersFile: "/run/secrets/otlp", AllowInsecure: true},
		{Endpoint: "localhost:4317", Insecure: true, HeadersFile: "/run/secrets/otlp"},
		{Endpoint: "http://127.0.0.1:4317", Insecure: true, HeadersFile: "/run/secrets/otlp"},
		{Endpoint: "collector.example.com:4317", Insecure: true},
		{Endpoint: "collector.example.com:4317", HeadersFile: "/run/secrets/otlp"},
	} {
		if err := (Config{Exporter: ExporterOTLP, OTLP: ok}).Validate(); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
}

// Validate's refusals never show a password from tracing.otlp.endpoint:
// the refusal of a URL without a host shows it redacted, and so must the
// refusal of plaintext off this machine, which names the collector's host.
// An endpoint in the host:port form with user info before it
// ("user:password@collector:4317", no scheme) has no port net.SplitHostPort
// can split off, so the whole endpoint, password and all, is taken for the
// host and quoted.
func TestConfigDoesNotShowTheEndpointsPasswordInThePlaintextRefusal(t *testing.T) {
	for _, endpoint := range []string{"user:hunter2@collector.example.com:4317", "//user:hunter2@collector.example.com:4317"} {
		err := (Config{Exporter: ExporterOTLP, OTLP: OTLP{Endpoint: endpoint, Insecure: true, HeadersFile: "/run/secrets/otlp"}}).Validate()
		if err == nil || !strings.HasPrefix(err.Error(), "tracing.otlp") {
			t.Errorf("endpoint %q: %v, want an error naming tracing.otlp", endpoint, err)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("endpoint %q: the refusal shows its password: %v", endpoint, err)
		}
	}
}

// ShownEndpoint, what errors and logs show of tracing.otlp.endpoint, keeps
// no user info, in any form the field may be written in: an endpoint that
// could carry one ('@', '?', '#') is not shown at all; any other is shown
// whole.
func TestShownEndpointKeepsNoUserInfo(t *testing.T) {
	for _, in := range []string{
		"https://user:hunter2@collector:4317/v1/traces",
		"https://hunter2@collector:4317",
		"https://user:hunter2@/v1/traces",
		"user:hunter2@collector:4317",
		"https://user:hunter2@collector:x/v1",
		"https://collector:4317/v1/traces?api_key=hunter2",
		"https://collector:4317/v1/traces#hunter2",
	} {
		if got := ShownEndpoint(in); strings.Contains(got, "hunter2") || got == in {
			t.Errorf("ShownEndpoint(%q) = %q, want it not shown", in, got)
		}
	}
	for _, in := range []string{"collector:4317", "https://collector:4317/v1/traces", "unix:/run/otelcol/otlp.sock"} {
		if got := ShownEndpoint(in); got != in {
			t.Errorf("ShownEndpoint(%q) = %q, want it shown whole", in, got)
		}
	}
}

// ShownEndpoint keeps no user info whose '@' url.Parse does not take for
// the end of user info: a password or token holding an unencoded '/', '?'
// or '#' (a base64 token's '/'), or a third slash after the scheme. The
// secret then sits in what url.Parse (or the fallback) calls the host or
// path, and was shown whole.
func TestShownEndpointKeepsNoUserInfoWithAnUnencodedSlash(t *testing.T) {
	for _, in := range []string{
		"https://user:hun/ter2@collector:4317",     // does not parse: the fallback keeps the path
		"https://user:4317/hunter2@collector:4317", // parses: host user:4317, path /hunter2@...
		"https://user:4317?hunter2@collector:4317", // parses: query hunter2@...
		"https://user:4317#hunter2@collector:4317", // parses: fragment hunter2@...
		"https://aHVudGVy/hunter2@collector:4317",  // a base64 token as user name
		"https:///user:hunter2@collector:4317",     // a third slash: empty host, user info in the path
		"dns:///user:hunter2@collector:4317",       // gRPC's target form
	} {
		got := ShownEndpoint(in)
		if strings.Contains(got, "hunter2") || strings.Contains(got, "hun/") {
			t.Errorf("ShownEndpoint(%q) = %q, shows the credential", in, got)
		}
	}
}

// Validate's refusal of an endpoint with no host (url.Parse's) does not
// show the password the endpoint holds.
func TestConfigDoesNotShowTheEndpointsPasswordInTheHostPortRefusal(t *testing.T) {
	for _, endpoint := range []string{"https:///user:hunter2@collector.example.com:4317", "https://user:hun/ter2@collector.example.com:4317"} {
		err := (Config{Exporter: ExporterOTLP, OTLP: OTLP{Endpoint: endpoint}}).Validate()
		if err == nil || !strings.HasPrefix(err.Error(), "tracing.otlp.endpoint") {
			t.Errorf("endpoint %q: %v, want an error naming tracing.otlp.endpoint", endpoint, err)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "hun/") {
			t.Errorf("endpoint %q: the refusal shows its password: %v", endpoint, err)
		}
	}
}

// Validate's plaintext refusal names the host the credential would go to;
// for a token holding an unencoded '/' written as user info, url.Parse's
// host is the token's first half, which is not to be shown either.
func TestConfigDoesNotShowTheEndpointsTokenInThePlaintextRefusal(t *testing.T) {
	endpoint := "https://aHVudGVy/MjpzZWNyZXQ@collector.example.com:4317"
	err := (Config{Exporter: ExporterOTLP, OTLP: OTLP{Endpoint: endpoint, Insecure: true, HeadersFile: "/run/secrets/otlp"}}).Validate()
	if err == nil {
		t.Fatalf("endpoint %q: nil, want a refusal", endpoint)
	}
	if strings.Contains(err.Error(), "aHVudGVy") || strings.Contains(err.Error(), "MjpzZWNyZXQ") {
		t.Errorf("endpoint %q: the refusal shows its token: %v", endpoint, err)
	}
}
