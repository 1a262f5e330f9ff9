package app

import (
	"context"
	"log/slog"

	"github.com/dedupio/dedup/client"
	"github.com/dedupio/dedup/sink/ledger"
)

// OpenClientFile reads dedup's config file (the routers' own: its event_id
// and routes give the same IDs) and opens a producer client as it says
// (OpenClient).
func OpenClientFile(ctx context.Context, path string, log *slog.Logger) (*client.Client, error) {
	cfg, err := LoadConfig(path)
	if err != nil {
		return nil, err
	}
	return OpenClient(ctx, cfg, log)
}

// OpenClient opens the producer client (package client) of dedup's own
// commands (dedup ingress) from a loaded config: Kafka (kafka.brokers,
// tls, sasl; the topic is ingress.topic, else the first of kafka.topics),
// PostgreSQL (postgres.url) and Temporal (temporal.*). A refused Kafka
// login or TLS handshake, or refused Temporal credentials, is an error; a
// Temporal that does not answer yet is waited for until ctx ends (give
// ctx a deadline to bound it). log may be nil. The client's Close closes
// every connection.
func OpenClient(ctx context.Context, cfg Config, log *slog.Logger) (*client.Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = NewLogger(cfg.Log)
	}
	kopts, err := KafkaOpts(cfg)
	if err != nil {
		return nil, err
	}
	if err := CheckKafka(ctx, cfg, log, kopts); err != nil {
		return nil, err
	}
	led, err := ledger.Open(ctx, cfg.Postgres)
	if err != nil {
		return nil, err
	}
	tc, err := DialTemporal(ctx, cfg, log)
	if err != nil {
		led.Close()
		return nil, err
	}
	c, err := client.New(client.Config{Topic: cfg.IngressTopic(), EventID: cfg.EventID, Routes: cfg.Routes, Namespace: cfg.Temporal.Namespace,
		MaxValueBytes: cfg.Kafka.MaxValueBytes, KafkaOpts: kopts, Ledger: led, Temporal: tc, Logger: log,
		OnClose: func() { tc.Close(); led.Close() }})
	if err != nil {
		tc.Close()
		led.Close()
		return nil, err
	}
	return c, nil
}
