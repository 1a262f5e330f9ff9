package pgcluster

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// make test runs the root module's packages beside the lab's, each
// starting clusters on ports it found free a moment before: two may pick
// the same one. A cluster whose server cannot listen on its port must not
// come up connected to the server that holds it, whose database is
// another test's.
func TestStartOnAPortAnotherClusterHoldsNeverAnswersWithThatCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Stop() }()
	b, err := Start(ctx, Options{Port: a.port})
	if err == nil {
		defer func() { _ = b.Stop() }()
		dir := dataDirectory(ctx, t, b.URL())
		t.Fatalf("Start on port %d, held by cluster %s: came up, answering from %s (its own: %s); want an error naming the port",
			a.port, a.dir, dir, b.dir)
	}
	t.Logf("Start on a held port: %v", err)
}

// Start with no port picks a free one; when another server takes it
// between the pick and the server's start, it picks again rather than
// fail or answer with that server.
func TestStartRetriesWhenItsFreePortIsTakenBeforeItListens(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Stop() }()
	picks := 0
	defer func(f func() (int, error)) { pickPort = f }(pickPort)
	pickPort = func() (int, error) {
		picks++
		if picks == 1 {
			return a.port, nil // taken between the pick and the start
		}
		return freePort()
	}
	b, err := Start(ctx, Options{})
	if err != nil {
		t.Fatalf("Start after its first pick was taken: %v; want it to pick again", err)
	}
	defer func() { _ = b.Stop() }()
	if b.port == a.port {
		t.Fatalf("Start came up on port %d, held by the other cluster", b.port)
	}
	if dir := dataDirectory(ctx, t, b.URL()); dir != b.dir {
		t.Fatalf("the started cluster answers from %s, want its own %s", dir, b.dir)
	}
}

func dataDirectory(ctx context.Context, t *testing.T, url string) string {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	var dir string
	if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The other lane's servers are not all PostgreSQL: an HTTP server (an
// ingress, a test's httptest server) may take the port Start found free
// before the cluster's server listens on it. The cluster's server, unable
// to listen, exits at once; the HTTP server never answers PostgreSQL's
// startup message (it waits for a request line). Start picks again, as it
// does when another cluster holds the port, rather than wait on that
// answer for as long as its context lasts. Bound: 30 s, several times what
// initdb and a start take on two cores (under 5 s).
func TestStartPicksAgainWhenItsFreePortIsHeldByAServerThatIsNotPostgreSQL(t *testing.T) {
	held := heldByHTTP(t)
	picks := 0
	defer func(f func() (int, error)) { pickPort = f }(pickPort)
	pickPort = func() (int, error) {
		picks++
		if picks == 1 {
			return held, nil // taken between the pick and the start
		}
		return freePort()
	}
	c, err := startWithin(t, Options{}, 30*time.Second)
	if err != nil {
		t.Fatalf("Start after its first pick was taken by an HTTP server: %v; want it to pick again", err)
	}
	if c.port == held {
		t.Fatalf("Start came up on port %d, held by the HTTP server", held)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if dir := dataDirectory(ctx, t, c.URL()); dir != c.dir {
		t.Fatalf("the started cluster answers from %s, want its own %s", dir, c.dir)
	}
}

// A port the caller chose is kept, and Start's error names it: also when
// what holds it is not PostgreSQL (an HTTP server, which never answers the
// startup message), once the cluster's own server has exited, not when the
// caller's context ends (make dev's has no deadline). Bound: 30 s, as
// above.
func TestStartOnAPortAServerThatIsNotPostgreSQLHoldsFailsNamingThePort(t *testing.T) {
	held := heldByHTTP(t)
	c, err := startWithin(t, Options{Port: held}, 30*time.Second)
	if err == nil {
		t.Fatalf("Start on port %d, held by an HTTP server: came up (data directory %s); want an error naming the port", held, c.dir)
	}
	if !strings.Contains(err.Error(), strconv.Itoa(held)) {
		t.Fatalf("Start on port %d, held by an HTTP server: %v; want an error naming the port", held, err)
	}
}

// Start knows its own server by the data directory the server reports
// (SHOW data_directory), which PostgreSQL puts in canonical form: no
// doubled slash, no "." component. A TMPDIR not in that form (the kernel
// resolves it all the same) still gives a cluster that comes up, not one
// whose own server is taken for another's and killed.
func TestStartKnowsItsOwnServerUnderATMPDIRNotInCanonicalForm(t *testing.T) {
	base := strings.TrimRight(os.TempDir(), "/")
	for _, tc := range []struct{ name, tmp string }{
		{"a trailing doubled slash", base + "//"},
		{"a dot component", base + "/./"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("TMPDIR", tc.tmp)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c, err := Start(ctx, Options{})
			if err != nil {
				t.Fatalf("Start with TMPDIR=%s: %v", tc.tmp, err)
			}
			defer func() { _ = c.Stop() }()
			if dir := dataDirectory(ctx, t, c.URL()); filepath.Clean(dir) != filepath.Clean(c.dir) {
				t.Fatalf("the started cluster answers from %s, want its own %s", dir, c.dir)
			}
		})
	}
}

// heldByHTTP is the port of an HTTP server that runs until the test ends,
// on a port of the kind freePort finds.
func heldByHTTP(t *testing.T) int {
	t.Helper()
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(func() {
		srv.CloseClientConnections() // a client still waiting on its answer
		srv.Close()
	})
	return srv.Listener.Addr().(*net.TCPAddr).Port
}

// startWithin runs Start and gives it at most bound: a Start still running
// then is canceled (a cluster it started all the same is stopped) and the
// test fails.
func startWithin(t *testing.T, opts Options, bound time.Duration) (*Cluster, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		c   *Cluster
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := Start(ctx, opts)
		done <- result{c, err}
	}()
	select {
	case r := <-done:
		if r.c != nil {
			t.Cleanup(func() { _ = r.c.Stop() })
		}
		return r.c, r.err
	case <-time.After(bound):
		cancel()
		r := <-done
		if r.c != nil {
			_ = r.c.Stop()
		}
		t.Fatalf("Start (port %d asked) still running after %s; canceled, it returned %v", opts.Port, bound, r.err)
		return nil, nil
	}
}

// A restart waits for its port while something else holds it for a
// while: clients that keep dialing a stopped server's port (the routers
// of a test that stopped it) can take that port as their own, a TCP
// connection to itself, held until the client gives up (CI: "bringing
// postgres back: postgres exited while starting on 127.0.0.1:33705: the
// port is held by another process").
func TestARestartWaitsForItsPortWhileAnotherHoldsItForAWhile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Stop() }()
	if err := c.StopImmediate(); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)))
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(2*time.Second, func() { _ = l.Close() })
	if err := c.Restart(ctx); err != nil {
		t.Fatalf("Restart while the port was held for 2s: %v", err)
	}
	if dir := dataDirectory(ctx, t, c.URL()); filepath.Clean(dir) != filepath.Clean(c.dir) {
		t.Fatalf("restarted, answering from %s, not %s", dir, c.dir)
	}
}
