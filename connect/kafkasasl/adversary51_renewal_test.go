package kafkasasl

import (
	"context"
	"sync"
	"testing"
	"time"

	mskiam "github.com/twmb/franz-go/pkg/sasl/aws"
)

// adversary 51: awsRenewal says "past the bound it is given up, and the
// next login starts another". Since 2657305 that holds only for the first
// maxFetches (3) given-up fetches: once three fetches hang (a fetch that
// does not watch its context), every later renewal waits for the last of
// them instead of fetching, so the process never logs in again even though
// the endpoint answers every new request at once.
func TestALoginSucceedsOnceTheEndpointAnswersAgainAfterThreeFetchesHung(t *testing.T) {
	stuck := make(chan struct{})
	defer close(stuck)
	var mu sync.Mutex
	calls := 0
	r := newAWSRenewal(func(context.Context) (mskiam.Auth, time.Time, bool, error) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n <= maxFetches {
			<-stuck // ignores its context: these three never answer
		}
		return mskiam.Auth{AccessKey: "ASIANEW", SecretKey: "new-secret", SessionToken: "new-session"}, time.Now().Add(time.Hour), false, nil
	})
	r.timeout = 50 * time.Millisecond
	for i := 0; i < maxFetches; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := r.get(ctx)
		cancel()
		if err == nil {
			t.Fatalf("login %d succeeded against a hung fetch", i+1)
		}
	}
	// The endpoint now answers every new request at once.
	var lastErr error
	for i := 0; i < 5; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		a, err := r.get(ctx)
		cancel()
		if err == nil && a.AccessKey == "ASIANEW" {
			return
		}
		lastErr = err
	}
	mu.Lock()
	n := calls
	mu.Unlock()
	t.Errorf("5 logins after the endpoint answers again all failed (last: %v); fetch called %d times: after %d hung fetches no renewal fetches again", lastErr, n, maxFetches)
}
