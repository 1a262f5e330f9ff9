package secretfile

import (
	"os"
	"path/filepath"
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
