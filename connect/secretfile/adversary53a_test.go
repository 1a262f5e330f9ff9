//go:build linux

package secretfile

import (
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// adv53aLooks is gatedLooks whose i-th read returns result(i) (a secret or
// an error): every look reads (each stat tells another file); reads 1 to n
// wait until release(i) (or the test's end); began(i) is closed when read
// i began; advance moves f.now.
func adv53aLooks(t *testing.T, f *File, n int, result func(i int64) (string, error)) (began func(i int) <-chan struct{}, release func(i int), advance func(time.Duration)) {
	t.Helper()
	starts := make([]chan struct{}, n+1)
	gates := make([]chan struct{}, n+1)
	onces := make([]sync.Once, n+1)
	for i := 1; i <= n; i++ {
		starts[i], gates[i] = make(chan struct{}), make(chan struct{})
	}
	release = func(i int) { onces[i].Do(func() { close(gates[i]) }) }
	t.Cleanup(func() {
		for i := 1; i <= n; i++ {
			release(i)
		}
	})
	var stats, reads, offset atomic.Int64
	base := time.Now().Add(time.Hour) // the last look is old: the next Get looks
	f.mu.Lock()
	f.now = func() time.Time { return base.Add(time.Duration(offset.Load())) }
	f.stat = func(key, p string) (fileID, error) { return fileID{size: -stats.Add(1)}, nil }
	f.read = func(key, p string) (string, fileID, error) {
		i := reads.Add(1)
		if i <= int64(n) {
			close(starts[i])
			<-gates[i]
		}
		v, err := result(i)
		if err != nil {
			return "", fileID{}, err
		}
		return v, fileID{size: i}, nil
	}
	f.mu.Unlock()
	return func(i int) <-chan struct{} { return starts[i] }, release, func(d time.Duration) { offset.Add(int64(d)) }
}

func adv53aNewFile(t *testing.T) *File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("the-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func adv53aWait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("setup: %s did not happen", what)
	}
}

func adv53aRecv(t *testing.T, ch <-chan adv52aResult, what string) adv52aResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(MaxWait + time.Second):
		t.Fatalf("%s did not return within MaxWait + 1 s", what)
	}
	return adv52aResult{}
}

// adversary 53a: the removed file's error, then the old secret from a look
// kept in f.recent, at a Get's deadline. Look 1 (it will read "old")
// begins; look 2 beside it finds the file removed and ends first: Get 2
// returns the error. Get 3, begun after that, begins look 3 (held past its
// MaxWait); look 1 then ends with "old" (kept in f.recent, ended after Get
// 3 began) and Get 4 begins just after. Neither Get 3 nor Get 4 (both
// begun after Get 2 returned the error) may return "old", not even from
// the deadline fallback; once look 3 ends ("new"), a Get returns "new".
func TestNoGetBegunAfterTheRemovedFilesErrorWasReturnedGetsTheOldSecretFromALookThatEndedLate(t *testing.T) {
	f := adv53aNewFile(t)
	gone := errors.New("token_file: reading the secret: no such file (look 2)")
	began, release, advance := adv53aLooks(t, f, 4, func(i int64) (string, error) {
		switch i {
		case 1:
			return "old", nil
		case 2:
			return "", gone
		}
		return "new" + strconv.FormatInt(i, 10), nil
	})
	g1 := adv52aGet(f)
	adv53aWait(t, began(1), "look 1's read")
	advance(time.Second)
	g2 := adv52aGet(f)
	adv53aWait(t, began(2), "look 2's read")
	release(2)
	if r := adv53aRecv(t, g2, "Get 2"); !errors.Is(r.err, gone) {
		t.Fatalf("setup: Get 2 = %q, %v; want look 2's error", r.v, r.err)
	}
	r1 := adv53aRecv(t, g1, "Get 1")
	t.Logf("Get 1 (concurrent with Get 2) = %q, %v", r1.v, r1.err)
	advance(time.Second)
	g3 := adv52aGet(f) // begun after the error was returned
	adv53aWait(t, began(3), "look 3's read")
	release(1) // look 1 ends: "old", into f.recent
	adv52aUntil(t, "look 1 ended", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.checks) == 1
	})
	g4 := adv52aGet(f) // begun after look 1 ended
	r3 := adv53aRecv(t, g3, "Get 3")
	r4 := adv53aRecv(t, g4, "Get 4")
	t.Logf("Get 3 = %q, %v; Get 4 = %q, %v", r3.v, r3.err, r4.v, r4.err)
	if r3.v == "old" || r4.v == "old" {
		t.Fatalf("a Get begun after a Get returned the removed file's error returned the old secret: Get 3 = %q, %v; Get 4 = %q, %v", r3.v, r3.err, r4.v, r4.err)
	}
	release(3)
	release(4)
	eventuallyNoCheck(t, f)
	advance(time.Second)
	if r := adv53aRecv(t, adv52aGet(f), "Get 5"); r.err != nil || !strings.HasPrefix(r.v, "new") {
		t.Fatalf("Get 5, after every look ended = %q, %v; want a new secret", r.v, r.err)
	}
}

