package ingress

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupio/dedup/sink/ledger"
)

// ErrInFlight is returned when a request with this event's key is being
// answered (here, or by another ingress replica).
var ErrInFlight = errors.New("a request with this idempotency key is in flight")

// lockClass is the first half of the two-int advisory lock key: it keeps
// the ingress's locks apart from every other (the single-bigint key space,
// which the migrations' lock uses, never overlaps the two-int one).
const lockClass = 0x64647570 // "ddup"

// Locks says which event IDs have a request in flight, across ingress
// replicas: a per-process set first, then a PostgreSQL session advisory
// lock per ID on one connection of this process, held until the request
// is answered. See the package doc for what it costs and when it is per
// process only.
//
// The connection runs one statement at a time; requests queue for it.
// A request gives up while it waits if its context ends; once it has the
// connection its statement runs on its own clock (stmtTimeout), whatever
// the caller does meanwhile, because a statement cut in the middle costs
// the connection, and the connection holds every request's lock. Only a
// failure of the connection itself (no answer in stmtTimeout, a broken
// socket) ends the session.
type Locks struct {
	url      string
	cc       *pgx.ConnConfig // nil: parsed from url
	inTx     bool            // hold a transaction open while locks are held (always, with a URL: a pooler may stand between)
	log      *slog.Logger
	degraded prometheus.Counter

	mu   sync.Mutex
	held map[string]bool

	// turn holds a token while a statement or a dial owns the fields
	// below: a channel, not a mutex, so that waiting for it can end with
	// the caller's context.
	turn      chan struct{}
	conn      *pgx.Conn
	gen       int           // bumped when conn is replaced: older locks went with it
	locked    int           // advisory locks conn holds (taken, not yet unlocked)
	open      bool          // conn is in the transaction inTx holds
	downUntil time.Time     // after a failure, PostgreSQL is not tried again before this
	downFor   time.Duration // the const downFor; shorter in tests
}

// downFor is how long PostgreSQL is left alone after a failed lock: the
// requests meanwhile are locked per process, without waiting on a dial
// that fails.
const downFor = 5 * time.Second

// stmtTimeout bounds a dial or a statement once it has the connection
// (not the wait for it): past it PostgreSQL is taken as failed.
const stmtTimeout = 2 * time.Second

var errDown = errors.New("postgres failed recently; not tried again yet")

// NewLocks locks in the PostgreSQL at url; "" locks per process only.
// degraded counts the requests locked per process only because PostgreSQL
// failed, and those whose lock went with a failed connection.
//
// The connection keeps a transaction open from its first lock to its last
// unlock whatever postgres.pooler says (see NewPooledLocks): through a
// transaction pooler the config does not name, a lock and its unlock
// would otherwise reach two server sessions and the lock would stay.
func NewLocks(url string, log *slog.Logger, degraded prometheus.Counter) *Locks {
	return &Locks{url: url, log: log, degraded: degraded, held: map[string]bool{}, turn: make(chan struct{}, 1), downFor: downFor,
		inTx: url != ""}
}

// NewPooledLocks locks in the PostgreSQL of cfg (postgres.url, through
// postgres.pooler). Under a transaction pooler the locking session must
// stay one server session while it holds a lock, so the connection keeps
// a transaction open from its first lock to its last unlock (the locks
// are still session locks, taken and released one by one inside it), and
// commits when it holds none: the pooler then hands that server session,
// with no lock on it, to other clients. Each replica so pins one server
// session of the pooler while any of its requests is in flight.
func NewPooledLocks(cfg ledger.Config, log *slog.Logger, degraded prometheus.Counter) (*Locks, error) {
	if cfg.URL == "" {
		return NewLocks("", log, degraded), nil
	}
	cc, err := cfg.ConnConfig()
	if err != nil {
		return nil, err
	}
	l := NewLocks(cfg.URL, log, degraded)
	l.cc = cc
	return l, nil
}

// Acquire takes key's lock, or returns ErrInFlight. release must be called
// once the request is answered. An error other than ErrInFlight is ctx's:
// it ended while the request waited for the connection.
func (l *Locks) Acquire(ctx context.Context, key string) (release func(), err error) {
	l.mu.Lock()
	if l.held[key] {
		l.mu.Unlock()
		return nil, ErrInFlight
	}
	l.held[key] = true
	l.mu.Unlock()
	local := func() {
		l.mu.Lock()
		delete(l.held, key)
		l.mu.Unlock()
	}
	if l.url == "" {
		return local, nil
	}
	if err := l.take(ctx); err != nil {
		local()
		return nil, err
	}
	got, gen, err := l.try(key)
	l.give()
	switch {
	case err != nil:
		l.addDegraded(1)
		if !errors.Is(err, errDown) {
			l.log.Warn("postgres advisory lock failed; the request is locked in this process only", "err", err)
		}
		return local, nil
	case !got:
		local()
		return nil, ErrInFlight
	}
	return func() { l.unlock(key, gen); local() }, nil
}

