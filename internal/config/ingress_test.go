package config

import (
	"strings"
	"testing"
)

func TestIngressConfig(t *testing.T) {
	base := `
kafka: {brokers: [b:9092], group: g, topics: [t, u], reset_offset: earliest, max_value_bytes: 1000}
routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]
postgres: {url: "postgres://u@h/d?sslmode=verify-full"}
`
	cfg, err := Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.IngressTopic() != "t" || cfg.IngressMaxBody() != 1000 || cfg.Ingress.Listen != "127.0.0.1:8080" || cfg.Ingress.AdminListen != "127.0.0.1:9466" {
		t.Errorf("defaults: topic %q, max body %d, %+v", cfg.IngressTopic(), cfg.IngressMaxBody(), cfg.Ingress)
	}
	cfg, err = Parse([]byte(base + "ingress: {topic: u, max_body_bytes: 10, public_url: \"https://events.example.com/api\"}\n"))
	if err != nil || cfg.IngressTopic() != "u" || cfg.IngressMaxBody() != 10 {
		t.Errorf("set: %v %+v", err, cfg.Ingress)
	}
	for want, doc := range map[string]string{
		"ingress.topic":                                           "ingress: {topic: other}\n",
		"ingress.max_body_bytes":                                  "ingress: {max_body_bytes: 1001}\n",
		"ingress.tls.cert_file, key_file":                         "ingress: {tls: {cert_file: c.pem}}\n",
		"ingress.produce_timeout":                                 "ingress: {produce_timeout: 0s}\n",
		"ingress.public_url":                                      "ingress: {public_url: \"events.example.com\"}\n",
		"field tokens not found":                                  "ingress: {tokens: x}\n",
		"ingress.max_body_bytes: -1, want":                        "ingress: {max_body_bytes: -1}\n",
		"ingress.lookup_timeout":                                  "ingress: {lookup_timeout: 0s}\n",
		"ingress.limits.rate":                                     "ingress: {limits: {rate: 0}}\n",
		"ingress.limits.burst":                                    "ingress: {limits: {burst: 0}}\n",
		"ingress.limits.max_concurrent":                           "ingress: {limits: {max_concurrent: 0}}\n",
		"kafka.tenant_keys_file: empty while ingress.tokens_file": "ingress: {tokens_file: /etc/dedup/tokens.yaml}\n",
	} {
		_, err := Parse([]byte(base + doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
	for _, doc := range []string{
		"ingress: {listen: \"127.0.0.1:8080\"}\n",
		"ingress: {listen: \"[::1]:8080\"}\n",
		"ingress: {listen: \"localhost:8080\"}\n",
		"ingress: {listen: \"0.0.0.0:8080\", allow_unauthenticated: true}\n",
		"ingress: {listen: \"0.0.0.0:8080\", tokens_file: /etc/dedup/tokens.yaml}\n",
	} {
		withKeys := strings.Replace(base, "max_value_bytes: 1000}", "max_value_bytes: 1000, tenant_keys_file: /etc/dedup/tenant-keys.yaml}", 1)
		if cfg, err := Parse([]byte(withKeys + doc)); err != nil || cfg.Ingress.CheckExposure() != nil {
			t.Errorf("%s: %v %v", doc, err, cfg.Ingress.CheckExposure())
		}
	}
	// Without tokens, dedup ingress listens on loopback only unless
	// allowed (the routers sharing the file do not care).
	for _, listen := range []string{"0.0.0.0:8080", ":8080", "ingress:8080", "10.0.0.7:8080"} {
		cfg, err := Parse([]byte(base + "ingress: {listen: \"" + listen + "\"}\n"))
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Ingress.CheckExposure(); err == nil || !strings.Contains(err.Error(), "ingress.listen: "+listen+" is not a loopback address") {
			t.Errorf("%s: %v", listen, err)
		}
	}
	if cfg, _ := Parse([]byte(base)); !cfg.Ingress.RequireKey || cfg.Ingress.Limits.MaxConcurrent != 64 {
		t.Errorf("defaults: %+v", cfg.Ingress)
	}
}