// adversary 53a: a Get's deadline fallback (no recent look within MaxWait)
// on a slow mount, beside a look older than a secret a Get returned before
// it began. Look 1 begins (held); look 2 beside it ends: Get 2 returns v2.
// Get 3 begins look 3 beside look 1; the clock moves so look 3 is not
// recent for Get 4, which begins with two looks in progress and waits.
// Look 3 ends (v3: Get 3 returns it); Get 4 begins look 4 (held past its
// MaxWait); then look 1 ends (v1, the oldest). Get 4's fallback may return
// v3 (ended while it waited, after every end before it began), never v1 or
// v2; Get 5, begun after Get 3 returned v3, never v1 or v2.
func TestAGetsDeadlineFallbackNeverReturnsALookOlderThanOneAGetReturnedBeforeItBegan(t *testing.T) {
	f := adv53aNewFile(t)
	began, release, advance := adv53aLooks(t, f, 5, func(i int64) (string, error) {
		return "v" + strconv.FormatInt(i, 10), nil
	})
	g1 := adv52aGet(f)
	adv53aWait(t, began(1), "look 1's read")
	advance(time.Second)
	g2 := adv52aGet(f)
	adv53aWait(t, began(2), "look 2's read")
	release(2)
	if r := adv53aRecv(t, g2, "Get 2"); r.err != nil || r.v != "v2" {
		t.Fatalf("setup: Get 2 = %q, %v; want v2", r.v, r.err)
	}
	_ = adv53aRecv(t, g1, "Get 1")
	advance(time.Second)
	g3 := adv52aGet(f) // look 1 cannot answer it: begins look 3
	adv53aWait(t, began(3), "look 3's read")
	advance(time.Second) // look 3 is not recent for Get 4
	t0 := time.Now()
	g4 := adv52aGet(f) // two looks in progress: waits
	for getsWaiting() < 2 && time.Since(t0) < HungAfter/2 {
		runtime.Gosched()
	}
	release(3)
	r3 := adv53aRecv(t, g3, "Get 3")
	if r3.err != nil || r3.v != "v3" {
		t.Fatalf("setup: Get 3 = %q, %v; want v3", r3.v, r3.err)
	}
	adv53aWait(t, began(4), "look 4's read (Get 4's)")
	g5 := adv52aGet(f) // begun after Get 3 returned v3
	release(1)         // the oldest look ends last
	r4 := adv53aRecv(t, g4, "Get 4")
	r5 := adv53aRecv(t, g5, "Get 5")
	t.Logf("Get 4 = %q, %v after %v; Get 5 = %q, %v", r4.v, r4.err, time.Since(t0), r5.v, r5.err)
	for _, r := range []struct {
		name string
		r    adv52aResult
	}{{"Get 4", r4}, {"Get 5", r5}} {
		if r.r.v == "v1" || r.r.v == "v2" {
			t.Errorf("%s, begun after Get 2 returned v2 (Get 5: after Get 3 returned v3) = %q, %v: an older look", r.name, r.r.v, r.r.err)
		}
	}
	if r5.v == "" && r5.err == nil {
		t.Errorf("Get 5 returned nothing")
	}
	if r4.err != nil {
		t.Errorf("Get 4 failed though look 3 (ended while it waited, after every end before it began) may answer it: %v", r4.err)
	}
}

// adversary 53a: a real-time monotonicity checker on a rotating file whose
// stat often tells no change (the look then keeps the value the state
// read: the prev path, which 52a's checker never took), with rotations
// (a new version every 15 ms, every fifth a removed file) and looks of
// mixed speeds (stat and read each 0-1.4 s or fast). A file version is a
// number; its stat tells the version (so an unchanged stat is the same
// content), its read returns it. No Get may return a smaller version than
// a Get that returned before it began.
func TestNoGetReturnsAnOlderVersionThanAGetThatReturnedBeforeItWhenLooksKeepTheStatesValue(t *testing.T) {
	adv53aVersions(t, false)
}