// take waits for the connection's turn, or for ctx to end.
func (l *Locks) take(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case l.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *Locks) give() { <-l.turn }

// try takes key's advisory lock (the turn held).
func (l *Locks) try(key string) (bool, int, error) {
	if time.Now().Before(l.downUntil) {
		return false, 0, errDown
	}
	ctx, cancel := context.WithTimeout(context.Background(), stmtTimeout)
	defer cancel()
	if l.conn == nil {
		var (
			c   *pgx.Conn
			err error
		)
		if l.cc != nil {
			c, err = pgx.ConnectConfig(ctx, l.cc)
		} else {
			c, err = pgx.Connect(ctx, l.url)
		}
		if err != nil {
			l.downUntil = time.Now().Add(l.downFor)
			return false, 0, err
		}
		l.conn = c
		l.gen++
	}
	if l.inTx && !l.open {
		if _, err := l.conn.Exec(ctx, "BEGIN"); err != nil {
			l.dropConn(true)
			l.downUntil = time.Now().Add(l.downFor)
			return false, 0, err
		}
		l.open = true
	}
	var got bool
	if err := l.conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1::int4, hashtext($2))`, lockClass, key).Scan(&got); err != nil {
		var pgErr *pgconn.PgError
		if l.inTx {
			// The transaction is aborted: no statement runs in it any
			// more. Ending the connection ends the server session (a
			// pooler closes one its client left in a transaction), and
			// the locks with it.
			l.dropConn(true)
			l.downUntil = time.Now().Add(l.downFor)
			return false, 0, err
		}
		if !errors.As(err, &pgErr) || l.conn.IsClosed() {
			// No answer, or a broken connection: the session (and every
			// lock on it) is as good as gone; make sure it is.
			l.dropConn(true)
			l.downUntil = time.Now().Add(l.downFor)
		}
		// An error PostgreSQL answered leaves the session and its locks
		// as they were: this request alone is locked per process.
		return false, 0, err
	}
	if got {
		l.locked++
	} else if err := l.release(ctx); err != nil {
		return false, 0, err
	}
	return got, l.gen, nil
}

// release commits inTx's transaction when conn holds no lock (the turn
// held), so that the pooler may hand the server session to others; a
// failed commit ends the connection.
func (l *Locks) release(ctx context.Context) error {
	if !l.open || l.locked > 0 {
		return nil
	}
	if _, err := l.conn.Exec(ctx, "COMMIT"); err != nil {
		l.dropConn(true)
		return err
	}
	l.open = false
	return nil
}

// unlock releases key's advisory lock, taken in session gen. It waits for
// its turn whatever happens: a lock must not outlive its request, so
// when the statement fails the session is ended instead.
func (l *Locks) unlock(key string, gen int) {
	_ = l.take(context.Background())
	defer l.give()
	if l.conn == nil || gen != l.gen {
		// The session that held it is gone, and the lock with it; a newer
		// session's lock on the same hash is another request's.
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), stmtTimeout)
	defer cancel()
	var was bool
	if err := l.conn.QueryRow(ctx, `SELECT pg_advisory_unlock($1::int4, hashtext($2))`, lockClass, key).Scan(&was); err != nil {
		l.log.Warn("postgres advisory unlock failed; dropping the connection (its locks go with it)", "err", err)
		l.locked-- // not lost: its request is answered
		l.dropConn(true)
		return
	}
	l.locked--
	if !was {
		l.log.Warn("postgres advisory unlock: the session did not hold the lock", "key", key)
	}
	if err := l.release(ctx); err != nil {
		l.log.Warn("postgres: ending the locking transaction failed; dropped the connection", "err", err)
	}
}

// dropConn closes conn (the turn held): the server ends its session and
// releases every lock it held. failed counts the requests still in flight
// with one of them as degraded: their lock is per process from now on.
func (l *Locks) dropConn(failed bool) {
	if l.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = l.conn.Close(ctx)
	cancel()
	l.conn, l.open = nil, false
	if failed && l.locked > 0 {
		l.log.Warn("postgres locking session ended with requests in flight: they are locked in this process only", "requests", l.locked)
		l.addDegraded(l.locked)
	}
	l.locked = 0
}

func (l *Locks) addDegraded(n int) {
	if l.degraded != nil {
		l.degraded.Add(float64(n))
	}
}

// Close ends the locking session.
func (l *Locks) Close() {
	_ = l.take(context.Background())
	defer l.give()
	l.dropConn(false)
}
