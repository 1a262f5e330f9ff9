package clienttls

import (
	"crypto/tls"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dedupio/dedup/internal/testsupport/testpki"
)

// server is a TLS listener that wants a client certificate from ca and
// serves whatever certificate is current.
type server struct {
	l    net.Listener
	mu   sync.Mutex
	cert tls.Certificate
	seen chan string // the client certificate's common name, per handshake
}

func newServer(t *testing.T, clientCA *testpki.CA, cert tls.Certificate) *server {
	t.Helper()
	s := &server{cert: cert, seen: make(chan string, 16)}
	cfg := &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCA.Pool(),
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			c := s.cert
			return &c, nil
		}}
	var err error
	if s.l, err = tls.Listen("tcp", "127.0.0.1:0", cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.l.Close() })
	go func() {
		for {
			c, err := s.l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				tc := c.(*tls.Conn)
				if tc.Handshake() == nil {
					s.seen <- tc.ConnectionState().PeerCertificates[0].Subject.CommonName
				}
			}()
		}
	}()
	return s
}

func (s *server) serve(c tls.Certificate) { s.mu.Lock(); s.cert = c; s.mu.Unlock() }

func (s *server) dial(f *Files) (string, error) {
	c, err := tls.Dial("tcp", s.l.Addr().String(), f.ClientConfig("127.0.0.1"))
	if err != nil {
		return "", err
	}
	defer func() { _ = c.Close() }()
	// TLS 1.3: the server judges the client certificate after the
	// client's handshake ended; a read tells.
	_ = c.SetReadDeadline(deadline())
	if _, err := c.Read(make([]byte, 1)); err != nil && !strings.Contains(err.Error(), "EOF") {
		return "", err
	}
	return <-s.seen, nil
}

// The certificate files are read at every handshake: a renewed client
// certificate and a new CA bundle are used by the next connection, without
// a restart; a server the CA file does not vouch for, or whose
// certificate names another host, is refused.
func TestFilesAreReadAgainAtEveryHandshake(t *testing.T) {
	clientCA, ca1, ca2 := testpki.NewCA(t, "clients"), testpki.NewCA(t, "servers-1"), testpki.NewCA(t, "servers-2")
	dir := t.TempDir()
	first := clientCA.Client(t, "client-1")
	cfg := Config{
		CAFile:   testpki.Write(t, dir, "ca.pem", ca1.CertPEM),
		CertFile: testpki.Write(t, dir, "tls.crt", first.CertPEM),
		KeyFile:  testpki.Write(t, dir, "tls.key", first.KeyPEM),
	}
	f, err := Load(cfg, "x.tls")
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, clientCA, ca1.Server(t, "127.0.0.1").TLS(t))

	if cn, err := s.dial(f); err != nil || cn != "client-1" {
		t.Fatalf("first handshake: %q %v", cn, err)
	}
	second := clientCA.Client(t, "client-2")
	testpki.Write(t, dir, "tls.crt", second.CertPEM)
	testpki.Write(t, dir, "tls.key", second.KeyPEM)
	if cn, err := s.dial(f); err != nil || cn != "client-2" {
		t.Fatalf("after renewing the client certificate: %q %v", cn, err)
	}

	s.serve(ca2.Server(t, "127.0.0.1").TLS(t))
	if _, err := s.dial(f); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("a server of another CA: %v", err)
	}
	testpki.Write(t, dir, "ca.pem", append(append([]byte{}, ca1.CertPEM...), ca2.CertPEM...))
	if _, err := s.dial(f); err != nil {
		t.Fatalf("after adding its CA to the bundle: %v", err)
	}

	s.serve(ca2.Server(t, "db.internal").TLS(t))
	if _, err := s.dial(f); err == nil || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("a certificate for another host: %v", err)
	}
	named := cfg
	named.ServerName = "db.internal"
	fn, err := Load(named, "x.tls")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.dial(fn); err != nil {
		t.Fatalf("server_name: %v", err)
	}

	// A CA file that breaks later fails the handshake; it never turns
	// verification off.
	testpki.Write(t, dir, "ca.pem", []byte("not a certificate"))
	if _, err := s.dial(fn); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("a broken CA file: %v", err)
	}
}

func TestLoadErrorsNameTheField(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	dir := t.TempDir()
	a, b := ca.Client(t, "a"), ca.Client(t, "b")
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{CAFile: dir + "/missing.pem"}, "kafka.tls.ca_file"},
		{Config{CAFile: testpki.Write(t, dir, "empty.pem", []byte("\n"))}, "kafka.tls.ca_file"},
		{Config{CertFile: testpki.Write(t, dir, "a.crt", a.CertPEM)}, "kafka.tls.cert_file, key_file: set both"},
		{Config{CertFile: testpki.Write(t, dir, "a.crt", a.CertPEM), KeyFile: testpki.Write(t, dir, "b.key", b.KeyPEM)}, "kafka.tls.cert_file, key_file: tls: private key does not match"},
		{Config{InsecureSkipVerify: true, CAFile: testpki.Write(t, dir, "ca.pem", ca.CertPEM)}, "kafka.tls.insecure_skip_verify"},
	} {
		if _, err := Load(tc.cfg, "kafka.tls"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if f, err := Load(Config{}, "kafka.tls"); f != nil || err != nil {
		t.Errorf("TLS off: %v %v", f, err)
	}
	f, err := Load(Config{Enabled: true}, "kafka.tls")
	if err != nil || f == nil {
		t.Fatalf("system roots: %v", err)
	}
	if c := f.ClientConfig("h"); c.InsecureSkipVerify || c.ServerName != "h" || c.RootCAs != nil {
		t.Errorf("system roots: %+v", c)
	}
}

func deadline() time.Time { return time.Now().Add(5 * time.Second) }
