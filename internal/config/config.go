// Package config reads dedup's config file: the file over the defaults,
// ${VAR} references in values expanded from the environment, the *_file
// secrets read, unknown keys refused, and every section validated with
// errors that name the setting. The components themselves only see their
// own sections (processor.Config, ledger.Config, starter.Config, ...); the
// commands that wire them (internal/app, internal/ops, internal/ingress)
// share this package.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/dedupio/dedup/connect/secretfile"
	"github.com/dedupio/dedup/connect/tracing"
	"github.com/dedupio/dedup/internal/ingress/ingressconfig"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/processor/schedule"
	"github.com/dedupio/dedup/sink/ledger"
	"github.com/dedupio/dedup/sink/starter"
	"github.com/dedupio/dedup/worker"
	"github.com/dedupio/dedup/worker/tenants"
)

// Config is the whole config file.
type Config struct {
	Kafka   processor.Config `yaml:"kafka"`
	EventID eventid.Config   `yaml:"event_id"`
	Routes  decide.Routes    `yaml:"routes"`
	// Starts and Retry configure the router's workflow starts and its
	// backoff; they are sections of their own, not Kafka settings.
	Starts   processor.StartConfig `yaml:"starts"`
	Retry    processor.RetryConfig `yaml:"retry"`
	Postgres ledger.Config         `yaml:"postgres"`
	Temporal starter.Config        `yaml:"temporal"`
	Admin    AdminConfig           `yaml:"admin"`
	Log      LogConfig             `yaml:"log"`
	Worker   WorkerConfig          `yaml:"worker"`
	// Schedules are the cron triggers `dedup run` fires (docs/schedules.md).
	Schedules schedule.Config `yaml:"schedules"`
	// Ingress configures `dedup ingress` and the producer client (package
	// client): ingress.go.
	Ingress ingressconfig.Config `yaml:"ingress"`
	// Tracing is OpenTelemetry tracing of dedup run, ingress and worker
	// (docs/tracing.md); off by default.
	Tracing tracing.Config `yaml:"tracing"`

	// envValues are the values ${VAR} references gave (parse), for Redact.
	envValues []string
}

// WorkerConfig is the worker: section: the worker's own settings
// (worker.Config, inline) and the tenants' task types (worker/tenants,
// which imports package worker, so its section cannot live there).
type WorkerConfig struct {
	worker.Config `yaml:",inline"`
	// Tenants registers the audit seed's five task types
	// (create_tenant_schema, run_migrations, send_welcome_email,
	// drop_tenant_schema, soft_delete_tenant; package worker/tenants),
	// with the mail server the welcome email goes through.
	Tenants tenants.Config `yaml:"tenants"`
}

// AdminConfig is the router's HTTP port for operators: /metrics, /livez
// (alias /healthz), /readyz (see admin.go). Pprof applies to the worker's
// port (worker.admin_listen) too.
type AdminConfig struct {
	// Listen address; keep it off public interfaces. Empty disables it.
	Listen string `yaml:"listen"`
	// Pprof mounts /debug/pprof on the admin port.
	Pprof bool `yaml:"pprof"`
}

// LogConfig selects the log format and level.
type LogConfig struct {
	Format string `yaml:"format"` // json or text
	Level  string `yaml:"level"`  // debug, info, warn, error
}

// Default is every default; the file overrides what it names.
func Default() Config {
	return Config{
		Kafka:     processor.DefaultConfig(),
		EventID:   eventid.DefaultConfig(),
		Starts:    processor.DefaultConfig().Starts,
		Retry:     processor.DefaultConfig().Retry,
		Postgres:  ledger.DefaultConfig(),
		Temporal:  starter.DefaultConfig(),
		Admin:     AdminConfig{Listen: "127.0.0.1:9464"},
		Log:       LogConfig{Format: "json", Level: "info"},
		Worker:    WorkerConfig{Config: worker.DefaultConfig(), Tenants: tenants.DefaultConfig()},
		Ingress:   ingressconfig.Default(),
		Schedules: schedule.DefaultConfig(),
	}
}

// Load reads a YAML file over the defaults. ${VAR} references in
// values are expanded from the environment (ExpandEnv); postgres.url_file
// fills postgres.url, and DATABASE_URL fills it when the file sets
// neither. Unknown keys are errors.
func Load(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("reading config: %w", err)
	}
	return Parse(b)
}

// Parse is Load on bytes.
func Parse(b []byte) (Config, error) {
	return parse(b, (*Config).Validate)
}

