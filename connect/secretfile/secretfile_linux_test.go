//go:build linux

package secretfile

import (
	"errors"
	"fmt"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// adversary 51c: a slow mount, whose every read returns but takes longer
// than HungAfter (1.5*HungAfter here: an NFS or FUSE mount under load),
// still gives a Get an answer within 2*HungAfter, as Get's doc promises
// "whatever the file system does". On the current code the Get gives up
// its read at HungAfter and starts another; the one given up returns
// just after, so f.hung is back to 0 when the second read is given up in
// turn, and a third, a fourth... are started: the Get never returns (and
// every read it gave up read the secret and was thrown away).
func TestAGetOnASlowButAnsweringMountReturnsWithinTwiceHungAfter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("old-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	var slow atomic.Bool
	slow.Store(true)
	var reads atomic.Int32
	real := f.read
	f.mu.Lock()
	f.now = func() time.Time { return time.Now().Add(time.Hour) } // the last look is old: the Get looks
	f.read = func(key, path string) (string, fileID, error) {
		reads.Add(1)
		if slow.Load() {
			time.Sleep(HungAfter * 3 / 2) // a slow read: it returns
		}
		return real(key, path)
	}
	f.mu.Unlock()
	t.Cleanup(func() { slow.Store(false) })
	if err := os.WriteFile(path, []byte("new-token-2\n"), 0o600); err != nil { // changed: the next Get reads
		t.Fatal(err)
	}
	type result struct {
		v   string
		err error
	}
	got := make(chan result, 1)
	began := time.Now()
	go func() {
		v, err := f.Get()
		got <- result{v, err}
	}()
	select {
	case r := <-got:
		t.Logf("Get returned %q %v after %v (%d reads)", r.v, r.err, time.Since(began), reads.Load())
	case <-time.After(2*HungAfter + time.Second):
		t.Errorf("a Get on a mount whose reads take 1.5*HungAfter has not returned after %v; %d reads began, each given up and thrown away", time.Since(began), reads.Load())
		select { // still slow: does it ever return?
		case r := <-got:
			t.Fatalf("it returned later, %q %v after %v", r.v, r.err, time.Since(began))
		case <-time.After(3 * HungAfter):
			t.Errorf("still no answer after %v: %d reads began, every one given up as it was about to return", time.Since(began), reads.Load())
		}
		slow.Store(false) // let the Get end
		select {
		case r := <-got:
			t.Logf("once reads were fast again: %q %v after %v", r.v, r.err, time.Since(began))
		case <-time.After(4 * HungAfter):
			t.Errorf("the Get did not return even once reads were fast")
		}
	}
}

// hungMount mounts a FUSE file system over dir that never answers (its
// INIT is never read): every stat, open or read under dir hangs, as on a
// hung NFS mount, until unhang is called (it aborts the connection: the
// calls fail with ENOTCONN) or the test ends. Skips where FUSE cannot be
// mounted (not root, no /dev/fuse).
func hungMount(t *testing.T, dir string) (unhang func()) {
	t.Helper()
	fd, err := syscall.Open("/dev/fuse", syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0", fd)
	if err := syscall.Mount("adversary51c", dir, "fuse", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		if cerr := syscall.Close(fd); cerr != nil {
			t.Error(cerr)
		}
		t.Skipf("cannot mount FUSE: %v", err)
	}
	closed := false
	unhang = func() {
		if closed {
			return
		}
		closed = true
		if err := syscall.Close(fd); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() {
		unhang()
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Error(err)
		}
	})
	return unhang
}

// adversary 51c: Get's doc says it "returns within 2*HungAfter whatever
// the file system does", and the File was rewritten for a hung mount.
// But Get stats the path itself, before any goroutine or HungAfter: on a
// hung mount the stat hangs like the read, and so does every Get (each in
// a thread of its own, none bounded by maxGivenUp), for as long as the
// mount does. The mount here is a FUSE file system that never answers.
func TestAGetOnAHungMountWhoseStatHangsReturnsWithinTwiceHungAfter(t *testing.T) {
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(mnt, "token")
	if err := os.WriteFile(path, []byte("old-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.now = func() time.Time { return time.Now().Add(time.Hour) } // the last look is old: every Get looks
	f.mu.Unlock()
	unhang := hungMount(t, mnt) // the mount hangs from here
	type result struct {
		v   string
		err error
	}
	const gets = 4
	got := make(chan result, gets)
	began := time.Now()
	for i := 0; i < gets; i++ {
		go func() {
			v, err := f.Get()
			got <- result{v, err}
		}()
	}
	timeout := time.After(2*HungAfter + time.Second)
	returned := 0
wait:
	for returned < gets {
		select {
		case <-got:
			returned++
		case <-timeout:
			break wait
		}
	}
	if returned < gets {
		t.Errorf("%d of %d Gets on a hung mount have not returned after %v (want each within 2*HungAfter, with an error naming the key and the path)", gets-returned, gets, time.Since(began))
	}
	unhang()
	for ; returned < gets; returned++ {
		select {
		case r := <-got:
			t.Logf("once the mount was aborted: %q %v after %v", r.v, r.err, time.Since(began))
		case <-time.After(5 * time.Second):
			t.Fatalf("a Get did not return even once the mount was aborted")
		}
	}
}

// getsWaiting says how many goroutines are blocked in (*File).Get's wait
// for a read (its select).
func getsWaiting() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "[select") && strings.Contains(g, "secretfile.(*File).Get(") {
			n++
		}
	}
	return n
}

