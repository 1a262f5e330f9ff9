package ledger

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/dedupio/dedup/processor"
)

// The fence (migration 00013, dedup_partition_owners): each partition of
// each consumer group has an epoch, which Own bumps when a router is
// assigned the partition. Claims and marks carry the epoch of their
// record's partition (decide.Fence) and take a share lock on the owner
// rows they carry, in the same statement as their writes, and write only
// the rows whose epoch still holds; Own's update waits for those locks.
// So a write under an old epoch either commits before the new owner's
// bump returns (and the new owner's first claim sees it) or writes
// nothing. The locks are taken in (group, topic, partition) order, as
// Own takes its own, so that a claim and a bump never deadlock.

// fenceArgs are a write's distinct fences, sorted, as the statements'
// unnest arrays.
type fenceArgs struct {
	groups, topics []string
	parts          []int32
	epochs         []int64
}

func (f *fenceArgs) stale(i int) processor.PartitionEpoch {
	return processor.PartitionEpoch{Group: f.groups[i], Topic: f.topics[i], Partition: f.parts[i], Epoch: f.epochs[i]}
}

// fenceParamOIDs are the types of a statement's fence parameters
// (fenceCTE), in order.
var fenceParamOIDs = []uint32{oidTextArray, oidTextArray, oidInt4Array, oidInt8Array}

// encodedSize is the room the fences' parameters take (encode).
func (f *fenceArgs) encodedSize() int {
	n := 4 * 20
	for i := range f.groups {
		n += 4 + len(f.groups[i]) + 4 + len(f.topics[i]) + 4 + 4 + 4 + 8
	}
	return n
}

// encode appends the fences' four parameters to b (binary arrays:
// arrays.go) and points params at them.
func (f *fenceArgs) encode(b []byte, params *[4][]byte) []byte {
	n := len(f.epochs)
	b = appendArray(b, &params[0], n, oidText, func(b []byte, i int) []byte { return appendTextElem(b, f.groups[i]) })
	b = appendArray(b, &params[1], n, oidText, func(b []byte, i int) []byte { return appendTextElem(b, f.topics[i]) })
	b = appendArray(b, &params[2], n, oidInt4, func(b []byte, i int) []byte { return appendInt4Elem(b, f.parts[i]) })
	return appendArray(b, &params[3], n, oidInt8, func(b []byte, i int) []byte { return appendInt8Elem(b, f.epochs[i]) })
}

// args are the fences' parameters as pgx's own Query is given them.
func (f *fenceArgs) args() []any { return []any{f.groups, f.topics, f.parts, f.epochs} }

// fencesOf collects the distinct fenced partitions of n writes (at(i)
// is write i's partition and fence; unfenced writes are left out).
func fencesOf(n int, at func(i int) processor.PartitionEpoch) fenceArgs {
	var all []processor.PartitionEpoch
	for i := 0; i < n; i++ {
		if pe := at(i); pe.Epoch != 0 && (len(all) == 0 || all[len(all)-1] != pe) {
			all = append(all, pe)
		}
	}
	slices.SortFunc(all, func(a, b processor.PartitionEpoch) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition),
			cmp.Compare(a.Epoch, b.Epoch))
	})
	all = slices.Compact(all)
	f := fenceArgs{groups: make([]string, len(all)), topics: make([]string, len(all)), parts: make([]int32, len(all)),
		epochs: make([]int64, len(all))}
	for i, pe := range all {
		f.groups[i], f.topics[i], f.parts[i], f.epochs[i] = pe.Group, pe.Topic, pe.Partition, pe.Epoch
	}
	return f
}

// fenceCTE share-locks the owner rows of the fences given as the
// statement's parameters $g (groups), $g+1 (topics), $g+2 (partitions)
// and $g+3 (epochs) whose epoch still holds; a row the bump changed
// meanwhile is read again at its new version (READ COMMITTED), so a fence
// bumped before this statement's lock is not held.
func fenceCTE(g int) string {
	return fmt.Sprintf(`fence AS MATERIALIZED (
	SELECT o.consumer_group, o.topic, o.kafka_partition, o.epoch FROM dedup_partition_owners o
	JOIN unnest($%d::text[], $%d::text[], $%d::int4[], $%d::int8[]) AS f(consumer_group, topic, kafka_partition, epoch)
		ON o.consumer_group = f.consumer_group AND o.topic = f.topic AND o.kafka_partition = f.kafka_partition AND o.epoch = f.epoch
	ORDER BY o.consumer_group, o.topic, o.kafka_partition
	FOR SHARE OF o
)`, g, g+1, g+2, g+3)
}

