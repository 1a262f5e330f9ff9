// Package secretfile reads secrets from files, as Kubernetes mounts them: a
// *_file config key names the file, and the value is its content without
// the trailing newline. Errors name the key and the path, never the
// content.
package secretfile

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Read reads the secret in path once; key is the config key that named it
// (for errors).
func Read(key, path string) (string, error) {
	v, _, err := read(key, path)
	return v, err
}

// read reads the secret in path and says what file it read (by the open
// file's stat, not the path's: the path may name another file by then).
// Opened without blocking, so that a FIFO (or other pipe) at the path is
// read through Go's poller with a deadline: a FIFO without a writer reads
// empty, one whose writer writes nothing ends at the deadline; neither
// holds a thread. (A regular file's read on a hung
// mount cannot be interrupted: File gives it up.)
func read(key, path string) (string, fileID, error) {
	fh, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", fileID{}, fmt.Errorf("%s: reading the secret: %w", key, err)
	}
	defer func() { _ = fh.Close() }() // read only: nothing to lose
	st, err := fh.Stat()
	if err != nil {
		return "", fileID{}, fmt.Errorf("%s: reading the secret: %w", key, err)
	}
	// Half of HungAfter: such a read ends before a Get would give it up.
	_ = fh.SetReadDeadline(time.Now().Add(HungAfter / 2)) // os.ErrNoDeadline for a regular file
	b, err := io.ReadAll(fh)
	if err != nil {
		return "", fileID{}, fmt.Errorf("%s: reading the secret: %w", key, err)
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return "", fileID{}, fmt.Errorf("%s: %s is empty", key, path)
	}
	return v, idOf(st), nil
}

// File is a secret file that is read again when it changes, so that a
// rotated secret (a Kubernetes Secret update, a token refreshed by a
// sidecar, a revoked token) is used without a restart: at once when a
// stat tells it changed (its size, modification time and, on Linux, its
// device, inode and change time: a file replaced by rename is another
// file, whatever times it was given), and otherwise its content is read
// again at least every RecheckInterval (a file rewritten in place at the
// same size and modification time). Get is cheap when the file has not
// changed: one stat, and a read a second.
//
// Its rule: one read at a time, whose outcome every Get waiting for it
// shares, and only that read stores what it read. A read begins after the
// previous one ended or was given up, so no Get returns an older secret
// after a newer one. A read that has not returned after HungAfter (a hung
// mount) is given up: the next Get reads again, and that read's outcome
// is the File's; the read given up, if it ever returns, stores nothing
// and answers no Get. At most one read given up may still be running:
// past that, Get returns an error naming the path until one of them
// returns, so that a hung mount holds at most two goroutines (and
// threads) of a File, not one per Get, and no Get waits for it for good.
type File struct {
	key, path string
	now       func() time.Time
	read      func(key, path string) (string, fileID, error) // read; a test's stand-in for a hung mount

	mu      sync.Mutex
	id      fileID // of the file value was read from
	readAt  time.Time
	value   string
	reading *reading // the read in progress; nil when none
	hung    int      // reads given up that have not returned
}

// reading is a read in progress. Its fields are set, under File.mu,
// before done is closed.
type reading struct {
	began   time.Time // time.Now, not File.now: HungAfter is real time
	done    chan struct{}
	givenUp bool
	value   string
	err     error
}

// RecheckInterval bounds how long a File keeps a value whose file was
// rewritten without a change of what a stat tells.
const RecheckInterval = time.Second

// HungAfter is how long a read may take before the next Get gives it up
// and reads again.
const HungAfter = time.Second

// maxGivenUp is how many reads given up may still be running before Get
// refuses to start another.
const maxGivenUp = 1

// NewFile reads the secret once, so that a missing or empty file is a
// start-up error, and returns it for reading again.
func NewFile(key, path string) (*File, error) {
	f := &File{key: key, path: path, now: time.Now, read: read}
	if _, err := f.Get(); err != nil {
		return nil, err
	}
	return f, nil
}

// Get returns the secret, reading the file again if it changed. When the
// file cannot be read any more, it returns the error: a secret that was
// removed is not silently kept. It returns within 2*HungAfter whatever
// the file system does: the read is a goroutine of its own, which Get
// waits for until HungAfter from its beginning, then gives up for
// another (or, past maxGivenUp, returns an error).
func (f *File) Get() (string, error) {
	st, err := os.Stat(f.path)
	if err != nil {
		return "", fmt.Errorf("%s: reading the secret: %w", f.key, err)
	}
	id := idOf(st)
	f.mu.Lock()
	for {
		if f.value != "" && id == f.id && f.now().Sub(f.readAt) < RecheckInterval {
			v := f.value
			f.mu.Unlock()
			return v, nil
		}
		r := f.reading
		switch {
		case r == nil:
			r = f.startRead()
		case time.Since(r.began) >= HungAfter:
			if f.hung >= maxGivenUp {
				f.mu.Unlock()
				return "", fmt.Errorf("%s: reading the secret: reads of %s have not returned for over %s", f.key, f.path, HungAfter)
			}
			r.givenUp = true
			f.hung++
			r = f.startRead()
		}
		f.mu.Unlock()
		t := time.NewTimer(HungAfter - time.Since(r.began))
		select {
		case <-r.done:
		case <-t.C:
		}
		t.Stop()
		f.mu.Lock()
		select {
		case <-r.done:
			if !r.givenUp { // the File's latest read: its outcome
				v, err := r.value, r.err
				f.mu.Unlock()
				return v, err
			}
		default:
		}
	}
}

// startRead starts a read of the file as the File's read in progress, and
// returns it. Called with f.mu held.
func (f *File) startRead() *reading {
	r := &reading{began: time.Now(), done: make(chan struct{})}
	f.reading = r
	readAt := f.now()
	go func() {
		v, id, err := f.read(f.key, f.path)
		f.mu.Lock()
		defer f.mu.Unlock()
		r.value, r.err = v, err
		close(r.done)
		if r.givenUp {
			f.hung-- // and stores nothing: a read began after it
			return
		}
		f.reading = nil
		if err == nil {
			f.value, f.id, f.readAt = v, id, readAt
		}
	}()
	return r
}
