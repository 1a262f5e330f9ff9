//go:build linux

package secretfile

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"sync"
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

// adversary 52a: adversary 51g's continuous Gets (one every 50 ms) on a
// mount whose every read takes 1.5 s, less than MaxWait: no Get should
// fail.
func TestContinuousGetsOnAMountWhoseReadsAllTakeThreeQuartersOfMaxWaitDoNotFail(t *testing.T) {
	adv51gContinuousGets(t, MaxWait*3/4)
}

// adversary 52a: idem, every read taking 1.9 s.
func TestContinuousGetsOnAMountWhoseReadsAllTakeNineTenthsOfMaxWaitDoNotFail(t *testing.T) {
	adv51gContinuousGets(t, MaxWait*95/100)
}

// adversary 52a: a real-time monotonicity checker on a mount of mixed
// speeds: each look's stat takes 1 ms, 0.3 s, 1.2 s, 1.9 s or 2.6 s (past
// MaxWait: the deadline fallback), every fourth stat fails (a rotation's
// missing path), the others are followed by a fast read. Every stat and
// read takes a number from one counter when it begins (the moment it
// looks); a Get's outcome is that number. Gets come every 10-60 ms from
// several goroutines for 8 s. No Get may return a smaller number than a
// Get that returned before it began.
func TestNoGetReturnsAnEarlierLookThanAGetThatReturnedBeforeItOnAMountOfMixedSpeedsAndErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("the-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	var looks atomic.Int64
	speeds := []time.Duration{time.Millisecond, 300 * time.Millisecond, 1200 * time.Millisecond, 1900 * time.Millisecond, 2600 * time.Millisecond}
	f.mu.Lock()
	f.stat = func(key, p string) (fileID, error) {
		n := looks.Add(1)
		time.Sleep(speeds[rand.Intn(len(speeds))])
		if n%4 == 0 {
			return fileID{}, fmt.Errorf("look %d: gone", n)
		}
		return fileID{size: -n}, nil // changed: the look reads
	}
	f.read = func(key, p string) (string, fileID, error) {
		n := looks.Add(1)
		return strconv.FormatInt(n, 10), fileID{size: n}, nil
	}
	f.mu.Unlock()
	type ret struct {
		began, ended time.Time
		n            int64 // 0: no look (MaxWait)
		s            string
	}
	var mu sync.Mutex
	var rets []ret
	stop := time.Now().Add(8 * time.Second)
	var wg sync.WaitGroup
	for time.Now().Before(stop) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := time.Now()
			v, err := f.Get()
			r := ret{began: b, ended: time.Now()}
			if err == nil {
				r.s = v
				r.n, _ = strconv.ParseInt(v, 10, 64)
			} else {
				r.s = err.Error()
				var n int64
				if _, serr := fmt.Sscanf(err.Error(), "look %d: gone", &n); serr == nil {
					r.n = n
				}
			}
			mu.Lock()
			rets = append(rets, r)
			mu.Unlock()
		}()
		time.Sleep(time.Duration(10+rand.Intn(50)) * time.Millisecond)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * MaxWait):
		t.Fatal("Gets did not return")
	}
	mu.Lock()
	defer mu.Unlock()
	looked := 0
	for _, r := range rets {
		if r.n > 0 {
			looked++
		}
	}
	if looked < len(rets)/2 {
		t.Fatalf("setup: only %d of %d Gets returned a look", looked, len(rets))
	}
	for _, a := range rets {
		for _, b := range rets {
			if a.n > 0 && b.n > 0 && a.ended.Before(b.began) && b.n < a.n {
				t.Fatalf("a Get begun %v after another returned look %d (%q) returned the earlier look %d (%q)", b.began.Sub(a.ended), a.n, a.s, b.n, b.s)
			}
		}
	}
}

