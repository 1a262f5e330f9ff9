package idempotency_test

import (
	"context"
	"errors"
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
	// The lease is 1s, renewed every 333ms: a loaded machine may delay a
	// renewal by a few hundred milliseconds without losing the lease.
	s, _ := store(t, idempotency.Options{Lease: time.Second, TTL: time.Hour})
	ctx := context.Background()
	holding := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := s.Do(ctx, "k1", fp, func(context.Context) ([]byte, error) {
			close(holding)
			time.Sleep(3 * time.Second) // three leases long
			return []byte("slow"), nil
		})
		done <- err
	}()
	holds(t, holding, done, "the slow holder")
	time.Sleep(1500 * time.Millisecond) // past the first lease
	var ran atomic.Bool
	_, err := s.Do(ctx, "k1", fp, func(context.Context) ([]byte, error) { ran.Store(true); return []byte("retry"), nil })
	var ip *idempotency.InProgressError
	if ran.Load() || !errors.As(err, &ip) {
		t.Fatalf("a retry during a slow call: err %v, ran %v; want InProgressError, not run again", err, ran.Load())
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
// success is not silently returned as if it were the only one; the double
// execution is counted, and the other holder's outcome stands.
func TestLostLeaseIsATypedErrorAndCounted(t *testing.T) {
	s, pool, reg := storeWithMetrics(t, idempotency.DefaultOptions())
	ctx := context.Background()
	_, err := s.Do(ctx, "k1", fp, func(ctx context.Context) ([]byte, error) {
		// Another holder took the key over while this one stalled.
		if _, err := pool.Exec(ctx, `UPDATE idempotency_keys SET lease_token = 'other-holder', lease_until = now() + interval '1 minute' WHERE key = 'k1'`); err != nil {
			return nil, err
		}
		return []byte("mine"), nil
	})
	var ll *idempotency.LeaseLostError
	if !errors.As(err, &ll) || !ll.Stored {
		t.Fatalf("a holder that lost its lease: %v, want a LeaseLostError with its success stored (the key had none)", err)
	}
	if n := metric(reg, "dedup_idempotency_lost_leases_total"); n != 1 {
		t.Fatalf("lost leases %v, want 1", n)
	}
	// When the other holder has stored its success first, that success
	// stands and this holder is told as well.
	_, err = s.Do(ctx, "k2", fp, func(ctx context.Context) ([]byte, error) {
		if _, err := pool.Exec(ctx, `UPDATE idempotency_keys SET status = 'completed', result = 'theirs', lease_token = NULL, lease_until = NULL WHERE key = 'k2'`); err != nil {
			return nil, err
		}
		return []byte("mine"), nil
	})
	if !errors.As(err, &ll) || ll.Stored {
		t.Fatalf("after the other holder's success: %v, want a LeaseLostError, not stored", err)
	}
	out, err := s.Do(ctx, "k2", fp, func(context.Context) ([]byte, error) { t.Error("ran again"); return nil, nil })
	if err != nil || string(out) != "theirs" {
		t.Fatalf("stored %s %v, want the first success", out, err)
	}
	if n := metric(reg, "dedup_idempotency_lost_leases_total"); n != 2 {
		t.Fatalf("lost leases %v, want 2", n)
	}
}

// The holder's renewal notices the lost lease while the call still runs:
// the call's context is cancelled (cause ErrLeaseLost), the holder gets a
// LeaseLostError, and its failure does not overwrite the other holder's
// lease.
func TestLeaseLostMidCallCancelsTheCall(t *testing.T) {
	s, pool, reg := storeWithMetrics(t, idempotency.Options{Lease: 300 * time.Millisecond, TTL: time.Hour})
	ctx := context.Background()
	var cause error
	_, err := s.Do(ctx, "k1", fp, func(ctx context.Context) ([]byte, error) {
		if _, err := pool.Exec(ctx, `UPDATE idempotency_keys SET lease_token = 'other-holder', lease_until = now() + interval '1 minute' WHERE key = 'k1'`); err != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
			return nil, ctx.Err()
		case <-time.After(5 * time.Second):
			return []byte("never told"), nil
		}
	})
	var ll *idempotency.LeaseLostError
	if !errors.As(err, &ll) || ll.Stored || !errors.Is(cause, idempotency.ErrLeaseLost) {
		t.Fatalf("got %v (call's context cause %v), want a LeaseLostError, nothing stored, cause ErrLeaseLost", err, cause)
	}
	if n := metric(reg, "dedup_idempotency_lost_leases_total"); n != 1 {
		t.Fatalf("lost leases %v, want 1", n)
	}
	var token string
	_ = pool.QueryRow(ctx, `SELECT lease_token FROM idempotency_keys WHERE key = 'k1'`).Scan(&token)
	if token != "other-holder" {
		t.Fatalf("lease token %q, want the other holder's", token)
	}
}

