package kafkasasl

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	mskiam "github.com/twmb/franz-go/pkg/sasl/aws"
)

// renewalTimeout bounds one renewal, its tries included.
var renewalTimeout = 30 * time.Second

// awsRenewal holds temporary AWS credentials, renewed by fetch when they
// are within five minutes of expiry. Concurrent logins share one renewal
// (the AWS SDKs' credentials cache does the same); the renewal is bounded
// by renewalTimeout, not by a login's context, even when fetch does not
// watch its context (a token file on a hung mount): past the bound it is
// given up, and the next login starts another. A login waits for the
// renewal until its own context ends, except while the held credentials
// are still valid and the last renewal failed: it then takes them at once
// and the renewal goes on without it, so an STS or agent that stopped
// answering costs one login one renewal, not every login one each. A
// renewal that fails while the held credentials are still valid keeps
// them.
type awsRenewal struct {
	// fetch returns new credentials, when they expire, and on an error
	// whether to try again.
	fetch func(context.Context) (creds mskiam.Auth, expires time.Time, retry bool, err error)
	// timeout bounds one renewal (renewalTimeout when made: newAWSRenewal).
	timeout time.Duration

	mu       sync.Mutex
	creds    mskiam.Auth
	expires  time.Time
	renewing chan struct{} // closed when the renewal in progress ends; nil when none
	err      error         // the last renewal's error
	// fetching is the last fetch started, inflight how many have not
	// returned: a renewal given up past its bound leaves its fetch running
	// (a read that does not return). The next renewals start fetches of
	// their own, up to maxFetches in flight, then wait for the last one:
	// a stuck endpoint or file holds a few goroutines, not one per renewal.
	// A fetch that never returned would hold its place for good, and past
	// maxFetches of them no renewal would fetch again: this package's
	// fetches all return, their requests by their context and their token
	// files within secretfile.MaxWait (a File waits no longer for its mount).
	fetching *fetchCall
	inflight int
}

// refusedRedirect is a redirect an endpoint answered that this package's
// clients do not follow (it would send a token to a host no start-up check
// saw): asking again gets the same answer, so a fetch does not retry it.
type refusedRedirect struct{ msg string }

func (e *refusedRedirect) Error() string { return e.msg }

// retriable says whether a request's error may pass by asking again: no
// answer may (a timeout, a reset connection), a refused redirect not.
func retriable(err error) bool {
	var r *refusedRedirect
	return !errors.As(err, &r)
}

// maxFetches bounds the fetches in flight, given-up ones included.
const maxFetches = 3

// fetchCall is one fetch in flight; done is closed once its answer is set.
type fetchCall struct {
	done    chan struct{}
	creds   mskiam.Auth
	expires time.Time
	retry   bool
	err     error
}

func newAWSRenewal(fetch func(context.Context) (mskiam.Auth, time.Time, bool, error)) *awsRenewal {
	return &awsRenewal{fetch: fetch, timeout: renewalTimeout}
}

func (s *awsRenewal) get(ctx context.Context) (mskiam.Auth, error) {
	s.mu.Lock()
	if time.Until(s.expires) > 5*time.Minute {
		defer s.mu.Unlock()
		return s.creds, nil
	}
	if s.renewing == nil {
		s.renewing = make(chan struct{})
		go s.renew(s.renewing)
	}
	if s.err != nil && time.Now().Before(s.expires) {
		defer s.mu.Unlock()
		return s.creds, nil // the renewal goes on without this login
	}
	done := s.renewing
	s.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return mskiam.Auth{}, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil && !time.Now().Before(s.expires) {
		return mskiam.Auth{}, s.err
	}
	return s.creds, nil
}

// renew fetches, with three tries, as the AWS SDKs, of what fetch says
// to retry (STS's 5xx, IDPCommunicationError and InvalidIdentityToken,
// which can pass while STS fetches the provider's keys; an agent's 5xx),
// within its timeout, and closes done.
func (s *awsRenewal) renew(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	var (
		creds   mskiam.Auth
		expires time.Time
		err     error
	)
	for try := 1; ; try++ {
		var retry bool
		creds, expires, retry, err = s.fetchWithin(ctx)
		if err == nil || !retry || try == 3 || !pause(ctx, time.Duration(try)*200*time.Millisecond) {
			break
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		s.creds, s.expires = creds, expires
	}
	s.err = err
	s.renewing = nil
	close(done)
}

// fetchWithin is one fetch, given up when ctx ends even if fetch does not
// return (its answer, if it ever comes, is dropped, or taken by a renewal
// that waits for it at maxFetches). Credentials that expired already are
// an error.
func (s *awsRenewal) fetchWithin(ctx context.Context) (mskiam.Auth, time.Time, bool, error) {
	s.mu.Lock()
	c := s.fetching
	if c == nil || s.inflight < maxFetches {
		c = &fetchCall{done: make(chan struct{})}
		s.fetching = c
		s.inflight++
		go func() {
			c.creds, c.expires, c.retry, c.err = s.fetch(ctx)
			close(c.done)
			s.mu.Lock()
			s.inflight--
			if s.fetching == c {
				s.fetching = nil
			}
			s.mu.Unlock()
		}()
	}
	s.mu.Unlock()
	select {
	case <-c.done:
		if c.err == nil && !c.expires.IsZero() && !time.Now().Before(c.expires) {
			return mskiam.Auth{}, time.Time{}, true, fmt.Errorf("the credentials answered expired at %s", c.expires.Format(time.RFC3339))
		}
		return c.creds, c.expires, c.retry, c.err
	case <-ctx.Done():
		return mskiam.Auth{}, time.Time{}, false, fmt.Errorf("no credentials within %s: %w", s.timeout, ctx.Err())
	}
}
