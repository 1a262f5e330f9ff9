package kafkasasl

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"fmt"

	mskiam "github.com/twmb/franz-go/pkg/sasl/aws"
)

// adversary 50e: awsRenewal says "the renewal is bounded by
// renewalTimeout, not by a login's context". It is bounded only by what
// fetch does with the context it is given: a fetch that does not return
// (a read of the token file on a hung mount — secretfile reads ignore
// contexts —, anything not watching ctx) keeps s.renewing set for ever.
// Every later login then joins that renewal and waits until its own
// context ends (franz-go's: the client's, no deadline), even after the
// endpoint answers again: the process never logs in again.
func TestARenewalWhoseFetchIgnoresItsContextEndsAtRenewalTimeoutAndTheNextLoginRenews(t *testing.T) {
	defer func(d time.Duration) { renewalTimeout = d }(renewalTimeout)
	renewalTimeout = 200 * time.Millisecond
	stuck := make(chan struct{})
	defer close(stuck)
	var mu sync.Mutex
	hang, calls := true, 0
	r := newAWSRenewal(func(ctx context.Context) (mskiam.Auth, time.Time, bool, error) {
		mu.Lock()
		calls++
		h := hang
		mu.Unlock()
		if h {
			<-stuck // ignores ctx
			return mskiam.Auth{}, time.Time{}, false, errors.New("answered too late")
		}
		return mskiam.Auth{AccessKey: "ASIANEW", SecretKey: "new-secret", SessionToken: "new-session"}, time.Now().Add(time.Hour), false, nil
	})

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	start := time.Now()
	_, err := r.get(ctx)
	cancel()
	if took := time.Since(start); took > 4*renewalTimeout {
		t.Errorf("a login against a fetch that ignores its context returned after %v (%v), not at the renewal's bound %v", took.Round(10*time.Millisecond), err, renewalTimeout)
	}

	// The endpoint answers again.
	mu.Lock()
	hang = false
	mu.Unlock()
	ctx, cancel = context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start = time.Now()
	a, err := r.get(ctx)
	mu.Lock()
	n := calls
	mu.Unlock()
	if err != nil || a.AccessKey != "ASIANEW" {
		t.Errorf("after the endpoint answers again, a login got %q, %v after %v (fetch called %d times): the stuck renewal is never replaced, every login waits on it until its own context ends", a.AccessKey, err, time.Since(start).Round(10*time.Millisecond), n)
	}
}

// adversary 50e, holds: logins cancelled mid-renewal return their own
// context's error; the renewal they left finishes anyway and its
// credentials serve the next login with no new fetch; an error of an
// earlier renewal is not returned after a later one succeeded; and under
// -race, concurrent logins with random deadlines against a fetch that
// alternates failures and successes never get credentials with an error,
// nor credentials no fetch issued, nor an error no fetch (or context) gave.
func TestAwsRenewalCancelledCallersLateRenewalsAndConcurrentMixesStayConsistent(t *testing.T) {
	t.Run("cancelled mid-renewal, renewal outlives its callers", func(t *testing.T) {
		release := make(chan struct{})
		var calls atomic.Int32
		r := newAWSRenewal(func(ctx context.Context) (mskiam.Auth, time.Time, bool, error) {
			n := calls.Add(1)
			if n == 1 {
				<-release
			}
			return mskiam.Auth{AccessKey: fmt.Sprintf("KEY%d", n), SecretKey: "s"}, time.Now().Add(time.Hour), false, nil
		})
		errs := make(chan error, 3)
		for range 3 {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				defer cancel()
				_, err := r.get(ctx)
				errs <- err
			}()
		}
		for range 3 {
			if err := <-errs; !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("a login cancelled mid-renewal: %v; want its context's error", err)
			}
		}
		close(release)
		deadline := time.Now().Add(2 * time.Second)
		for {
			r.mu.Lock()
			busy := r.renewing != nil
			r.mu.Unlock()
			if !busy || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		a, err := r.get(context.Background())
		if err != nil || a.AccessKey != "KEY1" || calls.Load() != 1 {
			t.Errorf("after the callers left: %q, %v, %d fetches; want KEY1 from the one renewal", a.AccessKey, err, calls.Load())
		}
	})
	t.Run("no stale error after a success", func(t *testing.T) {
		var fail atomic.Bool
		fail.Store(true)
		r := newAWSRenewal(func(ctx context.Context) (mskiam.Auth, time.Time, bool, error) {
			if fail.Load() {
				return mskiam.Auth{}, time.Time{}, false, errors.New("refused")
			}
			return mskiam.Auth{AccessKey: "OK", SecretKey: "s"}, time.Now().Add(4 * time.Minute), false, nil
		})
		if _, err := r.get(context.Background()); err == nil {
			t.Fatal("want the fetch's error")
		}
		fail.Store(false)
		if a, err := r.get(context.Background()); err != nil || a.AccessKey != "OK" {
			t.Fatalf("after a success: %q, %v", a.AccessKey, err)
		}
		fail.Store(true) // inside the window: the next renewal fails, the held creds serve
		if a, err := r.get(context.Background()); err != nil || a.AccessKey != "OK" {
			t.Fatalf("a failed renewal with valid creds held: %q, %v", a.AccessKey, err)
		}
	})
	t.Run("concurrent mix", func(t *testing.T) {
		var mu sync.Mutex
		issued := map[string]bool{}
		failed := map[string]bool{}
		n := 0
		r := newAWSRenewal(func(ctx context.Context) (mskiam.Auth, time.Time, bool, error) {
			mu.Lock()
			n++
			k := n
			mu.Unlock()
			select {
			case <-time.After(time.Duration(k%4) * time.Millisecond):
			case <-ctx.Done():
				return mskiam.Auth{}, time.Time{}, false, ctx.Err()
			}
			mu.Lock()
			defer mu.Unlock()
			if k%2 == 1 {
				e := fmt.Sprintf("fail-%d", k)
				failed[e] = true
				return mskiam.Auth{}, time.Time{}, k%3 == 0, errors.New(e)
			}
			key := fmt.Sprintf("KEY%d", k)
			issued[key] = true
			// expired at once, or about to: every login renews
			return mskiam.Auth{AccessKey: key, SecretKey: "s" + key}, time.Now().Add(time.Duration(k%3-1) * time.Second), false, nil
		})
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 60 {
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration((g+i)%6)*time.Millisecond)
					a, err := r.get(ctx)
					cancel()
					mu.Lock()
					switch {
					case err == nil && (a.AccessKey == "" || !issued[a.AccessKey] || a.SecretKey != "s"+a.AccessKey):
						t.Errorf("credentials no fetch issued as such: %+v", a)
					case err != nil && a.AccessKey != "":
						t.Errorf("credentials %s with error %v", a.AccessKey, err)
					case err != nil && !errors.Is(err, context.DeadlineExceeded) && !failed[err.Error()]:
						t.Errorf("an error no fetch gave: %v", err)
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	})
}