// adversary 51c: "a changed file is read at once". A Get that begins
// after a rotation by rename has completed (its stat sees the new file)
// returns the new secret, not the one the rename replaced. On the current
// code it joins a read in progress that opened the old file before the
// rename and returns that read's outcome, the replaced (revoked) secret,
// though its own stat told it the file changed. (Before 053a35d such a
// Get waited for the lock, compared its stat with the read's and read
// again.)
func TestAGetBegunAfterARenameReturnsTheNewSecretNotAReadInProgressOfTheOld(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte("old-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	opened := make(chan struct{})
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	var first atomic.Bool
	real := f.read
	later := time.Now().Add(2 * RecheckInterval)
	f.mu.Lock()
	f.now = func() time.Time { return later } // the cached value is due for its recheck
	f.read = func(key, path string) (string, fileID, error) {
		v, id, err := real(key, path)
		if first.CompareAndSwap(false, true) {
			close(opened) // read the old file; slow to return (a slow mount)
			<-gate
		}
		return v, id, err
	}
	f.mu.Unlock()
	type result struct {
		v   string
		err error
	}
	g1 := make(chan result, 1)
	go func() {
		v, err := f.Get() // the recheck: reads the old file
		g1 <- result{v, err}
	}()
	select {
	case <-opened:
	case <-time.After(5 * time.Second):
		t.Fatal("the recheck read did not begin")
	}
	tmp := filepath.Join(dir, "tmp")
	if err := os.WriteFile(tmp, []byte("new-token-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil { // rotated: revoked old-token
		t.Fatal(err)
	}
	f.mu.Lock()
	f.now = func() time.Time { return later.Add(StatInterval) } // a look later (the contract since 51c: within StatInterval a Get may take the look in progress)
	f.mu.Unlock()
	g2 := make(chan result, 1)
	go func() {
		v, err := f.Get() // begins after the rename
		g2 <- result{v, err}
	}()
	deadline := time.Now().Add(HungAfter / 2)
	for getsWaiting() < 2 && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	release()
	for _, c := range []struct {
		name string
		ch   chan result
	}{{"the Get begun before the rename", g1}, {"the Get begun after the rename", g2}} {
		select {
		case r := <-c.ch:
			t.Logf("%s: %q %v", c.name, r.v, r.err)
			if c.ch == g2 && (r.v != "new-token-2" || r.err != nil) {
				t.Errorf("%s returned %q %v, want new-token-2: the secret the rename replaced", c.name, r.v, r.err)
			}
		case <-time.After(2*HungAfter + time.Second):
			t.Fatalf("%s did not return", c.name)
		}
	}
}

// adversary 51c: a secret is a few hundred bytes; a path that names a
// device that never ends (key_file: /dev/zero or /dev/urandom, a
// misconfiguration) is an error, and a File's reads of it do not take
// the process's memory. On the current code read is io.ReadAll without a
// limit; /dev/zero is not pollable, so the read deadline does not apply,
// and the read never ends: given up after HungAfter it still reads, as
// does the read that replaced it, until the process runs out of memory.
// The File is used in a child process that exits once its heap passes
// 64 MiB (or after 2*HungAfter+1s), so that this machine's memory is not
// at stake.
func TestADeviceThatNeverEndsAtThePathIsAnErrorNotAllTheMemory(t *testing.T) {
	const limit = 64 << 20
	if os.Getenv("ADVERSARY51C_CHILD") == "zero" {
		f := &File{key: "token_file", path: "/dev/zero", now: time.Now, read: read, stat: stat, changed: make(chan struct{})}
		got := make(chan error, 1)
		go func() {
			_, err := f.Get()
			got <- err
		}()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		end := time.After(2*HungAfter + time.Second)
		getErr := fmt.Errorf("no answer yet")
		for {
			select {
			case err := <-got:
				getErr = err
				got = nil
			case <-end:
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				fmt.Printf("heap stayed under %d MiB (%d MiB); Get: %v\n", limit>>20, ms.HeapAlloc>>20, getErr)
				os.Exit(0)
			case <-tick.C:
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				if ms.HeapAlloc > limit {
					fmt.Printf("heap at %d MiB, reads of /dev/zero still running; Get: %v\n", ms.HeapAlloc>>20, getErr)
					os.Exit(3)
				}
			}
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestADeviceThatNeverEndsAtThePathIsAnErrorNotAllTheMemory$", "-test.count=1")
	cmd.Env = append(os.Environ(), "ADVERSARY51C_CHILD=zero")
	out, err := cmd.CombinedOutput()
	t.Logf("child: %s", strings.TrimSpace(string(out)))
	if err != nil {
		t.Errorf("a File of /dev/zero: %v: its reads take the memory", err)
	}
}

// adversary 51c: "a removed or emptied file is an error, not the old
// value". A Get that begins after the file was emptied (its stat sees
// size 0) returns an error. On the current code it joins a read in
// progress that read the file before it was emptied and returns the old
// secret: a secret emptied to revoke it is still handed out.
func TestAGetBegunAfterTheFileWasEmptiedIsAnErrorNotAReadInProgressOfTheOld(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("old-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	opened := make(chan struct{})
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	var first atomic.Bool
	real := f.read
	later := time.Now().Add(2 * RecheckInterval)
	f.mu.Lock()
	f.now = func() time.Time { return later } // the cached value is due for its recheck
	f.read = func(key, path string) (string, fileID, error) {
		v, id, err := real(key, path)
		if first.CompareAndSwap(false, true) {
			close(opened) // read the file before it was emptied; slow to return
			<-gate
		}
		return v, id, err
	}
	f.mu.Unlock()
	g1 := make(chan error, 1)
	go func() {
		_, err := f.Get() // the recheck
		g1 <- err
	}()
	select {
	case <-opened:
	case <-time.After(5 * time.Second):
		t.Fatal("the recheck read did not begin")
	}
	if err := os.Truncate(path, 0); err != nil { // emptied: revoked
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() != 0 {
		t.Fatalf("the file is not empty: %v %v", st, err)
	}
	type result struct {
		v   string
		err error
	}
	f.mu.Lock()
	f.now = func() time.Time { return later.Add(StatInterval) } // a look later (the contract since 51c: within StatInterval a Get may take the look in progress)
	f.mu.Unlock()
	g2 := make(chan result, 1)
	go func() {
		v, err := f.Get() // begins after the file was emptied
		g2 <- result{v, err}
	}()
	deadline := time.Now().Add(HungAfter / 2)
	for getsWaiting() < 2 && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	release()
	select {
	case r := <-g2:
		if r.err == nil {
			t.Errorf("a Get begun after the file was emptied returned %q, want an error: the secret the file no longer has", r.v)
		}
	case <-time.After(2*HungAfter + time.Second):
		t.Fatal("the Get begun after the file was emptied did not return")
	}
	select {
	case err := <-g1:
		t.Logf("the Get begun before: %v", err)
	case <-time.After(2*HungAfter + time.Second):
		t.Fatal("the Get begun before the file was emptied did not return")
	}
}

// adversary 51c: across goroutines in real time, no Get returns an older
// secret than one a Get that had already returned before it began
// returned, while the file is rotated by rename at the same size and
// modification time as fast as it can be and Gets race on eight
// goroutines (the waiter and cache paths taken, rechecks forced by a
// clock that runs ahead; every 300th read is slow past HungAfter, so
// reads are given up and replaced).
func TestNoGetReturnsAnOlderSecretThanAGetThatReturnedBeforeItBegan(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s")
	mt := time.Unix(1700000000, 0)
	write := func(n int) error {
		tmp := filepath.Join(dir, fmt.Sprintf("tmp%d", n%2))
		if err := os.WriteFile(tmp, []byte(fmt.Sprintf("v%06d", n)), 0o600); err != nil {
			return err
		}
		if err := os.Chtimes(tmp, mt, mt); err != nil {
			return err
		}
		return os.Rename(tmp, path)
	}
	if err := write(0); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("k", path)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now()
	var step atomic.Int64
	f.mu.Lock()
	f.now = func() time.Time { return base.Add(time.Duration(step.Add(1)) * 100 * time.Millisecond) }
	real := f.read
	var reads, slow atomic.Int64
	f.read = func(key, path string) (string, fileID, error) {
		v, id, err := real(key, path)
		if reads.Add(1)%300 == 0 {
			slow.Add(1)
			time.Sleep(HungAfter * 6 / 5)
		}
		return v, id, err
	}
	f.mu.Unlock()
	var mu sync.Mutex
	high := "" // the newest secret a returned Get returned
	stop := make(chan struct{})
	var bad atomic.Value
	var gets atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				floor := high
				mu.Unlock()
				v, err := f.Get()
				if err != nil {
					continue
				}
				gets.Add(1)
				if v < floor {
					bad.Store(fmt.Sprintf("got %s after a Get had returned %s", v, floor))
					return
				}
				mu.Lock()
				if v > high {
					high = v
				}
				mu.Unlock()
			}
		}()
	}
	var werr error
	end := time.Now().Add(2500 * time.Millisecond)
	for n := 1; time.Now().Before(end) && bad.Load() == nil; n++ {
		if werr = write(n); werr != nil {
			break
		}
	}
	close(stop)
	wg.Wait()
	if werr != nil {
		t.Fatal(werr)
	}
	if b := bad.Load(); b != nil {
		t.Fatalf("a Get returned an older secret: %v", b)
	}
	t.Logf("%d Gets returned, newest %s; %d reads, %d slow", gets.Load(), high, reads.Load(), slow.Load())
}

// adversary 51c: a directory, a symlink loop or a socket put at the path
// of a File that had a secret is an error naming the key and the path,
// at once, not the old value, and leaves no read running; a secret put
// back is read at once.
func TestADirectoryASymlinkLoopOrASocketAtThePathIsAnErrorNotTheOldValue(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte("old-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	// Each Get a look after the last (StatInterval): the contract since 51c.
	clock := time.Now()
	f.mu.Lock()
	f.now = func() time.Time { return clock }
	f.mu.Unlock()
	get := func() (string, error) {
		f.mu.Lock()
		clock = clock.Add(StatInterval)
		f.mu.Unlock()
		return f.Get()
	}
	check := func(what string) {
		t.Helper()
		began := time.Now()
		v, err := get()
		if err == nil || !strings.Contains(err.Error(), "token_file") || !strings.Contains(err.Error(), path) || v != "" {
			t.Errorf("%s at the path: %q %v, want an error naming the key and the path", what, v, err)
		}
		if took := time.Since(began); took > HungAfter/2 {
			t.Errorf("%s at the path: the error took %v", what, took)
		}
		f.mu.Lock()
		running := len(f.checks)
		f.mu.Unlock()
		if running != 0 {
			t.Errorf("%s at the path: %d looks left running", what, running)
		}
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	check("a directory")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(path, path); err != nil {
		t.Fatal(err)
	}
	check("a symlink loop")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	check("a socket")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("new-token-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if v, err := get(); v != "new-token-2" || err != nil {
		t.Errorf("the secret put back: %q %v, want new-token-2", v, err)
	}
}

// threadsBlocked is the number of this process's OS threads asleep in
// the kernel in a wait no signal but a fatal one ends (state D: in the
// FUSE request, or queued behind it on the directory's lookup), and
// what they wait in.
func threadsBlocked(t *testing.T) (int, []string) {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	n, in := 0, []string(nil)
	for _, task := range tasks {
		st, err := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "stat"))
		if err != nil {
			continue // the thread ended
		}
		s := string(st)
		if i := strings.LastIndexByte(s, ')'); i < 0 || !strings.HasPrefix(s[i+1:], " D ") {
			continue
		}
		n++
		w, err := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "wchan"))
		if err == nil {
			in = append(in, string(w))
		}
	}
	return n, in
}

// adversary 51c: "a hung mount holds at most two goroutines (and
// threads) of a File, not one per Get". On a hung mount (a FUSE mount
// that never answers) every Get's own os.Stat blocks a thread: 16 Gets of
// one File hold 16 more threads, and more with every Get.
func TestAHungMountHoldsAtMostTwoThreadsOfAFileNotOnePerGet(t *testing.T) {
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(mnt, "token")
	if err := os.WriteFile(path, []byte("old-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.now = func() time.Time { return time.Now().Add(time.Hour) } // the last look is old: every Get looks
	f.mu.Unlock()
	unhang := hungMount(t, mnt)
	const gets = 16
	done := make(chan error, gets)
	for i := 0; i < gets; i++ {
		go func() {
			_, err := f.Get()
			done <- err
		}()
	}
	deadline := time.Now().Add(2*HungAfter + time.Second)
	n, in := threadsBlocked(t)
	for n < gets && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		n, in = threadsBlocked(t)
	}
	if n > 2 {
		t.Errorf("%d Gets of one File on a hung mount hold %d threads blocked in the kernel (%v), want at most two", gets, n, in)
	}
	unhang()
	for i := 0; i < gets; i++ {
		select {
		case err := <-done:
			if err == nil {
				t.Error("a Get of a hung (then aborted) mount returned no error")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a Get did not return once the mount was aborted")
		}
	}
}

// adversary 51e: a check's "newest" is by the order checks began, not by
// when each looked at the file. On a slow mount, check 1's stat is slow;
// after HungAfter check 2 begins beside it, stats the (not yet rotated)
// file and begins its read of it, which is slow too. The secret is
// rotated by rename; check 1's stat returns, sees the new file, reads the
// new secret and ends first: a Get returns the new secret. Then check 2's
// read of the old file ends: being newer by sequence, it replaces the
// state, and the next Get returns the old secret after a Get returned the
// new one (a revoked secret comes back).
func TestAGetNeverReturnsTheOldSecretAfterANewerOneWhenTheChecksEndOutOfOrder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("old-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	c1Stat := make(chan struct{})    // check 1's stat began
	rel1 := make(chan struct{})      // check 1's stat answers
	c2Reading := make(chan struct{}) // check 2's read of the old file began
	rel2 := make(chan struct{})      // check 2's read answers
	var stats, reads atomic.Int32
	f.mu.Lock()
	idOld := f.state.id
	idNew := idOld
	idNew.size++ // the rotated file: another stat
	now := time.Now().Add(time.Hour)
	f.now = func() time.Time { return now } // the last look is old: the next Get looks
	f.stat = func(key, path string) (fileID, error) {
		if stats.Add(1) == 1 { // check 1: a slow stat, answered after the rotation
			close(c1Stat)
			<-rel1
			return idNew, nil
		}
		return idOld, nil // check 2: before the rotation
	}
	f.read = func(key, path string) (string, fileID, error) {
		if reads.Add(1) == 1 { // check 2: the old file, slow
			close(c2Reading)
			<-rel2
			return "old-secret", idOld, nil
		}
		return "new-secret", idNew, nil // check 1: the rotated file
	}
	f.mu.Unlock()
	released2 := false
	t.Cleanup(func() {
		if !released2 {
			close(rel2)
		}
	})

	type got struct {
		v   string
		err error
	}
	first := make(chan got, 1)
	go func() {
		v, err := f.Get()
		first <- got{v, err}
	}()
	bounded := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("setup: %s did not happen", what)
		}
	}
	bounded(c1Stat, "check 1's stat")
	bounded(c2Reading, "check 2 (begun after HungAfter) reading the old file")
	close(rel1) // the rotation is done; check 1 sees it and ends first
	var g got
	select {
	case g = <-first:
	case <-time.After(5 * time.Second):
		t.Fatal("setup: the first Get did not return")
	}
	if g.err != nil || g.v != "new-secret" {
		t.Fatalf("setup: first Get = %q, %v; want the rotated secret", g.v, g.err)
	}
	close(rel2) // check 2's read of the old file ends last
	released2 = true
	eventuallyNoCheck(t, f)
	v, err := f.Get()
	if err != nil {
		t.Fatal(err)
	}
	if v != "new-secret" {
		t.Fatalf("a Get returned %q after a Get returned %q: an older secret after a newer one", v, "new-secret")
	}
}

// adversary 51e: the same order of ends with a removal: check 1's slow
// stat answers after the secret was removed (a revoked token deleted), so
// a Get returns the error; then check 2, begun later beside it but whose
// read of the file began before the removal, ends with the old secret,
// and being newer by sequence becomes the state: the next Get returns the
// removed secret after a Get said it was gone.
func TestARemovedSecretIsNotReturnedAfterAGetSaidItWasRemoved(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("old-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	c1Stat := make(chan struct{})
	rel1 := make(chan struct{})
	c2Reading := make(chan struct{})
	rel2 := make(chan struct{})
	var stats, reads atomic.Int32
	realStat := f.stat
	f.mu.Lock()
	idOld := f.state.id
	now := time.Now().Add(time.Hour)
	f.now = func() time.Time { return now }
	f.stat = func(key, p string) (fileID, error) {
		if stats.Add(1) == 1 { // check 1: answered after the removal
			close(c1Stat)
			<-rel1
			return realStat(key, p)
		}
		return idOld, nil // check 2: before the removal
	}
	f.read = func(key, p string) (string, fileID, error) {
		if reads.Add(1) == 1 { // check 2: the file opened before its removal, slow
			close(c2Reading)
			<-rel2
			return "old-secret", idOld, nil
		}
		return read(key, p)
	}
	f.mu.Unlock()
	released2 := false
	t.Cleanup(func() {
		if !released2 {
			close(rel2)
		}
	})
	first := make(chan error, 1)
	go func() {
		_, err := f.Get()
		first <- err
	}()
	bounded := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("setup: %s did not happen", what)
		}
	}
	bounded(c1Stat, "check 1's stat")
	bounded(c2Reading, "check 2 (begun after HungAfter) reading the file")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	close(rel1)
	select {
	case err := <-first:
		if err == nil {
			t.Fatal("setup: the first Get returned no error for a removed secret")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("setup: the first Get did not return")
	}
	close(rel2)
	released2 = true
	eventuallyNoCheck(t, f)
	v, err := f.Get()
	if err == nil {
		t.Fatalf("a Get returned the removed secret %q after a Get said it was removed", v)
	}
}

// adversary 51e: a FIFO at the path whose writer wrote part of a secret
// and then stops (a sidecar that hangs mid-write) is an error at the read
// deadline, not the part written: a truncated secret is never returned,
// and the Get returns within MaxWait.
func TestAFIFOWhoseWriterStopsMidSecretIsAnErrorNotThePartWritten(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(path, os.O_RDWR, 0) // a writer that stays open
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	if _, err := w.WriteString("partial-sec"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	f, err := NewFile("token_file", path)
	if took := time.Since(start); took > MaxWait {
		t.Errorf("NewFile took %s, over MaxWait", took)
	}
	if err == nil {
		v, gerr := f.Get()
		t.Fatalf("NewFile accepted a FIFO stopped mid-write: Get = %q, %v", v, gerr)
	}
}

// A FIFO at the path that read empty (no writer then) is read again at
// the next look, not refused for RecheckInterval as an unchanged regular
// file that is empty is: a pipe's stat does not tell what it holds next
// (adversary 55d's suspicion, on 06623ab's reuse of refusals). The writer
// opens the FIFO once a look opens it to read, writes the secret, and
// closes it.
func TestAFIFOThatReadEmptyIsReadAgainAtTheNextLook(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fifo, path); err != nil {
		t.Fatal(err)
	}
	time.Sleep(StatInterval + 10*time.Millisecond)
	if v, err := f.Get(); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Fatalf("a FIFO with no writer: Get = %q, %v; want its refusal (empty)", v, err)
	}
	emptyAt := time.Now()
	wrote := make(chan error, 1)
	go func() {
		w, err := os.OpenFile(path, os.O_WRONLY, 0) // until a look opens it to read
		if err != nil {
			wrote <- err
			return
		}
		_, err = w.WriteString("the-secret\n")
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		wrote <- err
	}()
	t.Cleanup(func() { // a writer still waiting for a reader is let go
		if r, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = r.Close()
		}
	})
	for {
		v, err := f.Get()
		if err == nil && v == "the-secret" {
			break
		}
		if since := time.Since(emptyAt); since > RecheckInterval*8/10 {
			t.Fatalf("%v after a FIFO read empty, with a writer waiting: Get = %q, %v; want the secret at the next look (a pipe's refusal is not kept)", since, v, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(MaxWait):
		t.Fatal("the writer did not finish")
	}
}

// adversary 51e: the size bound is exact: a secret file of MaxSize bytes
// is read whole, one byte more is an error naming the path, and a file of
// only line ends is empty, an error; a File that had a secret turns to
// the error, not the old value, and back.
func TestASecretFileOfExactlyMaxSizeIsReadAndOneByteMoreIsAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	big := strings.Repeat("k", MaxSize)
	if err := os.WriteFile(path, []byte(big), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatalf("a secret of exactly MaxSize: %v", err)
	}
	if v, err := f.Get(); err != nil || v != big {
		t.Fatalf("a secret of exactly MaxSize: %d bytes, %v", len(v), err)
	}
	now := time.Now()
	f.mu.Lock()
	f.now = func() time.Time { return now }
	f.mu.Unlock()
	for _, c := range []struct {
		content string
		ok      bool
	}{
		{big + "k", false},
		{"\r\n\r\n", false},
		{"s\r\n", true},
		{big + "\n", false}, // the file, not the value, is bounded
	} {
		if err := os.WriteFile(path+".tmp", []byte(c.content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
		now = now.Add(StatInterval + time.Millisecond)
		v, err := f.Get()
		if c.ok && (err != nil || v != strings.TrimRight(c.content, "\r\n")) {
			t.Errorf("%d bytes: %d bytes, %v; want the secret", len(c.content), len(v), err)
		}
		if !c.ok && err == nil {
			t.Errorf("%d bytes: %d bytes returned, want an error", len(c.content), len(v))
		}
	}
}

// adversary 51e: the order of ends the other way round: check 2, begun
// beside a slow check 1, stats the path while a rotation that is not
// atomic (remove, then write) has it missing, and its error is slow to
// come back; check 1's stat answers after the new secret is written and
// ends first: a Get returns it. Then check 2's error, newer by sequence,
// becomes the state: a Get fails on a good file after a Get had its
// newer secret.
func TestAGetDoesNotFailOnAnOlderLooksErrorAfterAGetReturnedTheRotatedSecret(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("old-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	c1Stat, rel1 := make(chan struct{}), make(chan struct{})
	c2Stat, rel2 := make(chan struct{}), make(chan struct{})
	var stats atomic.Int32
	f.mu.Lock()
	now := time.Now().Add(time.Hour)
	f.now = func() time.Time { return now }
	f.stat = func(key, p string) (fileID, error) {
		switch stats.Add(1) {
		case 1: // check 1: answered after the new secret is written
			close(c1Stat)
			<-rel1
		case 2: // check 2: the path missing mid-rotation, slow to say so
			_, err := stat(key, p)
			close(c2Stat)
			<-rel2
			return fileID{}, err
		}
		return stat(key, p)
	}
	f.mu.Unlock()
	released2 := false
	t.Cleanup(func() {
		if !released2 {
			close(rel2)
		}
	})
	first := make(chan error, 1)
	var firstV string
	go func() {
		v, err := f.Get()
		firstV = v
		first <- err
	}()
	bounded := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("setup: %s did not happen", what)
		}
	}
	bounded(c1Stat, "check 1's stat")
	if err := os.Remove(path); err != nil { // the rotation, not atomic
		t.Fatal(err)
	}
	bounded(c2Stat, "check 2's stat (begun after HungAfter) of the missing path")
	if err := os.WriteFile(path, []byte("new-secret-\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	close(rel1)
	select {
	case err := <-first:
		if err != nil || firstV != "new-secret-" {
			t.Fatalf("setup: first Get = %q, %v; want the rotated secret", firstV, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("setup: the first Get did not return")
	}
	close(rel2)
	released2 = true
	eventuallyNoCheck(t, f)
	if v, err := f.Get(); err != nil || v != "new-secret-" {
		t.Fatalf("the file holds the rotated secret, a Get returned it, then a Get = %q, %v", v, err)
	}
}

// adversary 51g (holds): the same with reads of 0.49*MaxWait, shorter than
// HungAfter: no check is taken for hung; two Gets 50 ms apart may
// start checks beside each other (the first one's look older than
// StatInterval) and the second is dropped, but the re-read fits MaxWait.
func TestGetsOnAMountWhoseReadsTakeLessThanHungAfterDoNotFail(t *testing.T) {
	adv51gContinuousGets(t, MaxWait*49/100)
}

func adv51gContinuousGets(t *testing.T, readTakes time.Duration) {
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
	f.stat = func(key, p string) (fileID, error) {
		return fileID{size: stats.Add(1)}, nil // changed every time: every look reads
	}
	f.read = func(key, p string) (string, fileID, error) {
		n := reads.Add(1)
		time.Sleep(readTakes)
		return fmt.Sprintf("v%d", n), fileID{size: n}, nil
	}
	f.mu.Unlock()

	var (
		mu     sync.Mutex
		fails  int
		gets   int
		first  error
		slowst time.Duration
	)
	stop := time.Now().Add(6 * time.Second)
	var wg sync.WaitGroup
	for time.Now().Before(stop) { // a Get every 50 ms, whatever the others do
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			_, err := f.Get()
			d := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			gets++
			if d > slowst {
				slowst = d
			}
			if err != nil {
				fails++
				if first == nil {
					first = err
				}
			}
		}()
		time.Sleep(50 * time.Millisecond)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Until(stop) + 3*MaxWait):
		t.Fatal("Gets did not return")
	}
	mu.Lock()
	defer mu.Unlock()
	if fails > 0 {
		t.Fatalf("%d of %d Gets failed (slowest %v) though every read succeeded within %v (%d reads); first: %v", fails, gets, slowst, readTakes, reads.Load(), first)
	}
}

// adversary 51g (holds): monotonicity with errors on the slow mount of the test
// above: every third read fails (a rotation's missing path), the others
// return v<n>, n the order the reads began. A Get begun after another
// returned must not return an outcome of an earlier read (a secret or an
// error) than that one's.
func TestNoGetReturnsAnEarlierReadsOutcomeThanAGetThatReturnedBeforeItWithSlowFailingReads(t *testing.T) {
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
	f.stat = func(key, p string) (fileID, error) {
		return fileID{size: stats.Add(1)}, nil
	}
	f.read = func(key, p string) (string, fileID, error) {
		n := reads.Add(1)
		time.Sleep(time.Duration(n%3+4) * MaxWait / 10) // 0.4..0.6 MaxWait
		if n%3 == 0 {
			return "", fileID{}, fmt.Errorf("read %d: gone", n)
		}
		return fmt.Sprintf("%d", n), fileID{size: n}, nil
	}
	f.mu.Unlock()
	type ret struct {
		began, ended time.Time
		n            int64 // 0: MaxWait
		s            string
	}
	var mu sync.Mutex
	var rets []ret
	stop := time.Now().Add(6 * time.Second)
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
				_, _ = fmt.Sscanf(v, "%d", &r.n)
			} else {
				r.s = err.Error()
				_, _ = fmt.Sscanf(err.Error(), "read %d:", &r.n)
			}
			mu.Lock()
			rets = append(rets, r)
			mu.Unlock()
		}()
		time.Sleep(30 * time.Millisecond)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Until(stop) + 3*MaxWait):
		t.Fatal("Gets did not return")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, a := range rets {
		for _, b := range rets {
			if a.n > 0 && b.n > 0 && b.began.After(a.ended) && b.n < a.n {
				t.Fatalf("a Get begun after one that returned %q returned the earlier %q", a.s, b.s)
			}
		}
	}
	t.Logf("%d Gets, %d reads", len(rets), reads.Load())
}

