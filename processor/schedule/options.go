package schedule

import (
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupio/dedup/processor"
)

// Options are what a Scheduler works with, beside its Config.
type Options struct {
	// Store keeps the triggers' cursors and decided fires (sink/ledger);
	// required.
	Store Store
	// Ledger claims the fires' workflow IDs, as the router claims events'
	// (sink/ledger); required.
	Ledger processor.Ledger
	// Starter starts the fires in Temporal (sink/starter); required.
	Starter processor.Starter
	// Clock is the time the triggers are decided at: PostgreSQL's (the
	// ledger's Now), so that replicas with skewed clocks agree; required.
	Clock Clock
	// Registerer takes the scheduler's metrics; nil registers them nowhere.
	Registerer prometheus.Registerer
	// Log is the scheduler's logger; nil discards.
	Log *slog.Logger
	// Hooks are test-only stops (see Hooks); zero in production.
	Hooks Hooks
}

// check names the first required option that is missing, and fills in
// the defaults of the others.
func (o *Options) check() error {
	switch {
	case o.Store == nil:
		return errors.New("schedule.New: Options.Store is nil")
	case o.Ledger == nil:
		return errors.New("schedule.New: Options.Ledger is nil")
	case o.Starter == nil:
		return errors.New("schedule.New: Options.Starter is nil")
	case o.Clock == nil:
		return errors.New("schedule.New: Options.Clock is nil")
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.NewRegistry()
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return nil
}
