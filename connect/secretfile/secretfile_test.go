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

// adv53bFile is a File on path whose clock is time.Now plus an offset the
// test steps, and whose reads are counted.
func adv53bFile(t *testing.T, path string) (f *File, offset *atomic.Int64, reads *atomic.Int64) {
	t.Helper()
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	offset, reads = new(atomic.Int64), new(atomic.Int64)
	offset.Store(int64(time.Hour))
	f.mu.Lock()
	f.now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	f.read = func(key, path string) (string, fileID, error) {
		reads.Add(1)
		return read(key, path)
	}
	f.mu.Unlock()
	if v, err := f.Get(); err != nil || v != "old-secret" { // a look (and a read) at the clock's now
		t.Fatalf("setup: Get = %q, %v", v, err)
	}
	return f, offset, reads
}

// adversary 53b: the clock steps back by 90 ms every 100 ms of real time
// (never past the last look: within() sees no look "from the future"),
// so the File's clock moves 10 ms per 100 ms. The file is replaced by
// rename just after a look; Gets follow every 100 ms. The look's at stays
// within StatInterval of every Get's now for a second of real time: a Get
// begun 3*StatInterval (real) after the rotation completed returns the old
// secret with no stat. The fix catches a step back past a look, not steps
// back by less than its age, which keep it "recent" without bound (90 ms
// steps: 10x StatInterval; 99 ms steps: 100x). (time.Now's monotonic
// reading never steps back: in production this needs an f.now without one.)
func TestARenameIsSeenWithinStatIntervalWhenTheClockStepsBackRepeatedlyByLessThanTheLooksAge(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte("old-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, offset, _ := adv53bFile(t, path)
	tmp := filepath.Join(dir, "tmp")
	if err := os.WriteFile(tmp, []byte("new-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	rotated := time.Now()
	var v string
	var err error
	for i := 0; i < 3; i++ {
		time.Sleep(StatInterval)
		offset.Add(int64(-90 * time.Millisecond)) // the clock steps back 90 ms
		v, err = f.Get()
	}
	if err != nil || v != "new-secret" {
		t.Fatalf("a Get begun %v after a rotation completed (the clock stepped back 90 ms every 100 ms) = %q, %v; want new-secret: a look %v old in real time still counts as within StatInterval", time.Since(rotated).Round(time.Millisecond), v, err, time.Since(rotated).Round(time.Millisecond))
	}
}

// adversary 53b: as above for the RecheckInterval reread. The file is
// rewritten in place where a stat cannot tell (the rewritten file's stat
// taken as the one read, as in TestFileRewrittenAtSameSizeAndMtimeIsReadAgain);
// the clock steps back 150 ms every 200 ms of real time (never past the
// read), and a Get comes every 200 ms. After RecheckInterval + MaxWait of
// real time (2 * RecheckInterval + ...) the rewritten secret should be
// read: the read's readAt stays within RecheckInterval of every look's at
// for 4 s, so the revoked secret keeps working.
func TestAFileRewrittenInPlaceIsReadAgainWithinRecheckIntervalWhenTheClockStepsBackRepeatedlyByLessThanTheReadsAge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("old-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, offset, _ := adv53bFile(t, path)
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
	rewrote := time.Now()
	var v string
	for time.Since(rewrote) < RecheckInterval+MaxWait {
		time.Sleep(2 * StatInterval)
		offset.Add(int64(-150 * time.Millisecond)) // the clock steps back 150 ms
		v, err = f.Get()
	}
	if err != nil || v != "new-secret" {
		t.Fatalf("a Get %v after an in-place rewrite (the clock stepped back 150 ms every 200 ms) = %q, %v; want new-secret: a read that old in real time is still within RecheckInterval by the File's clock", time.Since(rewrote).Round(time.Millisecond), v, err)
	}
}

// adversary 53b: a clock that steps back by 1 ms before every Get (a
// clock slewed backwards; Gets 10 ms apart, the file unchanged): every
// Get finds the last look 1 ms "in the future" (not recent), looks, and
// finds the last read in its future too, so it reads the file: 30 Gets
// in 300 ms of real time (less than RecheckInterval) read the mount 30
// times. Before 63a5a42 they cost no system call; a stepped-back clock
// should cost a read per step past the read at most once, not one per Get.
func TestAClockSteppedBackBySmallAmountsBeforeEveryGetDoesNotMakeEveryGetReadTheMount(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("old-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, offset, reads := adv53bFile(t, path)
	before := reads.Load()
	last := f.now()
	const gets = 30
	for i := 0; i < gets; i++ {
		time.Sleep(StatInterval / 10)
		now := f.now()
		offset.Add(int64(last.Sub(now) - time.Millisecond)) // 1 ms before the last Get's now
		last = f.now()
		if v, err := f.Get(); err != nil || v != "old-secret" {
			t.Fatalf("Get %d = %q, %v", i, v, err)
		}
	}
	if n := reads.Load() - before; n > 3 {
		t.Fatalf("%d Gets in %v of real time, the clock stepped back 1 ms before each, read the unchanged file %d times: every Get reads the mount", gets, time.Duration(gets)*StatInterval/10, n)
	}
}

// adv53bStats counts f's stats from now on.
func adv53bStats(f *File) *atomic.Int64 {
	stats := new(atomic.Int64)
	f.mu.Lock()
	st := f.stat
	f.stat = func(key, path string) (fileID, error) {
		stats.Add(1)
		return st(key, path)
	}
	f.mu.Unlock()
	return stats
}

// adversary 53b (holds): the clock steps back 10 s once, then runs sanely:
// the Get after the step looks and reads at most once (the last look and
// read are "in the future" by the File's clock; by the real one, fresh:
// since when.fresh, none), and the Gets within StatInterval after it cost
// no system call.
func TestAClockSteppedBackOnceCostsAtMostOneReadAndThenGetsWithinStatIntervalCostNoSystemCall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("old-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, offset, reads := adv53bFile(t, path)
	stats := adv53bStats(f)
	offset.Add(int64(-10 * time.Second))
	r0 := reads.Load()
	if v, err := f.Get(); err != nil || v != "old-secret" {
		t.Fatalf("the Get after the step = %q, %v", v, err)
	}
	s1, r1 := stats.Load(), reads.Load()-r0
	if s1 > 1 || r1 > 1 {
		t.Fatalf("the Get after the step: %d stats, %d reads; want at most 1, 1", s1, r1)
	}
	for i := 0; i < 5; i++ {
		if v, err := f.Get(); err != nil || v != "old-secret" {
			t.Fatalf("Get %d = %q, %v", i, v, err)
		}
	}
	if s, r := stats.Load(), reads.Load()-r0; s != s1 || r != r1 {
		t.Fatalf("5 Gets at once after it: %d stats, %d reads in all; want %d, %d (no system call)", s, r, s1, r1)
	}
}

// adversary 53b (holds): the clock jumps forward past RecheckInterval
// (2 s) and back: the Get after the jump reads (the read is RecheckInterval
// old), the Get after the jump back does not (the read is "in the future"
// by the File's clock, fresh by the real one: when.fresh), and a rotation
// by rename just after is returned by the next Get begun StatInterval
// later; the Gets beside them cost nothing.
func TestAClockThatJumpsForwardPastRecheckIntervalAndBackReadsOnceAndSeesARename(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte("old-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, offset, reads := adv53bFile(t, path)
	r0 := reads.Load()
	get := func(want string) {
		t.Helper()
		for i := 0; i < 3; i++ {
			if v, err := f.Get(); err != nil || v != want {
				t.Fatalf("Get = %q, %v; want %q", v, err, want)
			}
		}
	}
	offset.Add(int64(2 * RecheckInterval))
	get("old-secret")
	offset.Add(int64(-2 * RecheckInterval))
	get("old-secret")
	if r := reads.Load() - r0; r != 1 {
		t.Fatalf("a jump forward and back: %d reads; want 1", r)
	}
	tmp := filepath.Join(dir, "tmp")
	if err := os.WriteFile(tmp, []byte("new-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	time.Sleep(StatInterval)
	get("new-secret")
	if r := reads.Load() - r0; r != 2 {
		t.Fatalf("a jump forward and back and a rename: %d reads; want 2", r)
	}
}

// adversary 53b (holds): a clock that advances but steps back 1 ms every
// 10 ms of real time (net 9 ms per 10 ms), Gets every millisecond for
// 300 ms, the file unchanged: a step lands before the last look only when
// that look began less than 1 ms before it, so the reads stay few (the
// read per Get above needs a clock that keeps going back).
func TestAnAdvancingClockSteppedBack1msEvery10msReadsTheUnchangedFileRarely(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("old-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, offset, reads := adv53bFile(t, path)
	r0 := reads.Load()
	for i := 1; i <= 300; i++ {
		time.Sleep(time.Millisecond)
		if i%10 == 0 {
			offset.Add(int64(-time.Millisecond))
		}
		if v, err := f.Get(); err != nil || v != "old-secret" {
			t.Fatalf("Get %d = %q, %v", i, v, err)
		}
	}
	if r := reads.Load() - r0; r > 5 {
		t.Fatalf("300 Gets over 300 ms, the clock stepped back 1 ms every 10 ms: %d reads of the unchanged file", r)
	}
}

// A File clock that stands still does not keep a look recent: a Get begun
// StatInterval of real time after a rename looks and returns the new
// secret (freshness is by both clocks; adversary 53c's brief, whose
// helper never ran: written in session 53 to hold the rule).
func TestAGetBegunStatIntervalAfterARenameReturnsTheNewSecretWithAClockThatStandsStill(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "secret")
	if err := os.WriteFile(path, []byte("old-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("x_file", path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(time.Hour)
	f.mu.Lock()
	f.now = func() time.Time { return now }
	f.mu.Unlock()
	if v, err := f.Get(); v != "old-secret" || err != nil {
		t.Fatalf("set-up: %q %v", v, err)
	}
	tmp := filepath.Join(dir, "tmp")
	if err := os.WriteFile(tmp, []byte("new-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	time.Sleep(StatInterval)
	if v, err := f.Get(); v != "new-secret" || err != nil {
		t.Errorf("StatInterval after a rename, the File's clock standing still: %q %v, want the new secret", v, err)
	}
}

// A value that looks keep reusing (the stat tells no change) is read again
// once RecheckInterval of real time has passed since its read, though the
// File's clock stands still: each look carries the read's stamp forward,
// never a new one (written in session 53, as above).
func TestAValueLooksReuseIsReadAgainAfterRecheckIntervalWithAClockThatStandsStill(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte("old-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("x_file", path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(time.Hour)
	f.mu.Lock()
	f.now = func() time.Time { return now }
	f.mu.Unlock()
	if _, err := f.Get(); err != nil { // read at now, by both clocks
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
	// Gets every 50 ms: a look every StatInterval, each reusing the value
	// (a stat alone cannot tell), until RecheckInterval has passed.
	deadline := time.Now().Add(RecheckInterval + 2*StatInterval)
	var v string
	for time.Now().Before(deadline) {
		if v, err = f.Get(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if v != "new-secret" {
		t.Errorf("RecheckInterval + 2 StatIntervals of real time after the read, the File's clock standing still: %q, want the rewritten secret", v)
	}
}
