package app

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/internal/testsupport/pgcluster"
	"github.com/dedupio/dedup/internal/testsupport/testpki"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/sink/ledger"
)

// sslmode=verify-full against a PostgreSQL with ssl=on and a certificate
// made here: the right CA and host connect over TLS (and the ledger
// migrates and opens on it); another CA, or a certificate for another
// host, is refused, and refused for good (not retried as an outage).
func TestPostgresVerifyFull(t *testing.T) {
	ca := testpki.NewCA(t, "pg-ca")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pc, err := pgcluster.Start(ctx, pgcluster.Options{TLS: &pgcluster.TLS{
		CertPEM: ca.Server(t, "127.0.0.1", "localhost").CertPEM, KeyPEM: nil}})
	if err == nil {
		_ = pc.Stop()
		t.Fatal("a cluster started with a certificate and no key")
	}
	srv := ca.Server(t, "127.0.0.1", "localhost")
	pc, err = pgcluster.Start(ctx, pgcluster.Options{TLS: &pgcluster.TLS{CertPEM: srv.CertPEM, KeyPEM: srv.KeyPEM}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pc.Stop() }()
	plain, err := pc.CreateDatabase(ctx, "dedup_tls")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rightCA := testpki.Write(t, dir, "ca.pem", ca.CertPEM)
	otherCA := testpki.Write(t, dir, "other.pem", testpki.NewCA(t, "other").CertPEM)
	url := func(host, mode, root string) string {
		u := strings.Replace(plain, "127.0.0.1", host, 1)
		return strings.Replace(u, "sslmode=disable", fmt.Sprintf("sslmode=%s&sslrootcert=%s", mode, root), 1)
	}

	good := url("127.0.0.1", "verify-full", rightCA)
	if err := ledger.Migrate(ctx, good); err != nil {
		t.Fatalf("verify-full with the right CA: %v", err)
	}
	lc := ledger.DefaultConfig()
	lc.URL = good
	led, err := ledger.Open(ctx, lc)
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	var ssl bool
	if err := led.Pool().QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl); err != nil || !ssl {
		t.Fatalf("connection over TLS: %v %v", ssl, err)
	}
	if err := connect(ctx, url("localhost", "verify-full", rightCA)); err != nil {
		t.Errorf("verify-full by name: %v", err)
	}

	for _, tc := range []struct{ name, url, want string }{
		{"another CA", url("127.0.0.1", "verify-full", otherCA), "certificate signed by unknown authority"},
		{"another CA, verify-ca", url("127.0.0.1", "verify-ca", otherCA), "certificate signed by unknown authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := connect(ctx, tc.url)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if ledger.Transient(err) {
				t.Errorf("a certificate that does not verify is taken for an outage (retried for ever): %v", err)
			}
			if refusedPostgres(err) == nil {
				t.Errorf("start-up would wait on a certificate that does not verify: %v", err)
			}
		})
	}

	// A certificate for another host: verify-full refuses it, verify-ca
	// (the chain only) takes it.
	other := ca.Server(t, "db.internal")
	pc2, err := pgcluster.Start(ctx, pgcluster.Options{TLS: &pgcluster.TLS{CertPEM: other.CertPEM, KeyPEM: other.KeyPEM}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pc2.Stop() }()
	u2 := strings.Replace(pc2.URL(), "sslmode=disable", "sslmode=verify-full&sslrootcert="+rightCA, 1)
	if err := connect(ctx, u2); err == nil || !strings.Contains(err.Error(), "cannot validate certificate for 127.0.0.1") || ledger.Transient(err) {
		t.Errorf("verify-full, certificate for another host: %v", err)
	}
	if err := connect(ctx, strings.Replace(u2, "verify-full", "verify-ca", 1)); err != nil {
		t.Errorf("verify-ca, certificate for another host: %v", err)
	}
}

func connect(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// Outside this machine, a connection that does not verify the server is
// a start-up error naming postgres.url, unless postgres.allow_insecure
// says so; loopback and Unix-socket connections (the dev stack, the
// tests, a local TLS proxy) never leave the machine and need no TLS.
func TestPostgresInsecureURLIsAStartupError(t *testing.T) {
	base := `
kafka: {brokers: [b:9092], group: g, topics: [t], reset_offset: earliest}
routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]
`
	for _, tc := range []struct{ postgres, want string }{
		{`{url: "postgres://u:pw@db.example.com/d"}`, "postgres.url: connects to db.example.com:5432 over TLS without verifying the server's certificate"},
		{`{url: "postgres://u:pw@db.example.com/d?sslmode=disable"}`, "postgres.url: connects to db.example.com:5432 without TLS"},
		{`{url: "postgres://u:pw@db.example.com/d?sslmode=require"}`, "over TLS without verifying"},
		{`{url: "host=db.example.com user=u sslmode=prefer"}`, "postgres.url: connects to db.example.com:5432"},
		{`{url: "postgres://u@127.0.0.1:5432,db.example.com:5433/d?sslmode=disable"}`, "postgres.url: connects to db.example.com:5433 without TLS"},
		{`{url: "postgres://u@db.example.com/d?sslmode=verify-full"}`, ""},
		{`{url: "postgres://u@db.example.com/d?sslmode=verify-ca&sslrootcert=system"}`, ""},
		{`{url: "postgres://u@db.example.com/d", allow_insecure: true}`, ""},
		{`{url: "postgres://u@127.0.0.1/d?sslmode=disable"}`, ""},
		{`{url: "postgres://u@localhost/d?sslmode=disable"}`, ""},
		{`{url: "postgres://u@[::1]/d?sslmode=disable"}`, ""},
		{`{url: "host=/var/run/postgresql user=u"}`, ""},
	} {
		_, err := config.Parse([]byte(base + "postgres: " + tc.postgres + "\n"))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.postgres, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want %q", tc.postgres, err, tc.want)
		case err != nil && (strings.Contains(err.Error(), ":pw@") || !strings.Contains(err.Error(), "postgres.allow_insecure: true")):
			t.Errorf("%s: the error quotes the password or does not say how to accept it: %v", tc.postgres, err)
		}
	}
	// dedup run checks it at start, before it connects to anything.
	cfg := config.Default()
	cfg.Kafka.Brokers, cfg.Kafka.Group, cfg.Kafka.Topics, cfg.Kafka.ResetOffset = []string{"b:9092"}, "g", []string{"t"}, "earliest"
	cfg.Routes = decide.Routes{{ID: "a", Match: decide.Match{Type: "x"}, WorkflowType: "W", TaskQueue: "q"}}
	cfg.Postgres.URL = "postgres://u@db.example.com/d"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := Run(ctx, cfg, Options{}); err == nil || !strings.HasPrefix(err.Error(), "postgres.url: ") {
		t.Errorf("dedup run: %v", err)
	}
}