// adversary 51g (holds): a mount that lost one look for good (its stat
// never returns) but answers every later one quickly: one check is held,
// the other slot must serve every Get; none may fail.
func TestGetsSucceedOnAMountThatLostOneLookForGood(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("the-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	lost := make(chan struct{})
	t.Cleanup(func() { close(lost) })
	var stats atomic.Int64
	f.mu.Lock()
	f.now = func() time.Time { return time.Now().Add(time.Hour) } // the NewFile look is old
	f.stat = func(key, p string) (fileID, error) {
		if stats.Add(1) == 1 {
			<-lost
		}
		return stat(key, p)
	}
	f.mu.Unlock()
	var mu sync.Mutex
	var fails, gets int
	var first error
	stop := time.Now().Add(4 * time.Second)
	var wg sync.WaitGroup
	for time.Now().Before(stop) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := f.Get()
			mu.Lock()
			defer mu.Unlock()
			gets++
			if err != nil || v != "the-secret" {
				fails++
				if first == nil {
					first = fmt.Errorf("%q, %v", v, err)
				}
			}
		}()
		time.Sleep(50 * time.Millisecond)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Until(stop) + 3*MaxWait):
		t.Fatal("Gets did not return")
	}
	mu.Lock()
	defer mu.Unlock()
	if fails > 0 {
		t.Fatalf("%d of %d Gets failed with one look lost; first: %v", fails, gets, first)
	}
}

