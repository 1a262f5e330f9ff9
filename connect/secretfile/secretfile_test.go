package secretfile

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A file rewritten at the same size and modification time (which a stat
// cannot tell from no change) is read again once RecheckInterval has
// passed: a revoked secret stops working within it.
func TestFileRewrittenAtSameSizeAndMtimeIsReadAgain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte("old-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("x_file", path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(time.Hour)
	f.now = func() time.Time { return now }
	if _, err := f.Get(); err != nil { // read at now
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("new-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	if v, _ := f.Get(); v != "old-secret" {
		t.Fatalf("within the interval: %q (a stat alone cannot tell)", v)
	}
	now = now.Add(RecheckInterval)
	if v, err := f.Get(); v != "new-secret" || err != nil {
		t.Errorf("after RecheckInterval: %q %v, want the rewritten secret", v, err)
	}
}

// A Get never returns an older secret than one a previous Get (same goroutine)
// returned, even when the rotation keeps size and modification time.
func TestGetNeverReturnsAnOlderSecretAfterANewerOne(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s")
	mt := time.Unix(1700000000, 0)
	write := func(n int) {
		tmp := filepath.Join(dir, "tmp")
		if err := os.WriteFile(tmp, []byte(fmt.Sprintf("v%06d", n)), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(tmp, mt, mt); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(0)
	f, err := NewFile("k", path)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now()
	var step atomic.Int64
	f.now = func() time.Time { return base.Add(time.Duration(step.Add(1)) * 10 * time.Millisecond) }
	stop := make(chan struct{})
	var bad atomic.Value
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := ""
			for {
				select {
				case <-stop:
					return
				default:
				}
				v, err := f.Get()
				if err != nil {
					continue
				}
				if v < last {
					bad.Store(fmt.Sprintf("got %s after %s", v, last))
					return
				}
				last = v
			}
		}()
	}
	for n := 1; n < 3000 && bad.Load() == nil; n++ {
		write(n)
	}
	close(stop)
	wg.Wait()
	if b := bad.Load(); b != nil {
		t.Fatalf("a Get returned an older secret: %v", b)
	}
}
