package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// StandbyOptions tune a streaming standby.
type StandbyOptions struct {
	// Name is the standby's application_name, the name the primary's
	// synchronous_standby_names and pg_stat_replication know it by;
	// default "standby".
	Name string
	// Synchronous names the standby in the primary's
	// synchronous_standby_names: a commit on the primary is acknowledged
	// only once the standby has flushed it (synchronous_commit on).
	// Otherwise the standby is asynchronous: the primary acknowledges
	// commits the standby may not have.
	Synchronous bool
	// Log receives the standby's output; nil discards it.
	Log *os.File
}

// waitFor bounds every wait of a standby's life (streaming, detaching,
// promotion, a kill).
const waitFor = 60 * time.Second

// Port is the port the server listens on (127.0.0.1).
func (c *Cluster) Port() int { return c.port }

// StartStandby makes a streaming standby of the running cluster c:
// pg_basebackup -R into a new temporary directory, started on a free port,
// and waits until the primary streams to it (and, if opts.Synchronous,
// counts it as its synchronous standby). The standby is a Cluster: Stop it
// (it has its own directory) before or after c.
func (c *Cluster) StartStandby(ctx context.Context, opts StandbyOptions) (*Cluster, error) {
	if c.cmd == nil {
		return nil, errors.New("making a standby: the primary is not running")
	}
	if opts.Name == "" {
		opts.Name = "standby"
	}
	so := c.opts
	so.Port, so.Log, so.Settings = 0, opts.Log, nil
	s := &Cluster{bin: c.bin, cred: c.cred, opts: so}
	var err error
	if s.dir, err = os.MkdirTemp("", "dedup-pg-standby-"); err != nil {
		return nil, fmt.Errorf("creating the standby's data directory: %w", err)
	}
	if s.cred != nil {
		if err := os.Chown(s.dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			_ = s.cleanup()
			return nil, fmt.Errorf("handing the standby's data directory to postgres: %w", err)
		}
	}
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=%s", c.port, opts.Name)
	// -R writes standby.signal and primary_conninfo (with the
	// application_name of -d); -X stream copies the WAL written during
	// the copy; -c fast does not wait for a checkpoint.
	backup := s.command(filepath.Join(c.bin, "pg_basebackup"), "-d", conninfo, "-D", s.dir, "-R", "-X", "stream", "-c", "fast", "--no-sync")
	if out, err := backup.CombinedOutput(); err != nil {
		_ = s.cleanup()
		return nil, fmt.Errorf("running pg_basebackup from 127.0.0.1:%d: %w: %s", c.port, err, out)
	}
	// pg_basebackup connected with the standby's application_name (-R
	// copies it into primary_conninfo), and its WAL senders stay in the
	// primary's pg_stat_replication until their backends have exited,
	// which can be after pg_basebackup has returned: on a loaded machine
	// the standby streamed beside them, and a caller counting the senders
	// saw two of that name (sink/ledger's
	// TestReplicationReadsWhatTheServerAcknowledges: Async [b b]). Once
	// they are gone, every sender of that name is the standby's.
	if err := c.until(ctx, "pg_basebackup's WAL senders to exit", func(conn *pgx.Conn) (bool, error) {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE application_name = $1`, opts.Name).Scan(&n)
		return n == 0, err
	}); err != nil {
		_ = s.cleanup()
		return nil, err
	}
	if err := s.startOnAFreePort(ctx); err != nil {
		_ = s.cleanup()
		return nil, err
	}
	if opts.Synchronous {
		if err := c.exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = "+quoteLiteral(pgx.Identifier{opts.Name}.Sanitize()),
			"SELECT pg_reload_conf()"); err != nil {
			_ = s.Stop()
			return nil, fmt.Errorf("making the standby synchronous: %w", err)
		}
	}
	want := "async"
	if opts.Synchronous {
		want = "sync"
	}
	// One sender of that name, streaming: a WAL receiver that reconnected
	// leaves its old sender behind until that one exits, too.
	if err := c.until(ctx, fmt.Sprintf("the primary streaming to %s as %s, and to no other sender of that name", opts.Name, want), func(conn *pgx.Conn) (bool, error) {
		var all, streaming int
		err := conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'streaming' AND sync_state = $2) FROM pg_stat_replication WHERE application_name = $1`,
			opts.Name, want).Scan(&all, &streaming)
		return all == 1 && streaming == 1, err
	}); err != nil {
		_ = s.Stop()
		return nil, err
	}
	return s, nil
}