// parse reads b over the defaults and checks it with validate.
func parse(b []byte, validate func(*Config) error) (Config, error) {
	cfg := Default()
	// Unknown keys: yaml's own check, on the file as written (expansion
	// never touches keys). Only its "not found" errors count here: a
	// ${VAR} in a number's place is a type error until it is expanded.
	strict := yaml.NewDecoder(bytes.NewReader(b))
	strict.KnownFields(true)
	shadow := Default()
	if err := strict.Decode(&shadow); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return Config{}, fmt.Errorf("parsing config: %w", err)
		}
		var unknown []string
		for _, e := range te.Errors {
			if strings.Contains(e, " not found in type ") {
				unknown = append(unknown, e)
			}
		}
		if len(unknown) > 0 {
			return Config{}, fmt.Errorf("parsing config: %s", strings.Join(unknown, "; "))
		}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return Config{}, fmt.Errorf("parsing config: %w", err)
	}
	expanded := map[int][]string{} // line: the keys whose values ${VAR} gave
	var values []string            // the values ${VAR} gave
	lookup := func(name string) (string, bool) {
		v, ok := os.LookupEnv(name)
		if ok && v != "" {
			values = append(values, v)
		}
		return v, ok
	}
	if err := expandEnv(&doc, lookup, expanded); err != nil {
		return Config{}, err
	}
	if err := checkIntegers(&doc, reflect.TypeFor[Config](), ""); err != nil {
		return Config{}, redactValues(fmt.Errorf("parsing config: %w", err), values)
	}
	if err := doc.Decode(&cfg); err != nil {
		return Config{}, fmt.Errorf("parsing config: %w", redactTypeErrors(err, expanded))
	}
	cfg.envValues = values
	if err := cfg.readSecretFiles(); err != nil {
		return Config{}, redactValues(err, values)
	}
	if cfg.Postgres.URL == "" {
		cfg.Postgres.URL = os.Getenv("DATABASE_URL")
	}
	if err := validate(&cfg); err != nil {
		return cfg, redactValues(err, values)
	}
	return cfg, nil
}

// Redact is err with every value a ${VAR} of the config's file gave
// taken out of its text, as the loader's own errors are (redactValues):
// for the errors of checks made on the loaded config, such as
// app.CheckWorker's. nil stays nil.
func (c Config) Redact(err error) error {
	if err == nil {
		return nil
	}
	return redactValues(err, c.envValues)
}

// redactedError is a validation error whose text had values from ${VAR}
// taken out; it wraps the original for errors.Is and errors.As.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redactValues takes out of err's text every value a ${VAR} gave (quoted,
// as the validation errors print a value, and as it is): such a value may
// be a secret put in the wrong key (a password in kafka.sasl.mechanism),
// and the error names the field anyway.
func redactValues(err error, values []string) error {
	msg := redactText(err.Error(), values)
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

// RedactText is text with every value a ${VAR} of the config's file gave
// taken out, as Redact takes it out of an error's: for the error lists of
// the operators' answers.
func (c Config) RedactText(text string) string {
	return redactText(text, c.envValues)
}

// redactText is text with every one of values taken out: quoted, and,
// when 4 bytes or longer (a shorter one would take out parts of words),
// as it is and as it stands escaped inside a longer quoted string. Every
// byte any of them covers is hidden, and each run of hidden bytes becomes
// one mark: values that hold or overlap one another go whole.
func redactText(text string, values []string) string {
	hide := make([]bool, len(text))
	hidden := false
	mark := func(form string) {
		for i := 0; form != ""; {
			j := strings.Index(text[i:], form)
			if j < 0 {
				return
			}
			for k := i + j; k < i+j+len(form); k++ {
				hide[k] = true
			}
			hidden = true
			i += j + 1
		}
	}
	for _, v := range values {
		if v == "" {
			continue
		}
		q := strconv.Quote(v)
		mark(q)
		if len(v) >= 4 {
			mark(v)
			if escaped := q[1 : len(q)-1]; escaped != v {
				mark(escaped)
			}
		}
	}
	if !hidden {
		return text
	}
	var b strings.Builder
	for i := 0; i < len(text); {
		if !hide[i] {
			b.WriteByte(text[i])
			i++
			continue
		}
		for i < len(text) && hide[i] {
			i++
		}
		b.WriteString("(a value from ${...}, not shown)")
	}
	return b.String()
}

// readSecretFiles reads the *_file keys that are read once, at start:
// postgres.url_file. (Kafka's SASL secrets and Temporal's API key are
// re-read by the clients that use them, so that rotating the file needs no
// restart.)
func (c *Config) readSecretFiles() error {
	if c.Postgres.URLFile == "" {
		return nil
	}
	if c.Postgres.URL != "" {
		return errors.New("postgres.url and postgres.url_file: set one, not both")
	}
	url, err := secretfile.Read("postgres.url_file", c.Postgres.URLFile)
	if err != nil {
		return err
	}
	c.Postgres.URL = url
	return nil
}

// ExpandEnv replaces ${VAR} in the scalar values of a parsed YAML document
// with the variable's value, looked up by lookup (os.LookupEnv). Only the
// braced form is a reference; $$ stands for one $, and any other $ is
// kept as it is (a password "pa$word" stays intact). A variable that is
// not set is an error naming the key; a variable that is set but empty
// expands to nothing. Keys are never expanded, and a value stays one
// scalar whatever the variable holds: a newline or "key: value" in it
// cannot add keys. An expanded value is typed by what it expands to (a
// port number decodes as a number, quoted or not; a string field keeps
// the text), except that it is never null: a password "null" stays the
// string "null".
func ExpandEnv(doc *yaml.Node, lookup func(string) (string, bool)) error {
	return expandNode(doc, "", lookup, nil)
}

// expandEnv is ExpandEnv that also notes, by line, the keys whose values
// it changed (for redactTypeErrors).
func expandEnv(doc *yaml.Node, lookup func(string) (string, bool), expanded map[int][]string) error {
	return expandNode(doc, "", lookup, expanded)
}

// typeErrorValue is the value a yaml type error quotes (`...`).
var typeErrorValue = regexp.MustCompile("`[^`]*`")

// redactTypeErrors rewrites yaml's type errors on the lines where ${VAR}
// gave a value: the value they quote may be a secret (a password in a
// number's place), so it is dropped and the keys are named instead.
func redactTypeErrors(err error, expanded map[int][]string) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		msgs[i] = m
		var line int
		if _, scanErr := fmt.Sscanf(m, "line %d:", &line); scanErr != nil || len(expanded[line]) == 0 {
			continue
		}
		msgs[i] = fmt.Sprintf("%s (line %d, from ${...}): %s", strings.Join(expanded[line], ", "), line,
			typeErrorValue.ReplaceAllString(strings.TrimSpace(strings.SplitN(m, ":", 2)[1]), "a value (not shown: it came from the environment)"))
	}
	return fmt.Errorf("yaml: unmarshal errors:\n  %s", strings.Join(msgs, "\n  "))
}

