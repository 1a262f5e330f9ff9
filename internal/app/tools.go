package app

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/sdk/client"
)

// The operators' commands (internal/ops: dedup explain, inspect, lag,
// offsets, ledger) connect the way dedup run does: through dial.go, so
// that the same brokers, TLS and SASL settings, and the same Temporal
// options, apply to them. (PostgreSQL: ledger.Open with cfg.Postgres.)

// ToolKafkaOpts are the Kafka client options of dial.go (kafkaOpts) for an
// operator's client; the caller adds what its client does (consume a
// partition, say).
func ToolKafkaOpts(cfg Config) ([]kgo.Opt, error) { return kafkaOpts(cfg) }

// DialToolTemporal connects an operator's Temporal client (dialTemporal,
// without metrics).
func DialToolTemporal(ctx context.Context, cfg Config, log *slog.Logger) (client.Client, error) {
	return dialTemporal(ctx, cfg, log, nil)
}