// A stuck endpoint does not grow goroutines without bound: each renewal given
// up must not leave its fetch goroutine behind for ever.
func TestAStuckEndpointDoesNotLeakAGoroutinePerRenewal(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	s := newAWSRenewal(func(context.Context) (mskiam.Auth, time.Time, bool, error) {
		<-block
		return mskiam.Auth{}, time.Time{}, false, nil
	})
	s.timeout = 5 * time.Millisecond
	before := runtime.NumGoroutine()
	for i := 0; i < 100; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, _ = s.get(ctx) // each fails: the endpoint is stuck
		cancel()
	}
	time.Sleep(50 * time.Millisecond)
	if n := runtime.NumGoroutine() - before; n > 10 {
		t.Fatalf("%d goroutines more after 100 renewals against a stuck endpoint", n)
	}
}

// A login never returns credentials that are already expired without an
// error: a fetch answering with a past expiry (a clock skew, a stale cache
// file) must not be handed to the broker as if valid.
func TestALoginDoesNotReturnAlreadyExpiredCredentials(t *testing.T) {
	s := newAWSRenewal(func(context.Context) (mskiam.Auth, time.Time, bool, error) {
		return mskiam.Auth{AccessKey: "AK", SecretKey: "SK"}, time.Now().Add(-time.Minute), false, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	a, err := s.get(ctx)
	if err == nil && a.AccessKey != "" {
		t.Fatalf("get returned credentials that expired a minute ago, and no error")
	}
}

// adversary 51 holds: 50 concurrent logins needing credentials share one
// fetch; then, credentials in the renewal window and an endpoint that
// fails, 300 logins with deadlines of 0-3ms get the held credentials or an
// error, never anything else, and leave no goroutine behind once the
// renewals end.
func TestConcurrentLoginsShareOneFetchAndFailedRenewalsLeaveNoGoroutine(t *testing.T) {
	var calls atomic.Int32
	release := make(chan struct{})
	var failing atomic.Bool
	r := newAWSRenewal(func(ctx context.Context) (mskiam.Auth, time.Time, bool, error) {
		calls.Add(1)
		if failing.Load() {
			select {
			case <-time.After(time.Duration(calls.Load()%3) * time.Millisecond):
			case <-ctx.Done():
				return mskiam.Auth{}, time.Time{}, false, ctx.Err()
			}
			return mskiam.Auth{}, time.Time{}, calls.Load()%2 == 0, errors.New("refused")
		}
		select {
		case <-release:
		case <-ctx.Done():
			return mskiam.Auth{}, time.Time{}, false, ctx.Err()
		}
		return mskiam.Auth{AccessKey: "AK", SecretKey: "SK"}, time.Now().Add(6 * time.Minute), false, nil
	})
	r.timeout = 2 * time.Second
	before := runtime.NumGoroutine()
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			_, err := r.get(ctx)
			errs <- err
		}()
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a concurrent login: %v", err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("50 concurrent logins made %d fetches, want 1", n)
	}
	// The credentials enter the renewal window; the endpoint now fails.
	r.mu.Lock()
	r.expires = time.Now().Add(time.Minute)
	r.mu.Unlock()
	failing.Store(true)
	r.timeout = 20 * time.Millisecond
	for i := range 300 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%4)*time.Millisecond)
		a, err := r.get(ctx)
		cancel()
		if err == nil && a.AccessKey != "AK" {
			t.Fatalf("login %d: %+v with no error", i, a)
		}
	}
	// Wait (bounded) for the last renewal to end.
	deadline := time.Now().Add(3 * time.Second)
	for {
		r.mu.Lock()
		busy := r.renewing != nil || r.inflight > 0
		r.mu.Unlock()
		if !busy {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a renewal did not end within 3s")
		}
		time.Sleep(2 * time.Millisecond)
	}
	var n int
	for end := time.Now().Add(2 * time.Second); ; {
		if n = runtime.NumGoroutine() - before; n <= 0 || time.Now().After(end) {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	if n > 0 {
		t.Errorf("%d goroutines more after 300 failed renewals", n)
	}
}
