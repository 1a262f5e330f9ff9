package app

import (
	"strings"
	"testing"
	"time"
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
