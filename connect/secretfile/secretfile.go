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

// MaxSize bounds a secret file: a larger one (a device such as /dev/zero
// at the path, a log file named by mistake) is an error, not a read
// without end.
const MaxSize = 1 << 20

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
// holds a thread. (A regular file's read on a hung mount cannot be
// interrupted: File waits for it at most MaxWait.)
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
	if st.IsDir() {
		return "", fileID{}, fmt.Errorf("%s: %s is a directory", key, path)
	}
	_ = fh.SetReadDeadline(time.Now().Add(HungAfter / 2)) // os.ErrNoDeadline for a regular file
	b, err := io.ReadAll(io.LimitReader(fh, MaxSize+1))
	if err != nil {
		return "", fileID{}, fmt.Errorf("%s: reading the secret: %w", key, err)
	}
	if len(b) > MaxSize {
		return "", fileID{}, fmt.Errorf("%s: %s is larger than %d bytes: not a secret", key, path, MaxSize)
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return "", fileID{}, fmt.Errorf("%s: %s is empty", key, path)
	}
	return v, idOf(st), nil
}

// stat says what file path names now.
func stat(key, path string) (fileID, error) {
	st, err := os.Stat(path)
	if err != nil {
		return fileID{}, fmt.Errorf("%s: reading the secret: %w", key, err)
	}
	return idOf(st), nil
}

// File is a secret file that is read again when it changes, so that a
// rotated secret (a Kubernetes Secret update, a token refreshed by a
// sidecar, a revoked token) is used without a restart: the file is looked
// at (a stat) at most every StatInterval, as Gets come, and read again
// when the stat tells it changed (its size, modification time and, on
// Linux, its device, inode and change time: a file replaced by rename is
// another file, whatever times it was given), and at least every
// RecheckInterval (a file rewritten in place where a stat cannot tell).
// A Get within StatInterval of the last look costs no system call.
//
// Its rule: the look (stat, then the read if needed) is a check, a
// goroutine of its own, which every Get needing a look as recent as it
// waits for and shares. A check's outcome is taken only if the check began
// after the taken one's ended: it looked at the file later, whatever the
// file system's delays. Two checks beside each other (on a slow mount)
// looked in an order nobody knows, each somewhere between its beginning
// and its end (adversary 51e: the last begun, or the last to look, or the
// last to end, each brought an old secret back), so the one that ends
// second is dropped and the next Get looks again, after both. A Get
// returns an outcome taken, so no Get returns an older secret after a
// newer one. A Get
// waits at most MaxWait, whatever the file system does, and a hung mount
// holds at most maxChecks checks (goroutines, threads) of a File: past
// them, a Get waits for one to end, or returns an error naming the key and
// the path at MaxWait. A file that cannot be read any more is an error,
// not the old secret.
type File struct {
	key, path string
	now       func() time.Time                               // StatInterval, RecheckInterval (a test moves it)
	read      func(key, path string) (string, fileID, error) // read; a test's stand-in for a slow or hung mount
	stat      func(key, path string) (fileID, error)         // stat; idem

	mu      sync.Mutex
	state   outcome       // the outcome taken: of a check begun after the one before it ended
	checks  []*check      // in progress, in the order they began
	seq     uint64        // of the last check begun
	ticks   uint64        // counts checks' beginnings and ends: their order
	changed chan struct{} // closed and replaced when a check ends
}

// outcome is what a check found: the secret or an error, and when it
// looked. Its zero value is no check yet.
type outcome struct {
	seq          uint64    // of its check
	began, ended uint64    // File.ticks when its check began and ended
	at           time.Time // File.now when the check began
	value        string
	id           fileID    // of the file value was read from
	readAt       time.Time // File.now when the read of value began
	err          error
}

// check is a look in progress; out is set, under File.mu, before done is
// closed.
type check struct {
	seq       uint64
	tick      uint64    // File.ticks when it began
	at        time.Time // File.now when it began
	startedAt time.Time // time.Now when it began: HungAfter is real time
	done      chan struct{}
	out       outcome
}

// StatInterval is how long a look at the file answers the Gets after it:
// a change is seen within it.
const StatInterval = 100 * time.Millisecond

// RecheckInterval bounds how long a File keeps a value whose file was
// rewritten without a change of what a stat tells.
const RecheckInterval = time.Second

// MaxWait is the longest a Get waits for the file system.
const MaxWait = 2 * time.Second

