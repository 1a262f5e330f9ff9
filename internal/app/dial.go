package app

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
)

// This file is the one place that says how dedup connects to its
// dependencies: every Kafka client (consumer, dead-letter producer, kadm)
// takes kafkaOpts, every Temporal client temporalOptions.

// kafkaOpts are the options every Kafka client of dedup shares: the seed
// brokers and (when configured) how to authenticate and encrypt.
func kafkaOpts(cfg Config) ([]kgo.Opt, error) {
	return []kgo.Opt{kgo.SeedBrokers(cfg.Kafka.Brokers...)}, nil
}

// temporalOptions are the SDK client options for cfg's Temporal. mh may be
// nil.
func temporalOptions(cfg Config, log *slog.Logger, mh client.MetricsHandler) (client.Options, error) {
	o := client.Options{
		HostPort:  cfg.Temporal.HostPort,
		Namespace: cfg.Temporal.Namespace,
		Logger:    tlog.NewStructuredLogger(log.With("component", "temporal-sdk")),
	}
	if mh != nil {
		o.MetricsHandler = mh
	}
	return o, nil
}

// dialTemporal connects an SDK client to cfg's Temporal.
func dialTemporal(ctx context.Context, cfg Config, log *slog.Logger, mh client.MetricsHandler) (client.Client, error) {
	o, err := temporalOptions(cfg, log, mh)
	if err != nil {
		return nil, err
	}
	tc, err := client.DialContext(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("dialing temporal at %s: %w", cfg.Temporal.HostPort, err)
	}
	return tc, nil
}
