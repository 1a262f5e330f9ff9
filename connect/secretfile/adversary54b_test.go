//go:build linux

package secretfile

import (
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

// adv54bFile is a File on a real file whose hooks are then replaced: its
// clock is base+offset (base an hour ahead, so that the set-up's look is
// old), its stat says the file is id (counted), and the gateAt-th stat
// after the set-up waits (after closing began): that look (C)
// ends when the test calls release. Reads return value and id, counted.
func adv54bFile(t *testing.T, value string, id fileID, gateAt int64) (f *File, offset *atomic.Int64, stats, reads *atomic.Int64, began chan struct{}, release func()) {
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
	began, gate := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	base := time.Now().Add(time.Hour)
	f.mu.Lock()
	f.now = func() time.Time { return base.Add(time.Duration(offset.Load())) }
	f.stat = func(key, p string) (fileID, error) {
		if stats.Add(1) == gateAt {
			close(began)
			<-gate
		}
		return id, nil
	}
	f.read = func(key, p string) (string, fileID, error) {
		reads.Add(1)
		return value, id, nil
	}
	f.mu.Unlock()
	return f, offset, stats, reads, began, release
}

// adversary 54b: C begins (its stat is slow); StatInterval later by the
// File clock a Get begins D beside it, which ends at once and is taken
// (the state: D, begun at +150 ms). Then C ends and found the same as D:
// by the change it is taken too, and its outcome replaces D's as the
// state, with C's beginning (+0) as its time. A Get at +200 ms, within
// StatInterval of D, a look that was taken, stats again: the older look
// that ended later made the newer look's answer unusable. (Not a
// regression: before the change C's end cleared the state, with the same
// cost.)
func TestAGetWithinStatIntervalOfATakenLookCostsNoStatThoughAnOlderLookBesideItEndedLaterWithTheSame(t *testing.T) {
	f, offset, stats, _, began, release := adv54bFile(t, "a", fileID{ino: 7, size: 1}, 1)
	done := make(chan struct{})
	go func() { _, _ = f.Get(); close(done) }() // begins C
	<-began
	offset.Store(int64(150 * time.Millisecond)) // C is not recent: the next Get begins D beside it
	if v, err := f.Get(); err != nil || v != "a" {
		t.Fatalf("the Get beside C = %q, %v; want a", v, err)
	}
	release() // C ends: it found what D found
	select {
	case <-done:
	case <-time.After(MaxWait + time.Second):
		t.Fatal("the Get that began C did not return")
	}
	eventuallyNoCheck(t, f)
	offset.Store(int64(200 * time.Millisecond)) // 50 ms after D began
	n := stats.Load()
	if v, err := f.Get(); err != nil || v != "a" {
		t.Fatalf("a Get 50 ms after D = %q, %v; want a", v, err)
	}
	eventuallyNoCheck(t, f)
	if got := stats.Load() - n; got != 0 {
		t.Fatalf("a Get 50 ms (File clock; a few ms real) after D began, a look that was taken and found what C found, made %d stats; want 0 (C's end put its own beginning, 200 ms old, in the state in place of D's)", got)
	}
}

// adversary 54b: the file (unchanged) was read at +0. C begins at
// +990 ms and reuses that value (its read is fresh); D begins beside it at
// +1100 ms and reads the file again (RecheckInterval). D ends, then C, with
// the same: the state is C's, whose value was read at +0, not D's read at
// +1100 ms. The next look (+1150 ms) reads the unchanged file again, 50 ms
// after D read it. (Not a regression: before the change C's end cleared
// the state, and the next look read.)
func TestAnUnchangedFileReadByALookBesideAnOlderOneThatEndedLaterWithTheSameIsNotReadAgainAtTheNextLook(t *testing.T) {
	f, offset, _, reads, began, release := adv54bFile(t, "a", fileID{ino: 7, size: 1}, 2)
	if v, err := f.Get(); err != nil || v != "a" { // the read at +0 (the set-up's look is old)
		t.Fatalf("the first Get = %q, %v; want a", v, err)
	}
	eventuallyNoCheck(t, f)
	offset.Store(int64(990 * time.Millisecond))
	done := make(chan struct{})
	go func() { _, _ = f.Get(); close(done) }() // begins C: it will reuse the read of +0
	<-began
	offset.Store(int64(1100 * time.Millisecond)) // C is not recent: the next Get begins D beside it
	n := reads.Load()
	if v, err := f.Get(); err != nil || v != "a" {
		t.Fatalf("the Get beside C = %q, %v; want a", v, err)
	}
	if got := reads.Load() - n; got != 1 {
		t.Fatalf("D made %d reads; want 1 (the read of +0 is RecheckInterval old)", got)
	}
	release() // C ends: it found what D found, without a read
	select {
	case <-done:
	case <-time.After(MaxWait + time.Second):
		t.Fatal("the Get that began C did not return")
	}
	eventuallyNoCheck(t, f)
	offset.Store(int64(1150 * time.Millisecond)) // C is not recent: the next Get looks
	n = reads.Load()
	if v, err := f.Get(); err != nil || v != "a" {
		t.Fatalf("a Get at +1150 ms = %q, %v; want a", v, err)
	}
	eventuallyNoCheck(t, f)
	if got := reads.Load() - n; got != 0 {
		t.Fatalf("the look at +1150 ms made %d reads of the unchanged file; want 0 (D read it at +1100 ms, and found what C found; C's end put C's value, read at +0, in the state in place of D's)", got)
	}
}

// adversary 54b: a mount whose stats and reads take 0-200 ms at random
// (looks beside each other, ending in any order, most finding the same);
// the file is rewritten every 30-120 ms, half of the times in place where
// a stat cannot tell (the same fileID), half by rename (another inode).
// Eight goroutines Get for 3 s: no Get returns an older version than one
// a Get returned before it began (order by a counter taken before each
// Get and after it returns).
func TestNoGetReturnsAnOlderVersionThanOneReturnedBeforeItBeganWhileSlowLooksFindTheSameOrInPlaceRewrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		version int
		id      = fileID{ino: 1, size: 1}
		rng     = rand.New(rand.NewSource(time.Now().UnixNano()))
	)
	pause := func() {
		mu.Lock()
		d := time.Duration(rng.Int63n(int64(200 * time.Millisecond)))
		mu.Unlock()
		time.Sleep(d)
	}
	f.mu.Lock()
	f.stat = func(key, p string) (fileID, error) {
		pause()
		mu.Lock()
		defer mu.Unlock()
		return id, nil
	}
	f.read = func(key, p string) (string, fileID, error) {
		pause()
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
			d := 30*time.Millisecond + time.Duration(rng.Int63n(int64(90*time.Millisecond)))
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(d):
			}
			mu.Lock()
			version++
			if rng.Intn(2) == 0 {
				id.ino++ // a rename
			}
			mu.Unlock()
		}
	}()
	type get struct {
		begin, end int64
		v          int
	}
	var (
		ctr  atomic.Int64
		gmu  sync.Mutex
		gets []get
	)
	deadline := time.Now().Add(3 * time.Second)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				b := ctr.Add(1)
				s, err := f.Get()
				e := ctr.Add(1)
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
				gets = append(gets, get{b, e, v})
				gmu.Unlock()
				time.Sleep(time.Duration(i) * 5 * time.Millisecond)
			}
		}()
	}
	time.Sleep(time.Until(deadline))
	close(stop)
	wg.Wait()
	eventuallyNoCheck(t, f)
	ends := append([]get(nil), gets...)
	sort.Slice(ends, func(i, j int) bool { return ends[i].end < ends[j].end })
	prefix := make([]int, len(ends)) // the newest version returned by ends[:i+1]
	for i, o := range ends {
		prefix[i] = o.v
		if i > 0 {
			prefix[i] = max(prefix[i], prefix[i-1])
		}
	}
	bad := 0
	for _, g := range gets {
		n := sort.Search(len(ends), func(i int) bool { return ends[i].end >= g.begin }) // returned before g began
		if n == 0 {
			continue
		}
		if newest := prefix[n-1]; g.v < newest {
			if bad++; bad <= 3 {
				t.Errorf("a Get returned version %d; a Get returned %d before it began", g.v, newest)
			}
		}
	}
	if bad > 0 || len(gets) < 50 {
		t.Fatalf("%d of %d Gets returned an older version than one returned before they began", bad, len(gets))
	}
	t.Logf("%d Gets, none older", len(gets))
}
