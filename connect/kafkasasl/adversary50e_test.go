package kafkasasl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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

// adversary 50e: the fix makes concurrent logins share one renewal, but a
// renewal that failed while the held credentials are still valid leaves
// nothing behind but s.err: the very next login (franz-go's context, no
// deadline) starts a new renewal and waits its whole renewalTimeout
// again. With the agent stuck (a NetworkPolicy dropping packets) during
// the held credentials' last five minutes, each login — each broker
// connection, each re-authentication, with the requests queued behind it —
// waits 30 s, one after the other: N sequential logins, N x 30 s, though
// every one of them is answered with the same still-valid credentials.
func TestSequentialLoginsHoldingValidCredentialsWaitAtMostOneStuckRenewal(t *testing.T) {
	noAWSEnv(t)
	defer func(d time.Duration) { renewalTimeout = d }(renewalTimeout)
	renewalTimeout = time.Second
	var mu sync.Mutex
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n == 1 { // valid for four more minutes: within the renewal window
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]string{
				"AccessKeyId": "ASIAPOD1", "SecretAccessKey": "pod-secret-1", "Token": "pod-session-1",
				"Expiration": time.Now().Add(4 * time.Minute).UTC().Format(time.RFC3339),
			})
			return
		}
		<-r.Context().Done() // stuck: answers nothing
	}))
	defer srv.Close()
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", srv.URL+"/v1/credentials")
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "pod-token")
	m, err := Config{Mechanism: AWSMSKIAM}.Build()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Authenticate(context.Background(), mskBroker); err != nil {
		t.Fatal(err)
	}
	const logins = 3
	start := time.Now()
	for i := range logins {
		s := time.Now()
		_, _, err := m.Authenticate(context.Background(), mskBroker)
		t.Logf("login %d, credentials valid ~4 min, agent stuck: %v after %v", i+1, err, time.Since(s).Round(10*time.Millisecond))
		if err != nil {
			t.Errorf("login %d: %v; want the still-valid credentials", i+1, err)
		}
	}
	if took := time.Since(start); took > renewalTimeout*3/2 {
		mu.Lock()
		n := calls
		mu.Unlock()
		t.Errorf("%d sequential logins holding valid credentials took %v against a stuck agent (asked %d times): each waited a whole renewal (%v), N logins N x renewalTimeout", logins, took.Round(10*time.Millisecond), n, renewalTimeout)
	}
}

