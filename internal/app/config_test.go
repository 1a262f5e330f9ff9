package app

import (
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
)

// The example shipped in deploy/ is the config reference the README points
// to: it must load, with every value it shows.
func TestExampleConfigLoads(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://u@localhost/db")
	cfg, err := LoadConfig("../../deploy/dedup.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Postgres.URL != "postgres://u@localhost/db" {
		t.Errorf("postgres.url = %q, want it expanded from DATABASE_URL", cfg.Postgres.URL)
	}
	if len(cfg.Kafka.Routes) != 2 || cfg.Kafka.Routes[1].Key != "scheduled_for" || cfg.Kafka.Routes[0].Key != "event_id" {
		t.Errorf("routes not handed to the router with defaults: %+v", cfg.Kafka.Routes)
	}
	if cfg.Kafka.SessionTimeout != 45*time.Second || cfg.Starts.MarkInterval != 10*time.Millisecond {
		t.Errorf("durations: %s %s", cfg.Kafka.SessionTimeout, cfg.Starts.MarkInterval)
	}
	def := DefaultConfig()
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
		_, err := ParseConfig([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
	if _, err := ParseConfig([]byte(base)); err != nil {
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
	cfg, err := ParseConfig([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	tr := cfg.Schedules.Triggers[0]
	if cfg.Schedules.Tick != time.Second || tr.Name != "550e8400-e29b-41d4-a716-446655440000" || tr.Limit() != 5 || tr.MisfireThreshold != time.Minute {
		t.Errorf("schedules: %+v", cfg.Schedules)
	}
	_, err = ParseConfig([]byte(strings.Replace(base, "dedupe_key_strategy: catchup", "dedupe_key_strategy: compress", 1)))
	if err == nil || !strings.Contains(err.Error(), `schedules.triggers[0].definition.dedupe_key_strategy "compress" does not match schedules.triggers[0].misfire_policy "catchup"`) {
		t.Errorf("mismatch: %v", err)
	}
	_, err = ParseConfig([]byte(strings.Replace(base, "catchup_limit: 5", "catchup_limit: 5\n      misfire_treshold: 1m", 1)))
	if err == nil || !strings.Contains(err.Error(), "misfire_treshold") {
		t.Errorf("unknown key: %v", err)
	}
}

// temporal.compression reaches the SDK: none unless gzip is asked for.
func TestTemporalCompression(t *testing.T) {
	for name, want := range map[string]client.GrpcCompression{"": &client.GrpcCompressionNone{}, "none": &client.GrpcCompressionNone{}, "gzip": &client.GrpcCompressionGzip{}} {
		cfg := DefaultConfig()
		if name != "" {
			cfg.Temporal.Compression = name
		}
		o, err := temporalOptions(cfg, slog.New(slog.DiscardHandler), nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := o.ConnectionOptions.GrpcCompression; reflect.TypeOf(got) != reflect.TypeOf(want) {
			t.Errorf("temporal.compression %q: the SDK gets %T, want %T", name, got, want)
		}
	}
}
