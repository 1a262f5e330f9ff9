package secretfile

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// adv54aFile is a File on a real file whose clock is set by the test
// (clock: a func the test swaps, under its own lock) and whose stats
// (each taking statTakes) and reads are counted.
func adv54aFile(t *testing.T, secret string, statTakes time.Duration) (f *File, path string, setClock func(func() time.Time), stats, reads *atomic.Int64) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	clock := time.Now
	setClock = func(c func() time.Time) {
		mu.Lock()
		clock = c
		mu.Unlock()
	}
	stats, reads = new(atomic.Int64), new(atomic.Int64)
	f.mu.Lock()
	f.now = func() time.Time {
		mu.Lock()
		c := clock
		mu.Unlock()
		return c()
	}
	f.stat = func(key, p string) (fileID, error) {
		stats.Add(1)
		time.Sleep(statTakes)
		return stat(key, p)
	}
	f.read = func(key, p string) (string, fileID, error) {
		reads.Add(1)
		return read(key, p)
	}
	f.mu.Unlock()
	return f, path, setClock, stats, reads
}

// adv54aStream runs Gets, each in its own goroutine, one every `every`,
// for d; it returns the first error or unexpected value (if any) and
// waits for every Get.
func adv54aStream(t *testing.T, f *File, every, d time.Duration, want func(string) bool) {
	t.Helper()
	var wg sync.WaitGroup
	var bad atomic.Value
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(every) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := f.Get()
			if err != nil || !want(v) {
				bad.CompareAndSwap(nil, v+" "+errString(err))
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(MaxWait + time.Second):
		t.Fatal("Gets did not return within MaxWait + 1 s")
	}
	if b := bad.Load(); b != nil {
		t.Fatalf("a Get returned %v", b)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// adversary 54a: the File's clock jumps forward (+1 h) once, while a look
// is in progress (stats take 30 ms: a fast enough mount), and then stands
// still; Gets come every millisecond. A Get after the jump finds the look
// in progress not recent (by the File's clock) and begins another beside
// it; from then on two looks always overlap: each end finds the other in
// progress (firstEnd set), so it is not taken (the state is cleared), and
// the next Get finds the remaining look unable to answer it and begins
// another beside it. The chain never heals, though the clock stands
// still: every Get waits for a look, every look reads (no state to reuse),
// about two looks per stat's duration instead of one per StatInterval.
func TestAClockThatJumpsForwardDuringALookAndStandsStillCostsAboutOneLookPerStatInterval(t *testing.T) {
	f, _, setClock, stats, reads := adv54aFile(t, "the-secret", 15*time.Millisecond)
	jumped := make(chan struct{})
	var once sync.Once
	f.mu.Lock()
	st := f.stat
	f.stat = func(key, p string) (fileID, error) {
		time.Sleep(15 * time.Millisecond)
		once.Do(func() { // halfway through the first look after set-up
			still := time.Now().Add(2 * time.Hour) // +1 h
			setClock(func() time.Time { return still })
			close(jumped)
		})
		return st(key, p)
	}
	f.mu.Unlock()
	setClock(func() time.Time { return time.Now().Add(time.Hour) }) // NewFile's look is old
	// This Get begins the look during which the clock jumps.
	go func() { _, _ = f.Get() }()
	adv53aWait(t, jumped, "the jump")
	s0, r0 := stats.Load(), reads.Load()
	const d = 1500 * time.Millisecond
	adv54aStream(t, f, time.Millisecond, d, func(v string) bool { return v == "the-secret" })
	s, r := stats.Load()-s0, reads.Load()-r0
	t.Logf("%v of Gets (one every ms) after the jump: %d looks, %d reads", d, s, r)
	if limit := int64(2*d/StatInterval) + 4; s > limit || r > 4 {
		t.Fatalf("the File's clock jumped forward once during a look and then stood still: %v of Gets cost %d looks (stats) and %d reads of the unchanged file; want at most about one look per StatInterval (%d) and a read or two: two looks overlap for ever, neither is taken, and each end begins another", d, s, r, limit)
	}
}

// adversary 54a: the overlap above on the real clock (f.now runs with
// time.Now): a mount whose every stat takes 150 ms (slower than
// StatInterval, far within HungAfter) and Gets every millisecond. A Get
// 100 ms into a look finds it not recent and begins another beside it;
// from then on two looks always overlap, none is taken, and every look
// reads the unchanged file (no state to reuse): a read per look, where
// the rule reads an unchanged file once per RecheckInterval.
func TestAnUnchangedFileOnAMountWhoseStatsTake150msIsReadAboutOncePerRecheckInterval(t *testing.T) {
	f, _, setClock, stats, reads := adv54aFile(t, "the-secret", 150*time.Millisecond)
	setClock(func() time.Time { return time.Now().Add(time.Hour) }) // NewFile's look is old
	s0, r0 := stats.Load(), reads.Load()
	const d = 3 * time.Second
	adv54aStream(t, f, time.Millisecond, d, func(v string) bool { return v == "the-secret" })
	s, r := stats.Load()-s0, reads.Load()-r0
	t.Logf("%v of Gets (one every ms), stats taking 150 ms: %d looks, %d reads", d, s, r)
	if limit := int64(d/RecheckInterval) + 3; r > limit {
		t.Fatalf("%v of Gets on a mount whose stats take 150 ms read the unchanged file %d times (%d looks); want about one read per RecheckInterval (at most %d): looks overlap for ever, none is taken, and each reads", d, r, s, limit)
	}
}

// adversary 54a: a File clock that jumps forward by RecheckInterval before
// every Get (a clock running a hundred times fast; Gets 10 ms apart, the
// file unchanged, a fast mount): by the File's clock every look and every
// read is RecheckInterval old at the next Get, so every Get stats and
// reads the mount. That is the rule, not a fault: a look or a read is
// fresh only by both clocks (adversaries 53a to 53c: a clock that stands
// still or steps back must not keep an old look fresh), so either clock
// ages it, and a clock that runs fast ages every look. The File's clock is
// a test's hook; in production it is time.Now, the real clock itself.
func TestAFileClockRunningAheadOfRealTimeAgesEveryLookAndReadByItself(t *testing.T) {
	f, _, setClock, stats, reads := adv54aFile(t, "the-secret", 0)
	var offset atomic.Int64
	offset.Store(int64(time.Hour))
	setClock(func() time.Time { return time.Now().Add(time.Duration(offset.Load())) })
	if v, err := f.Get(); err != nil || v != "the-secret" {
		t.Fatalf("setup: Get = %q, %v", v, err)
	}
	s0, r0 := stats.Load(), reads.Load()
	const gets = 30
	for i := 0; i < gets; i++ {
		time.Sleep(StatInterval / 10)
		offset.Add(int64(RecheckInterval))
		if v, err := f.Get(); err != nil || v != "the-secret" {
			t.Fatalf("Get %d = %q, %v", i, v, err)
		}
	}
	s, r := stats.Load()-s0, reads.Load()-r0
	if s != gets || r != gets {
		t.Fatalf("%d Gets over %v of real time, the File's clock jumping forward %v before each: %d stats, %d reads of the unchanged file; want a stat and a read per Get (each look and read RecheckInterval old by the File's clock)", gets, time.Duration(gets)*StatInterval/10, RecheckInterval, s, r)
	}
}

// adversary 54a: as the 150 ms stats above, on a mount whose stats are
// fast and only reads take 150 ms (the real clock): the first read (here
// the first look, the last read being old; in a process, every
// RecheckInterval's read or a rotation's) is 100 ms old while it runs, so
// a Get begins another look beside it, which reads too (the state it
// would reuse is as old). The first ends (taken), a fast look reusing it
// ends while the second still reads, and the second's end clears the
// state (another ended while it ran): the next look reads again, and 100
// ms into it a Get begins another beside it... Two reads of the unchanged
// file every 250 ms (23 in 3 s, 38 looks), for ever, where the rule reads
// it once per RecheckInterval.
func TestAnUnchangedFileOnAMountWhoseReadsTake150msIsReadAboutOncePerRecheckInterval(t *testing.T) {
	f, _, setClock, stats, reads := adv54aFile(t, "the-secret", 0)
	f.mu.Lock()
	rd := f.read
	f.read = func(key, p string) (string, fileID, error) {
		time.Sleep(150 * time.Millisecond)
		return rd(key, p)
	}
	f.mu.Unlock()
	setClock(func() time.Time { return time.Now().Add(time.Hour) }) // NewFile's read is old
	s0, r0 := stats.Load(), reads.Load()
	const d = 3 * time.Second
	adv54aStream(t, f, time.Millisecond, d, func(v string) bool { return v == "the-secret" })
	s, r := stats.Load()-s0, reads.Load()-r0
	t.Logf("%v of Gets (one every ms), reads taking 150 ms: %d looks, %d reads", d, s, r)
	if limit := int64(d/RecheckInterval) + 3; r > limit {
		t.Fatalf("%v of Gets on a mount whose reads take 150 ms (stats fast) read the unchanged file %d times (%d looks); want about one read per RecheckInterval (at most %d): two looks overlap for ever, none is taken, and each reads", d, r, s, limit)
	}
}

// adversary 54a: the overlap above on a mount whose every system call is
// faster than StatInterval: stats take 60 ms and reads 60 ms (real
// clock), Gets every 2 ms. A look that reads (the first; in a process,
// each RecheckInterval's read) takes 120 ms, so 100 ms into it a Get
// begins another beside it, which reads too; from then on the looks keep
// overlapping and the state is cleared at nearly every end, so nearly
// every look reads the unchanged file: 35 to 46 reads in 3 s (45 to 49
// looks), where
// the rule reads it about once per RecheckInterval and looks about once
// per StatInterval plus a look's duration.
func TestAnUnchangedFileOnAMountWhoseStatsAndReadsTake60msIsReadAboutOncePerRecheckInterval(t *testing.T) {
	f, _, setClock, stats, reads := adv54aFile(t, "the-secret", 60*time.Millisecond)
	f.mu.Lock()
	rd := f.read
	f.read = func(key, p string) (string, fileID, error) {
		time.Sleep(60 * time.Millisecond)
		return rd(key, p)
	}
	f.mu.Unlock()
	setClock(func() time.Time { return time.Now().Add(time.Hour) }) // NewFile's read is old
	s0, r0 := stats.Load(), reads.Load()
	const d = 3 * time.Second
	adv54aStream(t, f, 2*time.Millisecond, d, func(v string) bool { return v == "the-secret" })
	s, r := stats.Load()-s0, reads.Load()-r0
	t.Logf("%v of Gets (one every 2 ms), stats and reads taking 60 ms: %d looks, %d reads", d, s, r)
	if limit := int64(d/RecheckInterval) + 3; r > limit {
		t.Fatalf("%v of Gets on a mount whose stats and reads take 60 ms each read the unchanged file %d times (%d looks); want about one read per RecheckInterval (at most %d): looks overlap for ever and the state is cleared at nearly every end", d, r, s, limit)
	}
}

// adversary 54a (holds): the File's clock jumps forward (+1 h, or
// +RecheckInterval) between looks and then stands still, Gets every 5 ms
// on a fast mount: a rename is returned by the first Get begun
// StatInterval of real time after it, an in-place rewrite (stat unchanged)
// within RecheckInterval + 2 StatIntervals of real time after the last
// read, and a second of Gets after the jump costs about one look per
// StatInterval and about one read per RecheckInterval.
func TestAClockThatJumpsForwardBetweenLooksAndStandsStillSeesRenamesAndRewritesAndLooksOncePerStatInterval(t *testing.T) {
	for _, jump := range []time.Duration{time.Hour, RecheckInterval} {
		t.Run(jump.String(), func(t *testing.T) {
			f, path, setClock, stats, reads := adv54aFile(t, "old-secret", 0)
			setClock(func() time.Time { return time.Now().Add(time.Hour) })
			if v, err := f.Get(); err != nil || v != "old-secret" {
				t.Fatalf("setup: Get = %q, %v", v, err)
			}
			still := time.Now().Add(time.Hour + jump)
			setClock(func() time.Time { return still })
			s0, r0 := stats.Load(), reads.Load()
			const d = time.Second
			adv54aStream(t, f, 5*time.Millisecond, d, func(v string) bool { return v == "old-secret" })
			s, r := stats.Load()-s0, reads.Load()-r0
			t.Logf("a second of Gets after the jump: %d stats, %d reads", s, r)
			if s > int64(d/StatInterval)+3 || r > 2 {
				t.Fatalf("a second of Gets after a jump of %v then a clock standing still: %d stats, %d reads; want about %d and 1", jump, s, r, d/StatInterval)
			}
			// A rename: the first Get begun StatInterval later returns it.
			tmp := filepath.Join(filepath.Dir(path), "tmp")
			if err := os.WriteFile(tmp, []byte("new-secret\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
			renamed := time.Now()
			for time.Since(renamed) < StatInterval {
				if _, err := f.Get(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(5 * time.Millisecond)
			}
			if v, err := f.Get(); err != nil || v != "new-secret" {
				t.Fatalf("a Get begun %v after a rename (clock jumped %v, then still) = %q, %v", time.Since(renamed), jump, v, err)
			}
			// An in-place rewrite the stat cannot tell (its stat taken as
			// the one read): read again within RecheckInterval + 2
			// StatIntervals of real time.
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte("newer-secret\n"), 0o600); err != nil {
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
			readAt := f.state.readAt.real
			f.mu.Unlock()
			var v string
			for time.Since(readAt) < RecheckInterval+2*StatInterval {
				if v, err = f.Get(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(5 * time.Millisecond)
			}
			if v != "newer-secret" {
				t.Fatalf("RecheckInterval + 2 StatIntervals of real time after the read (clock jumped %v, then still): %q, want the rewritten secret", jump, v)
			}
		})
	}
}

// adversary 54a (holds): a real-time monotonicity checker on a slow mount
// (70% of reads take 1.2 to 2.5 s, the rest are fast; stats fast or 0.3 s)
// across rotations (a new version every 40 ms, every seventh a removed
// file: an error outcome), with the File's clock jumping forward or back
// (up to 3 s, every 20 ms) between Gets, and Gets every 5 to 30 ms for
// 8 s: the deadline fallback and the recency rule then pick among looks
// of many ages. A version is a number; a look's outcome is the version at
// a moment within it. No Get may return an older version (or the error of
// an older one) than a Get that returned before it began.
func TestNoGetReturnsAnOlderLookThanAGetThatReturnedBeforeItOnASlowMountWithAClockThatJumps(t *testing.T) {
	f := adv53aNewFile(t)
	var version, offset atomic.Int64
	version.Store(1)
	f.mu.Lock()
	f.now = func() time.Time { return time.Now().Add(time.Hour + time.Duration(offset.Load())) }
	f.stat = func(key, p string) (fileID, error) {
		if rand.Intn(4) == 0 {
			time.Sleep(300 * time.Millisecond)
		}
		v := version.Load()
		if v%7 == 0 {
			return fileID{}, fmt.Errorf("version %d: removed", v)
		}
		return fileID{size: v}, nil
	}
	f.read = func(key, p string) (string, fileID, error) {
		var takes time.Duration
		if rand.Intn(10) < 7 {
			takes = 1200*time.Millisecond + time.Duration(rand.Intn(1300))*time.Millisecond
		}
		early := rand.Intn(2) == 0
		v := version.Load()
		time.Sleep(takes)
		if !early {
			v = version.Load()
		}
		if v%7 == 0 {
			return "", fileID{}, fmt.Errorf("version %d: removed", v)
		}
		return strconv.FormatInt(v, 10), fileID{size: v}, nil
	}
	f.mu.Unlock()
	stopRot := make(chan struct{})
	var rotWG sync.WaitGroup
	rotWG.Add(1)
	go func() {
		defer rotWG.Done()
		for i := 0; ; i++ {
			select {
			case <-stopRot:
				return
			case <-time.After(20 * time.Millisecond):
				if i%2 == 0 {
					version.Add(1)
				}
				offset.Add(int64(time.Duration(rand.Intn(6001)-3000) * time.Millisecond))
			}
		}
	}()
	type ret struct {
		began, ended time.Time
		n            int64
		s            string
	}
	var mu sync.Mutex
	var rets []ret
	var wg sync.WaitGroup
	for stop := time.Now().Add(8 * time.Second); time.Now().Before(stop); time.Sleep(time.Duration(5+rand.Intn(26)) * time.Millisecond) {
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
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(MaxWait + time.Second):
		t.Fatal("Gets did not return within MaxWait + 1 s")
	}
	close(stopRot)
	rotWG.Wait()
	mu.Lock()
	defer mu.Unlock()
	looked, slow := 0, 0
	for _, r := range rets {
		if r.n > 0 {
			looked++
		}
		if r.ended.Sub(r.began) > MaxWait+time.Second {
			slow++
		}
	}
	if slow > 0 {
		t.Errorf("%d Gets took longer than MaxWait + 1 s", slow)
	}
	if looked < len(rets)/4 {
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

// adversary 54a (holds): the overlapping looks above (stats and reads
// take 60 ms, Gets every 2 ms, the real clock) across rotations (a new
// version every 30 ms, every seventh a removed file): no Get returns an
// older version (or its error) than a Get that returned before it began,
// every Get returns within MaxWait, at most maxChecks looks run at once,
// and none is left once the Gets stop.
func TestNoGetReturnsAnOlderVersionThanAGetThatReturnedBeforeItWhileLooksKeepOverlapping(t *testing.T) {
	f := adv53aNewFile(t)
	var version atomic.Int64
	version.Store(1)
	var in, maxIn atomic.Int64
	enter := func() {
		n := in.Add(1)
		for m := maxIn.Load(); n > m && !maxIn.CompareAndSwap(m, n); m = maxIn.Load() {
		}
	}
	f.mu.Lock()
	f.now = func() time.Time { return time.Now().Add(time.Hour) }
	f.stat = func(key, p string) (fileID, error) {
		enter()
		defer in.Add(-1)
		time.Sleep(60 * time.Millisecond)
		v := version.Load()
		if v%7 == 0 {
			return fileID{}, fmt.Errorf("version %d: removed", v)
		}
		return fileID{size: v}, nil
	}
	f.read = func(key, p string) (string, fileID, error) {
		enter()
		defer in.Add(-1)
		time.Sleep(60 * time.Millisecond)
		v := version.Load()
		if v%7 == 0 {
			return "", fileID{}, fmt.Errorf("version %d: removed", v)
		}
		return strconv.FormatInt(v, 10), fileID{size: v}, nil
	}
	f.mu.Unlock()
	stopRot := make(chan struct{})
	var rotWG sync.WaitGroup
	rotWG.Add(1)
	go func() {
		defer rotWG.Done()
		for {
			select {
			case <-stopRot:
				return
			case <-time.After(30 * time.Millisecond):
				version.Add(1)
			}
		}
	}()
	type ret struct {
		began, ended time.Time
		n            int64
		s            string
	}
	var mu sync.Mutex
	var rets []ret
	var wg sync.WaitGroup
	for stop := time.Now().Add(4 * time.Second); time.Now().Before(stop); time.Sleep(2 * time.Millisecond) {
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
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(MaxWait + time.Second):
		t.Fatal("Gets did not return within MaxWait + 1 s")
	}
	close(stopRot)
	rotWG.Wait()
	eventuallyNoCheck(t, f)
	if n := maxIn.Load(); n > maxChecks {
		t.Errorf("%d system calls of looks at once, want at most %d", n, maxChecks)
	}
	mu.Lock()
	defer mu.Unlock()
	looked, slow := 0, 0
	for _, r := range rets {
		if r.n > 0 {
			looked++
		}
		if r.ended.Sub(r.began) > MaxWait {
			slow++
		}
	}
	if slow > 0 {
		t.Errorf("%d Gets took longer than MaxWait", slow)
	}
	if looked < len(rets)*9/10 {
		t.Fatalf("only %d of %d Gets returned a version", looked, len(rets))
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
