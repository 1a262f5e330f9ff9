package app

import (
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dedupio/dedup/internal/testsupport/testpki"
)

// temporal.tls and the API key become the SDK's options; a file that
// cannot be read is an error naming its key, before anything dials.
func TestTemporalOptions(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "ca")
	cli := ca.Client(t, "dedup")
	caFile := testpki.Write(t, dir, "ca.pem", ca.CertPEM)
	cert, key := testpki.Write(t, dir, "c.pem", cli.CertPEM), testpki.Write(t, dir, "k.pem", cli.KeyPEM)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	cfg := DefaultConfig()
	cfg.Temporal.HostPort = "ns.acct.tmprl.cloud:7233"
	cfg.Temporal.TLS.CertFile, cfg.Temporal.TLS.KeyFile, cfg.Temporal.TLS.CAFile = cert, key, caFile
	o, err := temporalOptions(cfg, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	tc := o.ConnectionOptions.TLS
	if tc == nil || tc.ServerName != "ns.acct.tmprl.cloud" || tc.GetClientCertificate == nil || tc.VerifyConnection == nil || o.Credentials != nil {
		t.Errorf("mTLS options: %+v", o)
	}

	cfg = DefaultConfig()
	cfg.Temporal.APIKeyFile = testpki.Write(t, dir, "key", []byte("k\n"))
	if o, err = temporalOptions(cfg, log, nil); err != nil || o.Credentials == nil {
		t.Errorf("API key file: %+v %v", o, err)
	}
	for _, tc := range []struct {
		mod  func(c *Config)
		want string
	}{
		{func(c *Config) { c.Temporal.APIKeyFile = filepath.Join(dir, "missing") }, "temporal.api_key_file"},
		{func(c *Config) { c.Temporal.TLS.CAFile = filepath.Join(dir, "missing") }, "temporal.tls.ca_file"},
		{func(c *Config) { c.Temporal.TLS.CertFile, c.Temporal.TLS.KeyFile = cert, caFile }, "temporal.tls.cert_file, key_file"},
	} {
		c := DefaultConfig()
		tc.mod(&c)
		if _, err := temporalOptions(c, log, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
}

// TestTemporalAPIKeyNeverInPlaintext: with temporal.api_key and no
// temporal.tls, the connection opens with a TLS handshake, whatever the
// host: the key is never sent in plaintext, so validate needs no rule (and
// there is no temporal.allow_insecure). Without a key the same dial opens
// in plaintext (HTTP/2's preface): the control that the test sees it.
func TestTemporalAPIKeyNeverInPlaintext(t *testing.T) {
	first := func(apiKey string) []byte {
		t.Helper()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = ln.Close() }()
		cfg := DefaultConfig()
		cfg.Temporal.HostPort = ln.Addr().String()
		cfg.Temporal.APIKey = apiKey
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done := make(chan struct{})
		go func() {
			defer close(done)
			if tc, err := dialTemporal(ctx, cfg, slog.New(slog.DiscardHandler), nil); err == nil {
				tc.Close()
			}
		}()
		defer func() { cancel(); <-done }()
		_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
		conn, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 3)
		if _, err := io.ReadFull(conn, b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	if b := first("s3cret-key"); b[0] != 0x16 || b[1] != 0x03 {
		t.Errorf("with temporal.api_key and no temporal.tls the connection opened with %q, want a TLS handshake record", b)
	}
	if b := first(""); string(b) != "PRI" {
		t.Errorf("without a key the connection opened with %q, want HTTP/2's plaintext preface", b)
	}
}
