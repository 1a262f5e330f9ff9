package ledger

import (
	"context"
	"fmt"
	"strings"
)

// Replication is what the ledger's server says of where its commits are
// when it acknowledges them, as far as dedup's role can see: the input of
// the start-up rule that refuses a ledger a failover can rewind
// (internal/app/replication.go).
type Replication struct {
	// SynchronousCommit is synchronous_commit in dedup's own session (the
	// server's, or what ALTER ROLE / ALTER DATABASE set for it): off
	// acknowledges a commit before it is on disk; local before any
	// standby has it; on, remote_write and remote_apply wait for the
	// synchronous standbys, if synchronous_standby_names names any.
	SynchronousCommit string
	// SynchronousStandbyNames is the server's synchronous_standby_names:
	// empty, no commit waits for a standby.
	SynchronousStandbyNames string
	// Senders is how many WAL senders stream from the server
	// (pg_stat_replication: every role sees its rows, not their details).
	// Logical ones (a CDC tool's) are counted too when the role cannot
	// tell them apart: they err on the side of a standby.
	Senders int
	// IdleSlots is how many physical replication slots no sender uses: a
	// standby that is disconnected now, and will stream again
	// (pg_replication_slots, readable by every role).
	IdleSlots int
	// DetailsVisible says the role sees the senders' details (a superuser,
	// or a member of pg_read_all_stats, as pg_monitor is); without them,
	// which standbys are synchronous is unknown.
	DetailsVisible bool
	// Async names the standbys (application_name) that stream and are not
	// waited for (sync_state async or potential); only when
	// DetailsVisible.
	Async []string
}

// Synchronous says whether every commit the server acknowledges waits
// for a synchronous standby to have it (synchronous_commit on,
// remote_write or remote_apply, and synchronous_standby_names set).
func (r Replication) Synchronous() bool {
	switch r.SynchronousCommit {
	case "on", "remote_write", "remote_apply":
		return strings.TrimSpace(r.SynchronousStandbyNames) != ""
	}
	return false
}

// Standbys is how many physical standbys the role sees (streaming, or
// with a slot kept for them).
func (r Replication) Standbys() int { return r.Senders + r.IdleSlots }

// Replication reads the server's replication settings and standbys (one
// round trip; pg_stat_replication and pg_replication_slots are readable
// by every role).
func (p *Postgres) Replication(ctx context.Context) (Replication, error) {
	var r Replication
	err := p.pool.QueryRow(ctx, `
		SELECT current_setting('synchronous_commit'),
		       current_setting('synchronous_standby_names'),
		       (SELECT count(*) FROM pg_stat_replication s
		         WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots l WHERE l.active_pid = s.pid AND l.slot_type = 'logical')),
		       (SELECT count(*) FROM pg_replication_slots WHERE slot_type = 'physical' AND NOT active),
		       pg_has_role('pg_read_all_stats', 'USAGE'),
		       coalesce((SELECT array_agg(coalesce(application_name, '?') ORDER BY application_name) FROM pg_stat_replication s
		         WHERE sync_state IN ('async', 'potential')
		           AND NOT EXISTS (SELECT 1 FROM pg_replication_slots l WHERE l.active_pid = s.pid AND l.slot_type = 'logical')), '{}')`).
		Scan(&r.SynchronousCommit, &r.SynchronousStandbyNames, &r.Senders, &r.IdleSlots, &r.DetailsVisible, &r.Async)
	if err != nil {
		return Replication{}, fmt.Errorf("reading the server's replication settings: %w", err)
	}
	return r, nil
}
