//go:build linux

package secretfile

import (
	"errors"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// adv55eFile is a File on no real file: stat and rd stand for the mount.
func adv55eFile(stat func(key, path string) (fileID, error), rd func(key, path string) (string, fileID, error)) *File {
	return &File{key: "token_file", path: "/adv55e/token", now: time.Now, read: rd, stat: stat, changed: make(chan struct{})}
}

// adversary 55e: a mount whose looks each take between 5 ms and 1.6 s,
// chosen at random per look (so that lastLook, and with it a Get's
// patience for a look that cannot answer it, changes all the time), while
// the file is replaced by rename every 40 ms (looks beside each other find
// otherwise: mixed flips while Gets wait), with 8 Gets at a time for 6 s:
// every Get returns a secret within MaxWait + slack, never more than
// maxChecks looks are in progress, and none is left once the Gets stop.
func TestEveryGetReturnsWithinMaxWaitOnAMountWhoseLookDurationsChangeWhileTheFileIsReplaced(t *testing.T) {
	var gen atomic.Int64
	stop := make(chan struct{})
	var flips sync.WaitGroup
	flips.Add(1)
	go func() {
		defer flips.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(40 * time.Millisecond):
				gen.Add(1)
			}
		}
	}()
	idOfGen := func(g int64) fileID { return fileID{size: 8, ino: uint64(g + 1)} }
	var inFlight, maxInFlight atomic.Int64
	var rmu sync.Mutex
	rng := rand.New(rand.NewSource(55))
	durations := []time.Duration{5 * time.Millisecond, 150 * time.Millisecond, 600 * time.Millisecond, 1600 * time.Millisecond}
	pick := func() time.Duration {
		rmu.Lock()
		defer rmu.Unlock()
		return durations[rng.Intn(len(durations))]
	}
	stat := func(key, path string) (fileID, error) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := maxInFlight.Load()
			if n <= m || maxInFlight.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(pick())
		return idOfGen(gen.Load()), nil
	}
	rd := func(key, path string) (string, fileID, error) {
		g := gen.Load()
		return "secret-" + string(rune('a'+g%26)), idOfGen(g), nil
	}
	f := adv55eFile(stat, rd)
	deadline := time.Now().Add(6 * time.Second)
	var wg sync.WaitGroup
	var slow, failed atomic.Int64
	var worst atomic.Int64
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(i)))
			for time.Now().Before(deadline) {
				begin := time.Now()
				v, err := f.Get()
				took := time.Since(begin)
				for {
					w := worst.Load()
					if int64(took) <= w || worst.CompareAndSwap(w, int64(took)) {
						break
					}
				}
				if took > MaxWait+300*time.Millisecond {
					slow.Add(1)
					t.Errorf("a Get took %v (MaxWait %v)", took, MaxWait)
				}
				if err != nil || !strings.HasPrefix(v, "secret-") {
					failed.Add(1)
					t.Errorf("a Get after %v: %q, %v", took, v, err)
				}
				time.Sleep(time.Duration(r.Intn(60)) * time.Millisecond)
			}
		}(i)
	}
	wg.Wait()
	close(stop)
	flips.Wait()
	t.Logf("worst Get %v; at most %d looks at once", time.Duration(worst.Load()), maxInFlight.Load())
	if m := maxInFlight.Load(); m > maxChecks {
		t.Errorf("%d looks in progress at once, want at most %d", m, maxChecks)
	}
	end := time.Now().Add(MaxWait)
	for {
		f.mu.Lock()
		n := len(f.checks)
		f.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("%d looks still in progress %v after the last Get", n, MaxWait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// adversary 55e: the file is replaced by rename every 30 ms (generation n:
// value "gen-n", inode n); each stat takes 1 ms to 400 ms at random and
// looks at random early or late in that time; reads take 0 to 120 ms and
// read the file of their moment. 8 Gets at a time for 5 s: no Get returns
// an older generation than a Get that returned before it began
// (monotonicity), and none an older one than the path named StatInterval
// (+ 15 ms slack) before it began (freshness).
func TestGetsNeverGoBackAndSeeARenameWithinStatIntervalOnAMountWithRandomLookTimes(t *testing.T) {
	var mu sync.Mutex
	var genAt []time.Time // genAt[n]: when generation n began
	genAt = append(genAt, time.Now())
	cur := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(genAt) - 1
	}
	genBefore := func(at time.Time) int { // the generation the path named at at
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for i, s := range genAt {
			if !s.After(at) {
				n = i
			}
		}
		return n
	}
	stop := make(chan struct{})
	var flips sync.WaitGroup
	flips.Add(1)
	go func() {
		defer flips.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(30 * time.Millisecond):
				mu.Lock()
				genAt = append(genAt, time.Now())
				mu.Unlock()
			}
		}
	}()
	idOfGen := func(g int) fileID { return fileID{size: 8, ino: uint64(g + 1)} }
	var rmu sync.Mutex
	rng := rand.New(rand.NewSource(5505))
	rnd := func(n int) int {
		rmu.Lock()
		defer rmu.Unlock()
		return rng.Intn(n)
	}
	statTimes := []time.Duration{time.Millisecond, 80 * time.Millisecond, 150 * time.Millisecond, 400 * time.Millisecond}
	stat := func(key, path string) (fileID, error) {
		d := statTimes[rnd(len(statTimes))]
		if rnd(2) == 0 {
			id := idOfGen(cur())
			time.Sleep(d)
			return id, nil
		}
		time.Sleep(d)
		return idOfGen(cur()), nil
	}
	rd := func(key, path string) (string, fileID, error) {
		time.Sleep(time.Duration(rnd(120)) * time.Millisecond)
		g := cur()
		return "gen-" + itoa55e(g), idOfGen(g), nil
	}
	f := adv55eFile(stat, rd)
	type ret struct {
		begin, end time.Time
		gen        int
	}
	var rmu2 sync.Mutex
	var rets []ret
	deadline := time.Now().Add(5 * time.Second)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(100 + i)))
			for time.Now().Before(deadline) {
				begin := time.Now()
				v, err := f.Get()
				end := time.Now()
				if err != nil {
					t.Errorf("Get: %v", err)
				} else {
					g := atoi55e(strings.TrimPrefix(v, "gen-"))
					rmu2.Lock()
					rets = append(rets, ret{begin, end, g})
					rmu2.Unlock()
					if want := genBefore(begin.Add(-StatInterval - 15*time.Millisecond)); g < want {
						t.Errorf("a Get begun at %v returned generation %d; the path named %d StatInterval before", begin.Format("05.000"), g, want)
					}
				}
				time.Sleep(time.Duration(r.Intn(40)) * time.Millisecond)
			}
		}(i)
	}
	wg.Wait()
	close(stop)
	flips.Wait()
	bad := 0
	for _, b := range rets {
		for _, a := range rets {
			if a.end.Before(b.begin) && b.gen < a.gen {
				bad++
				if bad <= 5 {
					t.Errorf("a Get begun at %v returned generation %d; one that returned at %v had returned %d", b.begin.Format("05.000"), b.gen, a.end.Format("05.000"), a.gen)
				}
			}
		}
	}
	t.Logf("%d Gets, %d generations, %d go back", len(rets), cur(), bad)
}

