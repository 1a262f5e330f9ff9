package processor

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// committer owns partition membership and offsets. Its guarantee: an offset
// is committed only when every record before it in its partition finished
// (the contiguous finished prefix, tracker); nothing is committed for a
// partition after it is revoked (beyond what finished within RevokeTimeout)
// or lost; commits carry the group generation, so a zombie's late commit is
// rejected by the broker; a commit never moves a partition's committed
// offset backwards (it reads the group's committed offsets first and leaves
// out a partition another member committed past since this one was assigned
// it: a stale owner that the broker let back into the group with its old
// position must not rewind the group); a final commit happens on shutdown.
// It counts records in and out of the in-flight accounting (flight,
// inflight.go: capacity, drain, the revoke's wait), and tells the lag watch
// (lag, lag.go: consumer lag, offsets deleted by retention before they were
// read) what it was assigned, polled, committed and forgot.
//
// Every other component finishes its work on a record through end (or
// endAll, a batch's at once: the claimer's duplicates), and the poll loop
// tracks a poll through trackAll (committer_batch.go); nothing else
// touches offsets. The commit of the finished prefix and its ticker are
// in commit.go; partitions assigned, revoked and lost, and the fence's
// re-take, in assign.go.
//
// Lock order: commitMu, then mu, then flight.mu or lag.mu (never both);
// health.mu comes before mu and flight.mu (health.update calls setPaused
// under it; the committer and flight read the pause without a lock).
// flight and lag take no other lock, and no one waits on flight's
// condition holding commitMu or mu: revoked waits, then commits; track and
// end (trackAll and endAll) hold mu only to count in and out.
type committer struct {
	cfg Config
	log *slog.Logger
	m   *metrics
	cl  *kgo.Client
	adm *kadm.Client
	// trace records commits (tracing.go); nil: off.
	trace *routerTracer
	// groupCommitted reads the group's committed offsets of topics (kadm,
	// unless a test sets it).
	groupCommitted func(ctx context.Context, topics []string) (map[topicPartition]int64, error)
	paused         func() bool // fetching is paused (a dependency fails)
	// parent is the parent of every partition's context: cancelled when
	// the router's work stops.
	parent context.Context
	// own takes partitions in the ledger's fence (Ledger.Own, retried)
	// and returns their epochs.
	own func(ctx context.Context, o Ownership) ([]int64, error)

	// hurry makes the start pool's marker send its marks at once while a
	// revoke waits for its records (startPool.hurry); nil: no pool (a
	// test's committer).
	hurry func() (done func())

	// fenceLock (one token) serialises fenced (a partition is taken again
	// once), and guards retakes; a caller whose ctx ends stops waiting.
	fenceLock chan struct{}
	retakes   map[*partition]retake
	// stopping ends when the router stops polling (Run, stopPolling): an
	// Own of the assignment callback gives up then, and a revoke in
	// progress keeps to the shutdown's bounds (revoked).
	stopping context.Context
	stop     context.CancelFunc
	stopMu   sync.Mutex
	stopAt   time.Time // when the router stopped polling; zero before

	// commitMu makes each commit one step: read the finished prefix, read
	// the group's offsets, send, record what landed. Without it the
	// ticker's commit could read an older prefix, then send it after the
	// revoke committed a newer one, moving the offset backwards. Never held
	// while waiting for records (revoked waits first, then commits).
	commitMu sync.Mutex

	// flight counts the records in flight, under its own lock.
	flight *inFlight
	// lag exports lag and checks gaps, under its own lock.
	lag *lagWatch

	mu     sync.Mutex
	parts  map[topicPartition]*partition
	owning int // partitions assigned and being taken in the ledger's fence (not in parts yet)
	joined bool
}

func newCommitter(cfg Config, log *slog.Logger, m *metrics, parent context.Context, paused func() bool) *committer {
	stopping, stop := context.WithCancel(parent)
	return &committer{cfg: cfg, log: log, m: m, parent: parent, paused: paused, parts: map[topicPartition]*partition{},
		flight: newInFlight(cfg.MaxInFlight, paused, m.inFlight, log), lag: newLagWatch(cfg, log, m),
		fenceLock: make(chan struct{}, 1), stopping: stopping, stop: stop}
}

// track registers a polled record with its partition, or returns nil if the
// partition is no longer ours (or is being revoked). The record starts with
// one piece of work; the caller sets how many it really has
// (flight.setPending) before handing any of them out.
func (c *committer) track(kr *kgo.Record) *record {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.parts[topicPartition{kr.Topic, kr.Partition}]
	if p == nil || p.revoking {
		return nil
	}
	c.lag.polled(p.watch, kr.Offset)
	rec := &record{part: p, kr: kr, offset: kr.Offset, epoch: kr.LeaderEpoch, pending: 1}
	p.tr.add(rec)
	c.flight.add(p)
	return rec
}

// end ends one of a record's pieces of work. ok=false abandons it: the
// record is never committed by this router and will be redelivered.
//
// The last piece finishes the record in its partition's tracker, under mu
// and only if the partition is still this assignment, then counts it out
// of flight: whoever sees the partition with nothing in flight finds the
// record in the prefix.
func (c *committer) end(rec *record, ok bool) {
	last, committable := c.flight.endPiece(rec, ok)
	if !last {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p := rec.part
	if committable && c.parts[p.tp] == p {
		p.tr.finish(rec)
	}
	letGo(rec)
	c.flight.done(p)
}

// hurryMarks is hurry, or nothing without a start pool.
func (c *committer) hurryMarks() (done func()) {
	if c.hurry == nil {
		return func() {}
	}
	return c.hurry()
}

// ready says whether the router has joined the group.
func (c *committer) ready() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.joined
}

// setPaused exports how many owned partitions are paused, and wakes the
// poll loop's wait for capacity (waitCapacity asks whether it is paused).
func (c *committer) setPaused(paused bool) {
	c.mu.Lock()
	n := 0
	if paused {
		// Partitions still being taken in the ledger's fence are
		// assigned and wait too (PostgreSQL down at an assignment).
		n = len(c.parts) + c.owning
	}
	c.m.pausedPartitions.Set(float64(n))
	c.mu.Unlock()
	c.flight.wake()
}
