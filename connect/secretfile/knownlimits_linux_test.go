//go:build linux && knownlimits

package secretfile

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// Known limits, not fixed: tests that fail on purpose, kept out of the
// suite (go test -tags knownlimits ./connect/secretfile/ runs them).
//
//   - A File keeps at most maxChecks (two) looks in progress, so that a hung
//     mount holds two threads, not one per Get. A mount that lost two looks
//     for good (a FUSE daemon that dropped them) fills them: every Get then
//     waits MaxWait and fails, though the mount answers new requests, until
//     a lost look returns. Bounded threads were chosen over that recovery.

// adversary 51e: a mount that lost two requests for good (a FUSE daemon
// that dropped them, a hard NFS mount's requests to a server since
// replaced) but answers every later one: the secret file is readable
// again, yet the two checks holding their threads are the File's cap, so
// every later Get waits MaxWait and errors, for as long as the process
// lives. An error state does not recover once the file is good again.
func TestAFileWhoseMountLostTwoLooksRecoversOnceTheMountAnswersAgain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("the-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile("token_file", path)
	if err != nil {
		t.Fatal(err)
	}
	lost := make(chan struct{}) // the lost requests: answered only at cleanup
	t.Cleanup(func() { close(lost) })
	var stats atomic.Int32
	f.mu.Lock()
	f.now = func() time.Time { return time.Now().Add(time.Hour) } // the last look is old: the next Get looks
	f.stat = func(key, p string) (fileID, error) {
		if stats.Add(1) <= maxChecks {
			<-lost
		}
		return stat(key, p)
	}
	f.mu.Unlock()
	first := make(chan error, 1)
	go func() {
		_, err := f.Get()
		first <- err
	}()
	select {
	case err := <-first:
		if err == nil {
			t.Fatal("setup: a Get on the lost looks returned no error")
		}
	case <-time.After(2 * MaxWait):
		t.Fatal("setup: the first Get did not return within MaxWait")
	}
	if n := stats.Load(); n != maxChecks {
		t.Fatalf("setup: %d stats, want %d (both lost)", n, maxChecks)
	}
	// The mount answers again: the file is good.
	v, err := f.Get()
	if err != nil || v != "the-secret" {
		t.Fatalf("the mount answers again but Get = %q, %v", v, err)
	}
}
