package secretfile

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// adversary 51: since 2657305 Get reads under its lock, so one read that
// does not return (a hung NFS/FUSE mount, a FIFO) holds every later Get
// of the File for ever, even once the path is a plain readable file again
// (the mount replaced, the FIFO moved aside): the container credentials'
// token, the web identity token, the ingress and tenant secrets are never
// read again and every login or request that needs them hangs with it.
// Before, such a Get held only itself (what 50e's
// TestABlockingTokenFileReadDoesNotHoldLoginsPastTheRenewalBound asserted
// before 2657305 rewrote it to release the blocked read first).
func TestAGetIsNotHeldByAnotherGetsReadThatNeverReturns(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte("old-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	// The path becomes a FIFO with no writer: a read that blocks.
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	if err := os.Rename(fifo, path); err != nil {
		t.Fatal(err)
	}
	blocked := make(chan error, 1)
	go func() {
		_, err := f.Get()
		blocked <- err
	}()
	// Wait (bounded) until that Get has the FIFO open for reading: a
	// non-blocking open for writing succeeds only then. The writer is
	// kept open, writing nothing: the read goes on blocking.
	var w *os.File
	deadline := time.Now().Add(5 * time.Second)
	for {
		w, err = os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.ENXIO) || time.Now().After(deadline) {
			t.Fatalf("the first Get never opened the FIFO: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	released := false
	release := func() {
		if released {
			return
		}
		released = true
		if err := w.Close(); err != nil {
			t.Errorf("closing the FIFO's writer: %v", err)
		}
		select {
		case <-blocked:
		case <-time.After(5 * time.Second):
			t.Errorf("the blocked Get did not return once its read did")
		}
	}
	defer release()
	// The mount answers again: the FIFO moved aside, a plain file in its place.
	if err := os.Rename(path, filepath.Join(dir, "fifo-aside")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("new-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	type result struct {
		v   string
		err error
	}
	got := make(chan result, 1)
	go func() {
		v, err := f.Get()
		got <- result{v, err}
	}()
	select {
	case r := <-got:
		if r.v != "new-token" || r.err != nil {
			t.Errorf("a Get of the plain file: %q %v, want new-token", r.v, r.err)
		}
	case <-time.After(2 * time.Second):
		t.Errorf("a Get of a plain readable file did not return within 2s: it waits on another Get's read that never returns (the File's lock)")
		release()
		select {
		case <-got:
		case <-time.After(5 * time.Second):
			t.Errorf("the second Get did not return even after the blocked read did")
		}
	}
}
