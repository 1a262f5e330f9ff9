package kafkasasl

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// adversary 51: containerEndpointCreds.fetch says retry is for "no
// answer, a 5xx, 429", as the AWS SDKs' endpointcreds retries. A redirect
// is an answer, refused for good (CheckRedirect): it is not tried again.
// It is: every *url.Error is retried, so a login against an endpoint that
// answers 307 sends the pod's token three times and waits 600ms of pauses
// for a refusal that cannot change.
func TestARefusedRedirectOfTheContainerEndpointIsNotTriedAgain(t *testing.T) {
	noAWSEnv(t)
	var calls atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the redirect was followed")
	}))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Redirect(w, r, other.URL+"/v1/credentials", http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", srv.URL+"/v1/credentials")
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "pod-token")
	m, err := Config{Mechanism: AWSMSKIAM}.Build()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, _, err = m.Authenticate(ctx, mskBroker)
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "redirect") {
		t.Fatalf("a login against a redirecting endpoint: %v", err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("one login asked the redirecting endpoint %d times in %v (the token sent each time), want once: a refused redirect is no missing answer", n, took.Round(10*time.Millisecond))
	}
}
