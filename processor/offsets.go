package processor

// tracker holds one partition's records in the order they were polled and
// says how far the partition may be committed: to just past the end of the
// contiguous prefix of finished records. A record that is still starting
// (or whose start is being retried) holds back every later offset, however
// many of them are finished. Not safe for concurrent use: the router guards
// it with its mutex.
type tracker struct {
	queue []*record // polled, not yet committable, in offset order
	head  int       // queue[head:] is live; the prefix is reused
	// next is the offset to commit (one past the last contiguous finished
	// record) and its leader epoch; -1 until a record finishes.
	next      int64
	nextEpoch int32
}

func newTracker() *tracker { return &tracker{next: -1} }

// add registers a polled record; records must arrive in offset order.
func (t *tracker) add(r *record) {
	if t.head > 0 && t.head == len(t.queue) {
		t.queue, t.head = t.queue[:0], 0
	}
	t.queue = append(t.queue, r)
}

// finish marks r finished and advances next over the finished prefix.
// It reports whether next moved.
func (t *tracker) finish(r *record) bool {
	r.finished = true
	moved := false
	for t.head < len(t.queue) && t.queue[t.head].finished {
		f := t.queue[t.head]
		t.queue[t.head] = nil
		t.head++
		t.next, t.nextEpoch = f.offset+1, f.epoch
		moved = true
	}
	if t.head > 1024 && t.head*2 > len(t.queue) {
		n := copy(t.queue, t.queue[t.head:])
		clear(t.queue[n:])
		t.queue, t.head = t.queue[:n], 0
	}
	return moved
}

// outstanding is how many polled records are not yet committable.
func (t *tracker) outstanding() int { return len(t.queue) - t.head }
