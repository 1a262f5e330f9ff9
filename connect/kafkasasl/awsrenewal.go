package kafkasasl

import (
	"context"
	"sync"
	"time"

	mskiam "github.com/twmb/franz-go/pkg/sasl/aws"
)

// renewalTimeout bounds one renewal, its tries included.
var renewalTimeout = 30 * time.Second

// awsRenewal holds temporary AWS credentials, renewed by fetch when they
// are within five minutes of expiry. Concurrent logins share one renewal
// (the AWS SDKs' credentials cache does the same), each waiting for it
// until its own context ends; the renewal is bounded by renewalTimeout,
// not by a login's context. A renewal that fails while the held
// credentials are still valid keeps them: an STS or agent hiccup does not
// fail logins.
type awsRenewal struct {
	// fetch returns new credentials, when they expire, and on an error
	// whether to try again.
	fetch func(context.Context) (creds mskiam.Auth, expires time.Time, retry bool, err error)

	mu       sync.Mutex
	creds    mskiam.Auth
	expires  time.Time
	renewing chan struct{} // closed when the renewal in progress ends; nil when none
	err      error         // the last renewal's error
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
// and closes done.
func (s *awsRenewal) renew(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), renewalTimeout)
	defer cancel()
	var (
		creds   mskiam.Auth
		expires time.Time
		err     error
	)
	for try := 1; ; try++ {
		var retry bool
		creds, expires, retry, err = s.fetch(ctx)
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
