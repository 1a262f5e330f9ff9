// Package app wires dedup's components from a config file: the part of
// cmd/dedup that integration/cmd/devstack shares. It binds the file and the
// environment; the components themselves only see their Config structs.
package app

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/processor/schedule"
	"github.com/dedupio/dedup/sink/ledger"
	"github.com/dedupio/dedup/sink/starter"
)

// Config is the whole config file.
type Config struct {
	Kafka   processor.Config `yaml:"kafka"`
	EventID eventid.Config   `yaml:"event_id"`
	Routes  processor.Routes `yaml:"routes"`
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
}

// WorkerConfig configures `dedup worker`, which runs RunActivityWorkflow.
type WorkerConfig struct {
	TaskQueue string `yaml:"task_queue"`
	// WebhookURL receives webhook tasks that name no URL of their own.
	WebhookURL string `yaml:"webhook_url"`
	// KeyLease and KeyTTL tune the idempotency key store: how long an
	// activity may hold a key before another may take over (longer than
	// the slowest call), and how long outcomes are kept.
	KeyLease time.Duration `yaml:"key_lease"`
	KeyTTL   time.Duration `yaml:"key_ttl"`
}

// AdminConfig is the operators' HTTP port: /metrics, /healthz, /readyz.
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

// DefaultConfig is every default; the file overrides what it names.
func DefaultConfig() Config {
	return Config{
		Kafka:    processor.DefaultConfig(),
		EventID:  eventid.DefaultConfig(),
		Starts:   processor.DefaultConfig().Starts,
		Retry:    processor.DefaultConfig().Retry,
		Postgres: ledger.DefaultConfig(),
		Temporal: starter.DefaultConfig(),
		Admin:    AdminConfig{Listen: "127.0.0.1:9464"},
		Log:      LogConfig{Format: "json", Level: "info"},
		Worker:   WorkerConfig{TaskQueue: "activities", KeyLease: time.Minute, KeyTTL: 24 * time.Hour},

		Schedules: schedule.DefaultConfig(),
	}
}

// LoadConfig reads a YAML file over the defaults. ${VAR} references are
// expanded from the environment (for secrets); DATABASE_URL fills
// postgres.url when the file leaves it empty. Unknown keys are errors.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("reading config: %w", err)
	}
	return ParseConfig(b)
}

// ParseConfig is LoadConfig on bytes.
func ParseConfig(b []byte) (Config, error) {
	cfg := DefaultConfig()
	dec := yaml.NewDecoder(bytes.NewReader([]byte(os.ExpandEnv(string(b)))))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		return Config{}, fmt.Errorf("parsing config: %w", err)
	}
	if cfg.Postgres.URL == "" {
		cfg.Postgres.URL = os.Getenv("DATABASE_URL")
	}
	return cfg, cfg.Validate()
}

// Validate checks every section, and hands event_id and routes to the
// router's config.
func (c *Config) Validate() error {
	c.Kafka.EventID, c.Kafka.Routes, c.Kafka.Starts, c.Kafka.Retry = c.EventID, c.Routes, c.Starts, c.Retry
	if err := c.Kafka.Validate(); err != nil {
		return err
	}
	c.Routes = c.Kafka.Routes // defaults filled in place
	if err := c.Postgres.Validate(); err != nil {
		return err
	}
	if err := c.Temporal.Validate(); err != nil {
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
	if c.Worker.TaskQueue == "" || c.Worker.KeyLease <= 0 || c.Worker.KeyTTL <= 0 {
		return errors.New("worker.task_queue, key_lease, key_ttl: want non-empty and > 0")
	}
	if c.Admin.Pprof && c.Admin.Listen == "" {
		return errors.New("admin.pprof: needs admin.listen")
	}
	return c.Schedules.Validate()
}
