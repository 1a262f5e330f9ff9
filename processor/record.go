package processor

import (
	"context"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor/decide"
)

type topicPartition struct {
	topic     string
	partition int32
}

// partition is the committer's state for one partition the router owns.
type partition struct {
	tp        topicPartition
	ctx       context.Context // cancelled when the partition is revoked or lost
	cancel    context.CancelFunc
	tr        *tracker
	inFlight  int   // records tracked and not ended; guarded by inFlight.mu
	committed int64 // offset last committed by us; -1 none
	revoking  bool  // no new records are taken
	// assignedAt is the group's committed offset at assignment; -1 none.
	assignedAt int64
	watch      *watched // this assignment in the lag watch
	// epoch is this assignment's ownership in the ledger (Ledger.Own),
	// carried by every claim and mark of its records (fence); it changes
	// when the router takes the partition again (committer.fenced).
	group string
	epoch atomic.Int64
	// backoffUntil (Unix nanoseconds; 0 none) is when this assignment's
	// backoff ends after taking it again failed (committer.backOff): until
	// then it is kept under the refused fence, so that a write of it sent
	// again before is refused again.
	backoffUntil atomic.Int64
	// revokeBegan is revoking as read without the committer's lock
	// (backsOff): a partition being revoked does not back off.
	revokeBegan atomic.Bool
}

// fence is the partition's ownership as its records' writes carry it now.
func (p *partition) fence() decide.Fence { return decide.Fence{Group: p.group, Epoch: p.epoch.Load()} }

// record is one polled Kafka record while it is in flight. Its pieces of
// work (one per intent, or one dead-letter write) each end once, through
// committer.end or endAll; the record finishes when the last one ends.
type record struct {
	part     *partition
	kr       *kgo.Record
	offset   int64
	epoch    int32
	pending  int  // pieces of work not yet ended; guarded by inFlight.mu
	failed   bool // something was abandoned: never committable; guarded by inFlight.mu
	finished bool // set by the tracker
	// trace is the record's span (tracing.go); nil when tracing is off.
	trace context.Context
}