// gatedLooks makes every look of f read (each stat tells another file)
// and its i-th read (from 1) return "v<i>"; reads 1 to n wait until
// release(i) (or the test's end). began(i) is closed when read i began.
// The clock is f.now: advance moves it.
func gatedLooks(t *testing.T, f *File, n int) (began func(i int) <-chan struct{}, release func(i int), advance func(time.Duration)) {
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
	var stats, reads atomic.Int64
	var offset atomic.Int64
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
		return fmt.Sprintf("v%d", i), fileID{size: i}, nil
	}
	f.mu.Unlock()
	return func(i int) <-chan struct{} { return starts[i] }, release, func(d time.Duration) { offset.Add(int64(d)) }
}

// On a slow mount two looks run beside each other and end in an order
// that says nothing of the order they looked in. The look that ends
// second answers the Gets begun before the first one ended (no Get had
// returned anything it may have looked before), without another read of
// the slow mount; a Get begun after the first one ended is not answered
// by it (it may have looked before the first, whose secret a Get already
// returned): it looks again, at once.
func TestALookBesideAnotherAnswersTheGetsBegunBeforeTheOtherEndedAndNoLaterOne(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("the-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	began, release, advance := gatedLooks(t, f, 3)
	type got struct {
		v   string
		err error
	}
	get := func() chan got {
		ch := make(chan got, 1)
		go func() {
			v, err := f.Get()
			ch <- got{v, err}
		}()
		return ch
	}
	wait := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("setup: %s did not happen", what)
		}
	}
	g1 := get() // look 1
	wait(began(1), "look 1's read")
	advance(time.Second) // look 1 is not recent enough for the next Get
	g2 := get()          // look 2, beside look 1
	wait(began(2), "look 2's read")
	release(1)
	select {
	case r := <-g1:
		if r.err != nil || r.v != "v1" {
			t.Fatalf("setup: the first Get = %q, %v; want v1", r.v, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("setup: the first Get did not return")
	}
	g3 := get() // begun after look 1 ended (and a Get returned v1): look 2 cannot answer it
	wait(began(3), "look 3's read, begun by the Get look 2 cannot answer")
	release(2)
	select {
	case r := <-g2:
		if r.err != nil || r.v != "v2" {
			t.Errorf("the Get that waited for look 2 and began before look 1 ended = %q, %v; want v2, look 2's outcome, with no other read", r.v, r.err)
		}
	case <-time.After(MaxWait + time.Second):
		t.Fatal("the second Get did not return")
	}
	release(3)
	select {
	case r := <-g3:
		if r.err != nil || r.v != "v3" {
			t.Errorf("the Get begun after look 1 ended = %q, %v; want v3, a look after both (v2 may have been read before v1, which a Get returned before it began)", r.v, r.err)
		}
	case <-time.After(MaxWait + time.Second):
		t.Fatal("the third Get did not return")
	}
}

// A mount slower than MaxWait, with two looks in progress that began too
// long ago for a Get: it cannot have a recent look within MaxWait, and
// returns the newest one that ended while it waited, not an error.
func TestAGetOnAMountSlowerThanMaxWaitReturnsTheNewestLookThatEndedWhileItWaited(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("the-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	began, release, advance := gatedLooks(t, f, 3) // looks 1 and 3 answer only at the test's end
	type got struct {
		v   string
		err error
	}
	get := func() chan got {
		ch := make(chan got, 1)
		go func() {
			v, err := f.Get()
			ch <- got{v, err}
		}()
		return ch
	}
	wait := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("setup: %s did not happen", what)
		}
	}
	get() // look 1, for good
	wait(began(1), "look 1's read")
	advance(time.Second)
	g2 := get() // look 2, beside it
	wait(began(2), "look 2's read")
	advance(time.Second) // neither is recent enough for the next Get
	t0 := time.Now()
	g3 := get() // two looks in progress: waits for one to end
	deadline := time.Now().Add(HungAfter / 2)
	for getsWaiting() < 3 && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	release(2) // look 2 ends: v2 (the Get begins look 3, which answers only at the end)
	select {
	case r := <-g2:
		if r.err != nil || r.v != "v2" {
			t.Fatalf("setup: the second Get = %q, %v; want v2", r.v, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("setup: the second Get did not return")
	}
	wait(began(3), "look 3's read")
	select {
	case r := <-g3:
		t.Logf("after %v: %q %v", time.Since(t0), r.v, r.err)
		if r.err != nil || r.v != "v2" {
			t.Errorf("a Get with no recent look possible within MaxWait = %q, %v; want v2, the newest look that ended while it waited", r.v, r.err)
		}
	case <-time.After(MaxWait + time.Second):
		t.Fatal("the third Get did not return within MaxWait")
	}
}

// adversary 51g: a slow mount whose reads all succeed, each in 0.6*MaxWait
// (longer than HungAfter), with Gets arriving continuously. A Get that
// finds the last check too old starts one beside the one in progress; the
// second to end is dropped, state.at is zeroed, and its waiters look
// again: a fresh 1.2 s read that cannot end before their MaxWait. Gets
// fail although every read the mount was asked for succeeded in well
// under MaxWait.
func TestGetsOnAMountWhoseReadsAllSucceedWithinMaxWaitDoNotFail(t *testing.T) {
	adv51gContinuousGets(t, MaxWait*6/10)
}

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
	if r := recv(g3, "Get 3"); r.err != nil || (r.v != "v3" && r.v != "v4") {
		t.Errorf("Get 3 (begun after Get 2 returned v2) = %q, %v; want v3, or v4 (Get 4's look, begun after Get 3 began, may end first and be taken)", r.v, r.err)
	}
	if r := recv(g4, "Get 4"); r.err != nil || (r.v != "v3" && r.v != "v4") {
		t.Errorf("Get 4 (begun after look 1 ended, Get 2 returned v2) = %q, %v; want v3 or v4", r.v, r.err)
	}
	// Get 5 returns the state (v3 or v4), or, when StatInterval of real
	// time passed since its look began (a loaded machine: fresh only by
	// both clocks, and the File's clock stands still here), a look of its
	// own (v5); never v1 or v2 (session 54's CI gave v5).
	if r := recv(adv52aGet(f), "Get 5"); r.err != nil || (r.v != "v3" && r.v != "v4" && r.v != "v5") {
		t.Errorf("Get 5 (begun after all ended) = %q, %v; want v3 or v4, or v5 (a look of its own)", r.v, r.err)
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

// A look overlapped by others' ends is taken only when every one of them
// found what it found (adversary 54a's rule): one that found the same as
// the first to end beside it, but beside a second that found otherwise,
// may have looked before that second one, whose secret a Get returned;
// it is not kept. Look C (slow) found file B; beside it O1 found B and O2,
// after a rename, A2, which a Get returned: a Get after C ends returns A2
// (or a later look), never B. (The File's clock moves so that C and O1
// are not recent for the Gets that begin O1 and O2, and steps back so
// that C, if it were kept, would be recent for the last Get.)
func TestALookBesideTwoThatFoundOtherwiseIsNotKeptThoughItFoundWhatTheFirstFound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]fileID{"b": {ino: 2}, "a2": {ino: 3}}
	var (
		mu      sync.Mutex
		current = "b"
		reads   int
		offset  atomic.Int64
	)
	began, gate := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	})
	base := time.Now().Add(time.Hour) // the set-up's look is old: the next Get looks
	f.mu.Lock()
	f.now = func() time.Time { return base.Add(time.Duration(offset.Load())) }
	f.stat = func(key, p string) (fileID, error) {
		mu.Lock()
		defer mu.Unlock()
		return files[current], nil
	}
	f.read = func(key, p string) (string, fileID, error) {
		mu.Lock()
		reads++
		first, name := reads == 1, current
		mu.Unlock()
		if first { // C: it reads while the file is B, and answers late
			close(began)
			<-gate
			return "b", files["b"], nil
		}
		return name, files[name], nil
	}
	f.mu.Unlock()

	c := make(chan string, 1)
	go func() { v, _ := f.Get(); c <- v }() // begins C
	<-began
	offset.Add(int64(time.Hour)) // C is not recent: the next Get looks beside it
	if v, err := f.Get(); err != nil || v != "b" {
		t.Fatalf("the Get beside C (O1) = %q, %v; want b", v, err)
	}
	mu.Lock()
	current = "a2" // a rename
	mu.Unlock()
	offset.Add(int64(time.Hour)) // O1 is not recent either
	if v, err := f.Get(); err != nil || v != "a2" {
		t.Fatalf("the Get after the rename (O2) = %q, %v; want a2", v, err)
	}
	close(gate) // C ends: it found B, as O1 did, and O2 found A2
	eventuallyNoCheck(t, f)
	offset.Store(0) // the clock steps back to C's beginning: C is recent for the next Get, if kept
	select {
	case <-c:
	case <-time.After(MaxWait + time.Second):
		t.Fatal("the Get that began C did not return")
	}
	if v, err := f.Get(); err != nil || v != "a2" {
		t.Fatalf("a Get after C ended = %q, %v; want a2, which a Get returned before it began (C found B, which it may have looked at before O2's A2)", v, err)
	}
}

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
// 1.3 or 1.9 s (within MaxWait; past HungAfter, so a Get begins a look
// beside a slow one), Gets every 1-5 ms for 6 s on the real clock: every
// Get returns the secret within MaxWait + 100 ms. The slowest look ends
// 100 ms before MaxWait: at 1.99 s, the 10 ms left were less than a busy
// machine's -race run took to wake the look's sleep, and a Get whose only
// look was that one failed (CI, session 64: 1 of 1724 Gets).
func TestGetsReturnTheSecretWithinMaxWaitOnAMountOfSlowLooksThatAllFindTheSame(t *testing.T) {
	id := fileID{ino: 3, size: 1}
	speeds := []time.Duration{700 * time.Millisecond, 1300 * time.Millisecond, 1900 * time.Millisecond}
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
