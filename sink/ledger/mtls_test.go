package ledger_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dedupio/dedup/internal/testsupport/pgcluster"
	"github.com/dedupio/dedup/internal/testsupport/testpki"
	"github.com/dedupio/dedup/sink/ledger"
	"github.com/dedupio/dedup/sink/ledger/ledgerread"
)

// Client certificates in postgres.url (sslcert, sslkey): pgx v5.13 keeps
// them out of TLSConfig.Certificates and loads the files at each TLS
// handshake, keyed to the parsed config's own *tls.Config (replacing or
// cloning it drops them). Every way dedup dials the ledger keeps them:
// the migrations (database/sql over a copied ConnConfig), the ledger's
// pool, and ledgerread's; and a pair rotated in place is what the next
// connection sends.
func TestTheLedgerSendsTheClientCertificateOfItsURLAtEachDial(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ca := testpki.NewCA(t, "pg-ca")
	srv := ca.Server(t, "127.0.0.1", "localhost")
	// server.crt holds the CA too, and is the CA file: the server asks for
	// a client certificate and verifies one it gets (trust auth, so it
	// does not require one).
	pc, err := pgcluster.Start(ctx, pgcluster.Options{TLS: &pgcluster.TLS{CertPEM: append(append([]byte(nil), srv.CertPEM...), ca.CertPEM...),
		KeyPEM: srv.KeyPEM}, Settings: []string{"ssl_ca_file=server.crt"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Stop() })
	plain, err := pc.CreateDatabase(ctx, "dedup_mtls")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	one := ca.Client(t, "dedup-one")
	certFile := testpki.Write(t, dir, "client.crt", one.CertPEM)
	keyFile := testpki.Write(t, dir, "client.key", one.KeyPEM)
	rootFile := testpki.Write(t, dir, "ca.pem", ca.CertPEM)
	u := strings.Replace(plain, "sslmode=disable", fmt.Sprintf("sslmode=verify-full&sslrootcert=%s&sslcert=%s&sslkey=%s",
		url.QueryEscape(rootFile), url.QueryEscape(certFile), url.QueryEscape(keyFile)), 1)

	if err := ledger.Migrate(ctx, u); err != nil {
		t.Fatalf("migrating over mutual TLS: %v", err)
	}
	cfg := ledger.DefaultConfig()
	cfg.URL = u
	if err := ledger.MigrateAtStart(ctx, cfg); err != nil {
		t.Fatalf("the start's migration check over mutual TLS: %v", err)
	}
	led, err := ledger.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	dn := func() string {
		t.Helper()
		var ssl bool
		var dn *string
		if err := led.Pool().QueryRow(ctx, "SELECT ssl, client_dn FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl, &dn); err != nil {
			t.Fatal(err)
		}
		if !ssl || dn == nil {
			return "<no client certificate>"
		}
		return *dn
	}
	if got := dn(); !strings.Contains(got, "dedup-one") {
		t.Errorf("the ledger's connection sent %q, want the certificate of sslcert (dedup-one)", got)
	}
	// Rotated in place (a Secret's files replaced): the next connection
	// sends the new pair.
	two := ca.Client(t, "dedup-two")
	testpki.Write(t, dir, "client.crt", two.CertPEM)
	testpki.Write(t, dir, "client.key", two.KeyPEM)
	led.Pool().Reset()
	if got := dn(); !strings.Contains(got, "dedup-two") {
		t.Errorf("after the pair was replaced, a new connection sent %q, want dedup-two", got)
	}
	r, err := ledgerread.Open(ctx, u, ledgerread.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Lookup(ctx, []string{"activity-x:1"}); err != nil {
		t.Errorf("ledgerread over mutual TLS: %v", err)
	}
}
