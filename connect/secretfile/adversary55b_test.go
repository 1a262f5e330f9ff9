//go:build linux

package secretfile

import (
	"errors"
	"os"
	"path/filepath"
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
	e, c := hold(2, false), hold(3, false)
	adv55bAt(offset, 1000)
	ge := adv52aGet(f) // E: stat 2
	adv53aWait(t, e.began, "E's stat")
	adv55bAt(offset, 1150) // E is not recent: the next Get begins C beside it
	gc := adv52aGet(f)     // C: stat 3
	adv53aWait(t, c.began, "C's stat")
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
	c.release() // C reads (its state was the read of +0) and ends: the same as D
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
	e, p, c := hold(2, false), hold(3, false), hold(4, false)
	adv55bAt(offset, 1000)
	ge := adv52aGet(f) // E: stat 2
	adv53aWait(t, e.began, "E's stat")
	adv55bAt(offset, 1150)
	gp := adv52aGet(f) // P: stat 3, beside E
	adv53aWait(t, p.began, "P's stat")
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

// adversary 55b: errors count as outcomes, and their text is all that
// outcome.same compares. C begins and is held before its stat; D begins
// beside it and stats at once (look 1), then is held; C stats (look 2,
// the later look) and ends first: taken, and its Get returns look 2's
// error. D ends, with the same text: by f797c7b it is taken and, begun
// after C, it replaces C's as the state (54eba99 keeps only a newer
// state). A Get begun after look 2's error was returned returns look 1's:
// the outcome of an earlier look than one a Get returned before it began
// (the text is the same; the error values are not: errors.As, ==).
func TestAGetNeverReturnsAnEarlierLooksErrorThanOneReturnedBeforeItBeganThoughTheTextIsTheSame(t *testing.T) {
	var looks atomic.Int64
	f, offset, _, _, hold := adv55bFile(t, "a", fileID{ino: 7, size: 1}, func(int64) (fileID, error) {
		return fileID{}, &adv55bErr{looks.Add(1)}
	})
	c, d := hold(1, false), hold(2, true)
	gc := adv52aGet(f) // C: stat 1, held before it looks
	adv53aWait(t, c.began, "C's stat")
	adv55bAt(offset, 150) // C is not recent: the next Get begins D beside it
	gd := adv52aGet(f)    // D: stat 2, looks at once (look 1), then held
	adv53aWait(t, d.began, "D's stat")
	c.release() // C looks (look 2) and ends
	rc := adv53aRecv(t, gc, "C's Get")
	var ec *adv55bErr
	if !errors.As(rc.err, &ec) || ec.look != 2 {
		t.Fatalf("setup: C's Get = %q, %v; want look 2's error", rc.v, rc.err)
	}
	d.release() // D ends: look 1, the same text
	rd := adv53aRecv(t, gd, "D's Get")
	if rd.err == nil {
		t.Fatalf("setup: D's Get = %q, nil; want an error", rd.v)
	}
	eventuallyNoCheck(t, f)
	adv55bAt(offset, 200) // within StatInterval of D's beginning
	v, err := f.Get()     // begun after C's Get returned look 2's error
	var e *adv55bErr
	if !errors.As(err, &e) {
		t.Fatalf("a Get after C's = %q, %v; want an error", v, err)
	}
	if e.look < ec.look {
		t.Fatalf("a Get begun after a Get returned look %d's error returned look %d's (%v), an earlier look's outcome: D (begun after C, looked before it) ended later with the same text and replaced C's as the state", ec.look, e.look, err)
	}
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
// within StatInterval of a look costs a system call.
func TestAGetWithinStatIntervalOfALookInProgressBesideOneThatEndedCostsNoStatWhenTheLookFindsTheSame(t *testing.T) {
	f, offset, stats, _, hold := adv55bFile(t, "a", fileID{ino: 7, size: 1}, nil)
	c, d, e := hold(1, false), hold(2, false), hold(3, false)
	gc := adv52aGet(f) // C: stat 1
	adv53aWait(t, c.began, "C's stat")
	adv55bAt(offset, 150) // C is not recent: the next Get begins D beside it
	gd := adv52aGet(f)    // D: stat 2
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
	case <-time.After(300 * time.Millisecond):
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
