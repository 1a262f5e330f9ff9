// Package secretfile reads secrets from files, as Kubernetes mounts them: a
// *_file config key names the file, and the value is its content without
// the trailing newline. Errors name the key and the path, never the
// content.
package secretfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
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
	id := idOf(st)
	if !st.Mode().IsRegular() {
		// A pipe's stat does not tell what it holds next: its refusal
		// is read again at the next look.
		id = fileID{}
	}
	if len(b) > MaxSize {
		return "", id, &contentError{fmt.Sprintf("%s: %s is larger than %d bytes: not a secret", key, path, MaxSize)}
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return "", id, &contentError{fmt.Sprintf("%s: %s is empty", key, path)}
	}
	return v, idOf(st), nil
}

// contentError is a read's refusal of what the file holds (empty, larger
// than MaxSize), with the file it read (read's fileID): the same file,
// unchanged, holds the same, so a look reuses the refusal as it reuses a
// value (adversary 55b: an emptied or grown file was read at every look,
// a MiB each). An error of the file system is read again at every look:
// it may heal.
type contentError struct{ msg string }

func (e *contentError) Error() string { return e.msg }

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
// RecheckInterval (a file rewritten in place where a stat cannot tell)
// after the last read of it by any look; a read's refusal of what the
// file holds (empty, larger than MaxSize) is kept like a value, an error
// of the file system is not. A Get within StatInterval of the last look
// costs no system call.
//
// Its rule: the look (stat, then the read if needed) is a check, a
// goroutine of its own, which every Get needing a look as recent as it
// waits for and shares. A check looks at the file somewhere between its
// beginning and its end, and two checks beside each other (on a slow
// mount) looked in an order nobody knows (adversary 51e: the last begun,
// or the last to look, or the last to end, each brought an old secret
// back). So a check's outcome is taken (kept, to answer the Gets after
// it) only if no other check ended while it ran (it then looked after
// every outcome ever returned) or each that did found the same (the same
// file and value, or the same error: which looked last does not matter;
// on a mount whose looks take longer than StatInterval, looks beside each
// other are the rule, and an unchanged file is not read again for them:
// adversary 54a). A check that another's end overlapped with another
// finding is not taken, and after it nothing is kept (the next Get looks
// again); its outcome answers only the Gets that began before that other
// check ended, before any Get could have returned an outcome it may have
// looked before.
// So no Get returns an older secret than one a Get returned before it
// began. A Get waits at most MaxWait, whatever the file system does, and
// a hung mount holds at most maxChecks checks (goroutines, threads) of a
// File: past them, a Get waits for one to end. A Get that has no look
// begun within StatInterval before it by MaxWait (a mount slower than
// that: maxChecks checks were in progress, none of them recent) returns
// the newest outcome that ended while it waited and that the rule lets it
// return; with none, an error naming the key and the path. A file that
// cannot be read any more is an error, not the old secret.
type File struct {
	key, path string
	now       func() time.Time                               // StatInterval, RecheckInterval, with the real clock (when; a test moves it)
	read      func(key, path string) (string, fileID, error) // read; a test's stand-in for a slow or hung mount
	stat      func(key, path string) (fileID, error)         // stat; idem

	mu       sync.Mutex
	state    outcome       // the outcome taken: of the last check to end, if no other ended while it ran
	checks   []*check      // in progress, in the order they began
	recent   []*check      // the last maxChecks to end: a Get that did not see one in progress may still take its answer
	seq      uint64        // of the last check begun
	ticks    uint64        // counts checks' beginnings and ends: their order
	changed  chan struct{} // closed and replaced when a check ends
	lastLook time.Duration // how long the last check to end took (real time)
}

// outcome is what a check found: the secret or an error, and when it
// looked. Its zero value is no check yet, or none taken.
type outcome struct {
	seq    uint64 // of its check
	at     when   // when the check began
	value  string
	id     fileID // of the file value was read from
	readAt when   // when the read of value began
	err    error
}

// when is a moment by both of a File's clocks: File.now, which a test
// moves (and which may step back), and time.Now's monotonic reading,
// which never steps back.
type when struct{ file, real time.Time }

// fresh says whether w is less than d before now by both clocks: a File
// clock that stepped back (w after now by it) leaves the real one to
// tell, and no clock keeps w fresh past d of the other (adversaries 53a,
// 53b).
func (w when) fresh(now when, d time.Duration) bool {
	return now.file.Sub(w.file) < d && now.real.Sub(w.real) < d
}

