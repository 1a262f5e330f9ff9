package ledger

import (
	"math/rand/v2"
	"testing"

	"github.com/dedupio/dedup/processor"
)

// The known read's runs hold every record once, in its partition's run,
// and no run spans more than runSpan offsets for each of its records,
// whatever the order and spread of the records (a poll's, a compacted
// topic's with gaps, records of several topics at the same offsets).
func TestTheKnownReadsRunsSpanAtMostTwiceTheirRecords(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 2))
	for range 200 {
		var recs []processor.KnownRecord
		for range 1 + rng.IntN(300) {
			off := int64(rng.IntN(200))
			if rng.IntN(10) == 0 {
				off += int64(rng.IntN(1 << 40))
			}
			recs = append(recs, processor.KnownRecord{Topic: []string{"a", "b"}[rng.IntN(2)], Partition: int32(rng.IntN(3)), Offset: off})
		}
		runs, runOf := knownRuns(recs)
		count := make([]int, len(runs))
		for i, rec := range recs {
			k := runOf[i]
			if k < 1 || int(k) > len(runs) {
				t.Fatalf("record %d in run %d of %d", i, k, len(runs))
			}
			r := runs[k-1]
			if r.topic != rec.Topic || r.partition != rec.Partition || rec.Offset < r.first || rec.Offset > r.last {
				t.Fatalf("record %+v in run %+v", rec, r)
			}
			count[k-1]++
		}
		for k, r := range runs {
			if count[k] != r.records || count[k] == 0 {
				t.Fatalf("run %+v holds %d records", r, count[k])
			}
			if span := r.last - r.first + 1; span > int64(runSpan*r.records) {
				t.Fatalf("run %+v spans %d offsets for %d records", r, span, r.records)
			}
		}
	}
	// A poll's records, consecutive: one run a partition.
	var poll []processor.KnownRecord
	for p := range int32(2) {
		for off := range int64(500) {
			poll = append(poll, processor.KnownRecord{Topic: "events", Partition: p, Offset: 1000 + off})
		}
	}
	if runs, _ := knownRuns(poll); len(runs) != 2 {
		t.Fatalf("a poll of two partitions' consecutive records: %d runs, want 2", len(runs))
	}
}
