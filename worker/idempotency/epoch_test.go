package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupio/dedup/worker/idempotency"
)

// External keys: what fn sends to the outside service. It changes only
// when a newer generation takes over a failure the service answered (a
// service with Stripe's semantics bound the old key to that failure); it
// stays when the previous call's outcome is unknown (the service may have
// made the effect: the same key lets it drop the repeat), and within a
// generation.

// keyed is a DoKeyed fn that records the external key it got and returns
// err (or "ok").
func keyed(got *[]string, err error) func(context.Context, string) ([]byte, error) {
	return func(_ context.Context, ext string) ([]byte, error) {
		*got = append(*got, ext)
		if err != nil {
			return nil, err
		}
		return []byte("ok"), nil
	}
}

func epochRow(t *testing.T, pool *pgxpool.Pool, key string) (status string, epoch int, answered bool) {
	t.Helper()
	if err := pool.QueryRow(context.Background(), `SELECT status, epoch, answered FROM idempotency_keys WHERE key = $1`, key).
		Scan(&status, &epoch, &answered); err != nil {
		t.Fatal(err)
	}
	return status, epoch, answered
}

// crash leaves key as a holder that died mid-call leaves it: in_progress,
// its lease run out.
func crash(t *testing.T, pool *pgxpool.Pool, key string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `UPDATE idempotency_keys SET status = 'in_progress', lease_token = 'crashed',
		lease_until = now() - interval '1 second', result = NULL, error = NULL WHERE key = $1`, key); err != nil {
		t.Fatal(err)
	}
}

func TestExternalKeyForm(t *testing.T) {
	for _, c := range []struct {
		epoch int
		want  string
	}{{0, "task-r:webhook:0:post"}, {1, "task-r:webhook:0:post:1"}, {12, "task-r:webhook:0:post:12"}} {
		if got := idempotency.ExternalKey("task-r:webhook:0:post", c.epoch); got != c.want {
			t.Errorf("epoch %d: %s, want %s", c.epoch, got, c.want)
		}
	}
}

// Generation 1 fails twice (a 500, retried within the generation: the same
// external key); generation 2 takes the answered failure over under k:1,
// fails and retries under k:1; generation 3 under k:2 completes; from then
// on nothing runs. A permanent failure (a 4xx) is an answer too.
func TestNewerGenerationCallsAnAnsweredFailureUnderANewExternalKey(t *testing.T) {
	s, pool := store(t, idempotency.DefaultOptions())
	ctx := context.Background()
	var got []string
	fail := errors.New("500 Internal Server Error")
	for _, gen := range []int{1, 1, 2, 2} {
		if _, err := s.DoKeyed(ctx, "k", gen, fpOld, keyed(&got, fail)); !errors.Is(err, fail) {
			t.Fatalf("generation %d: %v, want the failure", gen, err)
		}
	}
	if _, ep, answered := epochRow(t, pool, "k"); ep != 1 || !answered {
		t.Fatalf("after generation 2: epoch %d, answered %v; want 1, true", ep, answered)
	}
	out, err := s.DoKeyed(ctx, "k", 3, fpNew, keyed(&got, nil))
	if err != nil || string(out) != "ok" {
		t.Fatalf("generation 3: %s %v", out, err)
	}
	for _, gen := range []int{3, 4, 0} {
		if out, err := s.DoKeyed(ctx, "k", gen, fpNew, keyed(&got, nil)); err != nil || string(out) != "ok" {
			t.Fatalf("generation %d after the success: %s %v", gen, out, err)
		}
	}
	want := "[k k k:1 k:1 k:2]"
	if fmt.Sprint(got) != want {
		t.Fatalf("external keys %v, want %s (one more epoch per newer generation taking over an answered failure)", got, want)
	}

	got = nil
	for _, gen := range []int{1, 1, 2} {
		_, _ = s.DoKeyed(ctx, "p", gen, fpOld, keyed(&got, idempotency.Permanent(errors.New("400 Bad Request"))))
	}
	if fmt.Sprint(got) != "[p p:1]" {
		t.Fatalf("after a permanent failure: external keys %v, want [p p:1] (one call per generation)", got)
	}
}