// HungAfter is how long a Get waits for a check before it begins another
// beside it (a slow or hung mount), if fewer than maxChecks are in
// progress.
const HungAfter = MaxWait / 2

// maxChecks is how many checks of a File may be in progress at once (on a
// hung mount, each holds a thread until the mount answers).
const maxChecks = 2

// NewFile reads the secret once, so that a missing or empty file is a
// start-up error, and returns it for reading again.
func NewFile(key, path string) (*File, error) {
	f := &File{key: key, path: path, now: time.Now, read: read, stat: stat, changed: make(chan struct{})}
	if _, err := f.Get(); err != nil {
		return nil, err
	}
	return f, nil
}

// Get returns the secret, from a look at the file at most StatInterval
// old, within MaxWait. When the file cannot be read any more, it returns
// the error: a secret that was removed is not silently kept.
func (f *File) Get() (string, error) {
	deadline := time.Now().Add(MaxWait)
	f.mu.Lock()
	defer f.mu.Unlock()
	since := f.now().Add(-StatInterval) // a look begun after it answers this Get
	for {
		if f.state.seq > 0 && f.state.at.After(since) {
			return f.state.value, f.state.err
		}
		// The check to wait for: the newest in progress, if recent enough
		// and not hung; else a new one, unless maxChecks are in progress
		// (then a hung one still recent enough, or none: wait for one to
		// end).
		var c *check
		if n := len(f.checks); n > 0 {
			c = f.checks[n-1]
		}
		if c == nil || !c.at.After(since) || time.Since(c.startedAt) >= HungAfter {
			switch {
			case len(f.checks) < maxChecks:
				c = f.start()
			case !c.at.After(since):
				c = nil
			}
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return "", fmt.Errorf("%s: reading the secret: %s did not answer within %s (%d looks at it in progress)", f.key, f.path, MaxWait, len(f.checks))
		}
		if c != nil {
			if hung := HungAfter - time.Since(c.startedAt); hung > 0 && hung < wait {
				wait = hung // then, maybe, another check beside it
			}
		}
		var done chan struct{}
		if c != nil {
			done = c.done
		}
		changed := f.changed
		f.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-done:
		case <-changed:
		case <-t.C:
		}
		t.Stop()
		f.mu.Lock()
		if c == nil {
			continue
		}
		select {
		case <-c.done:
			if f.state.seq == c.seq { // its outcome, taken
				return f.state.value, f.state.err
			}
			if f.state.began > c.tick { // one begun after it was taken since: newer
				return f.state.value, f.state.err
			}
			// Dropped (a check beside it ended first): look again.
		default:
		}
	}
}

// start begins a check and returns it. Called with f.mu held.
func (f *File) start() *check {
	f.seq++
	f.ticks++
	c := &check{seq: f.seq, tick: f.ticks, at: f.now(), startedAt: time.Now(), done: make(chan struct{})}
	f.checks = append(f.checks, c)
	prev := f.state
	go func() {
		out := f.look(c, prev)
		f.mu.Lock()
		defer f.mu.Unlock()
		close(c.done)
		for i, o := range f.checks {
			if o == c {
				f.checks = append(f.checks[:i], f.checks[i+1:]...)
				break
			}
		}
		f.ticks++
		out.ended = f.ticks
		c.out = out
		if f.state.seq == 0 || out.began > f.state.ended {
			f.state = out
		} else {
			// It was beside the one taken: which looked last is unknown,
			// so the next Get looks again, after both.
			f.state.at = time.Time{}
		}
		close(f.changed)
		f.changed = make(chan struct{})
	}()
	return c
}

// look is a check's work: a stat, and a read when the file changed since
// the value of prev (the state when the check began) was read, or that
// read is RecheckInterval old.
func (f *File) look(c *check, prev outcome) outcome {
	out := outcome{seq: c.seq, began: c.tick, at: c.at}
	id, err := f.stat(f.key, f.path)
	if err != nil {
		out.err = err
		return out
	}
	if prev.value != "" && prev.err == nil && id == prev.id && c.at.Sub(prev.readAt) < RecheckInterval {
		out.value, out.id, out.readAt = prev.value, prev.id, prev.readAt
		return out
	}
	v, rid, err := f.read(f.key, f.path)
	if err != nil {
		out.err = err
		return out
	}
	out.value, out.id, out.readAt = v, rid, c.at
	return out
}