// adversary 52a: three looks in a chain, each beside the next (1 and 2,
// then 2 and 3 ... and 1 and 3): look 1 begins, look 2 beside it ends
// first (v2 returned), look 3 begins beside look 1, look 1 ends (v1, which
// may have looked before v2), then look 3. No Get begun after a Get
// returned v2 may return v1, and Get 1 (begun before any end) may return
// v1 or v2 only.
func TestNoGetReturnsAnOlderLookThanAReturnedOneWhenThreeLooksEndOutOfOrder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("the-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	began, release, advance := gatedLooks(t, f, 3)
	wait := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("setup: %s did not happen", what)
		}
	}
	recv := func(ch <-chan adv52aResult, what string) adv52aResult {
		t.Helper()
		select {
		case r := <-ch:
			return r
		case <-time.After(MaxWait + time.Second):
			t.Fatalf("%s did not return", what)
		}
		return adv52aResult{}
	}
	g1 := adv52aGet(f) // look 1
	wait(began(1), "look 1's read")
	advance(StatInterval + time.Millisecond)
	g2 := adv52aGet(f) // look 2 beside look 1
	wait(began(2), "look 2's read")
	release(2)
	if r := recv(g2, "Get 2"); r.err != nil || r.v != "v2" {
		t.Fatalf("setup: Get 2 = %q, %v; want v2", r.v, r.err)
	}
	if r := recv(g1, "Get 1"); r.err != nil || r.v != "v2" {
		t.Errorf("Get 1 (waiting, look 2 recent for it too) = %q, %v; want v2", r.v, r.err)
	}
	advance(StatInterval + time.Millisecond)
	g3 := adv52aGet(f) // look 3 beside look 1, begun after v2 was returned
	wait(began(3), "look 3's read")
	release(1) // look 1 ends: v1, not to be returned to Get 3 or later
	g4 := adv52aGet(f)
	release(3)
	if r := recv(g3, "Get 3"); r.err != nil || r.v != "v3" {
		t.Errorf("Get 3 (begun after Get 2 returned v2) = %q, %v; want v3", r.v, r.err)
	}
	if r := recv(g4, "Get 4"); r.err != nil || (r.v != "v3" && r.v != "v4") {
		t.Errorf("Get 4 (begun after look 1 ended, Get 2 returned v2) = %q, %v; want v3 or v4", r.v, r.err)
	}
	if r := recv(adv52aGet(f), "Get 5"); r.err != nil || (r.v != "v3" && r.v != "v4") {
		t.Errorf("Get 5 (begun after all ended) = %q, %v; want v3 or v4", r.v, r.err)
	}
}

// adversary 52a: liveness on a mount of mixed speeds whose every read
// succeeds within MaxWait (5 ms, 150 ms, 1.2 s, 1.5 s or 1.9 s, at
// random), Gets every 10-60 ms for 8 s: no Get may fail.
func TestGetsOnAMountOfMixedSpeedsAllWithinMaxWaitDoNotFail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("the-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	speeds := []time.Duration{5 * time.Millisecond, 150 * time.Millisecond, 1200 * time.Millisecond, 1500 * time.Millisecond, 1900 * time.Millisecond}
	var stats, reads atomic.Int64
	f.mu.Lock()
	f.stat = func(key, p string) (fileID, error) { return fileID{size: -stats.Add(1)}, nil }
	f.read = func(key, p string) (string, fileID, error) {
		i := reads.Add(1)
		time.Sleep(speeds[rand.Intn(len(speeds))])
		return fmt.Sprintf("v%d", i), fileID{size: i}, nil
	}
	f.mu.Unlock()
	var fails, gets atomic.Int64
	var first atomic.Value
	stop := time.Now().Add(8 * time.Second)
	var wg sync.WaitGroup
	for time.Now().Before(stop) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := f.Get()
			gets.Add(1)
			if err != nil {
				fails.Add(1)
				first.CompareAndSwap(nil, err.Error())
			}
		}()
		time.Sleep(time.Duration(10+rand.Intn(50)) * time.Millisecond)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * MaxWait):
		t.Fatal("Gets did not return")
	}
	if n := fails.Load(); n > 0 {
		t.Fatalf("%d of %d Gets failed though every read succeeded within 1.9 s < MaxWait; first: %v", n, gets.Load(), first.Load())
	}
}
