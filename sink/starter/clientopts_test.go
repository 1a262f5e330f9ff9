package starter_test

import (
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dedupio/dedup/internal/testsupport/testpki"
	"github.com/dedupio/dedup/sink/starter"
)

// A stranger's starter.Config: temporal.tls and the API key become the
// SDK's options (ClientOptions); a file that
// cannot be read is an error naming its key, before anything dials.
func TestClientOptionsApplyTLSAndAPIKey(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "ca")
	cli := ca.Client(t, "dedup")
	caFile := testpki.Write(t, dir, "ca.pem", ca.CertPEM)
	cert, key := testpki.Write(t, dir, "c.pem", cli.CertPEM), testpki.Write(t, dir, "k.pem", cli.KeyPEM)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	cfg := starter.DefaultConfig()
	cfg.HostPort = "ns.acct.tmprl.cloud:7233"
	cfg.TLS.CertFile, cfg.TLS.KeyFile, cfg.TLS.CAFile = cert, key, caFile
	o, err := cfg.ClientOptions(log)
	if err != nil {
		t.Fatal(err)
	}
	tc := o.ConnectionOptions.TLS
	if tc == nil || tc.ServerName != "ns.acct.tmprl.cloud" || tc.GetClientCertificate == nil || tc.VerifyConnection == nil || o.Credentials != nil {
		t.Errorf("mTLS options: %+v", o)
	}

	cfg = starter.DefaultConfig()
	cfg.APIKeyFile = testpki.Write(t, dir, "key", []byte("k\n"))
	if o, err = cfg.ClientOptions(log); err != nil || o.Credentials == nil {
		t.Errorf("API key file: %+v %v", o, err)
	}
	for _, tc := range []struct {
		mod  func(c *starter.Config)
		want string
	}{
		{func(c *starter.Config) { c.APIKeyFile = filepath.Join(dir, "missing") }, "temporal.api_key_file"},
		{func(c *starter.Config) { c.TLS.CAFile = filepath.Join(dir, "missing") }, "temporal.tls.ca_file"},
		{func(c *starter.Config) { c.TLS.CertFile, c.TLS.KeyFile = cert, caFile }, "temporal.tls.cert_file, key_file"},
	} {
		c := starter.DefaultConfig()
		tc.mod(&c)
		if _, err := c.ClientOptions(log); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
}
