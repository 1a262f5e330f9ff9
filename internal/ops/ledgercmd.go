package ops

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/dedupio/dedup/internal/dial"
	"github.com/dedupio/dedup/sink/ledger"
)

func ledgerStatsCommand() command {
	return command{
		name:    "ledger stats",
		summary: "the ledger's rows by state, conflicts, dead letters and size",
		usage:   "--config FILE [--output json]",
		help: `Prints the ledger's rows by activity and state (with their oldest and newest change), the
oldest pending row (and how long it has waited), the conflicts, the dead letters by reason, and
the tables' size on disk. It counts every row (a scan of dedup_ledger): run it on demand.

Read-only. Exit code 0, 2 on an error.`,
		example: `dedup ledger stats --config dedup.yaml`,
		flags: func(fs *flag.FlagSet) func(context.Context, *Tool, []string) (any, int, error) {
			return func(ctx context.Context, t *Tool, args []string) (any, int, error) {
				if len(args) > 0 {
					return nil, ExitError, errors.New("ledger stats takes no arguments")
				}
				return t.LedgerStats(ctx)
			}
		},
	}
}

// StatsReport is dedup ledger stats' answer.
type StatsReport struct {
	Rows             []ledger.StateCount    `json:"rows"`
	ByState          map[ledger.State]int64 `json:"by_state"`
	Total            int64                  `json:"total"`
	OldestPending    *LedgerRow             `json:"oldest_pending,omitempty"`
	OldestPendingAge string                 `json:"oldest_pending_age,omitempty"`
	Conflicts        int64                  `json:"conflicts"`
	DeadLetters      []ledger.ReasonCount   `json:"dead_letters"`
	Tables           []ledger.TableSize     `json:"tables"`
}

// LedgerStats answers dedup ledger stats.
func (t *Tool) LedgerStats(ctx context.Context) (*StatsReport, int, error) {
	led, err := t.ledger(ctx)
	if err != nil {
		return nil, ExitError, err
	}
	st, err := led.Stats(ctx)
	if err != nil {
		return nil, ExitError, err
	}
	rep := &StatsReport{Rows: st.Rows, ByState: map[ledger.State]int64{}, Conflicts: st.Conflicts,
		DeadLetters: st.DeadLetters, Tables: st.Tables}
	if rep.Rows == nil {
		rep.Rows = []ledger.StateCount{}
	}
	if rep.DeadLetters == nil {
		rep.DeadLetters = []ledger.ReasonCount{}
	}
	for _, r := range st.Rows {
		rep.ByState[r.State] += r.Rows
		rep.Total += r.Rows
	}
	if o := st.OldestPending; o != nil {
		rep.OldestPending = rowView(*o)
		rep.OldestPendingAge = time.Since(o.UpdatedAt).Round(time.Second).String()
	}
	return rep, ExitFound, nil
}

