package processor

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// inFlight accounts for the records in flight: tracked (committer.track,
// trackAll) and not yet ended, every one of their pieces of work
// (committer.end, endAll). On
// that count it bounds the poll loop (waitCapacity: MaxInFlight, and the
// pause), lets the drain on shutdown wait for the records (waitDrained) and
// a revoke wait for its partitions' records (waitIdle).
//
// Its rule: a record counts, in all and for its partition, from its
// tracking until its last piece ended and the committer finished it in its
// partition's tracker (done comes after the tracker, under committer.mu).
// So a wait that sees a partition with no records in flight finds all of
// them in the tracker: a revoke then commits every record that finished.
// It decides nothing about offsets or membership: a partition's count is
// that assignment's (*partition), owned or not.
//
// Its lock is the innermost (committer.go has the order): taken under
// committer.mu by track and end, it never takes another lock of the
// router's, and nothing waits on its condition holding another lock.
type inFlight struct {
	max    int         // MaxInFlight
	paused func() bool // fetching is paused (health; an atomic, no lock)
	gauge  prometheus.Gauge
	log    *slog.Logger

	// mu guards n, and also the in-flight fields of others: partition.inFlight,
	// record.pending and record.failed.
	mu   sync.Mutex
	cond *sync.Cond // broadcast when a record ends, the pause changes or a deadline passes
	n    int        // records in flight
	// lent: the assignments whose partition waits for the ledger's fence
	// (refused.go) and is not fetched meanwhile; their records in flight
	// do not count against max (lend).
	lent map[*partition]bool
}

func newInFlight(max int, paused func() bool, gauge prometheus.Gauge, log *slog.Logger) *inFlight {
	f := &inFlight{max: max, paused: paused, gauge: gauge, log: log}
	f.cond = sync.NewCond(&f.mu)
	return f
}

// wake wakes everything waiting on records in flight (capacity, drain,
// revoke): the pause changed, or a deadline passed.
func (f *inFlight) wake() {
	f.mu.Lock()
	f.cond.Broadcast()
	f.mu.Unlock()
}

// add counts a record of p in, as it is tracked (committer.track, under
// committer.mu, so that a revoke that marked p first never misses it).
func (f *inFlight) add(p *partition) {
	f.mu.Lock()
	p.inFlight++
	f.n++
	f.gauge.Set(float64(f.n))
	f.mu.Unlock()
}

// addAll counts in a poll's tracked records (nil: not tracked), as add
// does for each as it is tracked (committer.trackAll, under committer.mu),
// under one lock.
func (f *inFlight) addAll(recs []*record) {
	f.mu.Lock()
	for _, rec := range recs {
		if rec != nil {
			rec.part.inFlight++
			f.n++
		}
	}
	f.gauge.Set(float64(f.n))
	f.mu.Unlock()
}

// setPending says how many pieces of work rec has (one per intent).
func (f *inFlight) setPending(rec *record, n int) {
	f.mu.Lock()
	rec.pending = n
	f.mu.Unlock()
}

// endPiece ends one of rec's pieces of work; ok=false abandons it. It
// reports whether that was the last piece and, if so, whether none was
// abandoned (the record may be finished in its tracker). After the last
// piece the caller finishes the record and counts it out (done).
func (f *inFlight) endPiece(rec *record, ok bool) (last, committable bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !ok {
		rec.failed = true
	}
	rec.pending--
	if rec.pending > 0 {
		return false, false
	}
	return true, !rec.failed
}

// endPieces ends one piece of each of recs (a record may appear once per
// piece), as endPiece does, under one lock. It keeps in recs, in order, the
// records whose last piece this was, and returns them (recs' first
// entries: the rest of recs is cleared). A record kept may be finished in
// its tracker unless failed, which no one writes after its last piece.
func (f *inFlight) endPieces(recs []*record, ok bool) []*record {
	f.mu.Lock()
	defer f.mu.Unlock()
	last := 0
	for _, rec := range recs {
		if !ok {
			rec.failed = true
		}
		rec.pending--
		if rec.pending == 0 {
			recs[last] = rec
			last++
		}
	}
	clear(recs[last:])
	return recs[:last]
}

