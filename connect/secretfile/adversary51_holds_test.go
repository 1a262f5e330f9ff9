package secretfile

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// adversary 51 holds: a secret that goes away is not silently kept, as
// Get's doc says, however it goes: removed, truncated to nothing (or a
// lone newline), its Kubernetes ..data symlink left dangling; and it is
// read again once it comes back.
func TestARemovedEmptiedOrDanglingSecretIsAnErrorNotTheOldValue(t *testing.T) {
	dir := t.TempDir()
	// Kubernetes' layout: secret -> ..data/secret, ..data -> ..ts1
	for _, d := range []string{"..ts1", "..ts2"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "..ts1", "secret"), []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..ts1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "secret")
	if err := os.Symlink(filepath.Join("..data", "secret"), path); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("x_file", path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	f.now = func() time.Time { return now }
	swap := func(to string) {
		t.Helper()
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(to, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	// ..data swapped to a directory without the key: dangling.
	swap("..ts2")
	if v, err := f.Get(); err == nil || v != "" {
		t.Errorf("dangling ..data: %q %v, want an error", v, err)
	}
	// The key comes back.
	if err := os.WriteFile(filepath.Join(dir, "..ts2", "secret"), []byte("second-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if v, err := f.Get(); v != "second-secret" || err != nil {
		t.Errorf("after the key came back: %q %v", v, err)
	}
	// Truncated to a lone newline.
	if err := os.WriteFile(filepath.Join(dir, "..ts2", "secret"), []byte("\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if v, err := f.Get(); err == nil || v != "" {
		t.Errorf("emptied: %q %v, want an error", v, err)
	}
	// Removed.
	if err := os.Remove(filepath.Join(dir, "..ts2", "secret")); err != nil {
		t.Fatal(err)
	}
	if v, err := f.Get(); err == nil || v != "" {
		t.Errorf("removed: %q %v, want an error", v, err)
	}
}
