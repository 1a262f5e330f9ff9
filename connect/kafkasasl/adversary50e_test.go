package kafkasasl

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

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
	r := &awsRenewal{fetch: func(ctx context.Context) (mskiam.Auth, time.Time, bool, error) {
		mu.Lock()
		calls++
		h := hang
		mu.Unlock()
		if h {
			<-stuck // ignores ctx
			return mskiam.Auth{}, time.Time{}, false, errors.New("answered too late")
		}
		return mskiam.Auth{AccessKey: "ASIANEW", SecretKey: "new-secret", SessionToken: "new-session"}, time.Now().Add(time.Hour), false, nil
	}}

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
