package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupio/dedup/worker/idempotency"
)

// The reaper against a holder that stalled past its lease and its key's
// expiry (a GC pause, a partition from PostgreSQL): reaping the key must
// change nothing the holder, or the next caller, can observe. The effect
// did happen, so its record must win.

// stallAndReap makes key look as a holder that stopped renewing leaves it
// after its lease and its TTL ran out, and reaps it. The holder's renewals
// are paused meanwhile (pauseRenewals): one that ran between the two would
// give the key a new lease, and the reaper would find nothing to reap.
func stallAndReap(t *testing.T, s *idempotency.Store, pool *pgxpool.Pool, key string) {
	t.Helper()
	ctx := context.Background()
	own, resume := pauseRenewals(t, pool)
	defer resume()
	if _, err := own.Exec(ctx, `UPDATE idempotency_keys SET lease_until = now() - interval '1 second', expires_at = now() - interval '1 second' WHERE key = $1`, key); err != nil {
		t.Fatal(err)
	}
	n, err := s.Reap(ctx, 100)
	if err != nil || n != 1 {
		t.Fatalf("reaped %d (%v), want the stalled holder's key", n, err)
	}
}

// waitTakenBack waits until key, reaped, is in the table again: its
// holder's renewal took it back.
func waitTakenBack(t *testing.T, pool *pgxpool.Pool, key string) {
	t.Helper()
	for end := time.Now().Add(holderPatience); ; time.Sleep(10 * time.Millisecond) {
		var back bool
		if err := pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM idempotency_keys WHERE key = $1)`, key).Scan(&back); err != nil {
			t.Fatal(err)
		}
		if back {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("the reaped key %s was not taken back by its holder's renewal in %s", key, holderPatience)
		}
	}
}

// renewalsPaused is the advisory lock pauseRenewals holds.
const renewalsPaused = 67067

// pauseRenewals makes every UPDATE of idempotency_keys from another
// session than own (a holder's renewal) wait, before it locks a row, until
// resume: a statement-level trigger (created here, for good) asks for a
// shared advisory lock that own holds. A renewal that waits past its
// statement's timeout (a third of the lease) fails and runs again at its
// next tick, after resume. own's statements pass, and so do the reaper's
// (a DELETE). resume lets the lock go and gives own back.
func pauseRenewals(t *testing.T, pool *pgxpool.Pool) (own *pgxpool.Conn, resume func()) {
	t.Helper()
	ctx := context.Background()
	own, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE OR REPLACE FUNCTION test_renewals_paused() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_advisory_xact_lock_shared(` + fmt.Sprint(renewalsPaused) + `); RETURN NULL; END $$`,
		`CREATE OR REPLACE TRIGGER test_renewals_paused BEFORE UPDATE ON idempotency_keys FOR EACH STATEMENT EXECUTE FUNCTION test_renewals_paused()`,
		`SELECT pg_advisory_lock(` + fmt.Sprint(renewalsPaused) + `)`,
	} {
		if _, err := own.Exec(ctx, q); err != nil {
			own.Release()
			t.Fatal(err)
		}
	}
	return own, func() {
		if _, err := own.Exec(ctx, `SELECT pg_advisory_unlock_all()`); err != nil {
			t.Error(err)
		}
		own.Release()
	}
}

// The holder's late success lands although its key was reaped: the next
// call gets it and does not run the effect again.
func TestLateSuccessSurvivesTheReaper(t *testing.T) {
	s, pool := store(t, idempotency.DefaultOptions())
	ctx := context.Background()
	out, err := s.Do(ctx, "k1", fp, func(context.Context) ([]byte, error) {
		stallAndReap(t, s, pool, "k1")
		return []byte("late"), nil // the effect happened
	})
	if err != nil || string(out) != "late" {
		t.Fatalf("the stalled holder: %s %v, want its result (nobody else held the key meanwhile)", out, err)
	}
	var ran atomic.Bool
	out, err = s.Do(ctx, "k1", fp, func(context.Context) ([]byte, error) { ran.Store(true); return []byte("again"), nil })
	if err != nil || ran.Load() || string(out) != "late" {
		t.Fatalf("after the reaped holder's success: %s %v (ran %v), want the late result without running", out, err, ran.Load())
	}
}

