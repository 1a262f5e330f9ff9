//go:build linux

package secretfile

import (
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// adv55bGate holds a hook call until opened; began is closed when the
// call arrives.
type adv55bGate struct {
	began, open chan struct{}
	once        sync.Once
}

func (g *adv55bGate) release() { g.once.Do(func() { close(g.open) }) }

// adv55bFile is a File on a real file whose hooks are then replaced: its
// clock is base+offset (base an hour ahead: the set-up's look is old);
// stat n (from 1, after the set-up) returns statOf(n), and reads return
// value and id; both are counted. hold(n, early) makes stat n wait for
// its gate: early, after it computed its result (it looked, then
// answers late); else before (it looks late).
func adv55bFile(t *testing.T, value string, id fileID, statOf func(n int64) (fileID, error)) (f *File, offset, stats, reads *atomic.Int64, hold func(n int64, early bool) *adv55bGate) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(value+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	offset, stats, reads = new(atomic.Int64), new(atomic.Int64), new(atomic.Int64)
	var mu sync.Mutex
	type held struct {
		g     *adv55bGate
		early bool
	}
	gates := map[int64]held{}
	hold = func(n int64, early bool) *adv55bGate {
		g := &adv55bGate{began: make(chan struct{}), open: make(chan struct{})}
		t.Cleanup(g.release)
		mu.Lock()
		gates[n] = held{g, early}
		mu.Unlock()
		return g
	}
	if statOf == nil {
		statOf = func(int64) (fileID, error) { return id, nil }
	}
	base := time.Now().Add(time.Hour)
	f.mu.Lock()
	f.now = func() time.Time { return base.Add(time.Duration(offset.Load())) }
	f.stat = func(key, p string) (fileID, error) {
		n := stats.Add(1)
		mu.Lock()
		h, ok := gates[n]
		mu.Unlock()
		if ok && !h.early {
			close(h.g.began)
			<-h.g.open
		}
		sid, err := statOf(n)
		if ok && h.early {
			close(h.g.began)
			<-h.g.open
		}
		return sid, err
	}
	f.read = func(key, p string) (string, fileID, error) {
		reads.Add(1)
		return value, id, nil
	}
	f.mu.Unlock()
	return f, offset, stats, reads, hold
}

// adv55bHoldNextRead makes the next read of f wait for the gate returned
// (began: the read arrived); the reads after it pass.
func adv55bHoldNextRead(t *testing.T, f *File) *adv55bGate {
	t.Helper()
	g := &adv55bGate{began: make(chan struct{}), open: make(chan struct{})}
	t.Cleanup(g.release)
	var once sync.Once
	f.mu.Lock()
	rd := f.read
	f.read = func(key, p string) (string, fileID, error) {
		first := false
		once.Do(func() { first = true })
		if first {
			close(g.began)
			<-g.open
		}
		return rd(key, p)
	}
	f.mu.Unlock()
	return g
}

func adv55bAt(offset *atomic.Int64, ms int) {
	offset.Store(int64(time.Duration(ms) * time.Millisecond))
}

// adversary 55b: the file (unchanged) was read at +0. E begins at +1000
// and reads it again (RecheckInterval); C begins beside it at +1150 and
// reads it too (the state is still the read of +0). E ends (taken: the
// state, read at +1000); D begins at +1300 and reuses E's read; D ends
// (taken), then C, which found the same as D: by 54eba99 the state stays
// D's, begun after C, whose value was read at +1000 - though C read the
// unchanged file at +1150. The next look (+2050) reads it again, 900 ms
// after C read it: the kept look's readAt is not the newest read of what
// it and the looks beside it found (the mirror of adversary 54b's second
// test, on the branch 54eba99 added).
func TestAnUnchangedFileReadByAnOlderLookThatEndedLaterWithTheSameIsNotReadAgainWithinRecheckIntervalOfThatRead(t *testing.T) {
	id := fileID{ino: 7, size: 1}
	f, offset, _, reads, hold := adv55bFile(t, "a", id, nil)
	if v, err := f.Get(); err != nil || v != "a" { // stat 1: the read at +0
		t.Fatalf("the first Get = %q, %v; want a", v, err)
	}
	eventuallyNoCheck(t, f)
	e := hold(2, false)
	adv55bAt(offset, 1000)
	ge := adv52aGet(f) // E: stat 2
	adv53aWait(t, e.began, "E's stat")
	c := adv55bHoldNextRead(t, f) // C's read, in flight beside E (a look that reads after another ended reuses its read)
	adv55bAt(offset, 1150)        // E is not recent: the next Get begins C beside it
	gc := adv52aGet(f)            // C: stat 3
	adv53aWait(t, c.began, "C's read")
	n := reads.Load()
	e.release() // E reads (the read of +0 is RecheckInterval old) and ends: taken
	if r := adv53aRecv(t, ge, "E's Get"); r.err != nil || r.v != "a" {
		t.Fatalf("E's Get = %q, %v; want a", r.v, r.err)
	}
	if got := reads.Load() - n; got != 1 {
		t.Fatalf("setup: E made %d reads; want 1", got)
	}
	adv55bAt(offset, 1300) // E and C are not recent: D, stat 4, reuses E's read
	n = reads.Load()
	if v, err := f.Get(); err != nil || v != "a" {
		t.Fatalf("D's Get = %q, %v; want a", v, err)
	}
	if got := reads.Load() - n; got != 0 {
		t.Fatalf("setup: D made %d reads; want 0 (E read at +1000)", got)
	}
	n = reads.Load()
	c.release() // C's read (its state was the read of +0) ends, and C: the same as D
	if r := adv53aRecv(t, gc, "C's Get"); r.err != nil || r.v != "a" {
		t.Fatalf("C's Get = %q, %v; want a", r.v, r.err)
	}
	eventuallyNoCheck(t, f)
	if got := reads.Load() - n; got != 1 {
		t.Fatalf("setup: C made %d reads; want 1 (its state, the read of +0, was old at +1150)", got)
	}
	adv55bAt(offset, 2050) // D is not recent: the next Get looks
	n = reads.Load()
	if v, err := f.Get(); err != nil || v != "a" {
		t.Fatalf("a Get at +2050 = %q, %v; want a", v, err)
	}
	eventuallyNoCheck(t, f)
	if got := reads.Load() - n; got != 0 {
		t.Fatalf("the look at +2050 made %d reads of the unchanged file; want 0 (C read it at +1150, 900 ms before, and found what D found; the state kept D's value, read at +1000)", got)
	}
}

// adversary 55b: the other branch of the same rule. The file (unchanged)
// was read at +0. E begins at +1000 and reads it; P begins beside it at
// +1150 and reads it too. E ends (taken: read at +1000); C begins at
// +1300 and reuses E's read. P ends, the same as E: taken (the state: P,
// read at +1150). C ends, the same as P: it replaces P (begun before it),
// and the state's value is now C's, read at +1000. The next look (+2050)
// reads the unchanged file, 900 ms after P read it.
func TestAnUnchangedFileReadByALookThatANewerLookBesideItReplacedWithTheSameIsNotReadAgainWithinRecheckIntervalOfThatRead(t *testing.T) {
	id := fileID{ino: 7, size: 1}
	f, offset, _, reads, hold := adv55bFile(t, "a", id, nil)
	if v, err := f.Get(); err != nil || v != "a" { // stat 1: the read at +0
		t.Fatalf("the first Get = %q, %v; want a", v, err)
	}
	eventuallyNoCheck(t, f)
	e, c := hold(2, false), hold(4, false)
	adv55bAt(offset, 1000)
	ge := adv52aGet(f) // E: stat 2
	adv53aWait(t, e.began, "E's stat")
	p := adv55bHoldNextRead(t, f) // P's read, in flight beside E (a look that reads after another ended reuses its read)
	adv55bAt(offset, 1150)
	gp := adv52aGet(f) // P: stat 3, beside E
	adv53aWait(t, p.began, "P's read")
	e.release()
	if r := adv53aRecv(t, ge, "E's Get"); r.err != nil || r.v != "a" {
		t.Fatalf("E's Get = %q, %v; want a", r.v, r.err)
	}
	adv55bAt(offset, 1300) // E and P are not recent: C, stat 4, beside P
	gc := adv52aGet(f)
	adv53aWait(t, c.began, "C's stat")
	n := reads.Load()
	p.release() // P reads (its state was the read of +0) and ends: the same as E
	if r := adv53aRecv(t, gp, "P's Get"); r.err != nil || r.v != "a" {
		t.Fatalf("P's Get = %q, %v; want a", r.v, r.err)
	}
	if got := reads.Load() - n; got != 1 {
		t.Fatalf("setup: P made %d reads; want 1", got)
	}
	n = reads.Load()
	c.release() // C reuses E's read of +1000 and ends: the same as P
	if r := adv53aRecv(t, gc, "C's Get"); r.err != nil || r.v != "a" {
		t.Fatalf("C's Get = %q, %v; want a", r.v, r.err)
	}
	eventuallyNoCheck(t, f)
	if got := reads.Load() - n; got != 0 {
		t.Fatalf("setup: C made %d reads; want 0 (its state was E's read of +1000)", got)
	}
	adv55bAt(offset, 2050) // C is not recent: the next Get looks
	n = reads.Load()
	if v, err := f.Get(); err != nil || v != "a" {
		t.Fatalf("a Get at +2050 = %q, %v; want a", v, err)
	}
	eventuallyNoCheck(t, f)
	if got := reads.Load() - n; got != 0 {
		t.Fatalf("the look at +2050 made %d reads of the unchanged file; want 0 (P read it at +1150, 900 ms before, and found what C found; C's end put its value, read at +1000, in the state in place of P's)", got)
	}
}

// adv55bErr is a stat's error whose text is the same for every look (a
// removed file, at every look: "no such file or directory") but that
// says which look made it (look: the order of the looks, by when they
// looked).
type adv55bErr struct{ look int64 }

func (e *adv55bErr) Error() string {
	return "token_file: reading the secret: stat /run/secrets/token: no such file or directory"
}

// adversary 55b: a mount whose stats take 300 ms (reads fast; the real
// clock), Gets every 2 ms for 6 s, the file unchanged. Every
// RecheckInterval a look reads the file again; 100 ms into it (its stat
// still running) a Get finds it not recent and begins another beside it,
// whose state is as old (the reading look has not ended), so it reads
// too: two reads 100 ms apart every RecheckInterval (11 or 12 in 6 s),
// for ever, where the rule reads an unchanged file about once per
// RecheckInterval. (Adversary 54a's tests of this kind allow d/1 s + 3
// reads over 3 s, which two per second pass.)
func TestAnUnchangedFileOnAMountWhoseStatsTake300msIsReadOncePerRecheckIntervalNotTwice(t *testing.T) {
	f, _, setClock, stats, reads := adv54aFile(t, "the-secret", 300*time.Millisecond)
	var mu sync.Mutex
	var at []time.Duration
	t0 := time.Now()
	f.mu.Lock()
	rd := f.read
	f.read = func(key, p string) (string, fileID, error) {
		mu.Lock()
		at = append(at, time.Since(t0).Round(time.Millisecond))
		mu.Unlock()
		return rd(key, p)
	}
	f.mu.Unlock()
	setClock(func() time.Time { return time.Now().Add(time.Hour) }) // NewFile's read is old
	s0, r0 := stats.Load(), reads.Load()
	const d = 6 * time.Second
	adv54aStream(t, f, 2*time.Millisecond, d, func(v string) bool { return v == "the-secret" })
	s, r := stats.Load()-s0, reads.Load()-r0
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%v of Gets (one every 2 ms), stats taking 300 ms: %d looks, %d reads, at %v", d, s, r, at)
	if limit := int64(d/RecheckInterval) + 2; r > limit {
		t.Fatalf("%v of Gets on a mount whose stats take 300 ms read the unchanged file %d times (%d looks), at %v; want about one read per RecheckInterval (at most %d): each RecheckInterval's reading look is 100 ms old while its stat runs, and the look a Get begins beside it reads too (the state it would reuse is as old)", d, r, s, at, limit)
	}
}

// adversary 55b: a mount whose stats take 105 ms (just slower than
// StatInterval; the real clock), Gets every millisecond for 3 s, the file
// unchanged. A Get 100 ms into look 1 begins look 2 beside it; look 1
// ends (taken) 5 ms later, and look 2 cannot answer a Get begun after
// that end (it may have looked before look 1), so the next Get begins
// look 3 at once; look 2 ends (the same: taken), and look 3 cannot answer
// the next Get... Every end begins a look: about two looks per stat's
// duration (57 in 3 s), though every look finds the same and the state is
// kept; the rule looks about once per StatInterval (30 in 3 s). A Get
// could wait for the look in progress and take the state it leaves, if
// taken.
func TestAnUnchangedFileOnAMountWhoseStatsTake105msIsLookedAtAboutOncePerStatInterval(t *testing.T) {
	f, _, setClock, stats, _ := adv54aFile(t, "the-secret", 105*time.Millisecond)
	setClock(func() time.Time { return time.Now().Add(time.Hour) }) // NewFile's look is old
	s0 := stats.Load()
	const d = 3 * time.Second
	adv54aStream(t, f, time.Millisecond, d, func(v string) bool { return v == "the-secret" })
	s := stats.Load() - s0
	t.Logf("%v of Gets (one every ms), stats taking 105 ms: %d looks", d, s)
	if limit := int64(d/StatInterval) + 6; s > limit {
		t.Fatalf("%v of Gets on a mount whose stats take 105 ms made %d looks (stats) of the unchanged file; want about one per StatInterval (at most %d): each look's end begins another, the look in progress beside it being unable to answer a Get begun after that end", d, s, limit)
	}
}

// adversary 55b: the 105 ms mount's loop, by the File's clock. C begins
// at +0 (its stat slow); at +150 a Get begins D beside it (C is not
// recent); C ends (taken). A Get at +200, 50 ms after D began, begins a
// third look E instead of waiting for D: D cannot answer a Get begun
// after C's end (it may have looked before C), though D then finds the
// same and is taken - the state the Get could have returned. A Get
// within StatInterval of a look costs a system call. (Fixed: the Get
// waits for D as long as looks take, here C's 200 ms of real time, and
// only then, D being slow, begins a look beside it: waiting longer made a
// Get fail past MaxWait when the mount slowed down, adversary 52a's
// TestAGetBegunJustAfterALookEndedBesideARecentOneDoesNotFailOnTheRealClock.)
func TestAGetWithinStatIntervalOfALookInProgressBesideOneThatEndedWaitsAsLongAsLooksTakeAndCostsNoStatWhenItFindsTheSame(t *testing.T) {
	f, offset, stats, _, hold := adv55bFile(t, "a", fileID{ino: 7, size: 1}, nil)
	c, d, e := hold(1, false), hold(2, false), hold(3, false)
	gc := adv52aGet(f) // C: stat 1
	adv53aWait(t, c.began, "C's stat")
	time.Sleep(200 * time.Millisecond) // C's look takes 200 ms of real time: looks take that long here
	adv55bAt(offset, 150)              // C is not recent: the next Get begins D beside it
	gd := adv52aGet(f)                 // D: stat 2
	adv53aWait(t, d.began, "D's stat")
	c.release()
	if r := adv53aRecv(t, gc, "C's Get"); r.err != nil || r.v != "a" {
		t.Fatalf("C's Get = %q, %v; want a", r.v, r.err)
	}
	adv55bAt(offset, 200) // 50 ms after D began
	g := adv52aGet(f)
	var third bool
	select {
	case <-e.began:
		third = true
	case <-time.After(100 * time.Millisecond): // within the time looks take here (C's 200 ms)
	}
	d.release() // D finds what C found: taken
	e.release()
	if r := adv53aRecv(t, gd, "D's Get"); r.err != nil || r.v != "a" {
		t.Fatalf("D's Get = %q, %v; want a", r.v, r.err)
	}
	if r := adv53aRecv(t, g, "the Get at +200"); r.err != nil || r.v != "a" {
		t.Fatalf("the Get at +200 = %q, %v; want a", r.v, r.err)
	}
	eventuallyNoCheck(t, f)
	if third {
		t.Fatalf("a Get 50 ms after look D began (in progress) began a third look (%d stats in all); want it to wait for D, which found what C found and was taken (a Get within StatInterval of a look costs no system call)", stats.Load())
	}
}

// adversary 55b (holds): a rename is seen by every Get begun StatInterval
// of real time after it, on a mount whose stats and reads each wait 0-250
// ms before and after the system call (looks of up to a second, beside
// each other, looking early or late, ending in any order, most finding
// the same), the file renamed over every 150-400 ms (a new version), Gets
// every 2 ms for 4 s; and no Get returns an older version than one a Get
// returned before it began.
func TestARenameIsSeenByEveryGetBegunStatIntervalAfterItWhileSlowLooksBesideEachOtherFindTheSame(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte("0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	var rmu sync.Mutex
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	pause := func(max time.Duration) {
		rmu.Lock()
		d := time.Duration(rng.Int63n(int64(max)))
		rmu.Unlock()
		time.Sleep(d)
	}
	f.mu.Lock()
	f.stat = func(key, p string) (fileID, error) {
		pause(250 * time.Millisecond)
		defer pause(250 * time.Millisecond)
		return stat(key, p)
	}
	f.read = func(key, p string) (string, fileID, error) {
		pause(250 * time.Millisecond)
		defer pause(250 * time.Millisecond)
		return read(key, p)
	}
	f.mu.Unlock()
	var (
		vmu     sync.Mutex
		renamed []time.Time // renamed[k-1]: when version k's rename returned
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for k := 1; ; k++ {
			rmu.Lock()
			d := 150*time.Millisecond + time.Duration(rng.Int63n(int64(250*time.Millisecond)))
			rmu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(d):
			}
			tmp := filepath.Join(dir, "tmp")
			if err := os.WriteFile(tmp, []byte(strconv.Itoa(k)+"\n"), 0o600); err != nil {
				t.Error(err)
				return
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Error(err)
				return
			}
			vmu.Lock()
			renamed = append(renamed, time.Now())
			vmu.Unlock()
		}
	}()
	type ret struct {
		began, ended time.Time
		v            int
	}
	var (
		gmu  sync.Mutex
		rets []ret
		gwg  sync.WaitGroup
	)
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		gwg.Add(1)
		go func() {
			defer gwg.Done()
			b := time.Now()
			s, err := f.Get()
			e := time.Now()
			if err != nil {
				t.Errorf("Get: %v", err)
				return
			}
			v, err := strconv.Atoi(s)
			if err != nil {
				t.Errorf("Get = %q", s)
				return
			}
			gmu.Lock()
			rets = append(rets, ret{b, e, v})
			gmu.Unlock()
		}()
	}
	gwg.Wait()
	close(stop)
	wg.Wait()
	eventuallyNoCheck(t, f)
	vmu.Lock()
	defer vmu.Unlock()
	gmu.Lock()
	defer gmu.Unlock()
	stale, older := 0, 0
	for _, r := range rets {
		want := 0 // the newest version renamed StatInterval before r began
		for k, at := range renamed {
			if !at.Add(StatInterval).After(r.began) {
				want = k + 1
			}
		}
		if r.v < want {
			if stale++; stale <= 3 {
				t.Errorf("a Get begun %v after version %d's rename returned version %d", r.began.Sub(renamed[want-1]), want, r.v)
			}
		}
	}
	sort.Slice(rets, func(i, j int) bool { return rets[i].ended.Before(rets[j].ended) })
	newest := make([]int, len(rets))
	for i, r := range rets {
		newest[i] = r.v
		if i > 0 {
			newest[i] = max(newest[i], newest[i-1])
		}
	}
	for _, r := range rets {
		n := sort.Search(len(rets), func(i int) bool { return !rets[i].ended.Before(r.began) })
		if n > 0 && r.v < newest[n-1] {
			if older++; older <= 3 {
				t.Errorf("a Get returned version %d; a Get returned %d before it began", r.v, newest[n-1])
			}
		}
	}
	if stale > 0 || older > 0 || len(renamed) < 8 {
		t.Fatalf("%d of %d Gets returned a version renamed over StatInterval before they began, %d an older one than a Get returned before they began (%d renames)", stale, len(rets), older, len(renamed))
	}
	t.Logf("%d Gets, %d renames: none stale or older", len(rets), len(renamed))
}

