// Package pgtest gives tests a fresh PostgreSQL database each: in the server
// named by DATABASE_URL when it is set, otherwise in one throwaway cluster per
// test binary (see pgcluster). Never a mock.
package pgtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dedupio/dedup/internal/testsupport/pgcluster"
)

var (
	mu      sync.Mutex
	cluster *pgcluster.Cluster
	seq     atomic.Int64
)

// Main runs the tests and then stops the cluster, if one was started.
// Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	mu.Lock()
	if cluster != nil {
		_ = cluster.Stop()
	}
	mu.Unlock()
	os.Exit(code)
}

// Cluster returns the package's throwaway cluster, starting it on first use.
// It fails the test when DATABASE_URL is set: a test that needs to stop the
// server must own it.
func Cluster(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if cluster == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c, err := pgcluster.Start(ctx, pgcluster.Options{})
		if err != nil {
			t.Fatalf("starting throwaway PostgreSQL: %v", err)
		}
		cluster = c
	}
	return cluster
}

// NewDatabase creates an empty database and returns its URL.
func NewDatabase(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := fmt.Sprintf("dedup_test_%d_%d", os.Getpid(), seq.Add(1))
	if base := os.Getenv("DATABASE_URL"); base != "" {
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Fatalf("connecting to DATABASE_URL: %v", err)
		}
		defer func() { _ = conn.Close(ctx) }()
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
			t.Fatalf("creating %s: %v", name, err)
		}
		cfg, err := pgx.ParseConfig(base)
		if err != nil {
			t.Fatal(err)
		}
		// Swap the database in the URL; both URL and key=value forms.
		if strings.Contains(base, "://") {
			i := strings.Index(base, "://")
			rest := base[i+3:]
			slash := strings.Index(rest, "/")
			q := ""
			if j := strings.Index(rest, "?"); j >= 0 {
				q = rest[j:]
				if slash < 0 || slash > j {
					slash = j
				}
			}
			if slash < 0 {
				slash = len(rest)
			}
			return base[:i+3] + rest[:slash] + "/" + name + q
		}
		return base + " dbname=" + name + fmt.Sprintf(" host=%s port=%d", cfg.Host, cfg.Port)
	}
	url, err := Cluster(t).CreateDatabase(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return url
}
