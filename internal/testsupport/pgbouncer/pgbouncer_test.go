package pgbouncer_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dedupio/dedup/internal/testsupport/pgbouncer"
	"github.com/dedupio/dedup/internal/testsupport/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Under transaction pooling two clients share the server connection: a
// statement one prepared is there for the other (one server connection,
// so the second client is sure to get it).
func TestTransactionModeSharesServerConnections(t *testing.T) {
	url := pgtest.NewDatabase(t)
	b := pgbouncer.Start(t, url, pgbouncer.Options{Mode: pgbouncer.Transaction, PoolSize: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := pgx.Connect(ctx, b.URL(url))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Close(ctx) }()
	c, err := pgx.Connect(ctx, b.URL(url))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(ctx) }()
	if _, err := a.Exec(ctx, "PREPARE shared AS SELECT 41 + 1", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := c.QueryRow(ctx, "EXECUTE shared", pgx.QueryExecModeSimpleProtocol).Scan(&n); err != nil {
		t.Fatalf("the other client's prepared statement is not on the shared server connection: %v", err)
	}
	if n != 42 {
		t.Fatalf("EXECUTE shared = %d, want 42", n)
	}
}

// Under session pooling a client has a server connection of its own: a
// statement another client prepared is not there.
func TestSessionModeKeepsSessionsApart(t *testing.T) {
	url := pgtest.NewDatabase(t)
	b := pgbouncer.Start(t, url, pgbouncer.Options{Mode: pgbouncer.Session})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := pgx.Connect(ctx, b.URL(url))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Close(ctx) }()
	c, err := pgx.Connect(ctx, b.URL(url))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(ctx) }()
	if _, err := a.Exec(ctx, "PREPARE mine AS SELECT 1", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "EXECUTE mine", pgx.QueryExecModeSimpleProtocol); err == nil {
		t.Fatal("another session's prepared statement ran: the sessions share a server connection")
	}
}

// make test runs the root module's packages beside the lab's, each
// starting servers on ports it found free a moment before: two may pick
// the same one. A PgBouncer whose port another holds picks again: it never
// comes up answering through the other's, which may front another
// server.
func TestStartPicksAgainWhenItsFreePortIsHeldByAnotherPgBouncer(t *testing.T) {
	url := pgtest.NewDatabase(t)
	a := pgbouncer.Start(t, url, pgbouncer.Options{})
	picks := 0
	restore := pgbouncer.SetPickPort(func() (int, error) {
		picks++
		if picks == 1 {
			return a.Port(), nil // taken between the pick and the start
		}
		return freePort()
	})
	defer restore()
	b := pgbouncer.Start(t, url, pgbouncer.Options{})
	if b.Port() == a.Port() {
		t.Fatalf("the second PgBouncer came up on port %d, the first's (%d picks)", b.Port(), picks)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, b.URL(url))
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// The other lane's throwaway clusters listen on ports they found free too,
// and one may take the port Start picked. A PostgreSQL server answers a
// client of database postgres (every server has one; pgcluster's URL,
// which Start's backendURL is documented as, names it) but it is no
// PgBouncer: Start picks again, as when another PgBouncer holds the port.
func TestStartPicksAgainWhenItsFreePortIsHeldByAPostgreSQLServer(t *testing.T) {
	if os.Getenv("DATABASE_URL") != "" {
		t.Skip("DATABASE_URL given: the server holding the port is a throwaway cluster")
	}
	c := pgtest.Cluster(t)
	picks := 0
	restore := pgbouncer.SetPickPort(func() (int, error) {
		picks++
		if picks == 1 {
			return c.Port(), nil // taken between the pick and the start
		}
		return freePort()
	})
	defer restore()
	b := pgbouncer.Start(t, c.URL(), pgbouncer.Options{})
	if b.Port() == c.Port() {
		t.Fatalf("PgBouncer came up on port %d, the PostgreSQL server's (%d picks)", b.Port(), picks)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, b.URL(c.URL()))
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)
}

// An HTTP server (an ingress, a test's httptest server) may take the port
// too. PgBouncer, unable to listen, exits at once; the HTTP server never
// answers PostgreSQL's startup message (it waits for a request line).
// Start picks again then, not once the 30 s it gives a PgBouncer to come
// up have passed. Bound: 15 s, half of those; a PgBouncer starts in well
// under a second.
func TestStartPicksAgainSoonWhenItsFreePortIsHeldByAServerThatIsNotPostgreSQL(t *testing.T) {
	url := pgtest.NewDatabase(t)
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	defer srv.CloseClientConnections() // a client still waiting on its answer
	held := srv.Listener.Addr().(*net.TCPAddr).Port
	picks := 0
	restore := pgbouncer.SetPickPort(func() (int, error) {
		picks++
		if picks == 1 {
			return held, nil // taken between the pick and the start
		}
		return freePort()
	})
	defer restore()
	begun := time.Now()
	b := pgbouncer.Start(t, url, pgbouncer.Options{})
	if took := time.Since(begun); took > 15*time.Second {
		t.Fatalf("Start took %s to come up after an HTTP server took its first pick (%d picks); want under 15s", took.Round(time.Millisecond), picks)
	}
	if b.Port() == held {
		t.Fatalf("PgBouncer came up on port %d, the HTTP server's", held)
	}
}
