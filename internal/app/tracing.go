package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/dedupio/dedup/connect/tracing"
	"github.com/dedupio/dedup/connect/tracing/otlp"
	"github.com/dedupio/dedup/internal/config"
)

// startTracing starts the tracing section's exporter for service (nil when
// tracing is off), or takes given (a test's), and returns its flush, for
// a defer (none for given: its owner flushes it).
func startTracing(ctx context.Context, cfg config.Config, service string, given *tracing.Tracing, log *slog.Logger) (*tracing.Tracing, func(), error) {
	if given != nil {
		return given, func() {}, nil
	}
	tr, err := otlp.New(ctx, cfg.Tracing, service)
	if err != nil || tr == nil {
		return nil, func() {}, err
	}
	log.Info("tracing on", "exporter", cfg.Tracing.Exporter, "endpoint", tracing.ShownEndpoint(cfg.Tracing.OTLP.Endpoint))
	return tr, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tr.Shutdown(ctx); err != nil {
			log.Warn("flushing spans at exit failed", "err", err)
		}
	}, nil
}
