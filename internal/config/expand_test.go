package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Environment expansion happens inside values only, in the ${VAR} form
// only, and never changes the shape of the document.
func TestConfigExpansion(t *testing.T) {
	env := map[string]string{
		"DB":        "postgres://u:pa$$w0rd@127.0.0.1/d",
		"PORT":      "9999",
		"EMPTY":     "",
		"NEWLINE":   "x\nadmin: {listen: 0.0.0.0:1, pprof: true}",
		"NULLISH":   "null",
		"GROUP":     "g1",
		"BROKER":    "b:9092",
		"PASSWORD":  "${NOT_EXPANDED_TWICE}",
		"WITHCOLON": "a: b",
	}
	base := func(extra string) string {
		return `
kafka: {brokers: ["${BROKER}"], group: "${GROUP}", topics: [t], reset_offset: earliest}
routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]
` + extra
	}
	for _, tc := range []struct {
		name  string
		doc   string
		check func(t *testing.T, c Config)
		err   string // substring of the error; "" for none
	}{
		{name: "a variable in a value", doc: base(`postgres: {url: "${DB}"}`), check: func(t *testing.T, c Config) {
			if c.Postgres.URL != env["DB"] || c.Kafka.Group != "g1" || c.Kafka.Brokers[0] != "b:9092" {
				t.Errorf("url %q group %q brokers %v", c.Postgres.URL, c.Kafka.Group, c.Kafka.Brokers)
			}
		}},
		{name: "a bare $ stays, as in a password", doc: base(`postgres: {url: "postgres://u:pa$sw0rd@127.0.0.1/d"}`), check: func(t *testing.T, c Config) {
			if c.Postgres.URL != "postgres://u:pa$sw0rd@127.0.0.1/d" {
				t.Errorf("url %q", c.Postgres.URL)
			}
		}},
		{name: "$$ is one $", doc: base(`postgres: {url: "postgres://u:a$$${GROUP}$$$$b@127.0.0.1/d"}`), check: func(t *testing.T, c Config) {
			if c.Postgres.URL != "postgres://u:a$g1$$b@127.0.0.1/d" {
				t.Errorf("url %q", c.Postgres.URL)
			}
		}},
		{name: "$${VAR} is literal", doc: base(`postgres: {url: "postgres://u:$${GROUP}@127.0.0.1/d"}`), check: func(t *testing.T, c Config) {
			if c.Postgres.URL != "postgres://u:${GROUP}@127.0.0.1/d" {
				t.Errorf("url %q", c.Postgres.URL)
			}
		}},
		{name: "$VAR without braces is literal", doc: base(`postgres: {url: "postgres://u:$GROUP@127.0.0.1/d"}`), check: func(t *testing.T, c Config) {
			if c.Postgres.URL != "postgres://u:$GROUP@127.0.0.1/d" {
				t.Errorf("url %q", c.Postgres.URL)
			}
		}},
		{name: "a value is expanded once", doc: base(`postgres: {url: "postgres://u:${PASSWORD}@127.0.0.1/d"}`), check: func(t *testing.T, c Config) {
			if c.Postgres.URL != "postgres://u:${NOT_EXPANDED_TWICE}@127.0.0.1/d" {
				t.Errorf("url %q", c.Postgres.URL)
			}
		}},
		{name: "an unset variable names the key", doc: base(`postgres: {url: "${NOPE}"}`), err: "postgres.url: environment variable NOPE is not set"},
		{name: "an unset variable in a list names the index", doc: base("postgres: {url: \"${DB}\"}\nevent_id: {headers: [a, \"${NOPE}\"]}"),
			err: "event_id.headers[1]: environment variable NOPE is not set"},
		{name: "a set but empty variable is empty", doc: base("postgres: {url: \"${DB}\"}\nworker: {webhook_url: \"${EMPTY}\"}"), check: func(t *testing.T, c Config) {
			if c.Worker.WebhookURL != "" {
				t.Errorf("webhook_url %q", c.Worker.WebhookURL)
			}
		}},
		{name: "a newline in a variable cannot add keys", doc: base("postgres: {url: \"${DB}\"}\nworker: {webhook_url: \"${NEWLINE}\"}"), check: func(t *testing.T, c Config) {
			if c.Worker.WebhookURL != env["NEWLINE"] || c.Admin.Pprof || c.Admin.Listen != "127.0.0.1:9464" {
				t.Errorf("webhook_url %q admin %+v", c.Worker.WebhookURL, c.Admin)
			}
		}},
		{name: "a newline in a variable, plain style", doc: base("postgres: {url: \"${DB}\"}\nworker:\n  webhook_url: ${NEWLINE}\n"), check: func(t *testing.T, c Config) {
			if c.Worker.WebhookURL != env["NEWLINE"] || c.Admin.Pprof {
				t.Errorf("webhook_url %q admin %+v", c.Worker.WebhookURL, c.Admin)
			}
		}},
		{name: "a colon in a variable stays a string", doc: base("postgres: {url: \"${DB}\"}\nworker:\n  webhook_url: ${WITHCOLON}\n"), check: func(t *testing.T, c Config) {
			if c.Worker.WebhookURL != "a: b" {
				t.Errorf("webhook_url %q", c.Worker.WebhookURL)
			}
		}},
		{name: "an unknown top-level key", doc: base("postgres: {url: \"${DB}\"}\nkafka_extra: 1\n"), err: "field kafka_extra not found"},
		{name: "a number from a variable, in a number's place", doc: base("postgres:\n  url: ${DB}\n  max_conns: ${PORT}\n"), check: func(t *testing.T, c Config) {
			if c.Postgres.MaxConns != 9999 {
				t.Errorf("max_conns %d", c.Postgres.MaxConns)
			}
		}},
		{name: "a number from a variable, quoted in a flow mapping", doc: base("postgres: {url: \"${DB}\", max_conns: \"${PORT}\"}\n"), check: func(t *testing.T, c Config) {
			if c.Postgres.MaxConns != 9999 {
				t.Errorf("max_conns %d", c.Postgres.MaxConns)
			}
		}},
		{name: "a number from a variable, in a string's place", doc: base("postgres: {url: \"${DB}\"}\nworker: {webhook_url: \"${PORT}\"}\n"), check: func(t *testing.T, c Config) {
			if c.Worker.WebhookURL != "9999" {
				t.Errorf("webhook_url %q", c.Worker.WebhookURL)
			}
		}},
		{name: "null from a variable is the string null", doc: base("postgres: {url: \"${DB}\"}\nworker:\n  webhook_url: ${NULLISH}\n"), check: func(t *testing.T, c Config) {
			if c.Worker.WebhookURL != "null" {
				t.Errorf("webhook_url %q", c.Worker.WebhookURL)
			}
		}},
		{name: "a key is never expanded", doc: base("postgres: {url: \"${DB}\", \"${GROUP}\": 1}\n"), err: "field ${GROUP} not found"},
		{name: "unterminated", doc: base(`postgres: {url: "postgres://u:${DB@h/d"}`), err: "postgres.url: unterminated ${"},
		{name: "not a name", doc: base(`postgres: {url: "postgres://u:${a-b}@h/d"}`), err: "postgres.url: ${...} at byte 13"},
		{name: "an unknown key stays an error", doc: base("postgres: {url: \"${DB}\"}\nadmin: {listen: x, pprof: true, extra: 1}\n"), err: "field extra not found in type config.AdminConfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range env {
				t.Setenv(k, v)
			}
			t.Setenv("DATABASE_URL", "")
			if err := os.Unsetenv("NOPE"); err != nil {
				t.Fatal(err)
			}
			c, err := Parse([]byte(tc.doc))
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("error: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want %q", err, tc.err)
			case tc.check != nil:
				tc.check(t, c)
			}
			if err != nil && strings.Contains(err.Error(), "pa$$w0rd") {
				t.Errorf("the error quotes a secret: %v", err)
			}
		})
	}
}

