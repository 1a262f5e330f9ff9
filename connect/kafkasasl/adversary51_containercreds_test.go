package kafkasasl

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// adversary 51: ECS's relative URI's path is the credentials ID, the task
// role's capability, which no error may quote (containerShown drops it;
// TestTheECSCredentialsIDIsInNoIdentityNorLoginError). A redirect answered
// by the endpoint (a trailing-slash redirect, an http->https upgrade) names
// that same path, and the redirect error quotes it: containerShown is
// called with from "" for the redirect's target.
func TestARedirectOfTheECSEndpointDoesNotQuoteTheCredentialsID(t *testing.T) {
	noAWSEnv(t)
	const id = "5f9c2b1e-7d4a-4c3e-9b8f-0a1d2e3f4a5b"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Path+"/", http.StatusMovedPermanently) // as http.ServeMux does
	}))
	defer srv.Close()
	// 169.254.170.2 is ECS's, not this machine's: every dial of the
	// transport Build clones goes to the test server instead.
	orig := http.DefaultTransport
	tr := orig.(*http.Transport).Clone()
	tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, srv.Listener.Addr().String())
	}
	http.DefaultTransport = tr
	defer func() { http.DefaultTransport = orig }()
	t.Setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/"+id)
	m, err := Config{Mechanism: AWSMSKIAM}.Build()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, err = m.Authenticate(ctx, mskBroker)
	if err == nil {
		t.Fatal("a login succeeded against an endpoint that only redirects")
	}
	if !strings.Contains(err.Error(), "redirect") {
		t.Fatalf("the login error is not the redirect's (the test server was not reached?): %v", err)
	}
	if strings.Contains(err.Error(), id) {
		t.Errorf("a login error quotes the ECS credentials ID: %v", err)
	}
}
