//go:build linux

package secretfile

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// adv52aFile is a File on a mount whose every look reads (the stat tells
// a change each time) and whose i-th read takes takes(i) real time and
// returns v<i>; f.now is a clock the test moves.
func adv52aFile(t *testing.T, takes func(i int64) time.Duration) (f *File, advance func(time.Duration), checks func() int) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("the-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	var stats, reads, offset atomic.Int64
	base := time.Now().Add(time.Hour) // the last look is old: the next Get looks
	f.mu.Lock()
	f.now = func() time.Time { return base.Add(time.Duration(offset.Load())) }
	f.stat = func(key, p string) (fileID, error) { return fileID{size: -stats.Add(1)}, nil }
	f.read = func(key, p string) (string, fileID, error) {
		i := reads.Add(1)
		time.Sleep(takes(i))
		return fmt.Sprintf("v%d", i), fileID{size: i}, nil
	}
	f.mu.Unlock()
	checks = func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.checks)
	}
	return f, func(d time.Duration) { offset.Add(int64(d)) }, checks
}

func adv52aUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(MaxWait); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("setup: %s did not happen", what)
		}
	}
}

type adv52aResult struct {
	v   string
	err error
}

func adv52aGet(f *File) <-chan adv52aResult {
	ch := make(chan adv52aResult, 1)
	go func() {
		v, err := f.Get()
		ch <- adv52aResult{v, err}
	}()
	return ch
}

// adversary 52a: every read succeeds within MaxWait (the first in 0.2 s,
// the others in 1.5 s). Get A begins check 1. StatInterval later Get X
// finds check 1 too old and begins check 2 beside it (a clock step of
// StatInterval, or in real time a Get 0.1 s after check 1 began). Check 1
// ends (A returns v1); check 2 is then not taken, and its firstEnd is
// check 1's end. Get B begins just after: check 2 is recent and not hung,
// so B waits for it until HungAfter; it may not answer B (B began after
// check 1 ended), so B begins check 3 only at check 2's HungAfter, and
// check 3's 1.5 s read ends after B's MaxWait: B fails, though the mount
// answered every read it was asked within MaxWait.
func TestAGetBegunJustAfterALookEndedBesideARecentOneDoesNotFailOnAMountAnsweringWithinMaxWait(t *testing.T) {
	f, advance, checks := adv52aFile(t, func(i int64) time.Duration {
		if i == 1 {
			return 200 * time.Millisecond
		}
		return 1500 * time.Millisecond
	})
	a := adv52aGet(f)
	adv52aUntil(t, "check 1 began", func() bool { return checks() == 1 })
	advance(StatInterval + time.Millisecond)
	x := adv52aGet(f)
	adv52aUntil(t, "check 2 began beside check 1", func() bool { return checks() == 2 })
	ra := <-a
	if ra.err != nil || ra.v != "v1" {
		t.Fatalf("setup: Get A = %q, %v; want v1", ra.v, ra.err)
	}
	t0 := time.Now()
	rb := <-adv52aGet(f)
	took := time.Since(t0)
	rx := <-x
	if rx.err != nil {
		t.Errorf("Get X failed: %v", rx.err)
	}
	if rb.err != nil {
		t.Fatalf("Get B (begun after check 1 ended, beside recent check 2) failed after %v though every read succeeded within 1.5 s < MaxWait: %v", took, rb.err)
	}
}

// adversary 52a: the Get-B failure above on the real clock (f.now is
// time.Now): Get A begins look 1 (a 150 ms read); 110 ms later Get X finds
// it older than StatInterval and begins look 2 (1.5 s, like every later
// read); look 1 ends, and Get B, begun then, waits for look 2 (begun 40 ms
// before it) to HungAfter, then begins look 3, which ends past its
// MaxWait.
func TestAGetBegunJustAfterALookEndedBesideARecentOneDoesNotFailOnTheRealClock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("the-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	var stats, reads atomic.Int64
	f.mu.Lock()
	f.stat = func(key, p string) (fileID, error) { return fileID{size: -stats.Add(1)}, nil }
	f.read = func(key, p string) (string, fileID, error) {
		i := reads.Add(1)
		if i == 1 {
			time.Sleep(150 * time.Millisecond)
		} else {
			time.Sleep(1500 * time.Millisecond)
		}
		return fmt.Sprintf("v%d", i), fileID{size: i}, nil
	}
	f.mu.Unlock()
	checks := func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.checks)
	}
	time.Sleep(StatInterval + 10*time.Millisecond) // NewFile's look is old
	a := adv52aGet(f)
	adv52aUntil(t, "look 1 began", func() bool { return checks() == 1 })
	time.Sleep(StatInterval + 10*time.Millisecond)
	x := adv52aGet(f)
	adv52aUntil(t, "look 2 began beside look 1", func() bool { return checks() == 2 })
	ra := <-a
	if ra.err != nil || ra.v != "v1" {
		t.Fatalf("setup: Get A = %q, %v; want v1", ra.v, ra.err)
	}
	t0 := time.Now()
	rb := <-adv52aGet(f)
	took := time.Since(t0)
	if rx := <-x; rx.err != nil {
		t.Errorf("Get X failed: %v", rx.err)
	}
	if rb.err != nil {
		t.Fatalf("Get B (begun just after look 1 ended, beside recent look 2) failed after %v though every read succeeded within 1.5 s < MaxWait: %v", took, rb.err)
	}
}

// adversary 52a: f.now steps back 1 s (a clock that jumps) while a Get
// waits for a hung look (look 1, begun under the old time). At HungAfter
// the Get begins look 2 beside it, under the new time: older than the
// Get's since, so not recent for it; look 2 ends at once (the mount
// answers new requests), and the Get begins another, and another: every
// look it begins is "too old" for it, so it reads the file in a loop until
// MaxWait, and its seen grows with each. A Get should begin a bounded
// number of looks (here: at most a handful), not spin on the mount.
// (time.Now's monotonic reading never steps back: in production this
// needs an f.now without one; the test clock shows the loop is unbounded
// but for MaxWait.)
func TestAGetWhoseClockSteppedBackDoesNotReadTheFileInALoopUntilMaxWait(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("the-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	began, release, advance := gatedLooks(t, f, 1)
	g := adv52aGet(f)
	select {
	case <-began(1):
	case <-time.After(5 * time.Second):
		t.Fatal("setup: look 1 did not begin")
	}
	advance(-time.Second)
	t0 := time.Now()
	var r adv52aResult
	select {
	case r = <-g:
	case <-time.After(MaxWait + time.Second):
		t.Fatal("the Get did not return")
	}
	took := time.Since(t0)
	release(1)
	f.mu.Lock()
	seq := f.seq
	f.mu.Unlock()
	if seq > 10 {
		t.Fatalf("one Get (returned %q, %v after %v) began %d looks at the file: it read the mount in a loop", r.v, r.err, took, seq)
	}
}
