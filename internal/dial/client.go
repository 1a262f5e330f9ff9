package dial

import (
	"context"
	"fmt"
	"log/slog"

	sdkclient "go.temporal.io/sdk/client"

	"github.com/dedupio/dedup/client"
	"github.com/dedupio/dedup/client/temporalread"
	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/processor/tenantsig"
	"github.com/dedupio/dedup/sink/ledger/ledgerread"
)

// OpenClientFile reads dedup's config file (the routers' own: its event_id
// and routes give the same IDs) and opens a producer client as it says
// (OpenClient).
func OpenClientFile(ctx context.Context, path string, log *slog.Logger) (*client.Client, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	return OpenClient(ctx, cfg, log)
}

// OpenClient opens the producer client (package client) of dedup's own
// commands (dedup ingress) from a loaded config: Kafka (kafka.brokers,
// tls, sasl; the topic is ingress.topic, else the first of kafka.topics),
// the ledger read-only (postgres.url, through sink/ledger/ledgerread:
// read-only sessions, no migrations) and Temporal read-only (temporal.*,
// through client/temporalread). A refused Kafka login or TLS handshake is
// an error (CheckKafka). PostgreSQL and Temporal are reached lazily, on
// the first lookup and the first Status or Result: OpenClient waits for
// neither, and a credential they refuse is that call's error. log may be
// nil. The client's Close closes every connection.
func OpenClient(ctx context.Context, cfg config.Config, log *slog.Logger) (*client.Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = config.NewLogger(cfg.Log)
	}
	kopts, err := cfg.Kafka.ClientOpts()
	if err != nil {
		return nil, err
	}
	if err := CheckKafka(ctx, cfg, log, kopts); err != nil {
		return nil, err
	}
	led, err := ledgerread.Open(ctx, cfg.Postgres.URL, ledgerread.Options{AllowInsecure: cfg.Postgres.AllowInsecure, MaxConns: cfg.Postgres.MaxConns, Pooler: cfg.Postgres.Pooler})
	if err != nil {
		return nil, fmt.Errorf("postgres.url: %w", err)
	}
	tc, err := lazyTemporal(cfg, log)
	if err != nil {
		led.Close()
		return nil, err
	}
	var keys *tenantsig.Keyring
	if cfg.Kafka.TenantKeysFile != "" {
		// dedup ingress signs its tenants' records with it (and the
		// client verifies what it prepares, as a router will).
		if keys, err = tenantsig.Load("kafka.tenant_keys_file", cfg.Kafka.TenantKeysFile); err != nil {
			tc.Close()
			led.Close()
			return nil, err
		}
	}
	c, err := client.New(client.Config{Topic: cfg.IngressTopic(), EventID: cfg.EventID, Routes: cfg.Routes, Namespace: cfg.Temporal.Namespace,
		MaxValueBytes: cfg.Kafka.MaxValueBytes, KafkaOpts: kopts, AllowInsecure: cfg.Kafka.AllowInsecure, Ledger: led, Runs: temporalread.New(tc, nil), Logger: log, TenantKeys: keys,
		LookupTimeout: cfg.Ingress.LookupTimeout, Propagator: PropagatorOf(cfg),
		OnClose: func() { tc.Close(); led.Close() }})
	if err != nil {
		tc.Close()
		led.Close()
		return nil, err
	}
	return c, nil
}

// lazyTemporal is a Temporal SDK client with the options of every dedup
// client (TemporalOptions: TLS, API key) that connects on its first call.
func lazyTemporal(cfg config.Config, log *slog.Logger) (sdkclient.Client, error) {
	o, err := TemporalOptions(cfg, log, nil)
	if err != nil {
		return nil, err
	}
	tc, err := sdkclient.NewLazyClient(o)
	if err != nil {
		return nil, fmt.Errorf("temporal: %w", err)
	}
	return tc, nil
}