// adversary 50e: containerShown hides the endpoint's query and ECS's
// credentials ID (the path of AWS_CONTAINER_CREDENTIALS_RELATIVE_URI), but
// fetch wraps net/http's error as it is ("calling it: %w"): a *url.Error,
// whose text is `Get "<the whole URL>": …` (net/http strips only the
// password). An agent that does not answer (ECS's agent restarting, a
// NetworkPolicy, the stuck endpoint the renewal bound is for) puts the ID
// and the query into the login error, and so into the logs. The earlier
// test of the ID gave its login a 2 s context, shorter than the renewal:
// it saw only "context deadline exceeded". franz-go's login context is the
// client's, with no deadline: the login sees the renewal's own error.
func TestATransportErrorOfTheContainerEndpointQuotesNeitherTheECSCredentialsIDNorTheQuery(t *testing.T) {
	defer func(d time.Duration) { renewalTimeout = d }(renewalTimeout)
	renewalTimeout = 500 * time.Millisecond
	const id = "5f9c2b1e-7d4a-4c3e-9b8f-0a1d2e3f4a5b"
	for _, env := range [][2]string{
		{"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/" + id},
		{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:1/v1/credentials?X-Amz-Signature=" + id},
	} {
		t.Run(env[0], func(t *testing.T) {
			noAWSEnv(t)
			t.Setenv(env[0], env[1])
			m, err := Config{Mechanism: AWSMSKIAM}.Build()
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = m.Authenticate(context.Background(), mskBroker) // franz-go's: the client's context
			if err == nil {
				t.Fatal("a login succeeded against no endpoint")
			}
			t.Logf("login error: %v", err)
			if strings.Contains(err.Error(), id) {
				t.Errorf("a login error quotes %s's secret part (%s): %v", env[0], id, err)
			}
		})
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

// adversary 50e, holds: one MSK cluster's seeds written every way an
// operator may write them (broker names, upper case with the root's dot,
// an interface VPC endpoint, a dual-stack api.aws name, a serverless
// bootstrap name, IP addresses and an alias) are taken with a web identity
// when AWS_REGION (or AWS_DEFAULT_REGION alone) is the cluster's region;
// a seed signed for any other region, or of another partition, is refused.
func TestOneClustersSeedsWrittenDifferentlyAreTakenAndAnotherRegionsSeedIsRefused(t *testing.T) {
	cluster := []string{
		"b-1.mycluster.abc123.c2.kafka.eu-central-1.amazonaws.com:9098",
		"B-2.MYCLUSTER.ABC123.C2.KAFKA.EU-CENTRAL-1.AMAZONAWS.COM.:9098",
		"vpce-0a1b2c3d4e5f67890-12345678.kafka.eu-central-1.vpce.amazonaws.com:9098",
		"b-3.mycluster.abc123.c2.kafka.eu-central-1.api.aws:9098",
		"boot-abcd1234.c2.kafka-serverless.eu-central-1.amazonaws.com:9098",
		"10.0.1.5:9098",
		"[fd00::5]:9098",
		"kafka-bootstrap.internal:9098",
	}
	c := Config{Mechanism: AWSMSKIAM}
	for _, regionVar := range []string{"AWS_REGION", "AWS_DEFAULT_REGION"} {
		noAWSEnv(t)
		t.Setenv(regionVar, "eu-central-1")
		t.Setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/dedup")
		t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/token")
		if err := c.checkBrokers(cluster, os.Getenv); err != nil {
			t.Errorf("%s eu-central-1, one cluster's seeds: %v; want taken", regionVar, err)
		}
		for _, other := range []string{
			"b-1.other.abc123.c2.kafka.eu-west-1.amazonaws.com:9098",
			"vpce-0a1b2c3d4e5f67890-12345678.kafka.eu-west-1.vpce.amazonaws.com:9098",
			"b-1.gov.abc123.c2.kafka.us-gov-west-1.amazonaws.com:9098",
			"b-1.cn.abc123.c2.kafka.cn-north-1.amazonaws.com.cn:9098",
		} {
			if err := c.checkBrokers(append(append([]string(nil), cluster...), other), os.Getenv); err == nil {
				t.Errorf("%s eu-central-1, one cluster's seeds and %s: taken; want refused", regionVar, other)
			}
		}
	}
	noAWSEnv(t)
	t.Setenv("AWS_REGION", "eu-west-1") // the IP seeds signed for eu-west-1, the named ones for eu-central-1
	t.Setenv("AWS_ACCESS_KEY_ID", keyID1)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret1)
	if err := c.checkBrokers(cluster, os.Getenv); err == nil || strings.Contains(err.Error(), secret1) {
		t.Errorf("AWS_REGION eu-west-1 with eu-central-1's seeds: %v; want refused, quoting no secret", err)
	}
}

// adversary 50e: the stuck fetch of the test above, through the
// production path. containerEndpointCreds.fetch reads the token file
// (secretfile.File.Get: os.ReadFile) with no regard for its context: a
// token path that blocks on read (here a FIFO with no writer; a hung
// network or FUSE mount does the same) holds the renewal past
// renewalTimeout, and every later login waits on that renewal until its
// own context ends, even once the token file is a plain file again.
func TestABlockingTokenFileReadDoesNotHoldLoginsPastTheRenewalBound(t *testing.T) {
	noAWSEnv(t)
	defer func(d time.Duration) { renewalTimeout = d }(renewalTimeout)
	renewalTimeout = 300 * time.Millisecond
	agent := &fakeAgent{token: "pod-token"} // no Expiration: fetched at each login
	srv := httptest.NewServer(agent)
	defer srv.Close()
	dir := t.TempDir()
	p := filepath.Join(dir, "token")
	if err := os.WriteFile(p, []byte("pod-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", srv.URL+"/v1/credentials")
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", p)
	m, err := Config{Mechanism: AWSMSKIAM}.Build()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Authenticate(context.Background(), mskBroker); err != nil {
		t.Fatal(err)
	}
	// The token path blocks on read.
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skip("no FIFO here:", err)
	}
	fifo := filepath.Join(dir, "fifo")
	defer func() { // release the blocked read
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_, _ = w.WriteString("pod-token\n")
			_ = w.Close()
		}
		// Wait for the released renewal to end (it read renewalTimeout).
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _, _ = m.Authenticate(ctx, mskBroker)
	}()
	login := func() (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		start := time.Now()
		_, _, err := m.Authenticate(ctx, mskBroker)
		return time.Since(start), err
	}
	took, err := login()
	t.Logf("login with the token path blocking: %v after %v", err, took.Round(10*time.Millisecond))
	if took > 4*renewalTimeout {
		t.Errorf("a login with the token file's read blocked returned after %v, not at the renewal's bound %v: %v", took.Round(10*time.Millisecond), renewalTimeout, err)
	}
	// The token file is a plain file again (the FIFO moved aside, its
	// reader still blocked).
	if err := os.Rename(p, fifo); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("pod-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	took, err = login()
	calls, _ := agent.counts()
	if err != nil {
		t.Errorf("with the token file readable again, a login failed after %v (the agent asked %d times in all): %v: the renewal blocked on the old read is never replaced", took.Round(10*time.Millisecond), calls, err)
	}
}