// A failure of unknown outcome keeps the external key in the next
// generation: an error marked Unanswered (no answer, a timeout), and an
// error returned after fn's context ended (the call was cut short).
func TestUnansweredFailureKeepsTheExternalKey(t *testing.T) {
	s, pool := store(t, idempotency.DefaultOptions())
	ctx := context.Background()
	var got []string
	if _, err := s.DoKeyed(ctx, "u", 1, fpOld, keyed(&got, idempotency.Unanswered(errors.New("connection reset")))); !idempotency.IsUnanswered(err) {
		t.Fatalf("generation 1: %v, want the unanswered error", err)
	}
	if _, ep, answered := epochRow(t, pool, "u"); ep != 0 || answered {
		t.Fatalf("after an unanswered failure: epoch %d, answered %v; want 0, false", ep, answered)
	}
	if _, err := s.DoKeyed(ctx, "u", 2, fpOld, keyed(&got, nil)); err != nil {
		t.Fatal(err)
	}

	// Cut short: the caller's deadline ends the call while fn runs; fn
	// returns a plain error (as an HTTP client does).
	cctx := newPassingDeadline()
	_, err := s.DoKeyed(cctx, "c", 1, fpOld, func(ctx context.Context, ext string) ([]byte, error) {
		got = append(got, ext)
		cctx.pass()
		<-ctx.Done()
		return nil, fmt.Errorf("posting: %w", ctx.Err())
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cut short: %v", err)
	}
	if st, ep, answered := epochRow(t, pool, "c"); st != idempotency.StatusFailed || ep != 0 || answered {
		t.Fatalf("after a call cut short: %s, epoch %d, answered %v; want failed, 0, false", st, ep, answered)
	}
	if _, err := s.DoKeyed(ctx, "c", 2, fpOld, keyed(&got, nil)); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[u u c c]" {
		t.Fatalf("external keys %v, want [u u c c] (the same key after a failure of unknown outcome)", got)
	}
}

// An in_progress key taken over after its holder crashed keeps its
// external key, in the same generation and in a newer one, also after the
// epoch grew: the crashed call may have reached the service.
func TestTakenOverLeaseKeepsTheExternalKey(t *testing.T) {
	s, pool := store(t, idempotency.DefaultOptions())
	ctx := context.Background()
	var got []string
	// Generation 1 crashes mid-call; generation 1's retry takes over.
	_, _ = s.DoKeyed(ctx, "k", 1, fpOld, keyed(&got, errors.New("503")))
	crash(t, pool, "k")
	_, _ = s.DoKeyed(ctx, "k", 1, fpOld, keyed(&got, errors.New("503")))
	// Generation 2 takes the answered failure over (k:1) and crashes;
	// generation 3 takes the crashed lease over: still k:1.
	_, _ = s.DoKeyed(ctx, "k", 2, fpOld, keyed(&got, errors.New("503")))
	crash(t, pool, "k")
	if _, err := s.DoKeyed(ctx, "k", 3, fpNew, keyed(&got, nil)); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[k k k:1 k:1]" {
		t.Fatalf("external keys %v, want [k k k:1 k:1] (a takeover after a crash keeps the key)", got)
	}
	if st, ep, _ := epochRow(t, pool, "k"); st != idempotency.StatusCompleted || ep != 1 {
		t.Fatalf("key %s at epoch %d, want completed at 1", st, ep)
	}
}

// An expired key is absent: taken as new, at epoch 0, whether or not the
// reaper deleted it.
func TestExpiredKeyStartsAgainAtEpochZero(t *testing.T) {
	s, pool := store(t, idempotency.DefaultOptions())
	ctx := context.Background()
	var got []string
	// fail runs generations 1 and 2 of key into answered failures (epoch
	// 1) and lets the key expire.
	fail := func(key string) {
		_, _ = s.DoKeyed(ctx, key, 1, fpOld, keyed(&got, errors.New("500")))
		_, _ = s.DoKeyed(ctx, key, 2, fpOld, keyed(&got, errors.New("500")))
		if _, err := pool.Exec(ctx, `UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE key = $1`, key); err != nil {
			t.Fatal(err)
		}
	}
	fail("reaped")
	if n, err := s.Reap(ctx, 10); err != nil || n != 1 {
		t.Fatalf("reaped %d, %v; want 1", n, err)
	}
	fail("expired")
	for _, key := range []string{"reaped", "expired"} {
		if _, err := s.DoKeyed(ctx, key, 3, fpOld, keyed(&got, nil)); err != nil {
			t.Fatal(err)
		}
	}
	if want := "[reaped reaped:1 expired expired:1 reaped expired]"; fmt.Sprint(got) != want {
		t.Fatalf("external keys %v, want %s (an expired key starts again at epoch 0)", got, want)
	}
}

// Generation 0 (Do) is never newer: it never changes the external key.
func TestGenerationZeroKeepsTheExternalKey(t *testing.T) {
	s, _ := store(t, idempotency.DefaultOptions())
	ctx := context.Background()
	var got []string
	_, _ = s.DoKeyed(ctx, "z", 0, fpOld, keyed(&got, errors.New("500")))
	_, _ = s.DoKeyed(ctx, "z", 0, fpOld, keyed(&got, nil))
	// A fenced generation's answered failure, then an unfenced caller.
	_, _ = s.DoKeyed(ctx, "f", 1, fpOld, keyed(&got, errors.New("500")))
	_, _ = s.DoKeyed(ctx, "f", 2, fpOld, keyed(&got, errors.New("500")))
	_, _ = s.DoKeyed(ctx, "f", 0, fpOld, keyed(&got, nil))
	if fmt.Sprint(got) != "[z z f f:1 f:1]" {
		t.Fatalf("external keys %v, want [z z f f:1 f:1]", got)
	}
}
