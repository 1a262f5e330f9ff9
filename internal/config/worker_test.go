package config

import (
	"strings"
	"testing"
)

// `dedup worker` reads the worker, postgres and temporal sections (and
// log): a config file written for the worker alone, with no kafka
// section and no routes, loads; its own sections are still checked, naming
// the field.
func TestWorkerConfigWithoutKafkaLoads(t *testing.T) {
	const workerOnly = `
postgres: {url: "postgres://u@h/d?sslmode=verify-full"}
temporal: {host_port: "temporal:7233", namespace: default}
`
	cfg, err := ParseWorker([]byte(workerOnly + "worker: {task_queue: activities}\n"))
	if err != nil {
		t.Fatalf("a worker config without a kafka section: %v, want it to load", err)
	}
	if cfg.Worker.TaskQueue != "activities" || cfg.Postgres.URL == "" {
		t.Errorf("worker config %+v, postgres %q", cfg.Worker, cfg.Postgres.URL)
	}
	if _, err := ParseWorker([]byte(workerOnly + "log: {level: loud}\n")); err == nil || !strings.Contains(err.Error(), "log.level") {
		t.Errorf("a bad log level: %v, want an error naming log.level", err)
	}
	if _, err := ParseWorker([]byte(workerOnly + "worker: {stop_timeout: -1s}\n")); err == nil || !strings.Contains(err.Error(), "worker.stop_timeout") {
		t.Errorf("a negative stop_timeout: %v, want an error naming worker.stop_timeout", err)
	}
	if _, err := ParseWorker([]byte("kafka: {brokers: [b:9092], nosuchkey: 1}\n" + workerOnly)); err == nil ||
		!strings.Contains(err.Error(), "nosuchkey") {
		t.Errorf("an unknown key: %v, want it refused", err)
	}
	if _, err := Parse([]byte(workerOnly)); err == nil || !strings.Contains(err.Error(), "kafka") {
		t.Errorf("the same file for dedup run: %v, want an error naming the kafka section", err)
	}
}
