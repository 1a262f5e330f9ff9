package idempotency_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dedupio/dedup/worker/idempotency"
)

// The store's edges (issue 19): each test here failed on the store before
// leases were fenced, renewed and detached from the caller's deadline.

// A call slower than the lease keeps its lease (the holder renews it), so a
// retry that arrives meanwhile does not run the effect a second time.
func TestSlowHolderKeepsItsLease(t *testing.T) {
	s, _ := store(t, idempotency.Options{Lease: 300 * time.Millisecond, TTL: time.Hour})
	ctx := context.Background()
	holding := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := s.Do(ctx, "k1", fp, func(context.Context) ([]byte, error) {
			close(holding)
			time.Sleep(1200 * time.Millisecond) // four leases long
			return []byte("slow"), nil
		})
		done <- err
	}()
	<-holding
	time.Sleep(700 * time.Millisecond) // past the first lease
	var ran atomic.Bool
	_, err := s.Do(ctx, "k1", fp, func(context.Context) ([]byte, error) { ran.Store(true); return []byte("retry"), nil })
	if ran.Load() || err == nil {
		t.Fatalf("a retry during a slow call: err %v, ran %v; want the call still in progress and not run again", err, ran.Load())
	}
	if err := <-done; err != nil {
		t.Fatalf("slow holder: %v", err)
	}
	out, err := s.Do(ctx, "k1", fp, func(context.Context) ([]byte, error) { t.Error("ran again"); return nil, nil })
	if err != nil || string(out) != "slow" {
		t.Fatalf("stored: %s %v", out, err)
	}
}

// A holder whose lease was taken over (it stalled past it) is told: its
// success is not silently returned as if it were the only one.
func TestLostLeaseIsReported(t *testing.T) {
	s, pool := store(t, idempotency.DefaultOptions())
	ctx := context.Background()
	_, err := s.Do(ctx, "k1", fp, func(ctx context.Context) ([]byte, error) {
		// Another holder took the key over while this one stalled.
		if _, err := pool.Exec(ctx, `UPDATE idempotency_keys SET lease_token = 'other-holder', lease_until = now() + interval '1 minute' WHERE key = 'k1'`); err != nil {
			return nil, err
		}
		return []byte("mine"), nil
	})
	if err == nil {
		t.Fatal("a holder that lost its lease got no error")
	}
}

// The effect happened before the caller's deadline passed: its outcome is
// stored all the same, and the next call gets it without running again.
func TestOutcomeStoredAfterTheDeadline(t *testing.T) {
	s, _ := store(t, idempotency.DefaultOptions())
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, _ = s.Do(ctx, "k1", fp, func(context.Context) ([]byte, error) {
		time.Sleep(400 * time.Millisecond) // the call outlives the deadline
		return []byte("sent"), nil
	})
	out, err := s.Do(context.Background(), "k1", fp, func(context.Context) ([]byte, error) { t.Error("ran again"); return nil, nil })
	if err != nil || string(out) != "sent" {
		t.Fatalf("after the deadline: %s %v, want the stored outcome", out, err)
	}
}

// An expired key is absent, whether or not the reaper has run: the call
// runs again (and may use other parameters).
func TestExpiredKeyIsAbsent(t *testing.T) {
	s, pool := store(t, idempotency.DefaultOptions())
	ctx := context.Background()
	if _, err := s.Do(ctx, "k1", fp, func(context.Context) ([]byte, error) { return []byte("old"), nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE idempotency_keys SET expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	out, err := s.Do(ctx, "k1", []byte("other-params"), func(context.Context) ([]byte, error) { return []byte("new"), nil })
	if err != nil || string(out) != "new" {
		t.Fatalf("an expired key: %s %v, want it run again as new", out, err)
	}
}

// The reaper never deletes a key whose holder is still running, even past
// the key's TTL.
func TestReaperSparesALiveHolder(t *testing.T) {
	s, pool := store(t, idempotency.Options{Lease: 300 * time.Millisecond, TTL: 200 * time.Millisecond})
	ctx := context.Background()
	holding := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.Do(ctx, "k1", fp, func(context.Context) ([]byte, error) {
			close(holding)
			time.Sleep(1200 * time.Millisecond)
			return []byte("x"), nil
		})
	}()
	<-holding
	time.Sleep(700 * time.Millisecond)
	if _, err := s.Reap(ctx, 100); err != nil {
		t.Fatal(err)
	}
	var n int
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE status = 'in_progress'`).Scan(&n)
	if n != 1 {
		t.Fatalf("%d in-progress keys after a reap during the call, want 1", n)
	}
	<-done
}

// A late success is never dropped: the holder that took over failed, and
// the stalled holder's effect did happen, so its result is stored and the
// next call does not run the effect a third time.
func TestLateSuccessIsKept(t *testing.T) {
	s, pool := store(t, idempotency.DefaultOptions())
	ctx := context.Background()
	_, _ = s.Do(ctx, "k1", fp, func(ctx context.Context) ([]byte, error) {
		// Meanwhile another holder took over and failed.
		if _, err := pool.Exec(ctx, `UPDATE idempotency_keys SET status = 'failed', lease_token = NULL, lease_until = NULL, error = 'smtp down' WHERE key = 'k1'`); err != nil {
			return nil, err
		}
		return []byte("late"), nil
	})
	var ran atomic.Bool
	out, err := s.Do(ctx, "k1", fp, func(context.Context) ([]byte, error) { ran.Store(true); return []byte("third"), nil })
	if err != nil || ran.Load() || string(out) != "late" {
		t.Fatalf("after a late success: %s %v (ran %v), want the late result without running", out, err, ran.Load())
	}
}
