//go:build linux

package secretfile

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

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