// adversary 55e: as above, but generation n is a value (n%4 0 or 3), a
// refusal of what the file holds (1: its text names the generation), or an
// error of the file system (2); each stat takes 1 ms to 400 ms at random and
// looks at random early or late in that time; reads take 0 to 120 ms and
// read the file of their moment. 8 Gets at a time for 5 s: no Get returns
// an older generation than a Get that returned before it began
// (monotonicity), and none an older one than the path named StatInterval
// (+ 15 ms slack) before it began (freshness).
func TestGetsNeverGoBackAcrossValuesRefusalsAndErrorsOnAMountWithRandomLookTimes(t *testing.T) {
	var mu sync.Mutex
	var genAt []time.Time // genAt[n]: when generation n began
	genAt = append(genAt, time.Now())
	cur := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(genAt) - 1
	}
	genBefore := func(at time.Time) int { // the generation the path named at at
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for i, s := range genAt {
			if !s.After(at) {
				n = i
			}
		}
		return n
	}
	stop := make(chan struct{})
	var flips sync.WaitGroup
	flips.Add(1)
	go func() {
		defer flips.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(30 * time.Millisecond):
				mu.Lock()
				genAt = append(genAt, time.Now())
				mu.Unlock()
			}
		}
	}()
	idOfGen := func(g int) fileID { return fileID{size: 8, ino: uint64(g + 1)} }
	var rmu sync.Mutex
	rng := rand.New(rand.NewSource(5505))
	rnd := func(n int) int {
		rmu.Lock()
		defer rmu.Unlock()
		return rng.Intn(n)
	}
	statTimes := []time.Duration{time.Millisecond, 80 * time.Millisecond, 150 * time.Millisecond, 400 * time.Millisecond}
	stat := func(key, path string) (fileID, error) {
		d := statTimes[rnd(len(statTimes))]
		if rnd(2) == 0 {
			id := idOfGen(cur())
			time.Sleep(d)
			return id, nil
		}
		time.Sleep(d)
		return idOfGen(cur()), nil
	}
	rd := func(key, path string) (string, fileID, error) {
		time.Sleep(time.Duration(rnd(120)) * time.Millisecond)
		g := cur()
		switch g % 4 {
		case 1:
			return "", idOfGen(g), &contentError{"gen-" + itoa55e(g) + " is empty"}
		case 2:
			return "", fileID{}, errors.New("gen-" + itoa55e(g) + " cannot be read")
		}
		return "gen-" + itoa55e(g), idOfGen(g), nil
	}
	f := adv55eFile(stat, rd)
	type ret struct {
		begin, end time.Time
		gen        int
	}
	var rmu2 sync.Mutex
	var rets []ret
	deadline := time.Now().Add(5 * time.Second)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(100 + i)))
			for time.Now().Before(deadline) {
				begin := time.Now()
				v, err := f.Get()
				end := time.Now()
				if err != nil {
					v = strings.Fields(err.Error())[0]
				}
				if !strings.HasPrefix(v, "gen-") {
					t.Errorf("Get: %q, %v", v, err)
				} else {
					g := atoi55e(strings.TrimPrefix(v, "gen-"))
					rmu2.Lock()
					rets = append(rets, ret{begin, end, g})
					rmu2.Unlock()
					if want := genBefore(begin.Add(-StatInterval - 15*time.Millisecond)); g < want {
						t.Errorf("a Get begun at %v returned generation %d; the path named %d StatInterval before", begin.Format("05.000"), g, want)
					}
				}
				time.Sleep(time.Duration(r.Intn(40)) * time.Millisecond)
			}
		}(i)
	}
	wg.Wait()
	close(stop)
	flips.Wait()
	bad := 0
	for _, b := range rets {
		for _, a := range rets {
			if a.end.Before(b.begin) && b.gen < a.gen {
				bad++
				if bad <= 5 {
					t.Errorf("a Get begun at %v returned generation %d; one that returned at %v had returned %d", b.begin.Format("05.000"), b.gen, a.end.Format("05.000"), a.gen)
				}
			}
		}
	}
	t.Logf("%d Gets, %d generations, %d go back", len(rets), cur(), bad)
}

