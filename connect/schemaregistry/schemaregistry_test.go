package schemaregistry_test

import (
	"bytes"
	"context"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/dedupio/dedup/connect/clienttls"
	"github.com/dedupio/dedup/connect/schemaregistry"
	"github.com/dedupio/dedup/connect/secretfile"
	"github.com/dedupio/dedup/internal/testsupport/srstandin"
)

// The client authenticates with the secret as its file holds it now: a
// rotated password or token is used from the next request on.
func TestClientSendsTheCredentialsOfItsFilesAsTheyAreNow(t *testing.T) {
	stand := srstandin.New()
	defer stand.Close()
	id, _ := stand.Register("s", sr.Schema{Schema: `"string"`})
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	write := func(v string, at time.Time) {
		t.Helper()
		if err := os.WriteFile(secret, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		// A new modification time: the file reads again at once.
		if err := os.Chtimes(secret, at, at); err != nil {
			t.Fatal(err)
		}
	}
	ask := func(cl *sr.Client) error {
		_, err := cl.SchemaByID(context.Background(), id)
		return err
	}
	t0 := time.Now().Add(-time.Hour)
	for _, c := range []struct {
		name    string
		cfg     schemaregistry.Config
		require func(string)
	}{
		{"basic", schemaregistry.Config{URL: stand.URL(), BasicAuth: schemaregistry.BasicAuth{Username: "u", PasswordFile: secret}},
			func(v string) { stand.RequireBasicAuth("u", v) }},
		{"bearer", schemaregistry.Config{URL: stand.URL(), BearerTokenFile: secret},
			func(v string) { stand.RequireBasicAuth("", ""); stand.RequireBearer(v) }},
	} {
		write("one", t0)
		time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
		c.require("one")
		if err := c.cfg.Validate("kafka.schema_registry"); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		cl, err := schemaregistry.NewClient(c.cfg, "kafka.schema_registry")
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if err := ask(cl); err != nil {
			t.Fatalf("%s: with the right secret: %v", c.name, err)
		}
		c.require("two")
		if err := ask(cl); err == nil {
			t.Fatalf("%s: the stand-in took the old secret", c.name)
		}
		write("two", t0.Add(time.Minute))
		time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
		if err := ask(cl); err != nil {
			t.Fatalf("%s: after the file was rotated: %v", c.name, err)
		}
	}
}

// With tls.ca_file the client talks to a registry whose certificate that
// CA signed; without it (the system's roots) it refuses the same registry.
func TestClientVerifiesTheRegistryAgainstItsCAFile(t *testing.T) {
	stand := srstandin.NewTLS()
	defer stand.Close()
	id, _ := stand.Register("s", sr.Schema{Schema: `"string"`})
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, stand.CertificatePEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tls clienttls.Config
		ok  bool
	}{{clienttls.Config{CAFile: ca}, true}, {clienttls.Config{Enabled: true}, false}} {
		cfg := schemaregistry.Config{URL: stand.URL(), TLS: c.tls}
		if err := cfg.Validate("kafka.schema_registry"); err != nil {
			t.Fatal(err)
		}
		cl, err := schemaregistry.NewClient(cfg, "kafka.schema_registry")
		if err != nil {
			t.Fatal(err)
		}
		_, err = cl.SchemaByID(context.Background(), id)
		if (err == nil) != c.ok {
			t.Errorf("tls %+v: err %v, want ok=%v", c.tls, err, c.ok)
		}
	}
	if err := (schemaregistry.Config{URL: "http://r.example.com", TLS: clienttls.Config{CAFile: ca}}).Validate("kafka.schema_registry"); err == nil {
		t.Error("tls settings with an http:// URL validated")
	}
}

// An answer is read into memory whole (pkg/sr): a registry, or a proxy in
// front of it, that answers without end is cut off at the client's bound
// (MaxResponseBytes) with an error naming it, not read to the end.
func TestClientReadsNoAnswerLargerThanItsBound(t *testing.T) {
	const total = 64 << 20
	var written atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		chunk := bytes.Repeat([]byte("a"), 64<<10)
		if _, err := w.Write([]byte(`{"schema":"`)); err != nil {
			return
		}
		for written.Load() < total {
			n, err := w.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
		_, _ = w.Write([]byte(`"}`))
	}))
	defer srv.Close()
	cl, err := schemaregistry.NewClient(schemaregistry.Config{URL: srv.URL}, "kafka.schema_registry")
	if err != nil {
		t.Fatal(err)
	}
	_, err = cl.SchemaByID(context.Background(), 1)
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("an answer of %d MiB: %v, want an error naming the bound", total>>20, err)
	}
	srv.CloseClientConnections()
	// The server's writes may run ahead of the client by the sockets' buffers.
	if w := written.Load(); w >= total {
		t.Fatalf("the client read all %d bytes of the answer", w)
	}
}

// A credential goes to a registry off this machine only over TLS that
// verifies it: a registry (or the load balancer in front of it) that
// redirects to plain http on the same host must not get the password
// sent in the clear. The test serves on this machine's first address that
// is not loopback, so that the rule applies.
func TestClientSendsNoCredentialOverARedirectToPlainHTTP(t *testing.T) {
	addr := nonLoopbackAddr(t)
	var leaked atomic.Value
	plainL, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	plain := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if a := req.Header.Get("Authorization"); a != "" {
			leaked.Store(a)
		}
		w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		_, _ = w.Write([]byte(`{"schema":"\"string\""}`))
	}))
	_ = plain.Listener.Close() // replaced by plainL
	plain.Listener = plainL
	plain.Start()
	defer plain.Close()
	tlsL, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	secure := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		http.Redirect(w, req, plain.URL+req.URL.Path, http.StatusTemporaryRedirect)
	}))
	_ = secure.Listener.Close() // replaced by tlsL
	secure.Listener = tlsL
	secure.StartTLS()
	defer secure.Close()
	dir := t.TempDir()
	ca, pw := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "pw")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: secure.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := schemaregistry.Config{URL: secure.URL, BasicAuth: schemaregistry.BasicAuth{Username: "u", PasswordFile: pw},
		TLS: clienttls.Config{CAFile: ca, ServerName: "example.com"}}
	if err := cfg.Validate("kafka.schema_registry"); err != nil {
		t.Fatal(err)
	}
	cl, err := schemaregistry.NewClient(cfg, "kafka.schema_registry")
	if err != nil {
		t.Fatal(err)
	}
	_, err = cl.SchemaByID(context.Background(), 1)
	if a := leaked.Load(); a != nil {
		t.Fatalf("the credential went over plain http to %s after a redirect: %v (request error %v)", plain.URL, a, err)
	}
	if err == nil {
		t.Fatal("a redirect to plain http was followed without the credential; want it refused")
	}
}

// nonLoopbackAddr is an address of this machine that is not loopback.
func nonLoopbackAddr(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	t.Skip("this machine has no address that is not loopback")
	return ""
}