// adv55bVersionErr is a look's error: its text says only which of two
// states the file was in ("removed" or "empty": every other version looks
// the same), its fields which version it found and which look found it.
type adv55bVersionErr struct{ version, look int64 }

func (e *adv55bVersionErr) Error() string {
	if e.version%2 == 1 {
		return "token_file: reading the secret: stat /run/secrets/token: no such file or directory"
	}
	return "token_file: /run/secrets/token is empty"
}

// adversary 55b (holds): A, B, A, B... - the file alternates between two
// states whose errors have the same text each time (removed, emptied,
// removed again: each a new version), every 20-80 ms, on a mount whose
// stats wait 0-150 ms before and after they look (looks beside each
// other, looking early or late, ending in any order, many finding the
// same text as a look of another version). Eight goroutines Get for 3 s:
// no Get returns an earlier version of the other text than one a Get
// returned before it began (the same text of an earlier version is the
// same outcome by outcome.same, and is only logged; see
// TestAGetNeverReturnsAnEarlierLooksErrorThanOneReturnedBeforeItBeganThoughTheTextIsTheSame).
func TestNoGetReturnsAnEarlierVersionOfTheOtherErrorThanOneReturnedBeforeItBeganWhileTheFileAlternates(t *testing.T) {
	var (
		mu      sync.Mutex
		version int64 = 1
		looks   int64
		rng     = rand.New(rand.NewSource(time.Now().UnixNano()))
	)
	pause := func() {
		mu.Lock()
		d := time.Duration(rng.Int63n(int64(150 * time.Millisecond)))
		mu.Unlock()
		time.Sleep(d)
	}
	f, _, _, _, _ := adv55bFile(t, "a", fileID{ino: 7, size: 1}, func(int64) (fileID, error) {
		pause()
		mu.Lock()
		looks++
		e := &adv55bVersionErr{version, looks}
		mu.Unlock()
		pause()
		return fileID{}, e
	})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			mu.Lock()
			d := 20*time.Millisecond + time.Duration(rng.Int63n(int64(60*time.Millisecond)))
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(d):
			}
			mu.Lock()
			version++
			mu.Unlock()
		}
	}()
	type get struct {
		begin, end int64
		e          *adv55bVersionErr
	}
	var (
		ctr  atomic.Int64
		gmu  sync.Mutex
		gets []get
	)
	deadline := time.Now().Add(3 * time.Second)
	var gwg sync.WaitGroup
	for i := 0; i < 8; i++ {
		gwg.Add(1)
		go func() {
			defer gwg.Done()
			for time.Now().Before(deadline) {
				b := ctr.Add(1)
				_, err := f.Get()
				e := ctr.Add(1)
				var ve *adv55bVersionErr
				if !errors.As(err, &ve) {
					t.Errorf("Get: %v; want a look's error", err)
					return
				}
				gmu.Lock()
				gets = append(gets, get{b, e, ve})
				gmu.Unlock()
				time.Sleep(time.Millisecond + time.Duration(i)*3*time.Millisecond)
			}
		}()
	}
	gwg.Wait()
	close(stop)
	wg.Wait()
	eventuallyNoCheck(t, f)
	gmu.Lock()
	defer gmu.Unlock()
	bad, sameText := 0, 0
	for _, g := range gets {
		var worst *adv55bVersionErr // the newest version of the other text returned before g began
		var sameWorst *adv55bVersionErr
		for _, h := range gets {
			if h.end >= g.begin {
				continue
			}
			if h.e.version%2 != g.e.version%2 {
				if h.e.version > g.e.version && (worst == nil || h.e.version > worst.version) {
					worst = h.e
				}
			} else if h.e.look > g.e.look {
				sameWorst = h.e
			}
		}
		if worst != nil {
			if bad++; bad <= 3 {
				t.Errorf("a Get returned version %d (%q, look %d); a Get returned version %d (%q) before it began", g.e.version, g.e.Error(), g.e.look, worst.version, worst.Error())
			}
		}
		if sameWorst != nil {
			sameText++
		}
	}
	if bad > 0 || len(gets) < 50 {
		t.Fatalf("%d of %d Gets returned an earlier version of the other text than one returned before they began", bad, len(gets))
	}
	t.Logf("%d Gets, none older; %d returned an earlier look's error of the same text than one returned before they began", len(gets), sameText)
}

