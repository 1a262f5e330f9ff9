package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dedupio/dedup/schemas"
)

// purgeable selects the ledger rows a purge of rows older than $1
// deletes (Purge, and PurgeCount's dry run): started and dead-lettered
// rows, by when they ended; never pending rows.
const purgeable = `((state = 'started' AND started_at < now() - $1::interval)
	OR (state = 'dead_lettered' AND updated_at < now() - $1::interval))`

// purgeableDeadLetters selects the dead-letter log entries a purge
// deletes.
const purgeableDeadLetters = `written_at < now() - $1::interval`

// Purge deletes started rows, dead-letter log entries and conflicts older than
// olderThan, in batches of batch rows (short transactions, so claims are
// not held up), and returns how many ledger rows it deleted. Pending rows
// are never purged: they are work not yet done.
//
// Each batch takes the oldest victims along a partial index
// (dedup_ledger_started, dedup_ledger_dead_lettered) and goes on from
// the newest end time the batch before deleted, so a purge reads the rows
// it deletes and not the ledger: its cost grows with what it removes, not
// with the ledger's size.
//
// A purge by a role that may lock rows (dedup_router's, which runs
// postgres.retention; a single-user setup) never waits for a row: it
// locks its victims and skips a row another transaction holds (FOR
// UPDATE SKIP LOCKED); a later purge deletes it. Finding its victims
// oldest first, it could otherwise deadlock with a router re-claiming the
// same dead-lettered rows or recording the same conflicts, which lock in
// key order. PostgreSQL lets a role lock a table's rows only with UPDATE
// on one of its columns, which dedup_operator (`dedup ledger purge
// --execute`) does not have: its purge deletes without the lock, and in
// that rare meeting PostgreSQL cancels one of the two (40P01). The
// router retries its claim; the purge runs its cancelled batch again
// (againAfterDeadlock). Each table is decided on its own.
func (p *Postgres) Purge(ctx context.Context, olderThan time.Duration, batch int) (_ int64, err error) {
	var lockLedger, lockConflicts bool
	if err := p.pool.QueryRow(ctx, `SELECT has_any_column_privilege('dedup_ledger', 'UPDATE'), has_any_column_privilege('dedup_conflicts', 'UPDATE')`).Scan(&lockLedger, &lockConflicts); err != nil {
		return 0, fmt.Errorf("purging: reading the role's privileges: %w", err)
	}
	started, deadLettered, conflicts := purgeStarted, purgeDeadLettered, purgeConflicts
	if !lockLedger {
		started, deadLettered = purgeStartedUnlocked, purgeDeadLetteredUnlocked
	}
	if !lockConflicts {
		conflicts = purgeConflictsUnlocked
	}
	// The rows it deletes are forgotten, and a claim that overlaps the
	// purge in any part remembers nothing (startedCache.forgetAll).
	ended := p.started.forgetAll()
	defer func() { ended(err != nil) }()
	var total int64
	for _, q := range []struct{ what, sql string }{
		{"started", started},
		{"dead-lettered", deadLettered},
	} {
		from := time.Time{} // the oldest end time still to look at
		for {
			var victims, n int64
			var last *time.Time
			if err := againAfterDeadlock(func() error {
				return p.cancelledOnTheServer(ctx, func(tx pgx.Tx) error {
					return tx.QueryRow(ctx, q.sql, olderThan, batch, from).Scan(&victims, &n, &last)
				})
			}); err != nil {
				return total, fmt.Errorf("purging %s ledger rows: %w", q.what, err)
			}
			total += n
			if victims < int64(batch) || last == nil {
				break
			}
			from = *last
		}
	}
	if err := againAfterDeadlock(func() error {
		return p.cancelledOnTheServer(ctx, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `DELETE FROM dedup_dead_letters WHERE `+purgeableDeadLetters, olderThan)
			return err
		})
	}); err != nil {
		return total, fmt.Errorf("purging dead-letter log: %w", err)
	}
	for {
		// Goes on while a batch chose as many victims as it may: it
		// may delete fewer (a row recorded again, or deleted by
		// another purge, while it waited for the row).
		var victims int64
		if err := againAfterDeadlock(func() error {
			return p.cancelledOnTheServer(ctx, func(tx pgx.Tx) error {
				return tx.QueryRow(ctx, conflicts, olderThan, batch).Scan(&victims)
			})
		}); err != nil {
			return total, fmt.Errorf("purging conflicts: %w", err)
		}
		if victims < int64(batch) {
			break
		}
	}
	return total, nil
}

// purgeDeadlockTries is how many times a purge statement runs when
// PostgreSQL keeps cancelling it to break a deadlock.
const purgeDeadlockTries = 5

// againAfterDeadlock runs one purge statement, and runs it again when
// PostgreSQL cancelled it to break a deadlock (40P01), up to
// purgeDeadlockTries times. A statement is its own transaction: one that
// lost a deadlock deleted nothing, and the next run chooses its victims
// anew, without the rows the other transaction took meanwhile (a router's
// re-claim makes them pending). Any other error ends the purge.
func againAfterDeadlock(run func() error) error {
	for try := 1; ; try++ {
		err := run()
		var pgErr *pgconn.PgError
		if err == nil || try == purgeDeadlockTries || !errors.As(err, &pgErr) || pgErr.Code != deadlockDetected {
			return err
		}
	}
}

