package kafkasasl

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mskiam "github.com/twmb/franz-go/pkg/sasl/aws"
)

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
