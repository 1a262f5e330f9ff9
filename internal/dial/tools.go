package dial

import (
	"context"
	"log/slog"

	"go.temporal.io/sdk/client"

	"github.com/dedupio/dedup/internal/config"
)

// The operators' commands (internal/ops: dedup explain, inspect, lag,
// offsets, ledger; dedup dlq replay) connect the way dedup run does:
// through dial.go, so that the same brokers, TLS and SASL settings and the
// same fetch isolation level (KafkaOpts), and the same Temporal options,
// apply to them. Those that read a topic read it as the router does, with
// processor/replay's Reader: under kafka.isolation_level read_committed,
// committed records only, up to the last stable offset. (PostgreSQL:
// ledger.Open with cfg.Postgres.)

// DialToolTemporal connects an operator's Temporal client (DialTemporal,
// without metrics).
func DialToolTemporal(ctx context.Context, cfg config.Config, log *slog.Logger) (client.Client, error) {
	return DialTemporal(ctx, cfg, log, nil)
}
