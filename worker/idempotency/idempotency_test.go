package idempotency_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/sink/ledger"
	"github.com/dedupio/dedup/worker/idempotency"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func store(t *testing.T, o idempotency.Options) (*idempotency.Store, *pgxpool.Pool) {
	t.Helper()
	s, pool, _ := storeWithMetrics(t, o)
	return s, pool
}

func storeWithMetrics(t *testing.T, o idempotency.Options) (*idempotency.Store, *pgxpool.Pool, *prometheus.Registry) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	if err := ledger.Migrate(context.Background(), url); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	reg := prometheus.NewRegistry()
	return storeOnWithMetrics(t, pool, o, reg), pool, reg
}

// storeOn is another store of pool's keys, with its own options (another
// worker's).
func storeOn(t *testing.T, pool *pgxpool.Pool, o idempotency.Options) *idempotency.Store {
	t.Helper()
	return storeOnWithMetrics(t, pool, o, prometheus.NewRegistry())
}

func storeOnWithMetrics(t *testing.T, pool *pgxpool.Pool, o idempotency.Options, reg *prometheus.Registry) *idempotency.Store {
	t.Helper()
	s, err := idempotency.New(pool, o, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), reg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// metric sums a metric's samples (optionally those with label=value).
func metric(reg *prometheus.Registry, name string, labelValue ...string) float64 {
	mfs, _ := reg.Gather()
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			ok := len(labelValue) == 0
			for _, l := range m.GetLabel() {
				if len(labelValue) == 2 && l.GetName() == labelValue[0] && l.GetValue() == labelValue[1] {
					ok = true
				}
			}
			if ok {
				total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return total
}

var fp = []byte("params-1")

func TestCompletedResultIsReturnedWithoutRunning(t *testing.T) {
	s, _ := store(t, idempotency.DefaultOptions())
	ctx := context.Background()
	var runs atomic.Int32
	fn := func(context.Context) ([]byte, error) { runs.Add(1); return []byte(`{"sent":true}`), nil }
	for i := 0; i < 3; i++ {
		out, err := s.Do(ctx, "k1", fp, fn)
		if err != nil || string(out) != `{"sent":true}` {
			t.Fatalf("call %d: %s %v", i, out, err)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("fn ran %d times, want 1", runs.Load())
	}
}

func TestFingerprintMismatch(t *testing.T) {
	s, _ := store(t, idempotency.DefaultOptions())
	ctx := context.Background()
	if _, err := s.Do(ctx, "k1", fp, func(context.Context) ([]byte, error) { return []byte("a"), nil }); err != nil {
		t.Fatal(err)
	}
	ran := false
	_, err := s.Do(ctx, "k1", []byte("other-params"), func(context.Context) ([]byte, error) { ran = true; return nil, nil })
	var mm *idempotency.MismatchError
	if !errors.As(err, &mm) || ran {
		t.Fatalf("got %v (ran=%v), want a MismatchError without running", err, ran)
	}
}

func TestFailedAttemptIsRetried(t *testing.T) {
	s, pool := store(t, idempotency.DefaultOptions())
	ctx := context.Background()
	boom := errors.New("smtp down")
	if _, err := s.Do(ctx, "k1", fp, func(context.Context) ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("first attempt: %v", err)
	}
	var status string
	_ = pool.QueryRow(ctx, `SELECT status FROM idempotency_keys WHERE key = 'k1'`).Scan(&status)
	if status != "failed" {
		t.Fatalf("status %q after a failure, want failed", status)
	}
	out, err := s.Do(ctx, "k1", fp, func(context.Context) ([]byte, error) { return []byte("ok"), nil })
	if err != nil || string(out) != "ok" {
		t.Fatalf("retry: %s %v", out, err)
	}
	var attempts int
	_ = pool.QueryRow(ctx, `SELECT attempts FROM idempotency_keys WHERE key = 'k1'`).Scan(&attempts)
	if attempts != 2 {
		t.Fatalf("attempts %d, want 2", attempts)
	}
}

func TestLiveLeaseIsInProgress(t *testing.T) {
	s, _ := store(t, idempotency.Options{Lease: 500 * time.Millisecond, TTL: time.Hour})
	ctx := context.Background()
	holding := make(chan struct{})
	release := make(chan struct{})
	ended := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := s.Do(ctx, "k1", fp, func(context.Context) ([]byte, error) {
			close(holding)
			<-release
			return []byte("first"), nil
		})
		ended <- err
	}()
	holds(t, holding, ended, "the first holder")
	var ip *idempotency.InProgressError
	if _, err := s.Do(ctx, "k1", fp, func(context.Context) ([]byte, error) { return nil, nil }); !errors.As(err, &ip) {
		t.Fatalf("during a live lease: %v, want InProgressError", err)
	}
	close(release)
	wg.Wait()
}

// A holder that crashed leaves its key in_progress; once its lease has
// expired (it no longer renews it), the next caller takes the key over,
// runs the call again under the same key, and the takeover is counted.
func TestExpiredLeaseIsTakenOver(t *testing.T) {
	s, pool, reg := storeWithMetrics(t, idempotency.Options{Lease: 500 * time.Millisecond, TTL: time.Hour})
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO idempotency_keys (key, fingerprint, status, lease_token, lease_until, expires_at)
		VALUES ('k1', $1, 'in_progress', 'crashed-holder', now() - interval '1 second', now() + interval '1 hour')`, fp); err != nil {
		t.Fatal(err)
	}
	out, err := s.Do(ctx, "k1", fp, func(context.Context) ([]byte, error) { return []byte("taken over"), nil })
	if err != nil || string(out) != "taken over" {
		t.Fatalf("takeover: %s %v", out, err)
	}
	if n := metric(reg, "dedup_idempotency_takeovers_total"); n != 1 {
		t.Fatalf("takeovers %v, want 1", n)
	}
	var attempts int
	var takenOver bool
	_ = pool.QueryRow(ctx, `SELECT attempts, taken_over_at IS NOT NULL FROM idempotency_keys WHERE key = 'k1'`).Scan(&attempts, &takenOver)
	if attempts != 2 || !takenOver {
		t.Fatalf("attempts %d, taken over %v; want 2, true", attempts, takenOver)
	}
}

func TestWaitForAnotherHolder(t *testing.T) {
	s, _ := store(t, idempotency.Options{Lease: time.Minute, TTL: time.Hour, Wait: 5 * time.Second})
	ctx := context.Background()
	started := make(chan struct{})
	ended := make(chan error, 1)
	go func() {
		_, err := s.Do(ctx, "k1", fp, func(context.Context) ([]byte, error) {
			close(started)
			time.Sleep(300 * time.Millisecond)
			return []byte("first"), nil
		})
		ended <- err
	}()
	holds(t, started, ended, "the first holder")
	out, err := s.Do(ctx, "k1", fp, func(context.Context) ([]byte, error) { return []byte("second"), nil })
	if err != nil || string(out) != "first" {
		t.Fatalf("waiter got %s %v, want the first holder's result", out, err)
	}
}

func TestReapDeletesExpiredKeys(t *testing.T) {
	s, pool := store(t, idempotency.Options{Lease: time.Minute, TTL: time.Hour})
	ctx := context.Background()
	for _, k := range []string{"old-1", "old-2", "old-3", "fresh"} {
		if _, err := s.Do(ctx, k, fp, func(context.Context) ([]byte, error) { return []byte("x"), nil }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE key LIKE 'old-%'`); err != nil {
		t.Fatal(err)
	}
	n, err := s.Reap(ctx, 2)
	if err != nil || n != 3 {
		t.Fatalf("reaped %d (%v), want 3", n, err)
	}
	var left int
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys`).Scan(&left)
	if left != 1 {
		t.Fatalf("%d keys left, want 1", left)
	}
}
