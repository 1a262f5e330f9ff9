package processor

import (
	"errors"
	"fmt"
	"strings"

	"github.com/dedupio/dedup/processor/decide"
)

// Ownership is a router's claim to partitions, for Ledger.Own: its
// consumer group, member ID and the group generation of the assignment.
type Ownership struct {
	Group, Member string
	// Generation is the group generation the member was assigned the
	// partitions in. The ledger takes them only if no later generation
	// has: a member the group dropped, whose Own lands late (retried while
	// PostgreSQL was down), takes nothing from the member that replaced it.
	Generation int32
	// Confirmed: the group coordinator said just now that the member owns
	// the partitions (committer.assignedToMe): taken whatever generation
	// the ledger holds (a group deleted and made anew starts its
	// generations again).
	Confirmed bool
	Parts     []PartitionRef
}

// PartitionRef names a partition of a topic.
type PartitionRef struct {
	Topic     string
	Partition int32
}

func (p PartitionRef) String() string { return fmt.Sprintf("%s/%d", p.Topic, p.Partition) }

// PartitionEpoch is a partition's ownership as a write carried it.
type PartitionEpoch struct {
	Group     string
	Topic     string
	Partition int32
	Epoch     int64
}

// FencedError is the ledger's refusal of writes whose partitions moved to
// another owner (Stale: the ownership they carried). A Claim wrote nothing
// after the new owner's bump (see Ledger.Claim); a mark wrote the rows of
// the other partitions only. The router
// treats the partitions as lost: their records are abandoned uncommitted,
// for the new owner, and the rest of a claim is claimed again.
type FencedError struct {
	Stale []PartitionEpoch
}

func (e *FencedError) Error() string {
	ps := make([]string, len(e.Stale))
	for i, p := range e.Stale {
		ps[i] = fmt.Sprintf("%s/%d (group %q, epoch %d)", p.Topic, p.Partition, p.Group, p.Epoch)
	}
	return "ledger fence: " + strings.Join(ps, ", ") + " moved to another owner since this router took it; its rows were not changed"
}

// Has says whether the refusal names the partition at that epoch.
func (e *FencedError) Has(topic string, partition int32, f decide.Fence) bool {
	for _, p := range e.Stale {
		if p.Topic == topic && p.Partition == partition && p.Group == f.Group && p.Epoch == f.Epoch {
			return true
		}
	}
	return false
}

// IsFenced returns the fence's refusal in err's chain, if any.
func IsFenced(err error) (*FencedError, bool) {
	var f *FencedError
	ok := errors.As(err, &f)
	return f, ok
}

func isFenced(err error) bool {
	_, ok := IsFenced(err)
	return ok
}