// doneAll counts recs out, as done does for each, after their last pieces
// ended and their trackers were told, and wakes the waits once.
func (f *inFlight) doneAll(recs []*record) {
	if len(recs) == 0 {
		return
	}
	f.mu.Lock()
	for _, rec := range recs {
		rec.part.inFlight--
	}
	f.n -= len(recs)
	f.gauge.Set(float64(f.n))
	f.cond.Broadcast()
	f.mu.Unlock()
}

// done counts one of p's records out, after its last piece ended and its
// tracker was told, and wakes the waits.
func (f *inFlight) done(p *partition) {
	f.mu.Lock()
	p.inFlight--
	f.n--
	f.gauge.Set(float64(f.n))
	f.cond.Broadcast()
	f.mu.Unlock()
}

// waitCapacity blocks while MaxInFlight records are in flight or fetching
// is paused; false once ctx ends.
func (f *inFlight) waitCapacity(ctx context.Context) bool {
	stop := context.AfterFunc(ctx, f.wake)
	defer stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	for (f.n-f.lentN() >= f.max || f.paused()) && ctx.Err() == nil {
		f.cond.Wait()
	}
	return ctx.Err() == nil
}

// lend takes p's records in flight out of the count waitCapacity bounds
// (lent), or puts them back: p's partition waits for the ledger's fence
// and is not fetched meanwhile (refused.go), so its records are the ones
// polled before it began to wait, and they must not stop the polls of the
// other partitions. Each waiting partition adds at most what the budget
// held (MaxInFlight and a poll) when it began to wait. Capped in all, two
// partitions waiting with the budget between them would stop the polls of
// a third (TestTwoWaitingPartitionsBacklogsDoNotHoldAThirdPartitionsRecords).
func (f *inFlight) lend(p *partition, lent bool) {
	f.mu.Lock()
	if lent {
		if f.lent == nil {
			f.lent = map[*partition]bool{}
		}
		f.lent[p] = true
	} else {
		delete(f.lent, p)
	}
	f.cond.Broadcast()
	f.mu.Unlock()
}

// lentN is how many records in flight are lent. Called with mu held.
func (f *inFlight) lentN() int {
	n := 0
	for p := range f.lent {
		n += p.inFlight
	}
	return n
}

// waitDrained waits up to timeout for every record in flight to end.
func (f *inFlight) waitDrained(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	t := time.AfterFunc(timeout, f.wake)
	defer t.Stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.n > 0 && time.Now().Before(deadline) {
		f.cond.Wait()
	}
	if f.n > 0 {
		f.log.Warn("shutting down with records in flight; they will be redelivered", "records", f.n)
	}
}

// waitIdle waits until deadline for every record of parts to end (a
// revoke gives its partitions' records RevokeTimeout); once stopping ends,
// until drainBy at the latest (a revoke during the shutdown waits no
// longer than its drain).
func (f *inFlight) waitIdle(parts []*partition, deadline time.Time, stopping context.Context, drainBy func() time.Time) {
	t := time.AfterFunc(time.Until(deadline), f.wake)
	defer t.Stop()
	var mu sync.Mutex
	var stopT *time.Timer
	defer context.AfterFunc(stopping, func() {
		mu.Lock()
		defer mu.Unlock()
		if d := drainBy(); !d.IsZero() {
			stopT = time.AfterFunc(time.Until(d), f.wake)
		}
		f.wake()
	})()
	defer func() {
		mu.Lock()
		if stopT != nil {
			stopT.Stop()
		}
		mu.Unlock()
	}()
	f.mu.Lock()
	defer f.mu.Unlock()
	for busy(parts) {
		until := deadline
		if d := drainBy(); stopping.Err() != nil && !d.IsZero() && d.Before(until) {
			until = d
		}
		if !time.Now().Before(until) {
			break
		}
		f.cond.Wait()
	}
}

// busy says whether any of parts has records in flight. Called with
// inFlight.mu held.
func busy(parts []*partition) bool {
	for _, p := range parts {
		if p.inFlight > 0 {
			return true
		}
	}
	return false
}
