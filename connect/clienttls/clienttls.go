// Package clienttls builds the TLS side of dedup's clients (Kafka,
// Temporal) from files, as operators mount them: a CA bundle, a client
// certificate and its key. The files are read again on every handshake and
// parsed again when their bytes changed, so a rotated certificate (cert-
// manager, a renewed Temporal Cloud client certificate) is used by the next
// connection without a restart. A file that cannot be read or parsed at
// start is a start-up error; one that breaks later fails that handshake
// (the client retries), and never falls back to no verification.
package clienttls

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
)

// Config is one client's TLS section (kafka.tls, temporal.tls).
type Config struct {
	// Enabled turns TLS on with the system's CA roots when no file is
	// named (Confluent Cloud, MSK, Temporal Cloud with an API key). Naming
	// any file below turns TLS on too.
	Enabled bool `yaml:"enabled"`
	// CAFile is a PEM bundle of the CAs that sign the server's
	// certificate; it replaces the system roots. Empty: the system roots.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are the client certificate (PEM, with its
	// intermediates) and private key for mutual TLS; both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name the server's certificate must carry, when it
	// is not the host dialled (a load balancer's address, say).
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify accepts any server certificate: the connection is
	// encrypted but anyone on the path can pose as the server. For a test
	// bench only; dedup logs a warning at every start.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// On reports whether TLS is used.
func (c Config) On() bool {
	return c.Enabled || c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" || c.ServerName != "" || c.InsecureSkipVerify
}

// Validate names the first invalid field under prefix (kafka.tls, say).
func (c Config) Validate(prefix string) error {
	switch {
	case (c.CertFile == "") != (c.KeyFile == ""):
		return fmt.Errorf("%s.cert_file, key_file: set both or neither", prefix)
	case c.InsecureSkipVerify && c.CAFile != "":
		return fmt.Errorf("%s.insecure_skip_verify: a ca_file is not used when nothing is verified; drop one", prefix)
	}
	return nil
}

// Files is a loaded Config: it hands out tls.Configs that read the files
// again on every handshake.
type Files struct {
	cfg Config

	mu      sync.Mutex
	caPEM   []byte
	pool    *x509.CertPool
	certPEM []byte
	keyPEM  []byte
	cert    *tls.Certificate
}

// Load reads and parses the files once, so that a missing file or a
// mismatched key is a start-up error naming the field under prefix. It
// returns nil, nil when TLS is off.
func Load(c Config, prefix string) (*Files, error) {
	if !c.On() {
		return nil, nil
	}
	if err := c.Validate(prefix); err != nil {
		return nil, err
	}
	f := &Files{cfg: c}
	if c.CAFile != "" {
		if _, err := f.roots(); err != nil {
			return nil, fmt.Errorf("%s.ca_file: %w", prefix, err)
		}
	}
	if c.CertFile != "" {
		if _, err := f.clientCert(); err != nil {
			return nil, fmt.Errorf("%s.cert_file, key_file: %w", prefix, err)
		}
	}
	return f, nil
}

// InsecureSkipVerify reports whether the server is not verified (the
// caller warns).
func (f *Files) InsecureSkipVerify() bool { return f.cfg.InsecureSkipVerify }

// ClientConfig is the tls.Config for connections to host (the dialled
// host name or IP; Config.ServerName wins over it). The server's
// certificate is verified against the CA file as it is at the handshake,
// and the client certificate is the one in the files at the handshake.
func (f *Files) ClientConfig(host string) *tls.Config {
	name := f.cfg.ServerName
	if name == "" {
		name = host
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: name}
	if f.cfg.CertFile != "" {
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return f.clientCert()
		}
	}
	switch {
	case f.cfg.InsecureSkipVerify:
		tc.InsecureSkipVerify = true
	case f.cfg.CAFile != "":
		// The standard verification, against the pool as it is now:
		// crypto/tls verifies against a fixed RootCAs, which would pin
		// the CA file as it was at start. VerifyConnection runs on every
		// handshake, resumed ones included.
		tc.InsecureSkipVerify = true
		tc.VerifyConnection = func(cs tls.ConnectionState) error {
			return f.verify(cs, name)
		}
	}
	return tc
}

func (f *Files) verify(cs tls.ConnectionState, name string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: the server sent no certificate")
	}
	roots, err := f.roots()
	if err != nil {
		return fmt.Errorf("tls: reading the CA file: %w", err)
	}
	opts := x509.VerifyOptions{DNSName: name, Roots: roots, Intermediates: x509.NewCertPool()}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
	}
	return nil
}

// roots is the CA pool, parsed again when the file's bytes changed.
func (f *Files) roots() (*x509.CertPool, error) {
	b, err := os.ReadFile(f.cfg.CAFile)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pool != nil && bytes.Equal(b, f.caPEM) {
		return f.pool, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", f.cfg.CAFile)
	}
	f.caPEM, f.pool = b, pool
	return pool, nil
}

// clientCert is the key pair, parsed again when either file's bytes
// changed. A pair that does not match (the certificate renewed, the key
// not yet) is an error for this handshake, not a fallback to the old
// pair: the files are the truth.
func (f *Files) clientCert() (*tls.Certificate, error) {
	cb, err := os.ReadFile(f.cfg.CertFile)
	if err != nil {
		return nil, err
	}
	kb, err := os.ReadFile(f.cfg.KeyFile)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cert != nil && bytes.Equal(cb, f.certPEM) && bytes.Equal(kb, f.keyPEM) {
		return f.cert, nil
	}
	pair, err := tls.X509KeyPair(cb, kb)
	if err != nil {
		return nil, err
	}
	f.certPEM, f.keyPEM, f.cert = cb, kb, &pair
	return &pair, nil
}
