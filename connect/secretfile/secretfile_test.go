package secretfile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A file rewritten in place where a stat cannot tell (same size and
// times: on Linux its change time tells, unless the rewrite falls in the
// same tick of the file system's clock, simulated here by taking the
// rewritten file's stat as the one read) is read again once
// RecheckInterval has passed: a revoked secret stops working within it.
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
	rewritten, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.state.id = idOf(rewritten)
	f.mu.Unlock()
	if v, _ := f.Get(); v != "old-secret" {
		t.Fatalf("within the interval: %q (a stat alone cannot tell)", v)
	}
	now = now.Add(RecheckInterval)
	if v, err := f.Get(); v != "new-secret" || err != nil {
		t.Errorf("after RecheckInterval: %q %v, want the rewritten secret", v, err)
	}
}

// A value whose read the File's clock puts in the future (the clock
// stepped back since) is read again once RecheckInterval of real time
// passed, not kept until the File's clock catches up with the read
// (adversary 53a: "the same root disables the RecheckInterval reread").
func TestAFileRewrittenInPlaceIsReadAgainAfterRecheckIntervalThoughTheClockSteppedBackPastItsRead(t *testing.T) {
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
	rewritten, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.state.id = idOf(rewritten)
	f.mu.Unlock()
	now = now.Add(-10 * time.Second) // the clock steps back past the read
	time.Sleep(RecheckInterval)
	if v, err := f.Get(); v != "new-secret" || err != nil {
		t.Errorf("RecheckInterval after the read, the clock stepped back past it: %q %v, want the rewritten secret", v, err)
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

// hangingReads makes f's next n reads hang until release is called (a
// hung mount: a read that no context or deadline ends); the others read
// the file. started says how many hung reads began.
func hangingReads(t *testing.T, f *File, n int32) (started func() int32, release func()) {
	t.Helper()
	var begun atomic.Int32
	gate := make(chan struct{})
	var once sync.Once
	real := f.read
	f.mu.Lock()
	f.now = func() time.Time { return time.Now().Add(time.Hour) } // the last look is old: the next Get looks
	f.read = func(key, path string) (string, fileID, error) {
		if begun.Add(1) <= n {
			<-gate
		}
		return real(key, path)
	}
	f.mu.Unlock()
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	return func() int32 { return min(begun.Load(), n) }, release
}

// adversary 51: a read that never returns (a hung mount) holds no other
// Get for good: a Get waiting for it begins another check beside it after
// HungAfter, so a path that is readable again is read within MaxWait. (Since 2657305 Get read under
// its lock, and one hung read held every later Get for ever, even once
// the path was a plain file again.)
func TestAGetIsNotHeldByAnotherGetsReadThatNeverReturns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("old-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	started, release := hangingReads(t, f, 1)
	defer release()
	if err := os.WriteFile(path, []byte("new-token-2\n"), 0o600); err != nil { // changed: the next Get reads
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		_, err := f.Get()
		first <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); started() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first Get began no read")
		}
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
		if r.v != "new-token-2" || r.err != nil {
			t.Errorf("a Get while another's read hangs: %q %v, want new-token-2", r.v, r.err)
		}
	case <-time.After(MaxWait + time.Second):
		t.Errorf("a Get did not return within MaxWait while another Get's read hangs")
	}
	select {
	case err := <-first:
		if err != nil { // its read was given up for the one that answered
			t.Errorf("the Get whose read hangs: %v, want the secret the read that replaced its own read", err)
		}
	case <-time.After(MaxWait + time.Second):
		t.Errorf("the Get whose read hangs did not return within MaxWait")
	}
}

// A hung mount holds at most maxChecks (two) reads of a File: the first,
// and the one a Get began beside it after HungAfter; every Get returns
// within MaxWait whatever the reads do, with an error naming the key and
// the path, and begins no third read. Once the reads return (the mount
// answers again), the File reads again and no check is left.
func TestAHungMountHoldsAtMostTwoReadsAndGetsReturnSayingWhy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("old-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	started, release := hangingReads(t, f, 1000)
	if err := os.WriteFile(path, []byte("new-token-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	says := func(err error) bool {
		return err != nil && strings.Contains(err.Error(), path) && strings.Contains(err.Error(), "token_file")
	}
	for i := range 3 {
		began := time.Now()
		_, err := f.Get()
		if took := time.Since(began); !says(err) || took > MaxWait+500*time.Millisecond {
			t.Errorf("Get %d of a hung file: %v after %v, want an error naming the key and the path within MaxWait", i+1, err, took)
		}
	}
	if n := started(); n != 2 {
		t.Errorf("%d reads began on the hung mount, want 2", n)
	}
	release()
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, err := f.Get()
		if v == "new-token-2" && err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("once the reads returned: %q %v, want new-token-2", v, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	eventuallyNoCheck(t, f)
}

// eventuallyNoCheck waits (bounded) until f has no check in progress.
func eventuallyNoCheck(t *testing.T, f *File) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		f.mu.Lock()
		n := len(f.checks)
		f.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d checks still in progress", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// adversary 51: a Secret replaced by rename (a new inode, as Kubernetes'
// ..data symlink swap, a `mv` of a file written with `cp -p`/`rsync -t`/tar,
// which keep the modification time) at the same size and modification time
// is a changed file, which a stat can tell from no change by its inode: it
// is read at once, not served from the cache for up to RecheckInterval (a
// revoked secret keeps working).
func TestAFileReplacedByRenameAtSameSizeAndMtimeIsReadAtTheNextLook(t *testing.T) {
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
	now = now.Add(StatInterval) // the next look, well within RecheckInterval
	if v, err := f.Get(); v != "new-secret" || err != nil {
		t.Errorf("after the file was replaced by rename (new inode, same size and mtime): %q %v, want the new secret at the next look", v, err)
	}
}

// adversary 51 holds: a secret that goes away is not silently kept, as
// Get's doc says, however it goes: removed, truncated to nothing (or a
// lone newline), its Kubernetes ..data symlink left dangling; and it is
// read again once it comes back; each at the next look (StatInterval).
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
	// Each Get a look later than the last (StatInterval on), within
	// RecheckInterval of the first read.
	now := time.Now()
	f.now = func() time.Time { return now }
	get := func() (string, error) {
		now = now.Add(StatInterval)
		return f.Get()
	}
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
	if v, err := get(); err == nil || v != "" {
		t.Errorf("dangling ..data: %q %v, want an error", v, err)
	}
	// The key comes back.
	if err := os.WriteFile(filepath.Join(dir, "..ts2", "secret"), []byte("second-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if v, err := get(); v != "second-secret" || err != nil {
		t.Errorf("after the key came back: %q %v", v, err)
	}
	// Truncated to a lone newline.
	if err := os.WriteFile(filepath.Join(dir, "..ts2", "secret"), []byte("\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if v, err := get(); err == nil || v != "" {
		t.Errorf("emptied: %q %v, want an error", v, err)
	}
	// Removed.
	if err := os.Remove(filepath.Join(dir, "..ts2", "secret")); err != nil {
		t.Fatal(err)
	}
	if v, err := get(); err == nil || v != "" {
		t.Errorf("removed: %q %v, want an error", v, err)
	}
}
