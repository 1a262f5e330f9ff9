package secretfile

import (
	"fmt"
	"os"
	"path/filepath"
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