// adversary 53a: the checker above with f.now jumping (every 15 ms, by a
// random step of -1 s to +1 s): recency and the deadline fallback then
// choose differently, but the rule (ticks, not the clock) must keep every
// Get's outcome no older than one returned before it began.
func TestNoGetReturnsAnOlderVersionThanAGetThatReturnedBeforeItWithAClockThatJumps(t *testing.T) {
	adv53aVersions(t, true)
}

func adv53aVersions(t *testing.T, jumps bool) {
	f := adv53aNewFile(t)
	var version, offset atomic.Int64
	version.Store(1)
	if jumps {
		f.mu.Lock()
		f.now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
		f.mu.Unlock()
	}
	stopRot := make(chan struct{})
	var rotWG sync.WaitGroup
	rotWG.Add(1)
	go func() {
		defer rotWG.Done()
		for {
			select {
			case <-stopRot:
				return
			case <-time.After(15 * time.Millisecond):
				version.Add(1)
				if jumps {
					offset.Add(int64(time.Duration(rand.Intn(2001)-1000) * time.Millisecond))
				}
			}
		}
	}()
	speeds := []time.Duration{0, 0, time.Millisecond, 30 * time.Millisecond, 300 * time.Millisecond, 1400 * time.Millisecond}
	pause := func() { time.Sleep(speeds[rand.Intn(len(speeds))]) }
	f.mu.Lock()
	f.stat = func(key, p string) (fileID, error) {
		pause()
		v := version.Load()
		if v%5 == 0 {
			return fileID{}, fmt.Errorf("version %d: removed", v)
		}
		return fileID{size: v}, nil
	}
	f.read = func(key, p string) (string, fileID, error) {
		pause()
		v := version.Load()
		if v%5 == 0 {
			return "", fileID{}, fmt.Errorf("version %d: removed", v)
		}
		return strconv.FormatInt(v, 10), fileID{size: v}, nil
	}
	f.mu.Unlock()
	type ret struct {
		began, ended time.Time
		n            int64
		s            string
	}
	var mu sync.Mutex
	var rets []ret
	stop := time.Now().Add(7 * time.Second)
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
				if i := strings.Index(r.s, "version "); i >= 0 {
					var n int64
					if _, serr := fmt.Sscanf(r.s[i:], "version %d: removed", &n); serr == nil {
						r.n = n
					}
				}
			}
			mu.Lock()
			rets = append(rets, r)
			mu.Unlock()
		}()
		time.Sleep(time.Duration(5+rand.Intn(40)) * time.Millisecond)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * MaxWait):
		t.Fatal("Gets did not return")
	}
	close(stopRot)
	rotWG.Wait()
	mu.Lock()
	defer mu.Unlock()
	looked := 0
	for _, r := range rets {
		if r.n > 0 {
			looked++
		}
	}
	if looked < len(rets)/2 {
		t.Fatalf("setup: only %d of %d Gets returned a version", looked, len(rets))
	}
	for _, a := range rets {
		for _, b := range rets {
			if a.n > 0 && b.n > 0 && a.ended.Before(b.began) && b.n < a.n {
				t.Fatalf("a Get begun %v after another returned version %d (%q) returned the older version %d (%q)", b.began.Sub(a.ended), a.n, a.s, b.n, b.s)
			}
		}
	}
	t.Logf("%d Gets, %d returned a version", len(rets), looked)
}