// The effect happened before the caller's deadline passed: its outcome is
// stored all the same, and the next call gets it without running again.
func TestOutcomeStoredAfterTheDeadline(t *testing.T) {
	s, _ := store(t, idempotency.DefaultOptions())
	ctx := newPassingDeadline()
	_, _ = s.Do(ctx, "k1", fp, func(fctx context.Context) ([]byte, error) {
		ctx.pass()
		<-fctx.Done() // the call outlives the deadline
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
	s, pool := store(t, idempotency.Options{Lease: time.Second, TTL: 200 * time.Millisecond})
	ctx := context.Background()
	holding := make(chan struct{})
	done := make(chan struct{})
	ended := make(chan error, 1)
	go func() {
		defer close(done)
		_, err := s.Do(ctx, "k1", fp, func(context.Context) ([]byte, error) {
			close(holding)
			time.Sleep(3 * time.Second)
			return []byte("x"), nil
		})
		ended <- err
	}()
	holds(t, holding, ended, "the live holder")
	time.Sleep(1500 * time.Millisecond) // past the first lease and the TTL
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
	_, lateErr := s.Do(ctx, "k1", fp, func(ctx context.Context) ([]byte, error) {
		// Meanwhile another holder took over and failed.
		if _, err := pool.Exec(ctx, `UPDATE idempotency_keys SET status = 'failed', lease_token = NULL, lease_until = NULL, error = 'smtp down' WHERE key = 'k1'`); err != nil {
			return nil, err
		}
		return []byte("late"), nil
	})
	var ll *idempotency.LeaseLostError
	if !errors.As(lateErr, &ll) || !ll.Stored {
		t.Fatalf("the late holder got %v, want a LeaseLostError with its result stored", lateErr)
	}
	var ran atomic.Bool
	out, err := s.Do(ctx, "k1", fp, func(context.Context) ([]byte, error) { ran.Store(true); return []byte("third"), nil })
	if err != nil || ran.Load() || string(out) != "late" {
		t.Fatalf("after a late success: %s %v (ran %v), want the late result without running", out, err, ran.Load())
	}
}

// A permanent failure is stored and returned to every later call, without
// running the call again; a retryable one runs again.
func TestPermanentFailureIsStored(t *testing.T) {
	s, pool := store(t, idempotency.DefaultOptions())
	ctx := context.Background()
	var runs atomic.Int32
	fn := func(context.Context) ([]byte, error) {
		runs.Add(1)
		return nil, idempotency.Permanent(errors.New("mailbox does not exist"))
	}
	for i := 0; i < 3; i++ {
		_, err := s.Do(ctx, "k1", fp, fn)
		if !idempotency.IsPermanent(err) || err.Error() != "mailbox does not exist" {
			t.Fatalf("call %d: %v, want the permanent error", i, err)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("ran %d times, want 1", runs.Load())
	}
	var status string
	_ = pool.QueryRow(ctx, `SELECT status FROM idempotency_keys WHERE key = 'k1'`).Scan(&status)
	if status != idempotency.StatusFailedPermanent {
		t.Fatalf("status %s", status)
	}
}

// Maintain reaps at once (not an interval after start) and sets the
// keys-by-state gauge; the reaper counts what it deletes.
func TestMaintainReapsAtStartAndCounts(t *testing.T) {
	s, pool, reg := storeWithMetrics(t, idempotency.DefaultOptions())
	ctx := context.Background()
	for _, k := range []string{"old", "done-1", "done-2"} {
		if _, err := s.Do(ctx, k, fp, func(context.Context) ([]byte, error) { return []byte("x"), nil }); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = s.Do(ctx, "bad", fp, func(context.Context) ([]byte, error) { return nil, errors.New("down") })
	if _, err := pool.Exec(ctx, `UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE key = 'old'`); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); s.Maintain(mctx, time.Hour, 100) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(5 * time.Second)
	for metric(reg, "dedup_idempotency_reaped_keys_total") != 1 || metric(reg, "dedup_idempotency_keys", "state", "completed") != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("reaped %v, completed keys %v; want 1 and 2 soon after start",
				metric(reg, "dedup_idempotency_reaped_keys_total"), metric(reg, "dedup_idempotency_keys", "state", "completed"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := metric(reg, "dedup_idempotency_keys", "state", "failed"); n != 1 {
		t.Fatalf("failed keys %v, want 1", n)
	}
}
