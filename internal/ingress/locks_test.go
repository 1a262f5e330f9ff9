package ingress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/dedupio/dedup/internal/testsupport/pgbouncer"
	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/sink/ledger"
	"github.com/dedupio/dedup/sink/ledger/pooler"
)

// With PostgreSQL unreachable, a lock is per process (counted), answered
// at once while PostgreSQL is left alone, and still exclusive in the
// process.
func TestLocksDegradeToPerProcess(t *testing.T) {
	degraded := prometheus.NewCounter(prometheus.CounterOpts{Name: "d"})
	l := NewLocks("postgres://u@127.0.0.1:1/db?sslmode=disable&connect_timeout=1", slog.New(slog.DiscardHandler), degraded)
	defer l.Close()
	ctx := context.Background()
	rel, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, "k"); !errors.Is(err, ErrInFlight) {
		t.Errorf("second acquire in the process: %v, want ErrInFlight", err)
	}
	t0 := time.Now()
	rel2, err := l.Acquire(ctx, "other")
	if err != nil || time.Since(t0) > 100*time.Millisecond {
		t.Errorf("while PostgreSQL is left alone: %v after %s", err, time.Since(t0))
	}
	rel2()
	rel()
	if rel, err := l.Acquire(ctx, "k"); err != nil {
		t.Errorf("after release: %v", err)
	} else {
		rel()
	}
}

