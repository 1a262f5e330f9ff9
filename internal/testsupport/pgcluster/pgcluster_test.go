package pgcluster

import (
	"context"
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