// adversary 53a: many Gets (one every 2 ms, for 3 s) across rotations on a
// mount whose looks hang until it answers again: at most maxChecks looks
// in progress throughout, every Get returns within MaxWait + 1 s, and once
// the mount answers every goroutine a Get or a look started ends (none
// left waiting, f.recent at most maxChecks).
func TestManyGetsAcrossRotationsOnAHangingMountLeaveNoGoroutineOnceItAnswers(t *testing.T) {
	f := adv53aNewFile(t)
	base := runtime.NumGoroutine()
	gate := make(chan struct{})
	var once sync.Once
	answer := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(answer)
	var version atomic.Int64
	f.mu.Lock()
	f.now = func() time.Time { return time.Now().Add(time.Hour) }
	f.stat = func(key, p string) (fileID, error) {
		<-gate
		return fileID{size: version.Load()}, nil
	}
	f.read = func(key, p string) (string, fileID, error) {
		v := version.Load()
		return strconv.FormatInt(v, 10), fileID{size: v}, nil
	}
	f.mu.Unlock()
	var maxIn atomic.Int64
	var slow atomic.Int64
	stop := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for i := 0; time.Now().Before(stop); i++ {
		if i%50 == 0 {
			version.Add(1)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			_, _ = f.Get()
			if time.Since(t0) > MaxWait+time.Second {
				slow.Add(1)
			}
		}()
		f.mu.Lock()
		if n := int64(len(f.checks)); n > maxIn.Load() {
			maxIn.Store(n)
		}
		f.mu.Unlock()
		time.Sleep(2 * time.Millisecond)
	}
	answer()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(MaxWait + time.Second):
		t.Fatal("Gets did not return once the mount answered")
	}
	eventuallyNoCheck(t, f)
	if n := maxIn.Load(); n > maxChecks {
		t.Errorf("%d looks in progress at once, want at most %d", n, maxChecks)
	}
	if n := slow.Load(); n > 0 {
		t.Errorf("%d Gets took longer than MaxWait + 1 s", n)
	}
	f.mu.Lock()
	nr := len(f.recent)
	f.mu.Unlock()
	if nr > maxChecks {
		t.Errorf("f.recent holds %d looks, want at most %d", nr, maxChecks)
	}
	var g int
	for end := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if g = runtime.NumGoroutine(); g <= base+1 || time.Now().After(end) {
			break
		}
	}
	if g > base+1 {
		buf := make([]byte, 1<<16)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("%d goroutines once the mount answered and every Get returned, %d before: %s", g, base, buf)
	}
}

