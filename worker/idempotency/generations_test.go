package idempotency_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupio/dedup/worker/idempotency"
)

// Generations: a failed outcome belongs to the run (generation) that
// failed. A newer generation tries again, under the same key; the same
// generation gets what it got before; an older one never runs.

var (
	fpOld = []byte("url=/broken")
	fpNew = []byte("url=/fixed")
)

func permanent(msg string) func(context.Context) ([]byte, error) {
	return func(context.Context) ([]byte, error) { return nil, idempotency.Permanent(errors.New(msg)) }
}

func keyRow(t *testing.T, pool *pgxpool.Pool, key string) (status string, gen int) {
	t.Helper()
	if err := pool.QueryRow(context.Background(), `SELECT status, generation FROM idempotency_keys WHERE key = $1`, key).Scan(&status, &gen); err != nil {
		t.Fatal(err)
	}
	return status, gen
}

// counted is fn that counts its runs and returns out.
func counted(n *atomic.Int32, out string) func(context.Context) ([]byte, error) {
	return func(context.Context) ([]byte, error) { n.Add(1); return []byte(out), nil }
}

// The 400 of generation 1 is answered once within generation 1; generation
// 2 runs the call again (with the operator's new parameters) and completes;
// from then on every generation gets that success without running.
func TestNewerGenerationRetriesAPermanentFailure(t *testing.T) {
	s, pool := store(t, idempotency.DefaultOptions())
	ctx := context.Background()
	var runs atomic.Int32
	bad := func(c context.Context) ([]byte, error) { runs.Add(1); return permanent("400 Bad Request")(c) }
	for i := 0; i < 2; i++ {
		if _, err := s.DoInGeneration(ctx, "k", 1, fpOld, bad); !idempotency.IsPermanent(err) {
			t.Fatalf("generation 1, call %d: %v, want the permanent error", i, err)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("generation 1 ran %d times, want 1 (a permanent failure is answered once)", runs.Load())
	}
	out, err := s.DoInGeneration(ctx, "k", 2, fpNew, counted(&runs, "ok"))
	if err != nil || string(out) != "ok" || runs.Load() != 2 {
		t.Fatalf("generation 2: %s %v after %d runs, want it run again and ok", out, err, runs.Load())
	}
	if st, gen := keyRow(t, pool, "k"); st != idempotency.StatusCompleted || gen != 2 {
		t.Fatalf("key %s, generation %d; want completed by generation 2", st, gen)
	}
	for _, c := range []struct {
		gen int
		fp  []byte
	}{{2, fpNew}, {3, fpOld}, {1, fpOld}, {0, fpNew}} {
		out, err := s.DoInGeneration(ctx, "k", c.gen, c.fp, counted(&runs, "again"))
		if err != nil || string(out) != "ok" {
			t.Errorf("generation %d after the success: %s %v, want the stored success", c.gen, out, err)
		}
	}
	if runs.Load() != 2 {
		t.Fatalf("ran %d times in all, want 2", runs.Load())
	}
}

// The same generation never calls twice once an outcome is final, and a
// retryable failure is retried within it (its retry policy), under the
// same parameters only.
func TestSameGenerationKeepsItsOutcome(t *testing.T) {
	s, _ := store(t, idempotency.DefaultOptions())
	ctx := context.Background()
	boom := errors.New("503")
	if _, err := s.DoInGeneration(ctx, "k", 4, fpOld, func(context.Context) ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	var mm *idempotency.MismatchError
	if _, err := s.DoInGeneration(ctx, "k", 4, fpNew, permanent("never")); !errors.As(err, &mm) {
		t.Fatalf("the same generation with other parameters: %v, want a MismatchError", err)
	}
	var runs atomic.Int32
	if out, err := s.DoInGeneration(ctx, "k", 4, fpOld, counted(&runs, "ok")); err != nil || string(out) != "ok" {
		t.Fatalf("retry in the same generation: %s %v", out, err)
	}
	if _, err := s.DoInGeneration(ctx, "k", 4, fpNew, counted(&runs, "x")); !errors.As(err, &mm) {
		t.Fatalf("after the success, the same generation with other parameters: %v, want a MismatchError", err)
	}
	if runs.Load() != 1 {
		t.Fatalf("ran %d times, want 1", runs.Load())
	}
}

// An older generation (a stale execution) never runs and never changes
// the key; it gets a stored success, and nothing else.
func TestOlderGenerationIsSuperseded(t *testing.T) {
	s, pool := store(t, idempotency.DefaultOptions())
	ctx := context.Background()
	var runs atomic.Int32
	for _, st := range []struct {
		key string
		fn  func(context.Context) ([]byte, error)
	}{
		{"failed", func(context.Context) ([]byte, error) { return nil, errors.New("503") }},
		{"permanent", permanent("400")},
	} {
		_, _ = s.DoInGeneration(ctx, st.key, 3, fpNew, st.fn)
		before, _ := keyRow(t, pool, st.key)
		var se *idempotency.SupersededError
		_, err := s.DoInGeneration(ctx, st.key, 2, fpNew, counted(&runs, "stale"))
		if !errors.As(err, &se) || se.Generation != 2 || se.KeyGeneration != 3 {
			t.Errorf("generation 2 on a %s key of generation 3: %v, want a SupersededError", st.key, err)
		}
		if after, gen := keyRow(t, pool, st.key); after != before || gen != 3 {
			t.Errorf("the %s key after the stale call: %s, generation %d; want it unchanged", st.key, after, gen)
		}
	}
	if _, err := s.DoInGeneration(ctx, "done", 3, fpNew, counted(&runs, "ok")); err != nil {
		t.Fatal(err)
	}
	if out, err := s.DoInGeneration(ctx, "done", 1, fpOld, counted(&runs, "stale")); err != nil || string(out) != "ok" {
		t.Errorf("an older generation on a completed key: %s %v, want the stored success", out, err)
	}
	if runs.Load() != 1 {
		t.Fatalf("ran %d times, want 1 (the stale calls never run)", runs.Load())
	}
}

// Generation 0 (a run started without one, or Do) is unfenced: it keeps a
// permanent failure of any generation, retries a retryable one without
// lowering the key's generation, and is never superseded.
func TestGenerationZeroIsUnfenced(t *testing.T) {
	s, pool := store(t, idempotency.DefaultOptions())
	ctx := context.Background()
	_, _ = s.DoInGeneration(ctx, "perm", 2, fp, permanent("400"))
	var runs atomic.Int32
	if _, err := s.Do(ctx, "perm", fp, counted(&runs, "x")); !idempotency.IsPermanent(err) {
		t.Fatalf("generation 0 on a permanent failure: %v, want it stored", err)
	}
	_, _ = s.DoInGeneration(ctx, "soft", 2, fp, func(context.Context) ([]byte, error) { return nil, errors.New("503") })
	if _, err := s.Do(ctx, "soft", fp, permanent("400 now")); !idempotency.IsPermanent(err) {
		t.Fatalf("generation 0 retrying: %v", err)
	}
	if st, gen := keyRow(t, pool, "soft"); st != idempotency.StatusFailedPermanent || gen != 2 {
		t.Fatalf("key %s, generation %d; want failed_permanent, still generation 2", st, gen)
	}
	if _, err := s.DoInGeneration(ctx, "soft", 2, fp, counted(&runs, "x")); !idempotency.IsPermanent(err) {
		t.Fatalf("generation 2 after generation 0's permanent failure: %v, want it stored", err)
	}
	if out, err := s.DoInGeneration(ctx, "soft", 3, fp, counted(&runs, "ok")); err != nil || string(out) != "ok" {
		t.Fatalf("generation 3: %s %v, want it run", out, err)
	}
	if runs.Load() != 1 {
		t.Fatalf("ran %d times, want 1", runs.Load())
	}
}

// Interleavings of two generations.

// A newer generation never takes a live lease of an older one (its holder
// may be making the effect right now): it waits; once the older holder
// fails, it runs.
func TestNewerGenerationWaitsForAnOlderLiveHolder(t *testing.T) {
	// A 1s lease renewed every 333ms: a loaded machine may delay a
	// renewal by a few hundred milliseconds without losing the lease.
	s, _ := store(t, idempotency.Options{Lease: time.Second, TTL: time.Hour})
	ctx := context.Background()
	holding, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := s.DoInGeneration(ctx, "k", 1, fpOld, func(context.Context) ([]byte, error) {
			close(holding)
			<-release // renewed meanwhile, past its lease
			return nil, idempotency.Permanent(errors.New("400"))
		})
		done <- err
	}()
	holds(t, holding, done, "generation 1's holder")
	time.Sleep(1500 * time.Millisecond) // past the first lease
	var ran atomic.Int32
	var ip *idempotency.InProgressError
	if _, err := s.DoInGeneration(ctx, "k", 2, fpNew, counted(&ran, "x")); !errors.As(err, &ip) {
		t.Fatalf("generation 2 during generation 1's call: %v, want InProgressError", err)
	}
	close(release)
	if err := <-done; !idempotency.IsPermanent(err) {
		t.Fatalf("generation 1: %v", err)
	}
	if out, err := s.DoInGeneration(ctx, "k", 2, fpNew, counted(&ran, "ok")); err != nil || string(out) != "ok" || ran.Load() != 1 {
		t.Fatalf("generation 2 after generation 1 failed: %s %v (ran %d), want it run once", out, err, ran.Load())
	}
}

// Generation 1's holder stalls past its lease; generation 2 takes the key
// over (new parameters) and is still running when generation 1's late
// success arrives: the success is stored (the effect happened), generation
// 2's call is cancelled and told, and generation 2's retry reads the
// success rather than a mismatch or a third call. Generation 1's late
// failure, instead, would overwrite nothing.
func TestOlderGenerationsLateSuccessWinsOverANewerHolder(t *testing.T) {
	s, pool := store(t, idempotency.Options{Lease: 600 * time.Millisecond, TTL: time.Hour})
	ctx := context.Background()
	var runs atomic.Int32
	newer := make(chan error, 1)
	holding := make(chan struct{})
	_, lateErr := s.DoInGeneration(ctx, "k", 1, fpOld, func(context.Context) ([]byte, error) {
		runs.Add(1)
		if _, err := pool.Exec(ctx, `UPDATE idempotency_keys SET lease_until = now() - interval '1 second' WHERE key = 'k'`); err != nil {
			return nil, err
		}
		go func() {
			_, err := s.DoInGeneration(ctx, "k", 2, fpNew, func(ctx context.Context) ([]byte, error) {
				runs.Add(1)
				close(holding)
				<-ctx.Done()
				return nil, ctx.Err()
			})
			newer <- err
		}()
		holds(t, holding, newer, "generation 2's takeover")
		return []byte("late"), nil
	})
	var ll *idempotency.LeaseLostError
	if !errors.As(lateErr, &ll) || !ll.Stored {
		t.Fatalf("generation 1's late success: %v, want a LeaseLostError, stored", lateErr)
	}
	if err := <-newer; !errors.As(err, &ll) || ll.Stored {
		t.Fatalf("generation 2's holder: %v, want a LeaseLostError (its call cancelled)", err)
	}
	if out, err := s.DoInGeneration(ctx, "k", 2, fpNew, counted(&runs, "third")); err != nil || string(out) != "late" {
		t.Fatalf("generation 2's retry: %s %v, want the late success", out, err)
	}
	if runs.Load() != 2 {
		t.Fatalf("ran %d times, want 2 (the double execution the takeover allowed, no third)", runs.Load())
	}

	// A late failure of generation 1 leaves generation 2's lease alone.
	holding2, release2 := make(chan struct{}), make(chan struct{})
	newer2 := make(chan error, 1)
	_, lateErr = s.DoInGeneration(ctx, "k2", 1, fpOld, func(context.Context) ([]byte, error) {
		if _, err := pool.Exec(ctx, `UPDATE idempotency_keys SET lease_until = now() - interval '1 second' WHERE key = 'k2'`); err != nil {
			return nil, err
		}
		go func() {
			_, err := s.DoInGeneration(ctx, "k2", 2, fpNew, func(context.Context) ([]byte, error) {
				close(holding2)
				<-release2
				return []byte("gen2"), nil
			})
			newer2 <- err
		}()
		holds(t, holding2, newer2, "generation 2's takeover of k2")
		return nil, idempotency.Permanent(errors.New("400"))
	})
	if !errors.As(lateErr, &ll) || ll.Stored {
		t.Fatalf("generation 1's late failure: %v, want a LeaseLostError, not stored", lateErr)
	}
	close(release2)
	if err := <-newer2; err != nil {
		t.Fatalf("generation 2 after generation 1's late failure: %v, want its success", err)
	}
	if st, gen := keyRow(t, pool, "k2"); st != idempotency.StatusCompleted || gen != 2 {
		t.Fatalf("k2: %s, generation %d; want completed by generation 2", st, gen)
	}
}

// Callers of several generations race for a key that generation 1 failed:
// the call runs once at a time (never two holders), the loser of an older
// generation is superseded or waits, and after the winner's success no
// generation runs it again.
func TestGenerationsRaceForAFailedKey(t *testing.T) {
	s, _ := store(t, idempotency.Options{Lease: time.Minute, TTL: time.Hour, Wait: 5 * time.Second})
	ctx := context.Background()
	_, _ = s.DoInGeneration(ctx, "k", 1, fpOld, permanent("400"))
	var running, maxRunning, runs atomic.Int32
	fn := func(context.Context) ([]byte, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			m := maxRunning.Load()
			if n <= m || maxRunning.CompareAndSwap(m, n) {
				break
			}
		}
		runs.Add(1)
		time.Sleep(200 * time.Millisecond)
		return []byte("ok"), nil
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.DoInGeneration(ctx, "k", 2+i%2, fpNew, fn) // generations 2 and 3
		}()
	}
	wg.Wait()
	for i, err := range errs {
		var se *idempotency.SupersededError
		if err != nil && !errors.As(err, &se) {
			t.Errorf("caller %d (generation %d): %v, want the success or SupersededError", i, 2+i%2, err)
		}
	}
	// Whoever wins, the others wait for it (Wait) and read its success,
	// or are superseded by it: exactly one run.
	if maxRunning.Load() != 1 || runs.Load() != 1 {
		t.Fatalf("%d runs, at most %d at once; want 1 and 1", runs.Load(), maxRunning.Load())
	}
}
