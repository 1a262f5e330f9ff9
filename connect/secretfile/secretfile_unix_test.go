//go:build unix

package secretfile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A FIFO at the path (a sidecar's pipe, a mount that became one) is read
// through Go's poller: without a writer it reads empty at once, and with
// a writer that writes nothing the read ends at HungAfter/2; either is an
// error naming the path, and no read is left running.
func TestAFIFOAtThePathIsAnErrorAndHoldsNoRead(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte("old-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	f.mu.Lock()
	f.now = func() time.Time { return time.Now().Add(time.Hour) } // the last look is old: every Get looks
	f.mu.Unlock()
	began := time.Now()
	if _, err := f.Get(); err == nil || !strings.Contains(err.Error(), path) || time.Since(began) > 500*time.Millisecond {
		t.Errorf("a Get of a FIFO without a writer: %v after %v, want an error naming the path at once", err, time.Since(began))
	}
	// A writer that writes nothing: opened (read and write, so that the
	// open does not wait for a reader) and held.
	w, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	}()
	began = time.Now()
	if _, err := f.Get(); err == nil || !strings.Contains(err.Error(), path) || time.Since(began) > HungAfter+500*time.Millisecond {
		t.Errorf("a Get of a FIFO whose writer writes nothing: %v after %v, want an error naming the path within HungAfter", err, time.Since(began))
	}
	eventuallyNoCheck(t, f)
}
