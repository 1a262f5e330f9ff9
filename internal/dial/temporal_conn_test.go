package dial

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/dedupio/dedup/internal/config"
)

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
		cfg := config.Default()
		cfg.Temporal.HostPort = ln.Addr().String()
		cfg.Temporal.APIKey = apiKey
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done := make(chan struct{})
		go func() {
			defer close(done)
			if tc, err := DialTemporal(ctx, cfg, slog.New(slog.DiscardHandler), nil); err == nil {
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