// later is the later of two moments, by the real clock (which never steps
// back); the zero moment is before any.
func later(a, b when) when {
	if b.real.After(a.real) {
		return b
	}
	return a
}

// nowOf is the moment now by both of f's clocks.
func (f *File) nowOf() when { return when{f.now(), time.Now()} }

// check is a look in progress; out is set, under File.mu, before done is
// closed.
type check struct {
	seq      uint64
	at       when    // when it began; HungAfter is real time (at.real)
	firstEnd uint64  // File.ticks at the first end of another check while it ran; 0: none (yet)
	overlap  outcome // what that first check found
	mixed    bool    // another check that ended while it ran found otherwise than overlap
	ended    uint64  // File.ticks at its end; 0: in progress
	done     chan struct{}
	out      outcome
}

// same says whether o and p found the same: the same file and value, or
// the same error. Of two checks beside each other that found the same,
// which looked last does not matter.
func (o outcome) same(p outcome) bool {
	if (o.err == nil) != (p.err == nil) {
		return false
	}
	if o.err != nil {
		return o.err.Error() == p.err.Error()
	}
	return o.value == p.value && o.id == p.id
}

// answers says whether c's outcome may answer a Get that began at tick
// start (File.ticks then): c did not end before it, and c is taken or
// began after every check that ended before the Get began had ended.
func (c *check) answers(start uint64) bool {
	return (c.ended == 0 || c.ended > start) && (c.firstEnd == 0 || start < c.firstEnd)
}

// recentFor says whether c is a look recent enough for a Get that began
// with File.seq at seq, at now: begun after it (whatever the clocks say
// since), or within StatInterval before it (by both clocks: when.fresh).
func (c *check) recentFor(seq uint64, now when) bool {
	return c.seq > seq || c.at.fresh(now, StatInterval)
}

