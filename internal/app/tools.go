package app

import (
	"context"
	"log/slog"

	"go.temporal.io/sdk/client"
)

// The operators' commands (internal/ops: dedup explain, inspect, lag,
// offsets, ledger) connect the way dedup run does: through dial.go, so
// that the same brokers, TLS and SASL settings (KafkaOpts), and the same
// Temporal options, apply to them. (PostgreSQL: ledger.Open with
// cfg.Postgres.)

// DialToolTemporal connects an operator's Temporal client (dialTemporal,
// without metrics).
func DialToolTemporal(ctx context.Context, cfg Config, log *slog.Logger) (client.Client, error) {
	return dialTemporal(ctx, cfg, log, nil)
}
