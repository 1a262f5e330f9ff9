package app

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
	cfg, err := ParseConfig([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.IngressTopic() != "t" || cfg.IngressMaxBody() != 1000 || cfg.Ingress.Listen != "127.0.0.1:8080" || cfg.Ingress.AdminListen != "127.0.0.1:9466" {
		t.Errorf("defaults: topic %q, max body %d, %+v", cfg.IngressTopic(), cfg.IngressMaxBody(), cfg.Ingress)
	}
	cfg, err = ParseConfig([]byte(base + "ingress: {topic: u, max_body_bytes: 10, public_url: \"https://events.example.com/api\"}\n"))
	if err != nil || cfg.IngressTopic() != "u" || cfg.IngressMaxBody() != 10 {
		t.Errorf("set: %v %+v", err, cfg.Ingress)
	}
	for want, doc := range map[string]string{
		"ingress.topic":                    "ingress: {topic: other}\n",
		"ingress.max_body_bytes":           "ingress: {max_body_bytes: 1001}\n",
		"ingress.tls.cert_file, key_file":  "ingress: {tls: {cert_file: c.pem}}\n",
		"ingress.produce_timeout":          "ingress: {produce_timeout: 0s}\n",
		"ingress.public_url":               "ingress: {public_url: \"events.example.com\"}\n",
		"field tokens not found":           "ingress: {tokens: x}\n",
		"ingress.max_body_bytes: -1, want": "ingress: {max_body_bytes: -1}\n",
	} {
		_, err := ParseConfig([]byte(base + doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
}
