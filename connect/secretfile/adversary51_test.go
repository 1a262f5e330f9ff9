package secretfile

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// adversary 51: a Secret replaced by rename (a new inode, as Kubernetes'
// ..data symlink swap, a `mv` of a file written with `cp -p`/`rsync -t`/tar,
// which keep the modification time) at the same size and modification time
// is a changed file, which a stat can tell from no change by its inode: it
// is read at once, not served from the cache for up to RecheckInterval (a
// revoked secret keeps working).
func TestAFileReplacedByRenameAtSameSizeAndMtimeIsReadAtOnce(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "secret")
	mt := time.Unix(1700000000, 0)
	write := func(v string) {
		t.Helper()
		tmp := filepath.Join(dir, "tmp")
		if err := os.WriteFile(tmp, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(tmp, mt, mt); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("old-secret")
	f, err := NewFile("x_file", path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	f.now = func() time.Time { return now } // the clock stands still: within RecheckInterval
	if v, err := f.Get(); v != "old-secret" || err != nil {
		t.Fatalf("first Get: %q %v", v, err)
	}
	write("new-secret")
	if v, err := f.Get(); v != "new-secret" || err != nil {
		t.Errorf("after the file was replaced by rename (new inode, same size and mtime): %q %v, want the new secret at once", v, err)
	}
}
