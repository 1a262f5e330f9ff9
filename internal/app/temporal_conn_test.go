package app

import (
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

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
