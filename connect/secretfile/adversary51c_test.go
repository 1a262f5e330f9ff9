package secretfile

import (
	"os"
	"path/filepath"
	"sync/atomic"
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