// Two lock sessions (two replicas) exclude each other per key; a released
// key, or a session that ends, frees it.
func TestLocksAcrossSessions(t *testing.T) {
	url := pgtest.NewDatabase(t)
	log := slog.New(slog.DiscardHandler)
	a := NewLocks(url, log, prometheus.NewCounter(prometheus.CounterOpts{Name: "a"}))
	b := NewLocks(url, log, prometheus.NewCounter(prometheus.CounterOpts{Name: "b"}))
	defer b.Close()
	ctx := context.Background()
	rel, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx, "k"); !errors.Is(err, ErrInFlight) {
		t.Fatalf("other session: %v, want ErrInFlight", err)
	}
	relOther, err := b.Acquire(ctx, "k2")
	if err != nil {
		t.Fatal(err)
	}
	relOther()
	rel()
	rel, err = b.Acquire(ctx, "k")
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	rel()
	// A session that ends (a crashed replica) frees its locks.
	if _, err := a.Acquire(ctx, "k3"); err != nil {
		t.Fatal(err)
	}
	a.Close()
	// The server ends the session (and releases its locks) a moment after
	// the client hangs up: bounded at 10 s here, in practice milliseconds.
	deadline := time.Now().Add(10 * time.Second)
	for {
		rel, err := b.Acquire(ctx, "k3")
		if err == nil {
			rel()
			break
		}
		if !errors.Is(err, ErrInFlight) || time.Now().After(deadline) {
			t.Fatalf("after the holder's session ended: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// latencyProxy forwards loopback TCP connections to target, delivering
// every chunk oneWay later in each direction (a PostgreSQL some
// milliseconds away), and returns its address.
func latencyProxy(t *testing.T, target string, oneWay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	pipe := func(dst, src net.Conn) {
		type chunk struct {
			b  []byte
			at time.Time
		}
		q := make(chan chunk, 1024)
		go func() {
			defer close(q)
			for {
				b := make([]byte, 32<<10)
				n, err := src.Read(b)
				if n > 0 {
					q <- chunk{b[:n], time.Now().Add(oneWay)}
				}
				if err != nil {
					return
				}
			}
		}()
		for c := range q {
			time.Sleep(time.Until(c.at))
			if _, err := dst.Write(c.b); err != nil {
				break
			}
		}
		_ = dst.Close()
		_ = src.Close()
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			go pipe(s, c)
			go pipe(c, s)
		}
	}()
	return ln.Addr().String()
}

// viaProxy is url with its host:port replaced by a latencyProxy's.
func viaProxy(t *testing.T, dbURL string, oneWay time.Duration) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil || u.Host == "" {
		t.Skipf("needs a postgres:// URL with a host, not %q", dbURL)
	}
	u.Host = latencyProxy(t, u.Host, oneWay)
	return u.String()
}

// Under load the requests queue for the process's one locking connection;
// a request that waited longer than a statement may take still gets its
// lock, and no request's wait costs the others theirs: 200 keys held at
// once on one replica (10 ms from PostgreSQL: 20 ms a statement, 4 s for
// the queue, twice the statement timeout) are all 409 on the other, none
// is degraded, and once released every key is free on the other.
func TestLocksUnderLoadLoseNoLock(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	log := slog.New(slog.DiscardHandler)
	degA := prometheus.NewCounter(prometheus.CounterOpts{Name: "a"})
	degB := prometheus.NewCounter(prometheus.CounterOpts{Name: "b"})
	a := NewLocks(viaProxy(t, dbURL, 10*time.Millisecond), log, degA)
	defer a.Close()
	b := NewLocks(dbURL, log, degB)
	defer b.Close()
	ctx := context.Background()

	const n = 200
	key := func(i int) string { return fmt.Sprintf("load-%d", i) }
	releases := make([]func(), n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range n {
		wg.Go(func() { releases[i], errs[i] = a.Acquire(ctx, key(i)) })
	}
	wg.Wait()
	t.Logf("%d locks taken on A in %s", n, time.Since(t0).Round(time.Millisecond))
	for i, err := range errs {
		if err != nil {
			t.Fatalf("A: acquire %s: %v", key(i), err)
		}
	}
	lost := 0
	for i := range n {
		rel, err := b.Acquire(ctx, key(i))
		if err == nil {
			lost++
			rel()
		} else if !errors.Is(err, ErrInFlight) {
			t.Fatalf("B: acquire %s: %v", key(i), err)
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d keys held on A were free on B: their advisory locks were lost", lost, n)
	}
	if d := counterValue(t, degA); d != 0 {
		t.Errorf("A's degraded counter: %v, want 0", d)
	}

	t0 = time.Now()
	for i := range n {
		wg.Go(releases[i])
	}
	wg.Wait()
	t.Logf("%d locks released on A in %s", n, time.Since(t0).Round(time.Millisecond))
	for i := range n {
		rel, err := b.Acquire(ctx, key(i))
		if err != nil {
			t.Fatalf("B: %s after A released it: %v", key(i), err)
		}
		rel()
	}
	if d := counterValue(t, degA) + counterValue(t, degB); d != 0 {
		t.Errorf("degraded counters after release: %v, want 0", d)
	}
}

// A request whose client goes away while its lock statement is on the
// connection costs nobody else their lock: the statement finishes on its
// own clock and the session stays. A request cancelled while it waits its
// turn gives up at once.
func TestLocksCallerCancelKeepsSession(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	log := slog.New(slog.DiscardHandler)
	degA := prometheus.NewCounter(prometheus.CounterOpts{Name: "a"})
	a := NewLocks(viaProxy(t, dbURL, 50*time.Millisecond), log, degA)
	defer a.Close()
	b := NewLocks(dbURL, log, prometheus.NewCounter(prometheus.CounterOpts{Name: "b"}))
	defer b.Close()
	ctx := context.Background()

	relHeld, err := a.Acquire(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	// Cancelled mid-statement (a statement takes 100 ms here).
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(30*time.Millisecond, cancel)
	if rel, err := a.Acquire(cctx, "gone"); err == nil {
		rel()
	}
	// Cancelled while waiting its turn behind a slow statement: the turn
	// is held here, as a statement holds it, until the request returned,
	// so that it can only have returned without it.
	a.turn <- struct{}{}
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Millisecond)
	type acquired struct {
		rel func()
		err error
	}
	waited := make(chan acquired, 1)
	go func() {
		rel, err := a.Acquire(wctx, "waiting")
		waited <- acquired{rel, err}
	}()
	var w acquired
	select {
	case w = <-waited:
	case <-time.After(time.Minute):
		a.give() // so that a.Close does not wait for it
		t.Fatal("cancelled while waiting its turn: still waiting for it a minute later, want the deadline at once")
	}
	wcancel()
	a.give()
	if w.err == nil {
		w.rel()
	}
	if !errors.Is(w.err, context.DeadlineExceeded) {
		t.Errorf("cancelled while waiting its turn: %v, want the deadline at once", w.err)
	}

	// A dropped session ends a moment later (pgx closes it in the
	// background): ask for half a second.
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if rel, err := b.Acquire(ctx, "held"); !errors.Is(err, ErrInFlight) {
			if err == nil {
				rel()
			}
			t.Fatalf("B: the key A still holds: %v, want ErrInFlight (A's session was dropped)", err)
		}
	}
	if d := counterValue(t, degA); d != 0 {
		t.Errorf("A's degraded counter: %v, want 0", d)
	}
	relHeld()
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// A session that fails with requests in flight: their locks went with it,
// so they count as degraded; the next session's lock on the same hash
// (another key, here a real hashtext collision) is not released by the
// unlock of a key taken in the session before.
func TestLocksNewSessionKeepsItsLocks(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = admin.Close(ctx) }()
	var k1, k2 string
	if err := admin.QueryRow(ctx, `SELECT min(k), max(k) FROM (SELECT 'c'||i AS k, hashtext('c'||i) AS h FROM generate_series(1, 300000) i) s
		GROUP BY h HAVING count(*) > 1 LIMIT 1`).Scan(&k1, &k2); err != nil {
		t.Fatalf("finding two keys whose hashtext collide: %v", err)
	}
	log := slog.New(slog.DiscardHandler)
	degA := prometheus.NewCounter(prometheus.CounterOpts{Name: "a"})
	a := NewLocks(dbURL, log, degA)
	a.downFor = 50 * time.Millisecond
	defer a.Close()
	b := NewLocks(dbURL, log, prometheus.NewCounter(prometheus.CounterOpts{Name: "b"}))
	defer b.Close()

	rel1, err := a.Acquire(ctx, k1)
	if err != nil {
		t.Fatal(err)
	}
	// The server ends A's session (a restart, a failover, an
	// administrator); A learns it at its next statement. Only this
	// test's database: with DATABASE_URL the server is shared with the
	// other lane of make test, whose ingress sessions hold such locks too.
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks
		WHERE locktype = 'advisory' AND classid = $1 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, lockClass); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if rel, err := a.Acquire(ctx, "probe"); err != nil {
		t.Fatal(err)
	} else {
		rel()
	}
	if d := counterValue(t, degA); d != 2 {
		t.Errorf("degraded after the session failed: %v, want 2 (%s, lost; probe, per process)", d, k1)
	}
	time.Sleep(a.downFor)
	rel2, err := a.Acquire(ctx, k2)
	if err != nil {
		t.Fatal(err)
	}
	rel1() // taken in the failed session: must not unlock k2's
	if _, err := b.Acquire(ctx, k2); !errors.Is(err, ErrInFlight) {
		t.Errorf("B: %s, held in A's new session after %s's release: %v, want ErrInFlight", k2, k1, err)
	}
	rel2()
	if rel, err := b.Acquire(ctx, k2); err != nil {
		t.Errorf("B: %s after its release: %v", k2, err)
	} else {
		rel()
	}
	if d := counterValue(t, degA); d != 2 {
		t.Errorf("degraded at the end: %v, want 2", d)
	}
}

// Two replicas' locks through PgBouncer in transaction pooling (two
// server sessions): they exclude each other per key as on a direct
// connection, and a released key is free for the other replica and for a
// third that comes later (no lock left behind on a shared session).
func TestLocksAcrossReplicasThroughTransactionPooler(t *testing.T) {
	url := pgtest.NewDatabase(t)
	b := pgbouncer.Start(t, url, pgbouncer.Options{Mode: pgbouncer.Transaction, PoolSize: 2})
	log := slog.New(slog.DiscardHandler)
	open := func(name string) (*Locks, prometheus.Counter) {
		degraded := prometheus.NewCounter(prometheus.CounterOpts{Name: name})
		cfg := ledger.DefaultConfig()
		cfg.URL, cfg.Pooler = b.URL(url), pooler.Transaction
		l, err := NewPooledLocks(cfg, log, degraded)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(l.Close)
		return l, degraded
	}
	ra, da := open("a")
	rb, db := open("b")
	ctx := context.Background()
	for round := range 3 {
		rel, err := ra.Acquire(ctx, "k")
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if _, err := rb.Acquire(ctx, "k"); !errors.Is(err, ErrInFlight) {
			t.Fatalf("round %d: the other replica's acquire of a held key: %v, want ErrInFlight", round, err)
		}
		relOther, err := rb.Acquire(ctx, "k2")
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		relOther()
		rel()
		rel, err = rb.Acquire(ctx, "k")
		if err != nil {
			t.Fatalf("round %d: after release: %v", round, err)
		}
		rel()
	}
	rc, dc := open("c")
	for _, k := range []string{"k", "k2"} {
		rel, err := rc.Acquire(ctx, k)
		if err != nil {
			t.Fatalf("a third replica's %s after every release: %v", k, err)
		}
		rel()
	}
	for name, d := range map[string]prometheus.Counter{"a": da, "b": db, "c": dc} {
		if n := counterValue(t, d); n != 0 {
			t.Errorf("replica %s: %v requests locked per process only, want 0 (the pooler answered every lock)", name, n)
		}
	}
}

// A released key leaves no lock on the server even when postgres.pooler
// is left at its default (none) and PostgreSQL is in fact reached through
// PgBouncer in transaction pooling, the commonest mis-set: either the
// locks work there or they refuse, naming postgres.pooler. Here the lock
// is taken on one server session (the only one the pooler has); another
// client's transaction then holds that session, so the unlock runs on a
// second one, which does not hold the lock: the lock stays on the shared
// session for good, and the key is "in flight" for every replica whose
// statement lands there.
func TestLocksReleasedThroughAnUnnamedTransactionPoolerLeaveNoLock(t *testing.T) {
	url := pgtest.NewDatabase(t)
	b := pgbouncer.Start(t, url, pgbouncer.Options{Mode: pgbouncer.Transaction, PoolSize: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := ledger.DefaultConfig()
	cfg.URL = b.URL(url) // postgres.pooler left at its default
	l, err := NewPooledLocks(cfg, slog.New(slog.DiscardHandler), prometheus.NewCounter(prometheus.CounterOpts{Name: "d"}))
	if err != nil {
		t.Fatalf("NewPooledLocks: %v (a refusal should name postgres.pooler)", err)
	}
	defer l.Close()
	rel, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	other, err := pgx.Connect(ctx, b.URL(url))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Close(ctx) }()
	if _, err := other.Exec(ctx, "BEGIN", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	rel()
	if _, err := other.Exec(ctx, "COMMIT", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	direct, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = direct.Close(ctx) }()
	var left int
	if err := direct.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::int8::oid AND granted`,
		int64(lockClass)).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d ingress advisory lock(s) still held on the server after the request was answered (postgres.pooler: none through a transaction pooler)", left)
	}
}
