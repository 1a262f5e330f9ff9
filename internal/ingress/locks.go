package ingress

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
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
type Locks struct {
	url      string
	log      *slog.Logger
	degraded prometheus.Counter

	mu   sync.Mutex
	held map[string]bool

	connMu    sync.Mutex // one statement at a time on conn
	conn      *pgx.Conn
	gen       int       // bumped when conn is replaced: older locks went with it
	downUntil time.Time // after a failure, PostgreSQL is not tried again before this
}

// downFor is how long PostgreSQL is left alone after a failed lock: the
// requests meanwhile are locked per process, without waiting on a dial
// that fails.
const downFor = 5 * time.Second

var errDown = errors.New("postgres failed recently; not tried again yet")

// NewLocks locks in the PostgreSQL at url; "" locks per process only.
// degraded counts the requests locked per process only because PostgreSQL
// failed.
func NewLocks(url string, log *slog.Logger, degraded prometheus.Counter) *Locks {
	return &Locks{url: url, log: log, degraded: degraded, held: map[string]bool{}}
}

// Acquire takes key's lock, or returns ErrInFlight. release must be called
// once the request is answered.
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
	got, gen, err := l.try(ctx, key)
	switch {
	case err != nil:
		if ctx.Err() != nil {
			local()
			return nil, ctx.Err()
		}
		l.degraded.Inc()
		if !errors.Is(err, errDown) {
			l.log.Warn("postgres advisory lock failed; requests are locked in this process only for a while", "err", err, "retry_in", downFor)
		}
		return local, nil
	case !got:
		local()
		return nil, ErrInFlight
	}
	return func() { l.unlock(key, gen); local() }, nil
}

func (l *Locks) try(ctx context.Context, key string) (bool, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	l.connMu.Lock()
	defer l.connMu.Unlock()
	if time.Now().Before(l.downUntil) {
		return false, 0, errDown
	}
	if l.conn == nil {
		c, err := pgx.Connect(ctx, l.url)
		if err != nil {
			if ctx.Err() == nil || errors.Is(ctx.Err(), context.DeadlineExceeded) {
				l.downUntil = time.Now().Add(downFor)
			}
			return false, 0, err
		}
		l.conn = c
		l.gen++
	}
	var got bool
	if err := l.conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1::int4, hashtext($2))`, lockClass, key).Scan(&got); err != nil {
		l.dropConn()
		l.downUntil = time.Now().Add(downFor)
		return false, 0, err
	}
	return got, l.gen, nil
}

func (l *Locks) unlock(key string, gen int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	l.connMu.Lock()
	defer l.connMu.Unlock()
	if l.conn == nil || gen != l.gen {
		return // the session that held it is gone, and the lock with it
	}
	if _, err := l.conn.Exec(ctx, `SELECT pg_advisory_unlock($1::int4, hashtext($2))`, lockClass, key); err != nil {
		l.log.Warn("postgres advisory unlock failed; dropping the connection (its locks go with it)", "err", err)
		l.dropConn()
	}
}

// dropConn closes conn (connMu held): the server ends its session and
// releases every lock it held.
func (l *Locks) dropConn() {
	if l.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = l.conn.Close(ctx)
		cancel()
		l.conn = nil
	}
}

// Close ends the locking session.
func (l *Locks) Close() {
	l.connMu.Lock()
	defer l.connMu.Unlock()
	l.dropConn()
}
