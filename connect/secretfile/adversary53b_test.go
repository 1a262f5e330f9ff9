package secretfile

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

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
