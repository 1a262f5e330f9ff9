//go:build linux

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

// adv55dGate is a channel closed once (release), and one closed when what
// it holds arrived (began).
type adv55dGate struct {
	began, open chan struct{}
	once        sync.Once
}

func newAdv55dGate(t *testing.T) *adv55dGate {
	g := &adv55dGate{began: make(chan struct{}), open: make(chan struct{})}
	t.Cleanup(g.release)
	return g
}

func (g *adv55dGate) release() { g.once.Do(func() { close(g.open) }) }

// adversary 55d: liveness of 57a0163's patience, a look whose duration
// changes. Every look reads (each stat tells another file); the File's
// clock stands still, so recency is real time. Look X (Get A) takes 0.67 s;
// 600 ms into it Get B finds it not recent and begins look C beside it;
// X ends (Get A: v1), and the secret is rotated (v2). Get G, begun 60 ms
// after C began, finds C unable to answer it (X ended while C ran), not
// mixed: it waits for C "as long as looks take", 1.5 x X's 0.67 s, capped
// at HungAfter: until C is 1 s old. Only then does it begin look D, which
// takes 1.3 s (like C's 1.05 s, within ~1.5 s: a mount slowing down). C
// ends with v2 (X found v1: not taken, no state) and cannot answer G; D
// ends 2.3 s after C began, 2.24 s after G began: G fails "did not
// answer within 2s", though every look of the mount answered within
// 1.3 s. (Before 57a0163, G began D at once: v2 within 1.3 s.) The
// patience, 1.5 x the last look, plus the look begun after it, is up to
// HungAfter + a look: past MaxWait for any look slower than MaxWait -
// HungAfter (1 s).
func TestAGetBesideALookThatCannotAnswerItDoesNotFailAfterASlowLookOnAMountAnsweringWithin1300ms(t *testing.T) {
	f := adv53aNewFile(t)
	x, c := newAdv55dGate(t), newAdv55dGate(t)
	var stats, version atomic.Int64
	version.Store(1)
	base := time.Now().Add(time.Hour) // the set-up's look is old; the clock stands still
	f.mu.Lock()
	f.now = func() time.Time { return base }
	f.stat = func(key, p string) (fileID, error) {
		n := stats.Add(1)
		switch n {
		case 1:
			close(x.began)
			<-x.open
		case 2:
			close(c.began)
			<-c.open
		default:
			time.Sleep(1300 * time.Millisecond)
		}
		return fileID{ino: 1, size: -n}, nil // another file each time: every look reads
	}
	f.read = func(key, p string) (string, fileID, error) {
		v := version.Load()
		return fmt.Sprintf("v%d", v), fileID{ino: 1, size: v}, nil
	}
	f.mu.Unlock()

	a := adv52aGet(f) // X: stat 1
	adv53aWait(t, x.began, "X's stat")
	xAt := time.Now()
	time.Sleep(600 * time.Millisecond)
	b := adv52aGet(f) // X is not recent: C, stat 2, beside it
	adv53aWait(t, c.began, "C's stat")
	cAt := time.Now()
	time.Sleep(time.Until(xAt.Add(670 * time.Millisecond)))
	x.release() // X (0.67 s) reads v1 and ends: taken; lastLook 0.67 s: patience min(HungAfter, 1 s)
	if r := adv53aRecv(t, a, "Get A"); r.err != nil || r.v != "v1" {
		t.Fatalf("setup: Get A = %q, %v; want v1", r.v, r.err)
	}
	version.Store(2) // rotated: C and every later look read v2
	if since := time.Since(cAt); since > 90*time.Millisecond {
		t.Skipf("setup too slow (a loaded machine): Get G would begin %v after C", since)
	}
	g0 := time.Now()
	g := adv52aGet(f)
	time.Sleep(time.Until(cAt.Add(1050 * time.Millisecond)))
	c.release() // C (1.05 s) reads v2 and ends: not taken (X found v1); it cannot answer G
	if r := adv53aRecv(t, b, "Get B"); r.err != nil || r.v != "v2" {
		t.Fatalf("setup: Get B = %q, %v; want v2", r.v, r.err)
	}
	rg := adv53aRecv(t, g, "Get G")
	took := time.Since(g0)
	eventuallyNoCheck(t, f)
	if rg.err != nil || rg.v != "v2" {
		t.Fatalf("Get G (begun %v after look C, just after look X ended) = %q, %v after %v; want v2 within MaxWait: every look answered within 1.3 s, but G waited for C, which could not answer it, 1.5 x X's 0.67 s (to HungAfter) before beginning its own 1.3 s look (%d stats)", g0.Sub(cAt), rg.v, rg.err, took, stats.Load())
	}
}