// Secrets can come from files (as Kubernetes mounts them); a trailing
// newline is not part of the secret, and one key takes one source.
func TestConfigSecretFiles(t *testing.T) {
	dir := t.TempDir()
	urlFile := filepath.Join(dir, "url")
	if err := os.WriteFile(urlFile, []byte("postgres://u:s3cret@127.0.0.1/d\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := `
kafka: {brokers: [b:9092], group: g, topics: [t], reset_offset: earliest}
routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]
`
	t.Setenv("DATABASE_URL", "postgres://fallback@127.0.0.1/d")
	c, err := Parse([]byte(base + "postgres: {url_file: " + urlFile + "}\n"))
	if err != nil || c.Postgres.URL != "postgres://u:s3cret@127.0.0.1/d" {
		t.Fatalf("url_file: %q %v", c.Postgres.URL, err)
	}
	if _, err := Parse([]byte(base + "postgres: {url: x, url_file: " + urlFile + "}\n")); err == nil || !strings.Contains(err.Error(), "postgres.url and postgres.url_file") {
		t.Errorf("both: %v", err)
	}
	if _, err := Parse([]byte(base + "postgres: {url_file: " + filepath.Join(dir, "missing") + "}\n")); err == nil || !strings.Contains(err.Error(), "postgres.url_file") {
		t.Errorf("missing file: %v", err)
	}
	c, err = Parse([]byte(base))
	if err != nil || c.Postgres.URL != "postgres://fallback@127.0.0.1/d" {
		t.Errorf("DATABASE_URL fallback: %q %v", c.Postgres.URL, err)
	}
}

// A value a ${VAR} gives is never shown in a config error (redactValues:
// it may be a secret put in the wrong key). postgres.url_file given the
// URL itself (url_file: "${DATABASE_URL}" for url: "${DATABASE_URL}") is
// such a mistake: reading the "file" fails, and its error must not quote
// the URL's password.
func TestConfigSecretFilesDoNotShowAValueFromAVariable(t *testing.T) {
	t.Setenv("DEDUP_TEST_PG_URL", "postgres://u:s3cretPg@db.example.com/d")
	base := `
kafka: {brokers: [b:9092], group: g, topics: [t], reset_offset: earliest}
routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]
postgres: {url_file: "${DEDUP_TEST_PG_URL}"}
`
	for name, parse := range map[string]func([]byte) (Config, error){"Parse": Parse, "ParseWorker": ParseWorker} {
		_, err := parse([]byte(base))
		if err == nil || !strings.Contains(err.Error(), "postgres.url_file") {
			t.Errorf("%s: %v, want an error naming postgres.url_file", name, err)
		}
		if err != nil && strings.Contains(err.Error(), "s3cretPg") {
			t.Errorf("%s: %v: shows the value ${DEDUP_TEST_PG_URL} gave, password and all", name, err)
		}
	}
}