// Reaped, then taken by a newcomer that is still running when the stalled
// holder's success arrives: the success is stored, the newcomer's call is
// cancelled by its renewal (its lease is gone) and it is told; the next
// call gets the first success. The stalled holder renews its lease only
// after an hour (a stall: no renewal of its own takes the reaped key back
// before the newcomer does), the newcomer every 200 ms.
func TestLateSuccessAfterTheReaperBeatsANewcomer(t *testing.T) {
	s, pool := store(t, idempotency.Options{Lease: time.Hour, TTL: time.Hour})
	other := storeOn(t, pool, idempotency.Options{Lease: 600 * time.Millisecond, TTL: time.Hour})
	ctx := context.Background()
	newcomer := make(chan error, 1)
	holding := make(chan struct{})
	var cause error
	_, lateErr := s.Do(ctx, "k1", fp, func(context.Context) ([]byte, error) {
		stallAndReap(t, s, pool, "k1")
		go func() {
			_, err := other.Do(ctx, "k1", fp, func(ctx context.Context) ([]byte, error) {
				close(holding)
				select {
				case <-ctx.Done():
					cause = context.Cause(ctx)
					return nil, ctx.Err()
				case <-time.After(holderPatience):
					return []byte("newcomer"), nil
				}
			})
			newcomer <- err
		}()
		holds(t, holding, newcomer, "the newcomer")
		return []byte("late"), nil
	})
	var ll *idempotency.LeaseLostError
	if !errors.As(lateErr, &ll) || !ll.Stored {
		t.Fatalf("the stalled holder: %v, want a LeaseLostError with its success stored", lateErr)
	}
	if err := <-newcomer; !errors.As(err, &ll) || ll.Stored || !errors.Is(cause, idempotency.ErrLeaseLost) {
		t.Fatalf("the newcomer: %v (cause %v), want a LeaseLostError, its call cancelled for the lost lease", err, cause)
	}
	out, err := s.Do(ctx, "k1", fp, func(context.Context) ([]byte, error) { t.Error("ran again"); return nil, nil })
	if err != nil || string(out) != "late" {
		t.Fatalf("stored %s %v, want the late success", out, err)
	}
}

// A holder whose key was reaped while it stalled takes it back at its next
// renewal (nobody else took it): its call is not cancelled, and a caller
// that arrives after that finds the key held, not absent.
func TestRenewalTakesBackAReapedKey(t *testing.T) {
	s, pool := store(t, idempotency.Options{Lease: 600 * time.Millisecond, TTL: time.Hour})
	ctx := context.Background()
	var cancelled atomic.Bool
	out, err := s.Do(ctx, "k1", fp, func(ctx context.Context) ([]byte, error) {
		stallAndReap(t, s, pool, "k1")
		waitTakenBack(t, pool, "k1") // by a renewal (every 200ms)
		var ip *idempotency.InProgressError
		if _, err := s.Do(context.Background(), "k1", fp, func(context.Context) ([]byte, error) {
			t.Error("a second caller ran the effect while the holder was back")
			return nil, nil
		}); !errors.As(err, &ip) {
			t.Errorf("a second caller after the holder's renewal: %v, want InProgressError", err)
		}
		cancelled.Store(ctx.Err() != nil)
		return []byte("done"), nil
	})
	if err != nil || string(out) != "done" || cancelled.Load() {
		t.Fatalf("holder: %s %v (cancelled %v), want its result and its call not cancelled", out, err, cancelled.Load())
	}
}

// Two generations and the reaper: generation 1's holder stalls, its key is
// reaped, generation 2 takes the absent key, is refused (a permanent
// failure) and its run fails; then generation 1's late success arrives. The
// success is stored over the failure (the effect happened): generation 3
// reads it and does not run, and generation 2's own retry reads it too.
func TestLateSuccessAfterTheReaperOverANewerFailure(t *testing.T) {
	s, pool := store(t, idempotency.DefaultOptions())
	ctx := context.Background()
	var runs atomic.Int32
	_, lateErr := s.DoInGeneration(ctx, "k1", 1, fpOld, func(context.Context) ([]byte, error) {
		runs.Add(1)
		stallAndReap(t, s, pool, "k1")
		if _, err := s.DoInGeneration(ctx, "k1", 2, fpNew, permanent("400")); !idempotency.IsPermanent(err) {
			t.Errorf("generation 2 on the reaped key: %v, want its own 400", err)
		}
		return []byte("late"), nil
	})
	var ll *idempotency.LeaseLostError
	if !errors.As(lateErr, &ll) || !ll.Stored {
		t.Fatalf("generation 1's late success: %v, want a LeaseLostError, stored", lateErr)
	}
	for _, gen := range []int{3, 2} {
		out, err := s.DoInGeneration(ctx, "k1", gen, fpNew, counted(&runs, "again"))
		if err != nil || string(out) != "late" {
			t.Errorf("generation %d: %s %v, want the late success", gen, out, err)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("ran %d times, want 1", runs.Load())
	}
}