func ledgerPurgeCommand() command {
	return command{
		name:    "ledger purge",
		summary: "delete ledger rows that ended long ago (a plan unless --execute)",
		usage:   "--config FILE --older-than DURATION [--execute] [--output json]",
		help: `Deletes started and dead-lettered ledger rows (and dead-letter log entries) older than DURATION,
in batches of postgres.purge_batch: what postgres.retention does on a schedule, once. Pending rows
are never purged: they are work not done.

It refuses a purge that would cross the replay horizon, the rule dedup run checks at start: when a
source topic may keep a record as long as or longer than both DURATION and the Temporal namespace's
retention (or, with a route under an allow_* policy, DURATION alone), a replay from the log start
would start forgotten workflows again. A topic may keep a record for its retention.ms + segment.ms
(Kafka deletes whole segments), forever with retention.ms -1 or cleanup.policy compact. Producers
that re-send an event late: add that delay to DURATION yourself (dedup cannot know it). It asks Temporal and Kafka, and refuses when either does not
answer. postgres.accept_short_horizon: true in the config accepts the risk, as for dedup run.
DURATION is at least 1h, as postgres.retention.

Without --execute it deletes nothing, as kafka-consumer-groups --reset-offsets: it checks the
horizon and prints the plan ("would purge", the rows and dead-letter log entries that would go).
--dry-run is the same, spelt out. With --execute it deletes them, prints "purged" and logs it.
Exit code 0 when done (or planned), 2 on an error or a refusal.`,
		example: `dedup ledger purge --config dedup.yaml --older-than 2160h             # the plan
dedup ledger purge --config dedup.yaml --older-than 2160h --execute   # the purge`,
		flags: func(fs *flag.FlagSet) func(context.Context, *Tool, []string) (any, int, error) {
			olderThan := fs.Duration("older-than", 0, "purge rows that ended longer ago than this (at least 1h; required)")
			dryRun := planFlags(fs)
			return func(ctx context.Context, t *Tool, args []string) (any, int, error) {
				if len(args) > 0 {
					return nil, ExitError, fmt.Errorf("unexpected arguments %q", args)
				}
				dry, err := dryRun()
				if err != nil {
					return nil, ExitError, err
				}
				if *olderThan < time.Hour {
					return nil, ExitError, fmt.Errorf("--older-than %s: want at least 1h (as postgres.retention)", *olderThan)
				}
				return t.Purge(ctx, *olderThan, dry)
			}
		},
	}
}

// PurgeReport is dedup ledger purge's answer.
type PurgeReport struct {
	OlderThan string `json:"older_than"`
	DryRun    bool   `json:"dry_run"`
	// Rows are the ledger rows deleted (or, in a dry run, that would be);
	// DeadLetters the dead-letter log entries (counted in dry runs only).
	Rows        int64 `json:"rows"`
	DeadLetters int64 `json:"dead_letters,omitempty"`
	// Refused: the replay horizon (or a dependency that did not answer)
	// stopped the purge before anything was counted or deleted.
	Refused bool     `json:"refused,omitempty"`
	Notes   []string `json:"notes,omitempty"`
}

// Purge answers dedup ledger purge.
func (t *Tool) Purge(ctx context.Context, olderThan time.Duration, dryRun bool) (*PurgeReport, int, error) {
	rep := &PurgeReport{OlderThan: olderThan.String(), DryRun: dryRun}
	refuse := func(err error) (*PurgeReport, int, error) {
		rep.Refused = true
		return rep, ExitError, err
	}
	tc, err := t.temporal(ctx)
	if err != nil {
		return refuse(fmt.Errorf("cannot check the replay horizon without Temporal: %w", err))
	}
	adm, err := t.kafka()
	if err != nil {
		return refuse(err)
	}
	h, err := dial.ReadHorizon(ctx, t.cfg, olderThan, tc, adm)
	if err != nil {
		return refuse(fmt.Errorf("cannot check the replay horizon, so not purging: %w", err))
	}
	h.LedgerBy = "--older-than"
	if err := h.Check(); err != nil {
		if !t.cfg.Postgres.AcceptShortHorizon {
			return refuse(fmt.Errorf("refusing to purge: %w", err))
		}
		rep.Notes = append(rep.Notes, "the purge crosses the replay horizon, accepted by postgres.accept_short_horizon: "+err.Error())
		t.log.Warn("ledger purge crosses the replay horizon; postgres.accept_short_horizon accepts it", "err", err)
	}
	led, err := t.ledger(ctx)
	if err != nil {
		return rep, ExitError, err
	}
	if dryRun {
		rep.Rows, rep.DeadLetters, err = led.PurgeCount(ctx, olderThan)
		if err != nil {
			return rep, ExitError, err
		}
		return rep, ExitFound, nil
	}
	n, err := led.Purge(ctx, olderThan, t.cfg.Postgres.PurgeBatch)
	rep.Rows = n
	t.log.Info("ledger purged by dedup ledger purge", "rows", n, "older_than", olderThan, "err", err)
	if err != nil {
		return rep, ExitError, err
	}
	return rep, ExitFound, nil
}
