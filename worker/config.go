package worker

import (
	"errors"
	"fmt"
	"time"
)

// Config configures `dedup worker`, which runs RunActivityWorkflow: the
// worker: section of the config file (its tenants' task types are
// worker/tenants' section).
type Config struct {
	TaskQueue string `yaml:"task_queue"`
	// WebhookURL receives webhook tasks that name no URL of their own.
	WebhookURL string `yaml:"webhook_url"`
	// KeyLease and KeyTTL tune the idempotency key store: how long a key
	// whose holder stopped renewing it (crashed) stays blocked before a
	// retry may take it over (a live holder renews it every third of it),
	// and how long outcomes are kept (how late a re-run still adopts them).
	KeyLease time.Duration `yaml:"key_lease"`
	KeyTTL   time.Duration `yaml:"key_ttl"`
	// AdminListen is the worker's admin port (/metrics, /livez, /readyz;
	// /debug/pprof with admin.pprof): a key of its own, so that one config
	// file serves a router and a worker on one host without their ports
	// colliding. Keep it off public interfaces; empty disables it.
	AdminListen string `yaml:"admin_listen"`
	// StopTimeout is how long a stopping worker (SIGTERM) lets the
	// activities it runs finish and report before it cancels them (the
	// SDK's WorkerStopTimeout). Cancelled, an activity's attempt is lost
	// and Temporal retries it after its timeout (a webhook cut short is
	// posted again, under its key). Keep it under the time the process
	// is given to stop (the worker pod's terminationGracePeriodSeconds,
	// 45s); 0 cancels them at once.
	StopTimeout time.Duration `yaml:"stop_timeout"`
}

// DefaultConfig is every default of the section.
func DefaultConfig() Config {
	return Config{TaskQueue: "activities", KeyLease: time.Minute, KeyTTL: 24 * time.Hour, AdminListen: "127.0.0.1:9465",
		StopTimeout: 30 * time.Second}
}

// Validate checks the section; errors name the setting (worker.*).
func (c Config) Validate() error {
	if c.TaskQueue == "" || c.KeyLease <= 0 || c.KeyTTL <= 0 {
		return errors.New("worker.task_queue, key_lease, key_ttl: want non-empty and > 0")
	}
	if c.StopTimeout < 0 {
		return fmt.Errorf("worker.stop_timeout: %s, want >= 0", c.StopTimeout)
	}
	return nil
}
