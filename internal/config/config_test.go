package config

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"reflect"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.yaml.in/yaml/v3"

	"github.com/dedupio/dedup/processor/decide"
)

// The example shipped in deploy/ is the config reference the README points
// to: it must load, with every value it shows.
func TestExampleConfigLoads(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://u@localhost/db")
	cfg, err := Load("../../deploy/dedup.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Postgres.URL != "postgres://u@localhost/db" {
		t.Errorf("postgres.url = %q, want it expanded from DATABASE_URL", cfg.Postgres.URL)
	}
	if len(cfg.Kafka.Routes) != 3 || cfg.Kafka.Routes[1].Key != "scheduled_for" || cfg.Kafka.Routes[0].Key != "event_id" ||
		cfg.Kafka.Routes[0].Mode != decide.ModeStart {
		t.Errorf("routes not handed to the router with defaults: %+v", cfg.Kafka.Routes)
	}
	if sig := cfg.Kafka.Routes[2]; sig.Mode != decide.ModeSignal || sig.WorkflowIDTemplate != "order-{data.order_id}" || sig.Signal != "event" ||
		sig.IDReusePolicy != decide.ReuseAllowDuplicate {
		t.Errorf("the signal route: %+v", sig)
	} else if tm, err := sig.Template(); err != nil || tm.String() != sig.WorkflowIDTemplate {
		t.Errorf("the signal route's template: %v, %v", tm, err)
	}
	if cfg.Kafka.SessionTimeout != 45*time.Second || cfg.Starts.MarkInterval != 250*time.Millisecond {
		t.Errorf("durations: %s %s", cfg.Kafka.SessionTimeout, cfg.Starts.MarkInterval)
	}
	def := Default()
	if cfg.Kafka.MaxPollRecords != def.Kafka.MaxPollRecords || cfg.Starts.Concurrency != def.Starts.Concurrency {
		t.Error("the example disagrees with the defaults it claims to show")
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	base := `
kafka: {brokers: [b:9092], group: g, topics: [t], reset_offset: earliest}
routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]
postgres: {url: "postgres://u@h/d?sslmode=verify-full"}
`
	cases := map[string]string{
		"field kafak not found":                   base + "kafak: {}\n",
		"kafka.reset_offset":                      strings.Replace(base, "reset_offset: earliest", "reset_offset: sometime", 1),
		"routes[0].workflow_type":                 strings.Replace(base, "workflow_type: W", "workflow_type: \"\"", 1),
		"event_id.chain[0]":                       base + "event_id: {chain: [random]}\n",
		"log.level":                               base + "log: {level: loud}\n",
		"kafka.dead_letter_topic":                 strings.Replace(base, "reset_offset: earliest", "reset_offset: earliest, dead_letter_topic: \"{topic}\"", 1),
		"temporal.namespace: empty":               base + "temporal: {namespace: \"\"}\n",
		"kafka.sasl.username: empty":              strings.Replace(base, "reset_offset: earliest", "reset_offset: earliest, sasl: {mechanism: SCRAM-SHA-256, password: x}", 1),
		"kafka.tls.cert_file, key_file: set both": strings.Replace(base, "reset_offset: earliest", "reset_offset: earliest, tls: {cert_file: c.pem}", 1),
		"temporal.api_key, api_key_file: set one": base + "temporal: {api_key: k, api_key_file: f}\n",
		"temporal.tls.cert_file, key_file":        base + "temporal: {tls: {key_file: k.pem}}\n",
		"temporal.compression: \"zstd\"":          base + "temporal: {compression: zstd}\n",
		"field pasword not found":                 strings.Replace(base, "reset_offset: earliest", "reset_offset: earliest, sasl: {pasword: x}", 1),
	}
	for want, doc := range cases {
		_, err := Parse([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
	if _, err := Parse([]byte(base)); err != nil {
		t.Fatalf("minimal config: %v", err)
	}
}

// The schedules section: parsed with its defaults, and a trigger whose
// definition's dedupe_key_strategy is not its misfire_policy is refused
// with both fields and values named.
func TestScheduleConfig(t *testing.T) {
	base := `
kafka: {brokers: [b:9092], group: g, topics: [t], reset_offset: earliest}
routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]
postgres: {url: "postgres://u@h/d?sslmode=verify-full"}
schedules:
  triggers:
    - activity_id: 550e8400-e29b-41d4-a716-446655440000
      cron: "30 2 * * *"
      time_zone: America/New_York
      misfire_policy: catchup
      catchup_limit: 5
      workflow_type: RunActivityWorkflow
      task_queue: activities
      definition: {dedupe_key_strategy: catchup, tasks: [{type: noop}]}
`
	cfg, err := Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	tr := cfg.Schedules.Triggers[0]
	if cfg.Schedules.Tick != time.Second || tr.Name != "550e8400-e29b-41d4-a716-446655440000" || tr.Limit() != 5 || tr.MisfireThreshold != time.Minute {
		t.Errorf("schedules: %+v", cfg.Schedules)
	}
	_, err = Parse([]byte(strings.Replace(base, "dedupe_key_strategy: catchup", "dedupe_key_strategy: compress", 1)))
	if err == nil || !strings.Contains(err.Error(), `schedules.triggers[0].definition.dedupe_key_strategy "compress" does not match schedules.triggers[0].misfire_policy "catchup"`) {
		t.Errorf("mismatch: %v", err)
	}
	_, err = Parse([]byte(strings.Replace(base, "catchup_limit: 5", "catchup_limit: 5\n      misfire_treshold: 1m", 1)))
	if err == nil || !strings.Contains(err.Error(), "misfire_treshold") {
		t.Errorf("unknown key: %v", err)
	}
}

// temporal.compression reaches the SDK: none unless gzip is asked for.
func TestTemporalCompression(t *testing.T) {
	for name, want := range map[string]client.GrpcCompression{"": &client.GrpcCompressionNone{}, "none": &client.GrpcCompressionNone{}, "gzip": &client.GrpcCompressionGzip{}} {
		cfg := Default()
		if name != "" {
			cfg.Temporal.Compression = name
		}
		o, err := cfg.Temporal.ClientOptions(slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if got := o.ConnectionOptions.GrpcCompression; reflect.TypeOf(got) != reflect.TypeOf(want) {
			t.Errorf("temporal.compression %q: the SDK gets %T, want %T", name, got, want)
		}
	}
}

// TestNoCredentialInPlaintext: a Kafka credential is never sent in
// plaintext to a broker or token endpoint off this machine: SASL to a
// non-loopback broker needs kafka.tls, an OAUTHBEARER token_url to a
// non-loopback host needs https, unless kafka.allow_insecure: true (as
// postgres.allow_insecure). Each refusal names the key to fix.
func TestNoCredentialInPlaintext(t *testing.T) {
	doc := func(brokers, kafka string) string {
		return `
kafka: {brokers: [` + brokers + `], group: g, topics: [t], reset_offset: earliest` + kafka + `}
routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]
postgres: {url: "postgres://u@h/d?sslmode=verify-full"}
`
	}
	const (
		plain  = ", sasl: {mechanism: PLAIN, username: u, password: p}"
		scram  = ", sasl: {mechanism: SCRAM-SHA-512, username: u, password: p}"
		token  = ", sasl: {mechanism: OAUTHBEARER, token_file: /run/token}"
		idp    = ", sasl: {mechanism: OAUTHBEARER, token_url: %s, client_id: c, client_secret: s}"
		tlsOn  = ", tls: {enabled: true}"
		allow  = ", allow_insecure: true"
		skip   = ", tls: {insecure_skip_verify: true}"
		remote = "kafka-1.example.com:9092"
	)
	url := func(u string) string { return strings.Replace(idp, "%s", u, 1) }
	for _, tc := range []struct {
		name, doc, want string // want: a substring of the error; "" passes
	}{
		{"PLAIN to a remote broker", doc(remote, plain), "kafka.sasl.mechanism PLAIN"},
		{"SCRAM to a remote broker", doc(remote, scram), "kafka.sasl.mechanism SCRAM-SHA-512"},
		{"OAUTHBEARER to a remote broker", doc(remote, token), "kafka.sasl.mechanism OAUTHBEARER"},
		{"one remote broker of two", doc("127.0.0.1:9092, 10.0.0.7:9092", plain), "10.0.0.7:9092"},
		{"a broker without a port", doc("kafka-1", plain), "kafka-1"},
		{"an http token_url to a remote host", doc(remote, url("http://idp.example.com/token")+tlsOn), "kafka.sasl.token_url"},
		{"an http token_url, on a loopback broker", doc("127.0.0.1:9092", url("http://10.1.1.1/token")), "kafka.sasl.token_url"},
		{"the refusal names the way out", doc(remote, plain), "kafka.allow_insecure: true"},
		{"the refusal names kafka.tls", doc(remote, plain), "kafka.tls"},

		{"PLAIN over TLS that verifies nothing", doc(remote, plain+skip), "kafka.tls.insecure_skip_verify"},
		{"OAUTHBEARER over TLS that verifies nothing", doc(remote, token+skip), "kafka.allow_insecure: true"},
		{"PLAIN over TLS that verifies nothing, on loopback", doc("127.0.0.1:9092", plain+skip), ""},
		{"PLAIN over TLS that verifies nothing, allowed", doc(remote, plain+skip+allow), ""},
		{"no SASL over TLS that verifies nothing", doc(remote, skip), ""},
		{"PLAIN over TLS", doc(remote, plain+tlsOn), ""},
		{"PLAIN over TLS with a CA", doc(remote, plain+", tls: {ca_file: /etc/ca.pem}"), ""},
		{"OAUTHBEARER over TLS, https token_url", doc(remote, url("https://idp.example.com/token")+tlsOn), ""},
		{"PLAIN to 127.0.0.1", doc("127.0.0.1:9092", plain), ""},
		{"PLAIN to 127.1.2.3", doc("127.1.2.3:9092", plain), ""},
		{"PLAIN to ::1", doc(`"[::1]:9092"`, plain), ""},
		{"PLAIN to localhost", doc("localhost:9092, LOCALHOST:9093", plain), ""},
		{"an http token_url to localhost", doc("127.0.0.1:9092", url("http://localhost:8080/token")), ""},
		{"an http token_url to 127.0.0.1", doc("127.0.0.1:9092", url("http://127.0.0.1:8080/token")), ""},
		{"no SASL to a remote broker", doc(remote, ""), ""},
		{"PLAIN to a remote broker, allowed", doc(remote, plain+allow), ""},
		{"an http token_url, allowed", doc(remote, url("http://idp.example.com/token")+allow), ""},
	} {
		_, err := Parse([]byte(tc.doc))
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestTemporalAPIKeyNeverToAnUnverifiedServer: temporal.api_key (or
// api_key_file) with temporal.tls.insecure_skip_verify to a host off this
// machine is refused, naming the key and temporal.allow_insecure, as
// postgres.allow_insecure: anyone on the path could pose as Temporal and
// read the key.
func TestTemporalAPIKeyNeverToAnUnverifiedServer(t *testing.T) {
	doc := func(temporal string) string {
		return `
kafka: {brokers: [127.0.0.1:9092], group: g, topics: [t], reset_offset: earliest}
routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]
postgres: {url: "postgres://u@h/d?sslmode=verify-full"}
temporal: {` + temporal + `}
`
	}
	const skip = ", tls: {insecure_skip_verify: true}"
	for _, tc := range []struct{ name, temporal, want string }{
		{"an API key to a remote server, unverified", "host_port: t.example.com:7233, api_key: k" + skip, "temporal.tls.insecure_skip_verify"},
		{"an API key file to a remote server, unverified", "host_port: 10.0.0.9:7233, api_key_file: /run/key" + skip, "temporal.allow_insecure: true"},
		{"an API key to a remote server, unverified, allowed", "host_port: t.example.com:7233, api_key: k, allow_insecure: true" + skip, ""},
		{"an API key on loopback, unverified", "host_port: 127.0.0.1:7233, api_key: k" + skip, ""},
		{"an API key to a remote server, verified", "host_port: t.example.com:7233, api_key: k", ""},
		{"no API key, unverified", "host_port: t.example.com:7233" + skip, ""},
	} {
		_, err := Parse([]byte(doc(tc.temporal)))
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// kafka.fetch_max_partition_bytes in a YAML: given, it is taken; left
// out, it is the default (256 KiB, as the example shows); 0, negative,
// over Kafka's 32-bit bound, or not an integer (a unit, a fraction, a
// number past int64), it is an error naming kafka.fetch_max_partition_bytes.
func TestFetchMaxPartitionBytesFromYAML(t *testing.T) {
	base := `
kafka: {brokers: [b:9092], group: g, topics: [t], reset_offset: earliest%s}
routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]
postgres: {url: "postgres://u@h/d?sslmode=verify-full"}
`
	doc := func(extra string) []byte { return fmt.Appendf(nil, base, extra) }
	if cfg, err := Parse(doc("")); err != nil || cfg.Kafka.FetchMaxPartitionBytes != 256<<10 || cfg.Kafka.FetchMaxPartitionBytes != Default().Kafka.FetchMaxPartitionBytes {
		t.Errorf("without the key: %d, %v; want the default 262144", cfg.Kafka.FetchMaxPartitionBytes, err)
	}
	if cfg, err := Parse(doc(", fetch_max_partition_bytes: 65536")); err != nil || cfg.Kafka.FetchMaxPartitionBytes != 65536 {
		t.Errorf("fetch_max_partition_bytes: 65536: %d, %v", cfg.Kafka.FetchMaxPartitionBytes, err)
	}
	if cfg, err := Parse(doc(", fetch_max_partition_bytes: 1")); err != nil || cfg.Kafka.FetchMaxPartitionBytes != 1 {
		t.Errorf("fetch_max_partition_bytes: 1: %d, %v", cfg.Kafka.FetchMaxPartitionBytes, err)
	}
	for _, v := range []string{"0", "-1", "2147483648", "4294967296"} {
		_, err := Parse(doc(", fetch_max_partition_bytes: " + v))
		if err == nil || !strings.Contains(err.Error(), "kafka.fetch_max_partition_bytes") {
			t.Errorf("fetch_max_partition_bytes: %s: %v, want an error naming kafka.fetch_max_partition_bytes", v, err)
		}
	}
}

// A kafka.fetch_max_partition_bytes that is not an integer (a unit, a
// fraction, a number past int64, a quoted number, a list) is an error
// naming kafka.fetch_max_partition_bytes, not a bound the loader made up
// (1.5 taken as 1 byte) nor a YAML type error naming only a line.
func TestANonIntegerFetchMaxPartitionBytesIsAnErrorNamingIt(t *testing.T) {
	base := `
kafka: {brokers: [b:9092], group: g, topics: [t], reset_offset: earliest, fetch_max_partition_bytes: %s}
routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]
postgres: {url: "postgres://u@h/d?sslmode=verify-full"}
`
	for _, v := range []string{"256KiB", "1.5", "262144.9", "99999999999999999999", "\"262144\"", "[1]"} {
		cfg, err := Parse(fmt.Appendf(nil, base, v))
		if err == nil || !strings.Contains(err.Error(), "fetch_max_partition_bytes") {
			t.Errorf("fetch_max_partition_bytes: %s: loaded as %d, error %v; want an error naming kafka.fetch_max_partition_bytes",
				v, cfg.Kafka.FetchMaxPartitionBytes, err)
		}
	}
}

// The example's fetch bounds are the defaults it claims to show.
func TestExampleConfigShowsTheDefaultFetchBounds(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://u@localhost/db")
	cfg, err := Load("../../deploy/dedup.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	def := Default().Kafka
	if cfg.Kafka.FetchMaxPartitionBytes != def.FetchMaxPartitionBytes || cfg.Kafka.FetchMaxBytes != def.FetchMaxBytes {
		t.Errorf("example: fetch_max_partition_bytes %d, fetch_max_bytes %d; defaults %d, %d",
			cfg.Kafka.FetchMaxPartitionBytes, cfg.Kafka.FetchMaxBytes, def.FetchMaxPartitionBytes, def.FetchMaxBytes)
	}
}

// An integer key set through a YAML merge key (<<, as in a mapping merged
// from an anchor) is checked as when written in place: a fraction is an
// error naming kafka.fetch_max_partition_bytes, not a bound of 1 byte the
// loader made up, and a unit is an error naming the key, not only a line.
func TestAnIntegerKeySetThroughAMergeKeyIsCheckedAsWrittenInPlace(t *testing.T) {
	base := `
kafka: {<<: {fetch_max_partition_bytes: %s}, brokers: [b:9092], group: g, topics: [t], reset_offset: earliest}
routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]
postgres: {url: "postgres://u@h/d?sslmode=verify-full"}
`
	if cfg, err := Parse(fmt.Appendf(nil, base, "65536")); err != nil || cfg.Kafka.FetchMaxPartitionBytes != 65536 {
		t.Fatalf("merged fetch_max_partition_bytes: 65536: %d, %v", cfg.Kafka.FetchMaxPartitionBytes, err)
	}
	for _, v := range []string{"1.5", "256KiB"} {
		cfg, err := Parse(fmt.Appendf(nil, base, v))
		if err == nil || !strings.Contains(err.Error(), "kafka.fetch_max_partition_bytes") {
			t.Errorf("merged fetch_max_partition_bytes: %s: loaded as %d, error %v; want an error naming kafka.fetch_max_partition_bytes",
				v, cfg.Kafka.FetchMaxPartitionBytes, err)
		}
	}
}

// A number past an integer key's range written as a float (-1e300, -.inf,
// 2^63 as 9.223372036854775808e18) is an error naming the key that says
// the written number does not fit: not a value the file never held
// (int64's minimum, which yaml makes of it) loaded silently or shown as
// if written.
func TestAFloatPastAnIntegerKeysRangeIsAnErrorNamingItNotInt64sMinimum(t *testing.T) {
	base := `
kafka: {brokers: [b:9092], group: g, topics: [t], reset_offset: earliest}
routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]
postgres: {url: "postgres://u@h/d?sslmode=verify-full"}
%s
`
	for key, doc := range map[string]string{
		"worker.tenants.smtp.port": "worker: {tenants: {smtp: {port: -1e300}}}",
		"ingress.limits.burst":     "ingress: {limits: {burst: -.inf}}",
		"ingress.max_body_bytes":   "ingress: {max_body_bytes: 9.223372036854775808e18}",
	} {
		_, err := Parse(fmt.Appendf(nil, base, doc))
		if err == nil || !strings.Contains(err.Error(), key) || strings.Contains(err.Error(), "-9223372036854775808") {
			t.Errorf("%s: error %v; want an error naming %s and the number written", doc, err, key)
		}
	}
}

// Integers YAML allows (hex, octal, binary, underscores, +5, 1e3), an
// integer from ${VAR} and one through an alias load as written; a value
// from ${VAR} in an integer key that is no integer is an error naming the
// key without the value (it may be a secret). (In a flow mapping a
// ${VAR} must be quoted.)
func TestIntegerKeysTakeEveryIntegerYAMLAllowsAndHideAValueFromVAR(t *testing.T) {
	base := `
kafka: {brokers: [b:9092], group: g, topics: [t], reset_offset: earliest}
routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]
postgres: {url: "postgres://u@h/d?sslmode=verify-full"}
ingress: {limits: {burst: %s, max_concurrent: &m 64}, max_body_bytes: *m}
`
	t.Setenv("DEDUP_BURST", "0x20")
	for v, want := range map[string]int{"0x10": 16, "0o17": 15, "0b11": 3, "1_000": 1000, "+5": 5, "1e3": 1000, `"${DEDUP_BURST}"`: 32} {
		cfg, err := Parse(fmt.Appendf(nil, base, v))
		if err != nil || cfg.Ingress.Limits.Burst != want || cfg.Ingress.MaxBodyBytes != 64 {
			t.Errorf("burst: %s: %d (max_body_bytes %d), %v; want %d", v, cfg.Ingress.Limits.Burst, cfg.Ingress.MaxBodyBytes, err, want)
		}
	}
	t.Setenv("DEDUP_SECRET", `s3"cr\et-1.5`)
	_, err := Parse(fmt.Appendf(nil, base, `"${DEDUP_SECRET}"`))
	if err == nil || !strings.Contains(err.Error(), "ingress.limits.burst") || strings.Contains(err.Error(), "cr") {
		t.Errorf("burst from a secret: %v; want an error naming ingress.limits.burst without the value", err)
	}
}

// Odd documents give an error or a config, never a panic: no content, a
// comment only, a non-mapping root, a list or null where a section or an
// integer list goes, aliases of sections, a route list of an alias.
func TestOddDocumentsNeverPanicTheIntegerCheck(t *testing.T) {
	for _, doc := range []string{"", "# nothing\n", "--- \n", "- a\n", "42\n", "kafka: [1]\n", "kafka: ~\n", "routes: {a: 1}\n",
		"ingress: {limits: [1, 2]}\n", "ingress: &i {max_body_bytes: 1}\nworker: *i\n", "ingress: {limits: &l {burst: 2}, max_body_bytes: *l}\n",
		"routes: &r [{id: a, definition: {max_attempts: 2}}]\nschedules: {triggers: *r}\n", "postgres: {max_conns: [[1]]}\n",
		"kafka: {routes: [{definition: ~}]}\n", "schedules: {triggers: [~, 1, [2]]}\n"} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%q: panic %v", doc, r)
				}
			}()
			_, _ = Parse([]byte(doc)) // an error or not: only a panic fails
		}()
	}
}

// A fraction reached through an alias (anchored on a key of another type)
// is an error naming the integer key the alias sets, not the anchor's.
func TestAFractionThroughAnAliasIsAnErrorNamingTheAliasesKey(t *testing.T) {
	doc := `
kafka: {brokers: [b:9092], group: &x 2.5, topics: [t], reset_offset: earliest}
routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]
postgres: {url: "postgres://u@h/d?sslmode=verify-full"}
ingress: {limits: {burst: *x}}
`
	cfg, err := Parse([]byte(doc))
	if err == nil || !strings.Contains(err.Error(), "ingress.limits.burst") {
		t.Errorf("burst: *x (2.5): loaded as %d, error %v; want an error naming ingress.limits.burst", cfg.Ingress.Limits.Burst, err)
	}
}

// mergeBase is a config that loads, for the merge-key tests below.
const mergeBase = `
routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]
postgres: {url: "postgres://u@h/d?sslmode=verify-full"}
`

// A value a merge key brings that YAML never uses (an explicit key of the
// mapping overrides it, an earlier mapping of a merge list gives the key,
// or a nested merge's explicit key does) is no value of the config: yaml
// loads 65536 for each of these documents, and so must Parse, not refuse
// the shadowed 1.5 or 256KiB as if it were the key's value.
func TestAMergedValueThatYAMLOverridesIsNotRefused(t *testing.T) {
	for _, kafka := range []string{
		`kafka: {<<: {fetch_max_partition_bytes: 1.5}, fetch_max_partition_bytes: 65536, brokers: [b:9092], group: g, topics: [t], reset_offset: earliest}`,
		`kafka: {fetch_max_partition_bytes: 65536, <<: {fetch_max_partition_bytes: 256KiB}, brokers: [b:9092], group: g, topics: [t], reset_offset: earliest}`,
		`kafka: {<<: [{fetch_max_partition_bytes: 65536}, {fetch_max_partition_bytes: 1.5}], brokers: [b:9092], group: g, topics: [t], reset_offset: earliest}`,
		`kafka: {<<: {<<: {fetch_max_partition_bytes: 1.5}, fetch_max_partition_bytes: 65536}, brokers: [b:9092], group: g, topics: [t], reset_offset: earliest}`,
	} {
		doc := kafka + mergeBase
		var plain Config
		yerr := yaml.Unmarshal([]byte(doc), &plain)
		cfg, err := Parse([]byte(doc))
		if err != nil || cfg.Kafka.FetchMaxPartitionBytes != 65536 {
			t.Errorf("%s\nParse: %d, %v; yaml itself: %d, %v; want 65536 as yaml takes it", kafka,
				cfg.Kafka.FetchMaxPartitionBytes, err, plain.Kafka.FetchMaxPartitionBytes, yerr)
		}
	}
}

// A merge cycle (an anchored mapping that merges itself) inside a merged
// value an explicit key overrides is never read by yaml, so the file
// loads; the integer check must not follow it for ever and crash the
// process with a stack overflow (it runs in a child process here, with a
// 64 MiB stack bound, so that a crash fails this test only).
func TestAMergeCycleInAValueYAMLNeverReadsDoesNotCrashTheLoader(t *testing.T) {
	doc := "kafka: {brokers: [b:9092], group: g, topics: [t], reset_offset: earliest}\n" + mergeBase +
		"ingress: {<<: {limits: &l {<<: *l}}, limits: {burst: 2}}\n"
	if os.Getenv("DEDUP_CONFIG_TEST_CHILD") == "1" {
		debug.SetMaxStack(64 << 20)
		cfg, err := Parse([]byte(doc))
		fmt.Printf("child: burst %d, error %v\n", cfg.Ingress.Limits.Burst, err)
		return
	}
	var plain Config
	yerr := yaml.Unmarshal([]byte(doc), &plain)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestAMergeCycleInAValueYAMLNeverReadsDoesNotCrashTheLoader$", "-test.count=1")
	cmd.Env = append(os.Environ(), "DEDUP_CONFIG_TEST_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		s := string(out)
		if i := strings.Index(s, "\ngoroutine "); i > 0 {
			s = s[:i]
		}
		t.Errorf("Parse crashed the process (%v): %s\n(yaml itself: burst %d, %v)", err, s, plain.Ingress.Limits.Burst, yerr)
	}
}

// Aliases that double at each level (a "billion laughs" of merge keys)
// inside a merged value an explicit key overrides are never read by yaml,
// so the file loads at once; the integer check must not expand them
// (2^40 visits) and hang the loader: Parse must answer within 10 s.
func TestManyAliasesInAValueYAMLNeverReadsDoNotHangTheLoader(t *testing.T) {
	laughs := "&a0 {burst: 1}"
	for i := 1; i <= 40; i++ {
		laughs = fmt.Sprintf("&a%d {<<: [%s, *a%d]}", i, laughs, i-1)
	}
	doc := "kafka: {brokers: [b:9092], group: g, topics: [t], reset_offset: earliest}\n" + mergeBase +
		"ingress: {<<: {limits: " + laughs + "}, limits: {burst: 2}}\n"
	var plain Config
	if err := yaml.Unmarshal([]byte(doc), &plain); err != nil || plain.Ingress.Limits.Burst != 2 {
		t.Fatalf("yaml itself: burst %d, %v", plain.Ingress.Limits.Burst, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := Parse([]byte(doc))
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Parse: %v; want the config yaml loads (burst 2)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Parse still running after 10 s: the integer check expands aliases yaml never reads")
	}
}

// An unsigned integer key refuses a negative float: yaml itself makes
// -1.0 into a uint64 18446744073709551615 (Go's float to uint64 on amd64),
// a value the file never held. (No config key is unsigned today: this
// holds the check itself, over a type of one uint64 key.)
func TestANegativeFloatIsRefusedForAnUnsignedIntegerKey(t *testing.T) {
	type unsigned struct {
		N uint64 `yaml:"n"`
		U uint   `yaml:"u"`
	}
	for _, doc := range []string{"n: -1.0\n", "u: -1.0\n", "n: -1e3\n"} {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(doc), &n); err != nil {
			t.Fatal(err)
		}
		var plain unsigned
		yerr := n.Decode(&plain)
		if err := checkIntegers(&n, reflect.TypeFor[unsigned](), ""); err == nil {
			t.Errorf("%q: no error (yaml loads n %d, u %d, %v); want an error naming the key", doc, plain.N, plain.U, yerr)
		}
	}
}

// A float past int64's range but within uint64's (1e19) is a uint64
// key's value exactly, as yaml takes it: the range check is the key's
// type's, not int64's. (No config key is unsigned today: this holds the
// check itself, over a type of one uint64 key.)
func TestAFloatWithinUint64ButPastInt64IsAnUnsignedKeysValue(t *testing.T) {
	type unsigned struct {
		N uint64 `yaml:"n"`
	}
	var n yaml.Node
	if err := yaml.Unmarshal([]byte("n: 1e19\n"), &n); err != nil {
		t.Fatal(err)
	}
	var plain unsigned
	if err := n.Decode(&plain); err != nil || plain.N != 10_000_000_000_000_000_000 {
		t.Fatalf("yaml itself: %d, %v", plain.N, err)
	}
	if err := checkIntegers(&n, reflect.TypeFor[unsigned](), ""); err != nil {
		t.Errorf("n: 1e19 into a uint64: %v; want it taken as yaml takes it (10000000000000000000)", err)
	}
}

// A fraction from ${VAR} in an integer key is an error naming the key
// without the value, however short: the value may be a secret put in the
// wrong key, and the redaction takes a value under 4 bytes out only where
// an error quotes it.
func TestAFractionFromVARIsAnErrorWithoutTheValue(t *testing.T) {
	t.Setenv("DEDUP_PIN", "7.5")
	doc := "kafka: {brokers: [b:9092], group: g, topics: [t], reset_offset: earliest}\n" + mergeBase +
		"ingress: {limits: {burst: \"${DEDUP_PIN}\"}}\n"
	_, err := Parse([]byte(doc))
	if err == nil || !strings.Contains(err.Error(), "ingress.limits.burst") || strings.Contains(err.Error(), "7.5") {
		t.Errorf("burst from ${DEDUP_PIN} (7.5): %v; want an error naming ingress.limits.burst without the value", err)
	}
}

// An int32 key (postgres.max_conns) set through a merge key takes a float
// that is an integer up to int32's maximum, and refuses one past either of
// int32's bounds with an error naming the key: never a value wrapped to
// fit.
func TestAnInt32KeyThroughAMergeTakesFloatsUpToItsBoundAndRefusesPastIt(t *testing.T) {
	base := "kafka: {brokers: [b:9092], group: g, topics: [t], reset_offset: earliest}\n" +
		"routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]\n" +
		"postgres: {<<: {max_conns: %s}, url: \"postgres://u@h/d?sslmode=verify-full\"}\n"
	if cfg, err := Parse(fmt.Appendf(nil, base, "2.147483647e9")); err != nil || cfg.Postgres.MaxConns != 2147483647 {
		t.Errorf("max_conns: 2.147483647e9: %d, %v; want 2147483647", cfg.Postgres.MaxConns, err)
	}
	for _, v := range []string{"2147483648.0", "2.147483648e9", "-2147483649.0", "4294967298.0", "1e19"} {
		cfg, err := Parse(fmt.Appendf(nil, base, v))
		if err == nil || !strings.Contains(err.Error(), "postgres.max_conns") {
			t.Errorf("max_conns: %s: loaded as %d, error %v; want an error naming postgres.max_conns", v, cfg.Postgres.MaxConns, err)
		}
	}
}