// adversary 55d (holds): 06623ab with 8f4d43c and 57a0163 on a file
// rewritten in place (the stat never changes, the real clock), its
// versions alternating between a secret (even k: "k") and an empty file
// (odd k: a read's refusal, the same text for every empty version, as
// read makes it), rewritten every 300-700 ms, on a mount whose stats and
// reads each wait 0-200 ms before and after (slow looks beside each
// other, most finding the same, reusing reads and refusals), Gets every
// 2 ms for 5 s: every Get begun StatInterval after RecheckInterval after
// the last read begun before a rewrite (or after the rewrite, if later)
// returns that version or a later one - a kept refusal is read again like
// a value; and no Get returns an older secret than one returned before it
// began, nor "empty" once a Get returned a secret written after every
// empty version that was written before it ended.
func TestAnInPlaceRewriteBetweenASecretAndAnEmptyFileIsReadAgainWithinRecheckIntervalWhileSlowLooksReuseRefusals(t *testing.T) {
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
		if version%2 == 1 {
			return "", id, &contentError{key + ": /run/secrets/token is empty"}
		}
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
		began, ended time.Time
		v            int // -1: empty
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
			e := time.Now()
			v := -1
			switch {
			case err != nil && strings.HasSuffix(err.Error(), " is empty"):
			case err != nil:
				t.Errorf("Get: %v", err)
				return
			default:
				n, cerr := strconv.Atoi(s)
				if cerr != nil {
					t.Errorf("Get = %q", s)
					return
				}
				v = n
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
	// emptyBy(t): the newest empty version written by t (0: none).
	emptyBy := func(at time.Time) int {
		n := 0
		for k, w := range writes {
			if (k+1)%2 == 1 && w.Before(at) {
				n = k + 1
			}
		}
		return n
	}
	stale, older := 0, 0
	for _, r := range rets {
		k := 0
		for i := range due {
			if !r.began.Before(due[i]) {
				k = i + 1
			}
		}
		var bad bool
		if r.v >= 0 {
			bad = r.v < k
		} else {
			bad = k%2 == 0 && emptyBy(r.ended) < k // a secret was due and no empty version came after it
		}
		if bad {
			if stale++; stale <= 3 {
				t.Errorf("a Get begun %v after version %d was due (written %v before it) returned %d (-1: empty)", r.began.Sub(due[k-1]), k, r.began.Sub(writes[k-1]), r.v)
			}
		}
		for _, q := range rets { // q returned before r began
			if !q.ended.Before(r.began) || q.v < 0 {
				continue
			}
			if (r.v >= 0 && r.v < q.v) || (r.v < 0 && emptyBy(r.ended) < q.v) {
				if older++; older <= 3 {
					t.Errorf("a Get returned %d (-1: empty); a Get returned secret %d before it began", r.v, q.v)
				}
				break
			}
		}
	}
	if stale > 0 || older > 0 || len(writes) < 6 {
		t.Fatalf("%d of %d Gets returned a version (secret or empty) rewritten in place RecheckInterval after the last read before the rewrite, StatInterval before they began; %d an older one than a Get returned before they began (%d writes, %d reads)", stale, len(rets), older, len(writes), len(reads))
	}
	t.Logf("%d Gets, %d writes, %d reads: none stale or older", len(rets), len(writes), len(reads))
}

// adversary 55d: 8f4d43c with 06623ab - two refusals of different files
// are "the same" (outcome.same compares an error's text only, and a
// refusal's text names the path, not the file), so the state's refusal
// of one file takes the other file's read as its readAt. The path is a
// symlink toggled between two directories (blue/green; os.Stat follows
// it, and the file of the directory not in use is unchanged, the same
// inode and change time, when the link comes back to it). Both files are
// empty. +0: a look reads blue (refused). The link goes to green; +500:
// look C reads green (refused), its read slow. The link goes back to
// blue; +600: look S (C is not recent) finds blue unchanged and reuses the
// refusal of +0; S ends (taken). C ends: its refusal has S's text, so it
// is kept as S's, and 8f4d43c gives the state - blue's refusal - C's
// read of green, +500, as its readAt. +700: blue is rewritten in place
// (the stat cannot tell) with a secret. +1150: a look finds blue
// unchanged and reuses the refusal (read "at +500"), though blue was last
// read at +0, 1150 ms before: the secret is not read until +1500, past
// RecheckInterval after the last read of the file ("at least every
// RecheckInterval ... after the last read of it by any look").
func TestARefusalOfOneFileIsNotKeptPastRecheckIntervalByTheReadOfAnotherFileWithTheSameRefusal(t *testing.T) {
	f := adv53aNewFile(t)
	blue, green := fileID{ino: 11, size: 1}, fileID{ino: 12, size: 1}
	var (
		mu        sync.Mutex
		target    = blue // the file the path names now
		blueHolds string // "": empty
		held      *adv55dGate
		reads     atomic.Int64
		offset    atomic.Int64
	)
	base := time.Now().Add(time.Hour) // the set-up's look is old
	f.mu.Lock()
	f.now = func() time.Time { return base.Add(time.Duration(offset.Load())) }
	f.stat = func(key, p string) (fileID, error) {
		mu.Lock()
		defer mu.Unlock()
		return target, nil
	}
	f.read = func(key, p string) (string, fileID, error) {
		reads.Add(1)
		mu.Lock()
		id, v, g := target, "", held
		if target == blue {
			v = blueHolds
		}
		held = nil
		mu.Unlock()
		if g != nil { // what it read is decided; it answers late
			close(g.began)
			<-g.open
		}
		if v == "" {
			return "", id, &contentError{fmt.Sprintf("%s: %s is empty", key, p)}
		}
		return v, id, nil
	}
	f.mu.Unlock()
	isEmpty := func(err error) bool { return err != nil && strings.HasSuffix(err.Error(), " is empty") }

	if v, err := f.Get(); !isEmpty(err) { // +0: blue read, refused
		t.Fatalf("setup: a Get at +0 = %q, %v; want blue's refusal (empty)", v, err)
	}
	eventuallyNoCheck(t, f)
	c := newAdv55dGate(t)
	mu.Lock()
	target, held = green, c
	mu.Unlock()
	adv55bAt(&offset, 500)
	gc := adv52aGet(f) // C reads green, refused, and answers late
	adv53aWait(t, c.began, "C's read of green")
	mu.Lock()
	target = blue // the link back to blue, unchanged
	mu.Unlock()
	adv55bAt(&offset, 600) // C is not recent: S begins beside it
	n := reads.Load()
	if v, err := f.Get(); !isEmpty(err) {
		t.Fatalf("setup: a Get at +600 = %q, %v; want blue's refusal (empty)", v, err)
	}
	if got := reads.Load() - n; got != 0 {
		t.Fatalf("setup: look S made %d reads; want 0 (blue unchanged, refused at +0)", got)
	}
	c.release()
	if r := adv53aRecv(t, gc, "C's Get"); !isEmpty(r.err) {
		t.Fatalf("setup: C's Get = %q, %v; want green's refusal (empty)", r.v, r.err)
	}
	eventuallyNoCheck(t, f)
	adv55bAt(&offset, 700)
	mu.Lock()
	blueHolds = "the-secret" // blue rewritten in place: the stat cannot tell
	mu.Unlock()
	adv55bAt(&offset, 1150) // StatInterval past RecheckInterval after blue's last read (+0)
	n = reads.Load()
	v, err := f.Get()
	eventuallyNoCheck(t, f)
	if err != nil || v != "the-secret" {
		t.Fatalf("a Get at +1150 = %q, %v (%d reads); want the-secret: blue, rewritten in place at +700, was last read at +0, 1150 ms before, but its refusal was kept with green's read of +500 as its readAt (the refusals' texts are the same)", v, err, reads.Load()-n)
	}
}

// adversary 55d (holds): the readAt a look keeps is when the look began,
// not when its read ended, so a read that began before an in-place
// rewrite and ended after it (returning the old content) does not make
// the old value fresh past RecheckInterval after that read began, even
// when 8f4d43c keeps the later of two such reads beside each other. The
// file (one id: the stat cannot tell) was read at +0 (v1). +1000: look A
// reads (its state is old), its read held; +1150: look B (A not recent)
// reads too, held. +1200: the file is rewritten in place (v2); both reads
// return v1, B first (taken), then A (the same: B's later read kept). A
// Get at +2260 (StatInterval past RecheckInterval after B's read began)
// returns v2.
func TestAReadThatBeganBeforeAnInPlaceRewriteAndEndedAfterItIsNotFreshPastRecheckIntervalAfterItBegan(t *testing.T) {
	id := fileID{ino: 5, size: 2}
	f, offset, _, _, _ := adv55bFile(t, "v1", id, nil)
	var (
		mu      sync.Mutex
		version = 1
		gates   []*adv55dGate // the reads to hold, in order
	)
	f.mu.Lock()
	f.read = func(key, p string) (string, fileID, error) {
		mu.Lock()
		v := fmt.Sprintf("v%d", version)
		var g *adv55dGate
		if len(gates) > 0 {
			g, gates = gates[0], gates[1:]
		}
		mu.Unlock()
		if g != nil { // read at its call; it returns late
			close(g.began)
			<-g.open
		}
		return v, id, nil
	}
	f.mu.Unlock()
	if v, err := f.Get(); err != nil || v != "v1" { // +0: read
		t.Fatalf("setup: a Get at +0 = %q, %v; want v1", v, err)
	}
	eventuallyNoCheck(t, f)
	a, b := newAdv55dGate(t), newAdv55dGate(t)
	mu.Lock()
	gates = []*adv55dGate{a, b}
	mu.Unlock()
	adv55bAt(offset, 1000)
	ga := adv52aGet(f)
	adv53aWait(t, a.began, "A's read")
	adv55bAt(offset, 1150)
	gb := adv52aGet(f)
	adv53aWait(t, b.began, "B's read")
	adv55bAt(offset, 1200)
	mu.Lock()
	version = 2 // rewritten in place
	mu.Unlock()
	b.release()
	if r := adv53aRecv(t, gb, "B's Get"); r.err != nil || r.v != "v1" {
		t.Fatalf("setup: B's Get = %q, %v; want v1", r.v, r.err)
	}
	a.release()
	if r := adv53aRecv(t, ga, "A's Get"); r.err != nil || r.v != "v1" {
		t.Fatalf("setup: A's Get = %q, %v; want v1", r.v, r.err)
	}
	eventuallyNoCheck(t, f)
	adv55bAt(offset, 2260)
	if v, err := f.Get(); err != nil || v != "v2" {
		t.Fatalf("a Get at +2260 = %q, %v; want v2 (rewritten in place at +1200; the last reads before it began at +1000 and +1150)", v, err)
	}
}

// adversary 55d (holds): 06623ab reuses only a refusal that carries the
// file it read: a stand-in read that refuses without saying what file it
// read (fileID{}), with a stat that tells nothing either (fileID{}), is
// read again at every look, not reused as a refusal of "the same file".
func TestARefusalWithoutAFileIsReadAgainAtEveryLook(t *testing.T) {
	f, offset, _, reads, _ := adv55bFile(t, "a", fileID{}, nil)
	f.mu.Lock()
	f.read = func(key, p string) (string, fileID, error) {
		reads.Add(1)
		return "", fileID{}, &contentError{key + ": " + p + " is empty"}
	}
	f.mu.Unlock()
	n := reads.Load()
	for i := 1; i <= 5; i++ {
		adv55bAt(offset, 200*i) // each Get looks (the last look is StatInterval old), within RecheckInterval of the first read
		if _, err := f.Get(); err == nil {
			t.Fatalf("Get %d returned no error", i)
		}
	}
	eventuallyNoCheck(t, f)
	if got := reads.Load() - n; got != 5 {
		t.Fatalf("5 looks made %d reads; want 5: a refusal that names no file may be another file's", got)
	}
}

// adversary 55d (holds): a symlink toggled between two directories
// (blue/green), the directory not in use rewritten by rename before the
// link comes to it, its versions alternating a secret (even k) and an
// empty file (odd k: refusals, the same text for every empty file, which
// 06623ab reuses and 8f4d43c keeps as "the same" across files), toggled
// every 150-400 ms; real files and the real clock, stats and reads each
// waiting 0-150 ms before and after, Gets every 2 ms for 4 s: every Get
// begun StatInterval after a toggle returns that version or a later one,
// none returns an older secret than one returned before it began (nor
// "empty" once a secret newer than every empty version written before it
// ended was returned), and every Get returns within MaxWait + 100 ms.
func TestAToggledSymlinkBetweenASecretAndEmptyFilesIsSeenWithinStatIntervalAndNeverGoesBack(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"blue", "green"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "blue", "token"), []byte("0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("blue", filepath.Join(dir, "current")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "current", "token")
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	var rmu sync.Mutex
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	pause := func() {
		rmu.Lock()
		d := time.Duration(rng.Int63n(int64(150 * time.Millisecond)))
		rmu.Unlock()
		time.Sleep(d)
	}
	f.mu.Lock()
	f.now = time.Now
	f.stat = func(key, p string) (fileID, error) {
		pause()
		defer pause()
		return stat(key, p)
	}
	f.read = func(key, p string) (string, fileID, error) {
		pause()
		defer pause()
		return read(key, p)
	}
	f.mu.Unlock()
	var (
		vmu     sync.Mutex
		toggled []time.Time // toggled[k-1]: when the link came to version k
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
			to := []string{"blue", "green"}[k%2]
			content := strconv.Itoa(k) + "\n"
			if k%2 == 1 {
				content = "\n"
			}
			tmp := filepath.Join(dir, to, "tmp")
			if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
				t.Error(err)
				return
			}
			if err := os.Rename(tmp, filepath.Join(dir, to, "token")); err != nil {
				t.Error(err)
				return
			}
			link := filepath.Join(dir, "link.tmp")
			if err := os.Symlink(to, link); err != nil {
				t.Error(err)
				return
			}
			if err := os.Rename(link, filepath.Join(dir, "current")); err != nil {
				t.Error(err)
				return
			}
			vmu.Lock()
			toggled = append(toggled, time.Now())
			vmu.Unlock()
		}
	}()
	type ret struct {
		began, ended time.Time
		v            int // -1: empty
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
			if e.Sub(b) > MaxWait+100*time.Millisecond {
				t.Errorf("a Get took %v", e.Sub(b))
			}
			v := -1
			switch {
			case err != nil && strings.HasSuffix(err.Error(), " is empty"):
			case err != nil:
				t.Errorf("Get: %v", err)
				return
			default:
				n, cerr := strconv.Atoi(s)
				if cerr != nil {
					t.Errorf("Get = %q", s)
					return
				}
				v = n
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
	emptyBy := func(at time.Time) int { // the newest empty version the link came to by at
		n := 0
		for k, w := range toggled {
			if (k+1)%2 == 1 && w.Before(at) {
				n = k + 1
			}
		}
		return n
	}
	stale, older := 0, 0
	for _, r := range rets {
		k := 0
		for i, at := range toggled {
			if !at.Add(StatInterval).After(r.began) {
				k = i + 1
			}
		}
		var bad bool
		if r.v >= 0 {
			bad = r.v < k
		} else {
			bad = k%2 == 0 && emptyBy(r.ended) < k
		}
		if bad {
			if stale++; stale <= 3 {
				t.Errorf("a Get begun %v after the link came to version %d returned %d (-1: empty)", r.began.Sub(toggled[k-1]), k, r.v)
			}
		}
		for _, q := range rets {
			if !q.ended.Before(r.began) || q.v < 0 {
				continue
			}
			if (r.v >= 0 && r.v < q.v) || (r.v < 0 && emptyBy(r.ended) < q.v) {
				if older++; older <= 3 {
					t.Errorf("a Get returned %d (-1: empty); a Get returned secret %d before it began", r.v, q.v)
				}
				break
			}
		}
	}
	if stale > 0 || older > 0 || len(toggled) < 8 {
		t.Fatalf("%d of %d Gets returned a version the link left StatInterval before they began, %d an older one than a Get returned before they began (%d toggles)", stale, len(rets), older, len(toggled))
	}
	t.Logf("%d Gets, %d toggles: none stale or older", len(rets), len(toggled))
}