// recentFor says the same of the check o is the outcome of.
func (o outcome) recentFor(seq uint64, now when) bool {
	return o.seq > seq || o.at.fresh(now, StatInterval)
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

// maxPatience bounds how long a Get waits for a look in progress that
// cannot answer it before it begins its own (Get): what it saves is a
// look on a mount whose looks take about StatInterval; on a slower one a
// Get keeps the time its own look takes.
const maxPatience = 2 * StatInterval

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
// old, within MaxWait; on a mount slower than that, from the newest look
// that ended while it waited (File's rule). When the file cannot be read
// any more, it returns the error: a secret that was removed is not
// silently kept.
func (f *File) Get() (string, error) {
	deadline := time.Now().Add(MaxWait)
	f.mu.Lock()
	defer f.mu.Unlock()
	start := f.ticks  // outcomes returned before this Get ended by then
	seq := f.seq      // checks begun after it are recent for this Get
	now := f.nowOf()  // so are checks begun within StatInterval before it
	var seen []*check // in progress, or ended, while this Get waited
	for {
		if f.state.seq > 0 && f.state.recentFor(seq, now) {
			return f.state.value, f.state.err
		}
		for _, l := range [][]*check{f.checks, f.recent} {
			for _, o := range l {
				if o.answers(start) && !slices.Contains(seen, o) {
					seen = append(seen, o)
				}
			}
		}
		if o, ok := newestAnswer(seen, start, func(c *check) bool { return c.recentFor(seq, now) }); ok {
			return o.value, o.err
		}
		// The check to wait for: the newest in progress, if recent enough,
		// able to answer this Get and not hung; else a new one, unless
		// maxChecks are in progress (then a hung one still recent enough
		// and able to answer, or none: wait for one to end).
		// One that cannot answer only because others ended while it ran,
		// each finding the same so far, is waited for too, until it took
		// half as long again as the last look to end, and maxPatience at
		// most (then it is slow: a look beside it, not a Get past
		// MaxWait): if it finds the same, it is taken, and the state this
		// Get returns (adversary 55b: on a mount whose looks take about
		// StatInterval, each end began another look; adversary 55d: a
		// Get that waited 1.5x a 0.67 s look for one that then found
		// otherwise had too little of MaxWait left for its own).
		var c *check
		if n := len(f.checks); n > 0 {
			c = f.checks[n-1]
		}
		patience := HungAfter
		if c != nil && !c.answers(start) {
			patience = 0
			if !c.mixed {
				patience = min(f.lastLook+f.lastLook/2, maxPatience)
			}
		}
		if c == nil || !c.recentFor(seq, now) || time.Since(c.at.real) >= patience {
			switch {
			case len(f.checks) < maxChecks:
				c, patience = f.start(), HungAfter
				seen = append(seen, c)
			case !c.recentFor(seq, now) || !c.answers(start):
				c = nil
			}
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			if o, ok := newestAnswer(seen, start, func(*check) bool { return true }); ok { // a slow mount: the newest look it may return
				return o.value, o.err
			}
			return "", fmt.Errorf("%s: reading the secret: %s did not answer within %s (%d looks at it in progress)", f.key, f.path, MaxWait, len(f.checks))
		}
		if c != nil {
			if hung := patience - time.Since(c.at.real); hung > 0 && hung < wait {
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
	}
}

// newestAnswer returns the outcome of the newest check of seen that ended,
// is recent (enough), and may answer a Get begun at tick start. Called
// with File.mu held.
func newestAnswer(seen []*check, start uint64, recent func(*check) bool) (outcome, bool) {
	var best *check
	for _, c := range seen {
		if c.ended == 0 {
			continue
		}
		if recent(c) && c.answers(start) && (best == nil || c.seq > best.seq) {
			best = c
		}
	}
	if best == nil {
		return outcome{}, false
	}
	return best.out, true
}

// start begins a check and returns it. Called with f.mu held.
func (f *File) start() *check {
	f.seq++
	f.ticks++
	c := &check{seq: f.seq, at: f.nowOf(), done: make(chan struct{})}
	f.checks = append(f.checks, c)
	prev := f.state
	go func() {
		out := f.look(c, prev)
		f.mu.Lock()
		defer f.mu.Unlock()
		for i, o := range f.checks {
			if o == c {
				f.checks = append(f.checks[:i], f.checks[i+1:]...)
				break
			}
		}
		f.ticks++
		c.ended = f.ticks
		f.lastLook = time.Since(c.at.real)
		if f.recent = append(f.recent, c); len(f.recent) > maxChecks {
			f.recent = f.recent[1:]
		}
		for _, o := range f.checks { // their looks and this one's: order unknown
			switch {
			case o.firstEnd == 0:
				o.firstEnd, o.overlap = f.ticks, out
			case !o.mixed && !o.overlap.same(out):
				o.mixed = true
			}
		}
		c.out = out
		switch {
		case c.firstEnd == 0:
			f.state = out
		case !c.mixed && c.overlap.same(out):
			// Each that ended while it ran found the same: kept, unless
			// the state is already one of them begun after it, whose
			// look is the later (adversary 54b). Either way the value
			// kept was read last by the later of their reads, which the
			// next RecheckInterval counts from (adversary 55b).
			sameRead := f.state.same(out) && f.state.id == out.id // a refusal's text names the path, not the file (adversary 55d)
			if sameRead {
				out.readAt = later(out.readAt, f.state.readAt)
			}
			if f.state.seq < c.seq || !f.state.same(out) {
				f.state = out
			} else if sameRead {
				f.state.readAt = out.readAt
			}
		default:
			// Another check ended while it ran and found otherwise:
			// which looked last is unknown, so neither is kept; the next
			// Get looks again.
			f.state = outcome{}
		}
		close(c.done)
		close(f.changed)
		f.changed = make(chan struct{})
	}()
	return c
}

// look is a check's work: a stat, and a read when the file changed since
// the value of prev (the state when the check began, or the state when
// the stat ended, if that was read later: a look beside it that read it
// meanwhile, adversary 55b) was read, or that read is RecheckInterval old
// (by either clock: when.fresh).
func (f *File) look(c *check, prev outcome) outcome {
	out := outcome{seq: c.seq, at: c.at}
	id, err := f.stat(f.key, f.path)
	if err != nil {
		out.err = err
		return out
	}
	f.mu.Lock()
	cur := f.state
	f.mu.Unlock()
	if cur.read() && cur.id == id && (!prev.read() || prev.id != id || cur.readAt.real.After(prev.readAt.real)) {
		prev = cur
	}
	if prev.read() && id == prev.id && prev.readAt.fresh(c.at, RecheckInterval) {
		out.value, out.err, out.id, out.readAt = prev.value, prev.err, prev.id, prev.readAt
		return out
	}
	v, rid, err := f.read(f.key, f.path)
	out.value, out.err = v, err
	var ce *contentError
	if err == nil || errors.As(err, &ce) {
		out.id, out.readAt = rid, c.at
	}
	return out
}

// read says whether o is what a read of its file found (a value, or a
// refusal of what the file holds), which a look may reuse while the file
// is unchanged.
func (o outcome) read() bool {
	var ce *contentError
	return o.err == nil && o.value != "" || o.err != nil && errors.As(o.err, &ce) && o.id != fileID{}
}
