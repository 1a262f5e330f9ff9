package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/schedule"
	"github.com/dedupio/dedup/sink/ledger"
)

// startSchedules runs the scheduler of cfg.Schedules (nothing without
// triggers) on PostgreSQL's clock, beside the router. stop ends it and
// waits for its tick in progress.
func startSchedules(ctx context.Context, cfg config.Config, led *ledger.Postgres, st processor.Starter, reg prometheus.Registerer,
	log *slog.Logger) (stop func(), err error) {
	if len(cfg.Schedules.Triggers) == 0 {
		return func() {}, nil
	}
	// A ledger handle of its own over the same pool: the router's replay
	// heuristic (Postgres.Claim) stays the router's.
	sl := ledger.NewFromPool(led.Pool())
	s, err := schedule.New(cfg.Schedules, schedule.Options{Store: sl, Ledger: sl, Starter: st, Clock: schedule.ClockFunc(sl.Now),
		Registerer: reg, Log: log.With("component", "schedule")})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	log.Info("scheduler running", "triggers", len(cfg.Schedules.Triggers))
	return func() { cancel(); <-done }, nil
}

// CheckedTriggers is what `dedup validate` says of cfg's validated
// triggers: each by name, with its schedule and its misfire and overlap
// policies (defaults filled in), or "no triggers".
func CheckedTriggers(cfg config.Config) string {
	ts := cfg.Schedules.Triggers
	if len(ts) == 0 {
		return "no triggers"
	}
	parts := make([]string, len(ts))
	for i, t := range ts {
		tz := t.TimeZone
		if tz == "" {
			tz = "UTC"
		}
		parts[i] = fmt.Sprintf("%s (%q %s, misfire %s, overlap %s)", t.Name, t.Cron, tz, t.MisfirePolicy, t.Overlap)
	}
	n := "triggers"
	if len(ts) == 1 {
		n = "trigger"
	}
	return fmt.Sprintf("%d %s: %s", len(ts), n, strings.Join(parts, ", "))
}

// SetSchedulePaused is `dedup schedule pause|resume NAME`: it pauses or
// resumes the named trigger in PostgreSQL for every replica. On resume,
// the next tick applies the trigger's misfire policy to the slots of the
// pause.
func SetSchedulePaused(ctx context.Context, cfg config.Config, name string, paused bool, out io.Writer) error {
	if _, err := cfg.Schedules.Trigger(name); err != nil {
		return err
	}
	if err := ledger.MigrateAtStart(ctx, cfg.Postgres); err != nil {
		return err
	}
	led, err := ledger.Open(ctx, cfg.Postgres)
	if err != nil {
		return err
	}
	defer led.Close()
	if err := schedule.SetPaused(ctx, cfg.Schedules, led, schedule.ClockFunc(led.Now), name, paused); err != nil {
		return err
	}
	verb := "resumed"
	if paused {
		verb = "paused"
	}
	_, err = fmt.Fprintf(out, "trigger %s %s\n", name, verb)
	return err
}