// adversary 55b (holds): a value rewritten in place (the stat never
// changes) is read again within RecheckInterval of its read, on a mount
// whose stats and reads wait 0-200 ms before and after the system call
// (looks beside each other, many finding the same and kept), the file
// rewritten every 300-700 ms, Gets every 2 ms for 5 s on the real clock:
// a Get begun StatInterval after both the rewrite and RecheckInterval
// after the last read begun before it returns the new version (or a
// later one).
func TestAnInPlaceRewriteIsReturnedRecheckIntervalAfterTheLastReadBeforeItWhileSlowLooksBesideEachOtherFindTheSame(t *testing.T) {
	var (
		mu      sync.Mutex
		version int
		writes  []time.Time // writes[k-1]: when version k was written
		reads   []time.Time // when each read was called
		rng     = rand.New(rand.NewSource(time.Now().UnixNano()))
	)
	pause := func() {
		mu.Lock()
		d := time.Duration(rng.Int63n(int64(200 * time.Millisecond)))
		mu.Unlock()
		time.Sleep(d)
	}
	id := fileID{ino: 9, size: 1}
	f, _, _, _, _ := adv55bFile(t, "0", id, func(int64) (fileID, error) {
		pause()
		defer pause()
		return id, nil
	})
	f.mu.Lock()
	f.now = time.Now
	f.read = func(key, p string) (string, fileID, error) {
		mu.Lock()
		reads = append(reads, time.Now())
		mu.Unlock()
		pause()
		defer pause()
		mu.Lock()
		defer mu.Unlock()
		return strconv.Itoa(version), id, nil
	}
	f.mu.Unlock()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			mu.Lock()
			d := 300*time.Millisecond + time.Duration(rng.Int63n(int64(400*time.Millisecond)))
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(d):
			}
			mu.Lock()
			version++
			writes = append(writes, time.Now())
			mu.Unlock()
		}
	}()
	type ret struct {
		began time.Time
		v     int
	}
	var (
		gmu  sync.Mutex
		rets []ret
		gwg  sync.WaitGroup
	)
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		gwg.Add(1)
		go func() {
			defer gwg.Done()
			b := time.Now()
			s, err := f.Get()
			if err != nil {
				t.Errorf("Get: %v", err)
				return
			}
			v, err := strconv.Atoi(s)
			if err != nil {
				t.Errorf("Get = %q", s)
				return
			}
			gmu.Lock()
			rets = append(rets, ret{b, v})
			gmu.Unlock()
		}()
	}
	gwg.Wait()
	close(stop)
	wg.Wait()
	eventuallyNoCheck(t, f)
	mu.Lock()
	defer mu.Unlock()
	gmu.Lock()
	defer gmu.Unlock()
	// due[k-1]: from when every Get begun returns version k or later.
	due := make([]time.Time, len(writes))
	for k, w := range writes {
		var last time.Time // the last read begun before the write
		for _, r := range reads {
			if r.Before(w) && r.After(last) {
				last = r
			}
		}
		d := last.Add(RecheckInterval)
		if w.After(d) {
			d = w
		}
		due[k] = d.Add(StatInterval)
	}
	stale := 0
	for _, r := range rets {
		for k := len(due) - 1; k >= 0; k-- {
			if !r.began.Before(due[k]) {
				if r.v < k+1 {
					if stale++; stale <= 3 {
						t.Errorf("a Get begun %v after version %d was due (written %v before it) returned version %d", r.began.Sub(due[k]), k+1, r.began.Sub(writes[k]), r.v)
					}
				}
				break
			}
		}
	}
	if stale > 0 || len(writes) < 5 {
		t.Fatalf("%d of %d Gets returned a version rewritten in place RecheckInterval after the last read before the rewrite, StatInterval before they began (%d writes, %d reads)", stale, len(rets), len(writes), len(reads))
	}
	t.Logf("%d Gets, %d writes, %d reads: none stale", len(rets), len(writes), len(reads))
}

