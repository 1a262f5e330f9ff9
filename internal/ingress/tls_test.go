package ingress

import (
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/dedupio/dedup/internal/testsupport/testpki"
)

// The server certificate is read from its files, and again when they
// change (a renewed certificate is served without a restart).
func TestServerCertificateReloads(t *testing.T) {
	dir := t.TempDir()
	ca1, ca2 := testpki.NewCA(t, "one"), testpki.NewCA(t, "two")
	p1 := ca1.Server(t, "127.0.0.1")
	certFile, keyFile := testpki.Write(t, dir, "tls.crt", p1.CertPEM), testpki.Write(t, dir, "tls.key", p1.KeyPEM)
	kp := &keyPair{cert: certFile, key: keyFile}
	if _, err := kp.get(nil); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }),
		ErrorLog: log.New(io.Discard, "", 0)} // the old CA's handshake fails, as it must
	go func() { _ = srv.Serve(tls.NewListener(l, &tls.Config{GetCertificate: kp.get})) }()
	defer func() { _ = srv.Close() }()
	get := func(ca *testpki.CA) error {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
		res, err := c.Get("https://" + l.Addr().String())
		if err == nil {
			_ = res.Body.Close()
		}
		return err
	}
	if err := get(ca1); err != nil {
		t.Fatalf("first certificate: %v", err)
	}
	p2 := ca2.Server(t, "127.0.0.1")
	time.Sleep(20 * time.Millisecond) // a later modification time
	if err := os.WriteFile(keyFile, p2.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, p2.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := get(ca2); err != nil {
		t.Errorf("renewed certificate not served: %v", err)
	}
	if err := get(ca1); err == nil {
		t.Error("the old CA still verifies the server")
	}
}