// Kill kills the server the way a crashed machine would, kill -9 of the
// postmaster and every backend at once (its process group): nothing is
// flushed, no standby is told. The data directory stays (Stop removes it).
func (c *Cluster) Kill() error {
	if c.cmd == nil {
		return errors.New("postgres is not running")
	}
	// The postmaster leads its process group (Setpgid): the group is the
	// whole server.
	if err := syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing postgres: %w", err)
	}
	select {
	case <-c.done:
	case <-time.After(waitFor):
		return fmt.Errorf("postgres still running %s after kill -9", waitFor)
	}
	c.cmd = nil
	return nil
}

// Detach makes a standby stop receiving WAL, as a standby whose network
// to the primary stalls does: from its return, every commit the primary
// acknowledges is one the standby lacks (a promotion then loses it). It
// empties primary_conninfo and waits until the WAL receiver has exited,
// and returns the last WAL position the standby received.
//
// Stopping the standby's processes (SIGSTOP) instead would not lose a
// known set of commits: the WAL already in the two kernels' socket
// buffers (megabytes on loopback) still reaches the standby when it
// resumes, even after the primary is killed.
func (c *Cluster) Detach(ctx context.Context) (string, error) {
	if err := c.exec(ctx, "ALTER SYSTEM SET primary_conninfo = ''", "SELECT pg_reload_conf()"); err != nil {
		return "", fmt.Errorf("detaching the standby: %w", err)
	}
	if err := c.until(ctx, "the standby's WAL receiver to exit", func(conn *pgx.Conn) (bool, error) {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_wal_receiver`).Scan(&n)
		return n == 0, err
	}); err != nil {
		return "", err
	}
	var lsn string
	if err := c.query(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT pg_last_wal_receive_lsn()::text`).Scan(&lsn)
	}); err != nil {
		return "", fmt.Errorf("reading the standby's received WAL position: %w", err)
	}
	return lsn, nil
}

// CaughtUp waits until a standby has replayed all the WAL it received (so
// that a read on it sees every commit it has), and returns that position.
//
// The received WAL can end inside a record: the primary streams what it
// flushed, and its WAL writer flushes whole pages, also the first pages of
// a record still being written (a full-page image spans two). Such a
// record's rest never comes once the primary is gone or the standby
// detached, so replay stops before the receive position for good. The
// standby has then replayed all it can when its startup process waits for
// more WAL and its replay position has not moved since the previous look.
func (c *Cluster) CaughtUp(ctx context.Context) (string, error) {
	var lsn, last string
	err := c.until(ctx, "the standby to replay the WAL it received", func(conn *pgx.Conn) (bool, error) {
		var done, waiting bool
		prev := last
		err := conn.QueryRow(ctx, `SELECT coalesce(pg_last_wal_replay_lsn() >= pg_last_wal_receive_lsn(), true),
			pg_last_wal_replay_lsn()::text,
			EXISTS (SELECT FROM pg_stat_activity WHERE backend_type = 'startup'
				AND wait_event IN ('RecoveryWalStream', 'RecoveryRetrieveRetryInterval'))`).Scan(&done, &lsn, &waiting)
		last = lsn
		return done || waiting && lsn == prev, err
	})
	return lsn, err
}

// Promote ends a standby's recovery (pg_promote, waiting for it): it
// becomes a primary that accepts writes, with what it had received.
func (c *Cluster) Promote(ctx context.Context) error {
	var ok bool
	if err := c.query(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT pg_promote(true, $1)`, int(waitFor/time.Second)).Scan(&ok)
	}); err != nil {
		return fmt.Errorf("promoting the standby: %w", err)
	}
	if !ok {
		return fmt.Errorf("promoting the standby: not promoted within %s", waitFor)
	}
	return nil
}

// WALPosition is the server's current WAL write position (a primary).
func (c *Cluster) WALPosition(ctx context.Context) (string, error) {
	var lsn string
	err := c.query(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn)
	})
	return lsn, err
}

// exec runs statements one by one as user postgres on database postgres.
func (c *Cluster) exec(ctx context.Context, stmts ...string) error {
	return c.query(ctx, func(conn *pgx.Conn) error {
		for _, s := range stmts {
			if _, err := conn.Exec(ctx, s); err != nil {
				return fmt.Errorf("running %q: %w", s, err)
			}
		}
		return nil
	})
}

func (c *Cluster) query(ctx context.Context, f func(*pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		return fmt.Errorf("connecting to 127.0.0.1:%d: %w", c.port, err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	return f(conn)
}

// until polls cond every 50ms for at most waitFor.
func (c *Cluster) until(ctx context.Context, what string, cond func(*pgx.Conn) (bool, error)) error {
	return c.query(ctx, func(conn *pgx.Conn) error {
		deadline := time.Now().Add(waitFor)
		for {
			ok, err := cond(conn)
			switch {
			case err != nil:
				return fmt.Errorf("waiting for %s: %w", what, err)
			case ok:
				return nil
			case time.Now().After(deadline):
				return fmt.Errorf("waiting for %s: not after %s", what, waitFor)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