func expandNode(n *yaml.Node, path string, lookup func(string) (string, bool), expanded map[int][]string) error {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := expandNode(c, path, lookup, expanded); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i].Value
			if path != "" {
				key = path + "." + key
			}
			if err := expandNode(n.Content[i+1], key, lookup, expanded); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if err := expandNode(c, fmt.Sprintf("%s[%d]", path, i), lookup, expanded); err != nil {
				return err
			}
		}
	case yaml.ScalarNode:
		if !strings.Contains(n.Value, "$") {
			return nil
		}
		v, err := expandString(n.Value, lookup)
		if err != nil {
			if path == "" {
				path = "(document)"
			}
			return fmt.Errorf("%s: %w", path, err)
		}
		if v == n.Value {
			return nil
		}
		if expanded != nil {
			expanded[n.Line] = append(expanded[n.Line], path)
		}
		n.Value = v
		if n.Style&yaml.TaggedStyle == 0 {
			// Typed again by what it now says, quoted or not (in a flow
			// mapping, {max_conns: "${N}"} must be quoted); a string
			// field keeps the text either way.
			n.Tag, n.Style = "", 0
			if n.ShortTag() == "!!null" {
				n.Tag = "!!str"
			}
		}
	}
	// Aliases point at a node expanded where its anchor is.
	return nil
}

// expandString expands one value. Its errors never quote the value: it
// may be a secret.
func expandString(s string, lookup func(string) (string, bool)) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return "", fmt.Errorf("unterminated ${ at byte %d (write $$ for a literal $)", i)
			}
			name := s[i+2 : i+2+end]
			if !envName(name) {
				return "", fmt.Errorf("${...} at byte %d: want a variable name of letters, digits and _ (write $$ for a literal $)", i)
			}
			v, ok := lookup(name)
			if !ok {
				return "", fmt.Errorf("environment variable %s is not set", name)
			}
			b.WriteString(v)
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String(), nil
}

func envName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for _, r := range s {
		if r != '_' && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// Validate checks every section, and hands event_id and routes to the
// router's config.
func (c *Config) Validate() error {
	c.Kafka.EventID, c.Kafka.Routes, c.Kafka.Starts, c.Kafka.Retry = c.EventID, c.Routes, c.Starts, c.Retry
	if err := c.Kafka.Validate(); err != nil {
		return err
	}
	c.Routes = c.Kafka.Routes // defaults filled in place
	if err := c.validateShared(); err != nil {
		return err
	}
	if c.Admin.Pprof && c.Admin.Listen == "" {
		return errors.New("admin.pprof: needs admin.listen")
	}
	if err := c.Schedules.Validate(); err != nil {
		return err
	}
	return c.Ingress.Validate(c.Kafka)
}

// validateShared checks the sections `dedup run` and `dedup worker` both
// read: postgres, temporal, log and worker.
func (c *Config) validateShared() error {
	if err := c.Postgres.Validate(); err != nil {
		return err
	}
	if err := c.Temporal.Validate(); err != nil {
		return err
	}
	if err := c.Tracing.Validate(); err != nil {
		return err
	}
	// The worker waits for its dependencies with the retry backoff too.
	if err := c.Retry.Validate(); err != nil {
		return err
	}
	switch c.Log.Format {
	case "json", "text":
	default:
		return fmt.Errorf("log.format: %q, want json or text", c.Log.Format)
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("log.level: %q, want debug, info, warn or error", c.Log.Level)
	}
	if err := c.Worker.Validate(); err != nil {
		return err
	}
	return c.Worker.Tenants.Validate("worker.tenants")
}