// adversary 55e: the file is rewritten in place every 30 ms with its stat
// unchanged (generation n: value "gen-n"); each stat takes 1 ms to 400 ms at random and
// looks at random early or late in that time; reads take 0 to 120 ms and
// read the file of their moment. 8 Gets at a time for 5 s: no Get returns
// an older generation than a Get that returned before it began
// (monotonicity), and none older than the file held RecheckInterval +
// StatInterval + a look (550 ms) before it began (freshness).
func TestGetsNeverGoBackWhenTheFileIsRewrittenInPlaceOnAMountWithRandomLookTimes(t *testing.T) {
	var mu sync.Mutex
	var genAt []time.Time // genAt[n]: when generation n began
	genAt = append(genAt, time.Now())
	cur := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(genAt) - 1
	}
	genBefore := func(at time.Time) int { // the generation the path named at at
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for i, s := range genAt {
			if !s.After(at) {
				n = i
			}
		}
		return n
	}
	stop := make(chan struct{})
	var flips sync.WaitGroup
	flips.Add(1)
	go func() {
		defer flips.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(30 * time.Millisecond):
				mu.Lock()
				genAt = append(genAt, time.Now())
				mu.Unlock()
			}
		}
	}()
	idOfGen := func(int) fileID { return fileID{size: 8, ino: 1} } // the stat never changes
	var rmu sync.Mutex
	rng := rand.New(rand.NewSource(5505))
	rnd := func(n int) int {
		rmu.Lock()
		defer rmu.Unlock()
		return rng.Intn(n)
	}
	statTimes := []time.Duration{time.Millisecond, 80 * time.Millisecond, 150 * time.Millisecond, 400 * time.Millisecond}
	stat := func(key, path string) (fileID, error) {
		d := statTimes[rnd(len(statTimes))]
		if rnd(2) == 0 {
			id := idOfGen(cur())
			time.Sleep(d)
			return id, nil
		}
		time.Sleep(d)
		return idOfGen(cur()), nil
	}
	rd := func(key, path string) (string, fileID, error) {
		time.Sleep(time.Duration(rnd(120)) * time.Millisecond)
		g := cur()
		return "gen-" + itoa55e(g), idOfGen(g), nil
	}
	f := adv55eFile(stat, rd)
	type ret struct {
		begin, end time.Time
		gen        int
	}
	var rmu2 sync.Mutex
	var rets []ret
	deadline := time.Now().Add(5 * time.Second)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(100 + i)))
			for time.Now().Before(deadline) {
				begin := time.Now()
				v, err := f.Get()
				end := time.Now()
				if err != nil {
					t.Errorf("Get: %v", err)
				} else {
					g := atoi55e(strings.TrimPrefix(v, "gen-"))
					rmu2.Lock()
					rets = append(rets, ret{begin, end, g})
					rmu2.Unlock()
					if want := genBefore(begin.Add(-RecheckInterval - StatInterval - 550*time.Millisecond)); g < want {
						t.Errorf("a Get begun at %v returned generation %d; the file held %d RecheckInterval+StatInterval+a look before", begin.Format("05.000"), g, want)
					}
				}
				time.Sleep(time.Duration(r.Intn(40)) * time.Millisecond)
			}
		}(i)
	}
	wg.Wait()
	close(stop)
	flips.Wait()
	bad := 0
	for _, b := range rets {
		for _, a := range rets {
			if a.end.Before(b.begin) && b.gen < a.gen {
				bad++
				if bad <= 5 {
					t.Errorf("a Get begun at %v returned generation %d; one that returned at %v had returned %d", b.begin.Format("05.000"), b.gen, a.end.Format("05.000"), a.gen)
				}
			}
		}
	}
	t.Logf("%d Gets, %d generations, %d go back", len(rets), cur(), bad)
}

