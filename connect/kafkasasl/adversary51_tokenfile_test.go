package kafkasasl

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// adversary 51: the production face of secretfile reading under its lock
// (2657305): EKS Pod Identity's token path blocks on a read that never
// returns (a hung mount; here a FIFO with no writer), then is a plain file
// again (the mount replaced; the FIFO moved aside, its reader still
// blocked). The logins never recover: every fetch waits on the token
// File's lock held by the read that never returns. This is what 50e's
// TestABlockingTokenFileReadDoesNotHoldLoginsPastTheRenewalBound asserted
// before 2657305 rewrote it to release the blocked read first.
func TestLoginsRecoverOnceTheTokenPathIsReadableAgainWhileAnOldReadStillHangs(t *testing.T) {
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
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skip("no FIFO here:", err)
	}
	fifo := filepath.Join(dir, "fifo")
	defer func() { // at the end, release the read that hung (EOF) and let its renewal end
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			if err := w.Close(); err != nil {
				t.Errorf("closing the FIFO's writer: %v", err)
			}
		}
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
	if _, err := login(); err == nil {
		t.Fatal("a login succeeded with the token path blocking")
	}
	// The read never returns; the path is a plain file again.
	if err := os.Rename(p, fifo); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("pod-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var lastErr error
	for i := 0; i < 5; i++ {
		if _, lastErr = login(); lastErr == nil {
			return
		}
	}
	calls, _ := agent.counts()
	t.Errorf("with the token file readable again, 5 logins failed (the agent asked %d times in all; last: %v): the token File's lock is held by the read that never returns", calls, lastErr)
}
