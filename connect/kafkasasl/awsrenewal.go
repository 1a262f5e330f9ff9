package kafkasasl

import (
	"context"
	"sync"
	"time"

	mskiam "github.com/twmb/franz-go/pkg/sasl/aws"
)

// awsRenewal holds temporary AWS credentials, renewed by fetch when they
// are within five minutes of expiry. A renewal that fails while the held
// credentials are still valid keeps them: an STS hiccup does not fail
// logins.
type awsRenewal struct {
	// fetch returns new credentials, when they expire, and on an error
	// whether to try again.
	fetch func(context.Context) (creds mskiam.Auth, expires time.Time, retry bool, err error)

	mu      sync.Mutex // held across a renewal: concurrent logins wait for it
	creds   mskiam.Auth
	expires time.Time
}

func (s *awsRenewal) get(ctx context.Context) (mskiam.Auth, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Until(s.expires) > 5*time.Minute {
		return s.creds, nil
	}
	// franz-go calls with its client's context, which has no deadline.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var (
		creds   mskiam.Auth
		expires time.Time
		err     error
	)
	// Three tries, as the AWS SDKs, of what they retry: STS's 5xx,
	// IDPCommunicationError (the identity provider did not answer STS)
	// and InvalidIdentityToken (which can pass while STS fetches the
	// provider's keys).
	for try := 1; ; try++ {
		var retry bool
		creds, expires, retry, err = s.fetch(ctx)
		if err == nil || !retry || try == 3 || !pause(ctx, time.Duration(try)*200*time.Millisecond) {
			break
		}
	}
	if err != nil {
		if time.Now().Before(s.expires) {
			return s.creds, nil
		}
		return mskiam.Auth{}, err
	}
	s.creds, s.expires = creds, expires
	return creds, nil
}