// adversary 55b (holds): liveness where looks beside each other find the
// same (f797c7b keeps them): the file unchanged, every stat taking 0.7,
// 1.3 or 1.99 s (within MaxWait; past HungAfter, so a Get begins a look
// beside a slow one), Gets every 1-5 ms for 6 s on the real clock: every
// Get returns the secret within MaxWait + 100 ms.
func TestGetsReturnTheSecretWithinMaxWaitOnAMountOfSlowLooksThatAllFindTheSame(t *testing.T) {
	id := fileID{ino: 3, size: 1}
	speeds := []time.Duration{700 * time.Millisecond, 1300 * time.Millisecond, 1990 * time.Millisecond}
	var smu sync.Mutex
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	f, _, _, _, _ := adv55bFile(t, "a", id, func(int64) (fileID, error) {
		smu.Lock()
		d := speeds[rng.Intn(len(speeds))]
		smu.Unlock()
		time.Sleep(d)
		return id, nil
	})
	f.mu.Lock()
	f.now = time.Now
	f.mu.Unlock()
	var fails, gets, slow atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for stop := time.Now().Add(6 * time.Second); time.Now().Before(stop); {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := time.Now()
			v, err := f.Get()
			if time.Since(b) > MaxWait+100*time.Millisecond {
				slow.Add(1)
			}
			gets.Add(1)
			if err != nil || v != "a" {
				fails.Add(1)
				first.CompareAndSwap(nil, v+" "+errString(err))
			}
		}()
		smu.Lock()
		d := time.Duration(1+rng.Intn(5)) * time.Millisecond
		smu.Unlock()
		time.Sleep(d)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(MaxWait + time.Second):
		t.Fatal("Gets did not return within MaxWait + 1 s")
	}
	if fails.Load() > 0 || slow.Load() > 0 {
		t.Fatalf("%d of %d Gets failed (first: %v), %d took longer than MaxWait + 100 ms, though every look found the same within MaxWait", fails.Load(), gets.Load(), first.Load(), slow.Load())
	}
	t.Logf("%d Gets, none failed or slow", gets.Load())
}

