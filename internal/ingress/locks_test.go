package ingress

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupio/dedup/internal/testsupport/pgtest"
)

// With PostgreSQL unreachable, a lock is per process (counted), answered
// at once while PostgreSQL is left alone, and still exclusive in the
// process.
func TestLocksDegradeToPerProcess(t *testing.T) {
	degraded := prometheus.NewCounter(prometheus.CounterOpts{Name: "d"})
	l := NewLocks("postgres://u@127.0.0.1:1/db?sslmode=disable&connect_timeout=1", slog.New(slog.DiscardHandler), degraded)
	defer l.Close()
	ctx := context.Background()
	rel, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, "k"); !errors.Is(err, ErrInFlight) {
		t.Errorf("second acquire in the process: %v, want ErrInFlight", err)
	}
	t0 := time.Now()
	rel2, err := l.Acquire(ctx, "other")
	if err != nil || time.Since(t0) > 100*time.Millisecond {
		t.Errorf("while PostgreSQL is left alone: %v after %s", err, time.Since(t0))
	}
	rel2()
	rel()
	if rel, err := l.Acquire(ctx, "k"); err != nil {
		t.Errorf("after release: %v", err)
	} else {
		rel()
	}
}

// Two lock sessions (two replicas) exclude each other per key; a released
// key, or a session that ends, frees it.
func TestLocksAcrossSessions(t *testing.T) {
	url := pgtest.NewDatabase(t)
	log := slog.New(slog.DiscardHandler)
	a := NewLocks(url, log, prometheus.NewCounter(prometheus.CounterOpts{Name: "a"}))
	b := NewLocks(url, log, prometheus.NewCounter(prometheus.CounterOpts{Name: "b"}))
	defer b.Close()
	ctx := context.Background()
	rel, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx, "k"); !errors.Is(err, ErrInFlight) {
		t.Fatalf("other session: %v, want ErrInFlight", err)
	}
	relOther, err := b.Acquire(ctx, "k2")
	if err != nil {
		t.Fatal(err)
	}
	relOther()
	rel()
	rel, err = b.Acquire(ctx, "k")
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	rel()
	// A session that ends (a crashed replica) frees its locks.
	if _, err := a.Acquire(ctx, "k3"); err != nil {
		t.Fatal(err)
	}
	a.Close()
	// The server ends the session (and releases its locks) a moment after
	// the client hangs up: bounded at 10 s here, in practice milliseconds.
	deadline := time.Now().Add(10 * time.Second)
	for {
		rel, err := b.Acquire(ctx, "k3")
		if err == nil {
			rel()
			break
		}
		if !errors.Is(err, ErrInFlight) || time.Now().After(deadline) {
			t.Fatalf("after the holder's session ended: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