func itoa55e(n int) string {
	if n == 0 {
		return "0"
	}
	s := ""
	for ; n > 0; n /= 10 {
		s = string(rune('0'+n%10)) + s
	}
	return s
}

func atoi55e(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// adversary 55e: an emptied regular file (its refusal reused like a value)
// on a mount whose stats take 10 ms to 300 ms at random, with 6 Gets at a
// time for 4 s: about one look per StatInterval (at most 50) and one read
// per RecheckInterval (at most 4 + 2 for looks beside each other, the
// known limit of maxChecks reads).
func TestAnEmptiedFileOnASlowStatMountCostsAboutOneLookPerStatIntervalAndOneReadPerRecheckInterval(t *testing.T) {
	id := fileID{size: 0, ino: 7}
	var stats, reads atomic.Int64
	var rmu sync.Mutex
	rng := rand.New(rand.NewSource(77))
	stat := func(key, path string) (fileID, error) {
		stats.Add(1)
		rmu.Lock()
		d := time.Duration(10+rng.Intn(290)) * time.Millisecond
		rmu.Unlock()
		time.Sleep(d)
		return id, nil
	}
	rd := func(key, path string) (string, fileID, error) {
		reads.Add(1)
		return "", id, &contentError{"token_file: /adv55e/token is empty"}
	}
	f := adv55eFile(stat, rd)
	deadline := time.Now().Add(4 * time.Second)
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if _, err := f.Get(); err == nil {
					t.Error("an empty file read as a secret")
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d stats, %d reads in 4 s", stats.Load(), reads.Load())
	if n := stats.Load(); n > 50 {
		t.Errorf("%d stats in 4 s, want about one per StatInterval (at most 50)", n)
	}
	if n := reads.Load(); n > 6 {
		t.Errorf("%d reads in 4 s, want about one per RecheckInterval (at most 6)", n)
	}
}

// adversary 55e: a look C begins while the state's read (+0) is fresh
// (+990 by the File clock) and its stat is held; the file is rewritten in
// place (stat unchanged) and a look Q begun at +1100 reads it again (the
// state's read is stale for Q) and is taken; a Get returns the new value.
// Then C's stat returns: C takes the state (a later read of the same file,
// rule 3) and returns the new value too, and a Get after it as well - no
// Get goes back to the value read at +0.
func TestALookWhoseStatOutlastsAnInPlaceRereadBesideItDoesNotGoBack(t *testing.T) {
	id := fileID{size: 8, ino: 3}
	var value atomic.Value
	value.Store("secret-1")
	var offset atomic.Int64
	var reads atomic.Int64
	gate := make(chan struct{})
	began := make(chan struct{})
	var holdNext atomic.Bool
	base := time.Now()
	stat := func(key, path string) (fileID, error) {
		if holdNext.CompareAndSwap(true, false) {
			close(began)
			<-gate
		}
		return id, nil
	}
	rd := func(key, path string) (string, fileID, error) {
		reads.Add(1)
		return value.Load().(string), id, nil
	}
	f := adv55eFile(stat, rd)
	f.mu.Lock()
	f.now = func() time.Time { return base.Add(time.Duration(offset.Load())) }
	f.mu.Unlock()
	if v, err := f.Get(); err != nil || v != "secret-1" {
		t.Fatalf("first Get: %q, %v", v, err)
	}
	offset.Store(int64(990 * time.Millisecond))
	holdNext.Store(true)
	type res struct {
		v   string
		err error
	}
	c := make(chan res, 1)
	go func() {
		v, err := f.Get()
		c <- res{v, err}
	}()
	<-began
	value.Store("secret-2")
	offset.Store(int64(1100 * time.Millisecond))
	if v, err := f.Get(); err != nil || v != "secret-2" {
		t.Fatalf("a Get beside the held look: %q, %v; want secret-2 (read again: RecheckInterval)", v, err)
	}
	close(gate)
	r := <-c
	if r.err != nil {
		t.Fatalf("the held look's Get: %v", r.err)
	}
	t.Logf("the held look's Get (begun before the reread ended): %q", r.v)
	offset.Store(int64(1150 * time.Millisecond))
	if v, err := f.Get(); err != nil || v != "secret-2" {
		t.Fatalf("a Get after both: %q, %v; want secret-2", v, err)
	}
	offset.Store(int64(1300 * time.Millisecond))
	if v, err := f.Get(); err != nil || v != "secret-2" {
		t.Fatalf("a Get after the next look: %q, %v; want secret-2", v, err)
	}
	if n := reads.Load(); n != 2 {
		t.Errorf("%d reads, want 2 (the held look reuses the reread)", n)
	}
}

// adversary 55e: a fast mount, the file rewritten in place (stat
// unchanged) every 70 ms to 700 ms at random, 6 Gets at a time for 5 s:
// a Get begun RecheckInterval + StatInterval + 20 ms after the last read
// before a rewrite returns the rewritten value or a later one.
func TestAnInPlaceRewriteIsSeenByEveryGetBegunRecheckIntervalAfterTheLastReadBeforeIt(t *testing.T) {
	id := fileID{size: 8, ino: 9}
	var mu sync.Mutex
	gen := 0
	var lastRead time.Time
	type rewrite struct {
		gen      int
		lastRead time.Time
	}
	var rewrites []rewrite
	stat := func(key, path string) (fileID, error) { return id, nil }
	rd := func(key, path string) (string, fileID, error) {
		mu.Lock()
		defer mu.Unlock()
		lastRead = time.Now()
		return "gen-" + itoa55e(gen), id, nil
	}
	f := adv55eFile(stat, rd)
	stop := make(chan struct{})
	var w sync.WaitGroup
	w.Add(1)
	go func() {
		defer w.Done()
		r := rand.New(rand.NewSource(9))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(70+r.Intn(630)) * time.Millisecond):
				mu.Lock()
				gen++
				rewrites = append(rewrites, rewrite{gen, lastRead})
				mu.Unlock()
			}
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	var wg sync.WaitGroup
	var bad atomic.Int64
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				begin := time.Now()
				v, err := f.Get()
				if err != nil {
					t.Errorf("Get: %v", err)
					return
				}
				g := atoi55e(strings.TrimPrefix(v, "gen-"))
				mu.Lock()
				want := 0
				for _, rw := range rewrites {
					if !rw.lastRead.IsZero() && begin.Sub(rw.lastRead) > RecheckInterval+StatInterval+20*time.Millisecond {
						want = rw.gen
					}
				}
				mu.Unlock()
				if g < want && bad.Add(1) <= 5 {
					t.Errorf("a Get begun at %v returned generation %d; %d was written after a read more than RecheckInterval+StatInterval before", begin.Format("05.000"), g, want)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	close(stop)
	w.Wait()
}