// adversary 55b: an unchanged file whose read is an error - emptied (a
// secret not provisioned yet), or larger than MaxSize (each read then
// MaxSize+1 bytes) - is read at every look: look only reuses a value, so
// after an error every look reads again though the stat tells nothing
// changed. Gets every millisecond for 2 s on the real clock (a fast
// mount): about one read per StatInterval (20), where the rule reads an
// unchanged file about once per RecheckInterval.
func TestAnUnchangedFileWhoseReadIsAnErrorIsReadAboutOncePerRecheckInterval(t *testing.T) {
	for _, c := range []struct {
		name    string
		content []byte
	}{{"empty", nil}, {"larger than MaxSize", make([]byte, MaxSize+1)}} {
		t.Run(c.name, func(t *testing.T) {
			f, path, _, _, reads := adv54aFile(t, "the-secret", 0)
			if err := os.WriteFile(path, c.content, 0o600); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * StatInterval) // the next Get looks, and reads: the file changed
			if _, err := f.Get(); err == nil {
				t.Fatal("setup: a Get after the file was emptied or grown returned no error")
			}
			r0 := reads.Load()
			const d = 2 * time.Second
			for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Millisecond) {
				if _, err := f.Get(); err == nil {
					t.Fatal("a Get returned no error")
				}
			}
			r := reads.Load() - r0
			if limit := int64(d/RecheckInterval) + 2; r > limit {
				t.Fatalf("%v of Gets (one every ms) read the unchanged %s file %d times; want about one read per RecheckInterval (at most %d): after an error every look reads, the stat unchanged", d, c.name, r, limit)
			}
		})
	}
}