// cancelledOnTheServer runs one purge statement (do) in a transaction of
// its own on a connection of the pool, so that a purge stopped by its
// context (an operator's Ctrl-C, --timeout) deletes nothing more once it
// has returned. pgx, ctx ended, drops the connection at once; the server,
// which does not look at the client while a statement waits for a lock,
// goes on, and an auto-committed DELETE would delete the rows it waited
// for once their holder let go. In a transaction, the DELETE's work is
// committed only by the COMMIT the purge sends after it, which a stopped
// purge never sends: the server rolls it back when it finds the client
// gone, whatever reached it when. It also sends a cancel request (best
// effort), so that the statement stops waiting at once; a connection it
// was sent for serves nothing else (it may reach it after its statement).
func (p *Postgres) cancelledOnTheServer(ctx context.Context, do func(pgx.Tx) error) error {
	c, err := p.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	sent := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(sent)
		cctx, cancel := context.WithTimeout(context.Background(), cancelWait)
		defer cancel()
		_ = c.Conn().PgConn().CancelRequest(cctx)
	})
	err = pgx.BeginFunc(ctx, c, do)
	if stop() {
		c.Release()
		return err
	}
	<-sent
	_ = c.Hijack().Close(context.Background())
	if err != nil && !errors.Is(err, ctx.Err()) {
		err = errors.Join(ctx.Err(), err) // the server's "canceling statement due to user request"
	}
	return err
}

// cancelWait bounds a cancel request (cancelledOnTheServer).
const cancelWait = 5 * time.Second

// deadlockDetected is PostgreSQL's SQLSTATE for a statement it cancelled
// to break a deadlock.
const deadlockDetected = "40P01"

// purgeConflicts deletes up to $2 conflict rows last seen before now() -
// $1, oldest first along dedup_conflicts_seen (migration 00014), and
// returns how many it chose: a
// conflict lives one retention period after its last copy, whatever its
// ledger row's state (a payload sent again meanwhile keeps its row). A
// row written before 00014 has no last_seen_at and goes by detected_at.
// It skips the rows another transaction holds; purgeConflictsUnlocked,
// for a role that may not lock them, does not. The DELETE checks the
// row's age again: one recorded again meanwhile (a router's copy seen
// while the purge waited for its row) is not a victim any more.
var (
	purgeConflicts         = purgeConflictsSQL(skipLocked)
	purgeConflictsUnlocked = purgeConflictsSQL("")
)

func purgeConflictsSQL(lock string) string {
	return `
WITH victims AS (
	SELECT id FROM dedup_conflicts
	WHERE coalesce(last_seen_at, detected_at) < now() - $1::interval
	ORDER BY coalesce(last_seen_at, detected_at) LIMIT $2
	` + lock + `
), gone AS (
	DELETE FROM dedup_conflicts c USING victims v
	WHERE c.id = v.id AND coalesce(c.last_seen_at, c.detected_at) < now() - $1::interval
)
SELECT count(*) FROM victims`
}

// skipLocked ends a purge's choice of victims: it locks them, and skips
// those another transaction holds.
const skipLocked = `FOR UPDATE SKIP LOCKED`

// purgeStarted deletes up to $2 started rows that ended before now() -
// $1 and at or after $3, oldest first (an index range scan of
// dedup_ledger_started), and returns how many it chose, how many it
// deleted and the newest end time among them. The DELETE checks the row
// again: one re-run meanwhile (a newer started_at) is not a victim any
// more. purgeDeadLettered is the same for dead-lettered rows, by when
// they were dead-lettered (dedup_ledger_dead_lettered). Both skip the rows
// another transaction holds; the *Unlocked ones, for a role that may not
// lock them, do not.
var (
	purgeStarted              = purgeBatchSQL(StateStarted, "started_at", skipLocked)
	purgeDeadLettered         = purgeBatchSQL(StateDeadLettered, "updated_at", skipLocked)
	purgeStartedUnlocked      = purgeBatchSQL(StateStarted, "started_at", "")
	purgeDeadLetteredUnlocked = purgeBatchSQL(StateDeadLettered, "updated_at", "")
)

// purgeBatchSQL is one purge batch of the rows in state, by their end
// time ended (the column of that state's partial index), its victims
// chosen with lock (skipLocked, or nothing).
func purgeBatchSQL(state State, ended, lock string) string {
	return fmt.Sprintf(`
WITH victims AS (
	SELECT workflow_id, key, %[2]s AS t FROM dedup_ledger
	WHERE state = '%[1]s' AND %[2]s < now() - $1::interval AND %[2]s >= $3
	ORDER BY %[2]s LIMIT $2
	%[4]s
), gone AS (
	DELETE FROM dedup_ledger l USING victims v
	WHERE %[3]s AND l.state = '%[1]s' AND l.%[2]s < now() - $1::interval
	RETURNING 1
)
SELECT (SELECT count(*) FROM victims), (SELECT count(*) FROM gone), (SELECT max(t) FROM victims)`, state, ended, schemas.LedgerRowIs("l", "v.workflow_id", "v.key"), lock)
}
