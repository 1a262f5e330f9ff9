package app

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/internal/dial"
	"github.com/dedupio/dedup/sink/ledger"
)

// A ledger a failover can rewind. PostgreSQL acknowledges a commit once it
// is on its own disk; an asynchronous standby gets it later. Promote that
// standby after the primary dies and the ledger is rewound: the started
// rows the primary acknowledged last are gone, and the next copy of each
// of their events (a re-send, a redelivery, a replay) is claimed as a new
// event and started again. What refuses the second run then is Temporal
// alone: under reject_duplicate, for the namespace's retention. Under an
// allow_* policy (or a signal route) a closed run does not refuse it, and
// after the namespace's retention nothing does.
//
// The rule, checked at start: when the server can lose acknowledged
// commits (synchronous_commit off; or streaming standbys none of which a
// commit waits for), dedup refuses to start if a route relies on the
// ledger alone, or the ledger remembers events longer than Temporal's
// namespace retention (postgres.retention 0 or longer), unless
// postgres.accept_async_replication accepts it. Otherwise it logs the risk.
//
// What the role cannot see it cannot refuse: a server with no standby in
// pg_stat_replication and no physical slot is taken for a lone server
// (a managed service's storage-level replication, synchronous, shows
// none; so does a replica the provider hides, which the runbook covers).
// A role that cannot see which standbys are synchronous gets a warning.

// rewinds says how the server can lose commits it acknowledged; "" when
// it cannot, as far as the role sees.
func rewinds(r ledger.Replication) string {
	switch {
	case r.SynchronousCommit == "off":
		return "synchronous_commit is off for dedup's sessions: the server acknowledges a commit before it is on disk, and a crash loses it"
	case r.Synchronous() || r.Standbys() == 0:
		return ""
	}
	why := "synchronous_standby_names is empty"
	if strings.TrimSpace(r.SynchronousStandbyNames) != "" {
		why = "synchronous_commit is " + r.SynchronousCommit + " for dedup's sessions"
	}
	return fmt.Sprintf("%d standby(s) replicate asynchronously (%s): the server acknowledges commits they may not have, "+
		"and a failover to one of them loses those commits", r.Standbys(), why)
}

// replicationCheck is the rule's input.
type replicationCheck struct {
	Replication ledger.Replication
	// Routes names the routes that rely on the ledger alone
	// (config.LedgerOnlyRoutes).
	Routes []string
	// Outlives says why the ledger remembers events longer than Temporal
	// refuses their IDs; "" when it does not.
	Outlives string
	Accept   bool // postgres.accept_async_replication
}

// Check returns the start-up error, or the warnings to log.
func (c replicationCheck) Check() (warnings []string, err error) {
	r := c.Replication
	risk := rewinds(r)
	if risk == "" {
		if r.Synchronous() && len(r.Async) > 0 {
			warnings = append(warnings, fmt.Sprintf("standbys %s replicate asynchronously beside the synchronous ones: "+
				"promote only a synchronous standby, or the ledger is rewound", strings.Join(r.Async, ", ")))
		}
		// A role without pg_monitor sees the senders, not their state: a
		// standby streaming while another (the synchronous one, perhaps)
		// is away may be asynchronous, whatever the count.
		if r.Synchronous() && !r.DetailsVisible && (r.Senders > 1 || (r.Senders > 0 && r.IdleSlots > 0)) {
			warnings = append(warnings, fmt.Sprintf("%d standbys stream (%d more have a slot and are away), and dedup's role cannot see which are synchronous "+
				"(grant it pg_monitor to check): promote only a synchronous standby, or the ledger is rewound", r.Senders, r.IdleSlots))
		}
		return warnings, nil
	}
	var relies []string
	if len(c.Routes) > 0 {
		relies = append(relies, fmt.Sprintf("%s rel%s on the ledger alone to refuse a second run (Temporal starts a closed ID again)",
			strings.Join(c.Routes, ", "), map[bool]string{true: "ies", false: "y"}[len(c.Routes) == 1]))
	}
	if c.Outlives != "" {
		relies = append(relies, c.Outlives+": after the namespace retention only the ledger remembers an event")
	}
	if len(relies) == 0 {
		return []string{risk + "; every route is reject_duplicate and the ledger forgets no later than Temporal, " +
			"so Temporal refuses the second start of a lost row's event"}, nil
	}
	msg := fmt.Sprintf("the ledger's server can lose acknowledged commits: %s; a lost started row's next copy is claimed as a new event, and %s",
		risk, strings.Join(relies, "; and "))
	if c.Accept {
		return []string{msg + " (accepted by postgres.accept_async_replication)"}, nil
	}
	return nil, fmt.Errorf("postgres.accept_async_replication: %s. Make commits wait for a standby (synchronous_standby_names on the server, "+
		"synchronous_commit on, remote_write or remote_apply), or use reject_duplicate routes with postgres.retention no longer than the namespace "+
		"retention, or accept it with postgres.accept_async_replication: true", msg)
}

// ledgerOutlivesTemporal says why the ledger remembers a started event
// longer than the routes' namespaces refuse its ID, "" when it does not.
// A retention it cannot read counts as shorter.
func ledgerOutlivesTemporal(ctx context.Context, cfg config.Config, tc client.Client) string {
	if cfg.Postgres.Retention == 0 {
		return "postgres.retention 0 keeps started rows forever, longer than the Temporal namespace retention"
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ns, err := dial.NamespaceRetention(ctx, cfg, tc)
	switch {
	case err != nil:
		return fmt.Sprintf("postgres.retention %s may be longer than the Temporal namespace retention, which could not be read (%v)", cfg.Postgres.Retention, err)
	case cfg.Postgres.Retention > ns:
		return fmt.Sprintf("postgres.retention %s is longer than the Temporal namespace retention %s", cfg.Postgres.Retention, ns)
	}
	return ""
}

// checkReplication reads the ledger server's replication (waiting while
// PostgreSQL does not answer) and applies the rule.
func checkReplication(ctx context.Context, cfg config.Config, led *ledger.Postgres, tc client.Client, deps *dependencies, log *slog.Logger) error {
	var r ledger.Replication
	if err := deps.waitFor(ctx, depPostgres, cfg.Retry, refusedPostgres, func(ctx context.Context) (err error) {
		r, err = led.Replication(ctx)
		return err
	}); err != nil {
		return err
	}
	c := replicationCheck{Replication: r, Routes: config.LedgerOnlyRoutes(cfg), Accept: cfg.Postgres.AcceptAsyncReplication}
	if rewinds(r) != "" {
		c.Outlives = ledgerOutlivesTemporal(ctx, cfg, tc)
	}
	warnings, err := c.Check()
	for _, w := range warnings {
		log.Warn("the ledger can be rewound by a failover", "why", w)
	}
	if err == nil {
		log.Info("ledger replication", "synchronous_commit", r.SynchronousCommit, "synchronous_standby_names", r.SynchronousStandbyNames,
			"standbys", r.Standbys(), "synchronous", r.Synchronous())
	}
	return err
}