// adversary 53a: f.now steps back 10 s (a clock that jumps; the brief's
// "clock that jumps", as in 52a's stepped-back test) just after a look:
// that look's at is then in the File's future, "after" every Get's since
// until the clock catches up, so f.state answers every Get for 10 s with
// no stat. The file is then replaced by rename (a rotation, file system
// fast) and real time passes (3*StatInterval, the clock moving with it):
// a Get begun then should look (and return the new secret), not return
// the old secret from a look 10 s "ahead". (time.Now's monotonic reading
// never steps back: in production this needs an f.now without one.)
func TestAGetAfterTheClockSteppedBackAndARotationReturnsTheNewSecretNotALookFromTheFuture(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte("old-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	var offset atomic.Int64
	offset.Store(int64(time.Hour))
	f.mu.Lock()
	f.now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	f.mu.Unlock()
	if v, err := f.Get(); err != nil || v != "old-secret" { // a look at the clock's now
		t.Fatalf("setup: Get = %q, %v", v, err)
	}
	offset.Add(int64(-10 * time.Second)) // the clock steps back
	tmp := filepath.Join(dir, "tmp")
	if err := os.WriteFile(tmp, []byte("new-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * StatInterval)
	if v, err := f.Get(); err != nil || v != "new-secret" {
		t.Fatalf("a Get begun 3*StatInterval after a rotation (the clock stepped back 10 s before it) = %q, %v; want new-secret: a look 'from the future' answers every Get until the clock catches up", v, err)
	}
}

// adversary 53a: a mount that loses one look for good in the middle of a
// stream of Gets (the 5th stat never returns) and answers every other
// look in 0.8 s (HungAfter + 0.8 s < MaxWait): the Gets begun just after
// the lost look began wait HungAfter for it, then look beside it; no Get
// may fail, and at most maxChecks looks are ever in progress.
func TestGetsSucceedWhenAMountLosesALookMidStreamAndAnswersOthersWithinMaxWaitMinusHungAfter(t *testing.T) {
	f := adv53aNewFile(t)
	lost := make(chan struct{})
	t.Cleanup(func() { close(lost) })
	var stats, reads atomic.Int64
	f.mu.Lock()
	f.stat = func(key, p string) (fileID, error) {
		n := stats.Add(1)
		if n == 5 {
			<-lost
		}
		return fileID{size: -n}, nil // changed: the look reads
	}
	f.read = func(key, p string) (string, fileID, error) {
		n := reads.Add(1)
		time.Sleep(800 * time.Millisecond)
		return "v" + strconv.FormatInt(n, 10), fileID{size: n}, nil
	}
	f.mu.Unlock()
	var fails, gets, maxIn atomic.Int64
	var first atomic.Value
	stop := time.Now().Add(6 * time.Second)
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
		f.mu.Lock()
		if n := int64(len(f.checks)); n > maxIn.Load() {
			maxIn.Store(n)
		}
		f.mu.Unlock()
		time.Sleep(30 * time.Millisecond)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * MaxWait):
		t.Fatal("Gets did not return")
	}
	if stats.Load() < 5 {
		t.Fatalf("setup: only %d looks: the lost one never began", stats.Load())
	}
	if n := maxIn.Load(); n > maxChecks {
		t.Errorf("%d looks in progress at once, want at most %d", n, maxChecks)
	}
	if n := fails.Load(); n > 0 {
		t.Fatalf("%d of %d Gets failed with one look lost and the others answering in 0.8 s; first: %v", n, gets.Load(), first.Load())
	}
}

// adversary 53a: Gets begun at the exact moment of an end (queued on f.mu
// with the ending look's goroutine, in an order nobody knows) among three
// looks. Look 1 begins (held); look 2 beside it; with f.mu held, look 2
// is released and Get 3 begins: both wait for f.mu. Whichever takes it
// first, Get 3 returns v2 (look 2 answers it either way). Then with f.mu
// held again, look 1 (v1, which may have looked before v2) is released and
// Get 4 begins: Get 4 began after Get 3 returned v2, so it must not return
// v1, whichever of it and look 1's end came first.
func TestGetsBegunAtTheMomentOfAnEndNeverReturnAnOlderLook(t *testing.T) {
	for round := 0; round < 3; round++ {
		f := adv53aNewFile(t)
		began, release, advance := adv53aLooks(t, f, 4, func(i int64) (string, error) {
			return "v" + strconv.FormatInt(i, 10), nil
		})
		g1 := adv52aGet(f)
		adv53aWait(t, began(1), "look 1's read")
		advance(time.Second)
		g2 := adv52aGet(f)
		adv53aWait(t, began(2), "look 2's read")
		f.mu.Lock()
		release(2)
		g3 := adv52aGet(f)
		time.Sleep(20 * time.Millisecond) // both queue on f.mu (setup only)
		f.mu.Unlock()
		if r := adv53aRecv(t, g3, "Get 3"); r.err != nil || r.v != "v2" {
			t.Fatalf("round %d: Get 3 (begun at look 2's end) = %q, %v; want v2", round, r.v, r.err)
		}
		_ = adv53aRecv(t, g2, "Get 2")
		_ = adv53aRecv(t, g1, "Get 1")
		f.mu.Lock()
		release(1)
		g4 := adv52aGet(f)
		time.Sleep(20 * time.Millisecond)
		f.mu.Unlock()
		release(3)
		release(4)
		if r := adv53aRecv(t, g4, "Get 4"); r.err != nil || r.v == "v1" {
			t.Fatalf("round %d: Get 4 (begun after Get 3 returned v2, at look 1's end) = %q, %v; want v2 or a later look", round, r.v, r.err)
		}
		eventuallyNoCheck(t, f)
	}
}

// adversary 53a: liveness with a clock that jumps: every read succeeds
// within MaxWait (5 ms, 150 ms, 1.2 s or 1.8 s, at random), Gets every
// 10-60 ms for 6 s, and f.now jumps by -1 s to +1 s every 50 ms (looks
// then seem recent, or old, whatever real time says). No Get may fail,
// and each returns within MaxWait + 1 s.
func TestGetsOnAMountAnsweringWithinMaxWaitDoNotFailWithAClockThatJumps(t *testing.T) {
	f := adv53aNewFile(t)
	speeds := []time.Duration{5 * time.Millisecond, 150 * time.Millisecond, 1200 * time.Millisecond, 1800 * time.Millisecond}
	var stats, reads, offset atomic.Int64
	f.mu.Lock()
	f.now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	f.stat = func(key, p string) (fileID, error) { return fileID{size: -stats.Add(1)}, nil }
	f.read = func(key, p string) (string, fileID, error) {
		i := reads.Add(1)
		time.Sleep(speeds[rand.Intn(len(speeds))])
		return "v" + strconv.FormatInt(i, 10), fileID{size: i}, nil
	}
	f.mu.Unlock()
	var fails, gets, slow atomic.Int64
	var first atomic.Value
	stop := time.Now().Add(6 * time.Second)
	var wg sync.WaitGroup
	lastJump := time.Now()
	for time.Now().Before(stop) {
		if time.Since(lastJump) > 50*time.Millisecond {
			offset.Add(int64(time.Duration(rand.Intn(2001)-1000) * time.Millisecond))
			lastJump = time.Now()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			_, err := f.Get()
			if time.Since(t0) > MaxWait+time.Second {
				slow.Add(1)
			}
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
	if n := slow.Load(); n > 0 {
		t.Errorf("%d Gets took longer than MaxWait + 1 s", n)
	}
	if n := fails.Load(); n > 0 {
		t.Fatalf("%d of %d Gets failed though every read succeeded within 1.8 s < MaxWait; first: %v", n, gets.Load(), first.Load())
	}
}
