package idempotency_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupio/dedup/internal/pgtest"
	"github.com/dedupio/dedup/sink/ledger"
	"github.com/dedupio/dedup/worker/idempotency"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func store(t *testing.T, o idempotency.Options) (*idempotency.Store, *pgxpool.Pool) {
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
	s, err := idempotency.New(pool, o)
	if err != nil {
		t.Fatal(err)
	}
	return s, pool
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

func TestLiveLeaseIsInProgressAndExpiredLeaseIsTakenOver(t *testing.T) {
	s, _ := store(t, idempotency.Options{Lease: 500 * time.Millisecond, TTL: time.Hour})
	ctx := context.Background()
	holding := make(chan struct{})
	release := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	var firstErr error
	go func() {
		defer wg.Done()
		// A holder that stalls past its lease (a hung or dead worker).
		_, firstErr = s.Do(ctx, "k1", fp, func(context.Context) ([]byte, error) {
			close(holding)
			<-release
			return []byte("late"), nil
		})
	}()
	<-holding
	var ip *idempotency.InProgressError
	if _, err := s.Do(ctx, "k1", fp, func(context.Context) ([]byte, error) { return nil, nil }); !errors.As(err, &ip) {
		t.Fatalf("during a live lease: %v, want InProgressError", err)
	}
	time.Sleep(700 * time.Millisecond) // the lease expires
	out, err := s.Do(ctx, "k1", fp, func(context.Context) ([]byte, error) { return []byte("taken over"), nil })
	if err != nil || string(out) != "taken over" {
		t.Fatalf("takeover: %s %v", out, err)
	}
	close(release)
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("stale holder: %v", firstErr)
	}
	// The stale holder's late outcome does not overwrite the new holder's.
	out, err = s.Do(ctx, "k1", fp, func(context.Context) ([]byte, error) { t.Fatal("ran again"); return nil, nil })
	if err != nil || string(out) != "taken over" {
		t.Fatalf("stored: %s %v", out, err)
	}
}

func TestWaitForAnotherHolder(t *testing.T) {
	s, _ := store(t, idempotency.Options{Lease: time.Minute, TTL: time.Hour, Wait: 5 * time.Second})
	ctx := context.Background()
	started := make(chan struct{})
	go func() {
		_, _ = s.Do(ctx, "k1", fp, func(context.Context) ([]byte, error) {
			close(started)
			time.Sleep(300 * time.Millisecond)
			return []byte("first"), nil
		})
	}()
	<-started
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
