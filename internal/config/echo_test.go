package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A secret is never echoed by an error: a ${VAR} in the wrong field (a
// number's), a postgres.url_file holding a key=value string whose
// password has a space. The error names the key instead.
func TestConfigErrorsNeverEchoSecrets(t *testing.T) {
	const secretValue = "hunter2-s3cr3t-value"
	t.Setenv("PGPASS", secretValue)
	base := `
kafka: {brokers: [b:9092], group: g, topics: [t], reset_offset: earliest}
routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]
`
	dir := t.TempDir()
	dsnFile := filepath.Join(dir, "dsn")
	if err := os.WriteFile(dsnFile, []byte("host=db.example.com user=dedup password=hunter2 s3cr3t-value sslmode=verify-full\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"a variable in a number's place", "postgres: {url: \"postgres://127.0.0.1/d\", max_conns: \"${PGPASS}\"}\n", "postgres.max_conns"},
		{"a variable in a duration's place", "postgres: {url: \"postgres://127.0.0.1/d\", retention: \"${PGPASS}\"}\n", "postgres.retention"},
		{"a variable in a list's place", "event_id: {headers: \"${PGPASS}\"}\n", "event_id.headers"},
		{"a key=value string with a space in its password", "postgres: {url_file: " + dsnFile + "}\n", "postgres.url"},
		{"the same in url", "postgres: {url: \"host=db.example.com password=hunter2 s3cr3t-value\"}\n", "postgres.url"},
	} {
		_, err := Parse([]byte(base + tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
			continue
		}
		for _, part := range []string{"hunter2", "s3cr3t", "s3c", "hun"} {
			if strings.Contains(err.Error(), part) {
				t.Errorf("%s: the error shows the secret (%q): %v", tc.name, part, err)
			}
		}
	}
}

// A string field whose value came from ${VAR} is never printed by a
// validation error (it may be a secret put in the wrong key): the error
// names the field instead.
func TestValidationErrorsNeverPrintAnEnvironmentValue(t *testing.T) {
	const secretValue = "hunter2-s3cr3t-value"
	t.Setenv("SECRET", secretValue)
	base := "kafka: {brokers: [b:9092], group: g, topics: [t], reset_offset: earliest}\n" +
		"routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]\n" +
		"postgres: {url: \"postgres://127.0.0.1/d\"}\n"
	for _, tc := range []struct{ doc, want string }{
		{strings.Replace(base, "reset_offset: earliest", "reset_offset: \"${SECRET}\"", 1), "kafka.reset_offset"},
		{strings.Replace(base, "reset_offset: earliest", "reset_offset: earliest, isolation_level: \"${SECRET}\"", 1), "kafka.isolation_level"},
		{strings.Replace(base, "reset_offset: earliest", "reset_offset: earliest, sasl: {mechanism: \"${SECRET}\"}", 1), "kafka.sasl.mechanism"},
		{base + "log: {level: \"${SECRET}\"}\n", "log.level"},
		{strings.Replace(base, "task_queue: q}", "task_queue: q, id_reuse_policy: \"${SECRET}\"}", 1), "id_reuse_policy"},
		{base + "ingress: {public_url: \"${SECRET}\"}\n", "ingress.public_url"},
	} {
		_, err := Parse([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming it", tc.want, err)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: the error prints the value from ${SECRET}: %v", tc.want, err)
		}
	}
}

// A value a ${VAR} gave with a character %q escapes (a quote, a
// backslash), written into a setting with other text after it: the
// validation error quotes the setting whole (log.format: %q), so the value
// is in the error neither as it is nor quoted alone, but escaped. The
// error must not show it that way either.
func TestValidationErrorsDoNotPrintAnEscapedValueInsideALongerSetting(t *testing.T) {
	t.Setenv("SECRET", `hunter2"s3cr3t\value`)
	doc := "kafka: {brokers: [b:9092], group: g, topics: [t], reset_offset: earliest}\n" +
		"routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]\n" +
		"postgres: {url: \"postgres://127.0.0.1/d\"}\n" +
		"log: {format: \"${SECRET}-x\"}\n"
	_, err := Parse([]byte(doc))
	if err == nil || !strings.Contains(err.Error(), "log.format") {
		t.Fatalf("%v, want an error naming log.format", err)
	}
	for _, part := range []string{"hunter2", "s3cr3t"} {
		if strings.Contains(err.Error(), part) {
			t.Errorf("the error shows the value from ${SECRET}, escaped (%q): %v", part, err)
		}
	}
}

// Two values from ${VAR}s that overlap in a setting (the end of one is the
// start of the other), neither holding the other: taking the longer out
// leaves the part of the shorter that is not in it. The error must show
// neither.
func TestValidationErrorsDoNotPrintAPieceOfOverlappingValues(t *testing.T) {
	t.Setenv("SECRET_A", "hunter2-s3cr3t")
	t.Setenv("SECRET_B", "s3cr3t-value-tail")
	doc := "kafka: {brokers: [b:9092], group: g, topics: [t], reset_offset: earliest}\n" +
		"routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]\n" +
		"postgres: {url: \"postgres://127.0.0.1/d\"}\n" +
		"ingress: {public_url: \"${SECRET_A}\"}\n" +
		"log: {format: \"hunter2-s3cr3t-value-tail\", level: \"${SECRET_B}\"}\n"
	_, err := Parse([]byte(doc))
	if err == nil || !strings.Contains(err.Error(), "log.format") {
		t.Fatalf("%v, want an error naming log.format", err)
	}
	if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "value-tail") {
		t.Errorf("the error shows a piece of a value from a ${VAR}: %v", err)
	}
}