// ownSQL bumps the epochs (an absent row starts at 1), in the fence's
// lock order; its row locks wait for the claims and marks that hold a
// share lock on the old epoch. A row a later generation holds is left
// alone (and not returned) unless $6 (confirmed by the coordinator).
const ownSQL = `
INSERT INTO dedup_partition_owners AS o (consumer_group, topic, kafka_partition, owner, generation)
SELECT $1, t.topic, t.kafka_partition, $2, $3 FROM unnest($4::text[], $5::int4[]) AS t(topic, kafka_partition)
ORDER BY t.topic, t.kafka_partition
ON CONFLICT (consumer_group, topic, kafka_partition) DO UPDATE SET epoch = o.epoch + 1, owner = EXCLUDED.owner,
	generation = EXCLUDED.generation, updated_at = now()
WHERE o.generation <= EXCLUDED.generation OR $6::bool
RETURNING o.topic, o.kafka_partition, o.epoch`

// Own bumps the partitions' epochs for o.Group and returns the new ones,
// in order, 0 for a partition a later generation holds
// (processor.Ledger).
func (p *Postgres) Own(ctx context.Context, o processor.Ownership) ([]int64, error) {
	group, parts := o.Group, o.Parts
	if len(parts) == 0 {
		return nil, nil
	}
	topics, ps := make([]string, len(parts)), make([]int32, len(parts))
	for i, pr := range parts {
		topics[i], ps[i] = pr.Topic, pr.Partition
	}
	rows, err := p.pool.Query(ctx, ownSQL, group, o.Member, o.Generation, topics, ps, o.Confirmed)
	if err != nil {
		return nil, p.classify(fmt.Errorf("taking %d partitions of group %q in the ledger: %w", len(parts), group, err))
	}
	defer rows.Close()
	got := make(map[processor.PartitionRef]int64, len(parts))
	for rows.Next() {
		var pr processor.PartitionRef
		var epoch int64
		if err := rows.Scan(&pr.Topic, &pr.Partition, &epoch); err != nil {
			return nil, p.classify(fmt.Errorf("reading the partitions' epochs: %w", err))
		}
		got[pr] = epoch
	}
	if err := rows.Err(); err != nil {
		return nil, p.classify(fmt.Errorf("taking %d partitions of group %q in the ledger: %w", len(parts), group, err))
	}
	epochs := make([]int64, len(parts))
	for i, pr := range parts {
		epochs[i] = got[pr] // 0: a later generation holds it
	}
	return epochs, nil
}

// staleSQL names the fences that no longer hold (read after a write that
// found one of them stale).
const staleSQL = `
SELECT f.n FROM unnest($1::text[], $2::text[], $3::int4[], $4::int8[]) WITH ORDINALITY AS f(consumer_group, topic, kafka_partition, epoch, n)
LEFT JOIN dedup_partition_owners o
	ON o.consumer_group = f.consumer_group AND o.topic = f.topic AND o.kafka_partition = f.kafka_partition
WHERE o.epoch IS DISTINCT FROM f.epoch`

// fenced returns the refusal naming the fences of f that no longer hold.
// An epoch only grows, so a fence found stale once stays stale.
func (p *Postgres) fenced(ctx context.Context, f fenceArgs) error {
	rows, err := p.pool.Query(ctx, staleSQL, f.groups, f.topics, f.parts, f.epochs)
	if err != nil {
		return fmt.Errorf("reading which partitions moved: %w", err)
	}
	defer rows.Close()
	var e processor.FencedError
	for rows.Next() {
		var n int64
		if err := rows.Scan(&n); err != nil {
			return fmt.Errorf("reading which partitions moved: %w", err)
		}
		e.Stale = append(e.Stale, f.stale(int(n-1)))
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading which partitions moved: %w", err)
	}
	if len(e.Stale) == 0 {
		// Cannot happen (epochs only grow); say so rather than claim.
		return fmt.Errorf("ledger fence: a fence did not hold, yet every epoch reads as carried")
	}
	return &e
}
