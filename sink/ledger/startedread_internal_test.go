package ledger

import (
	"math"
	"testing"
)

// A partition's records in a batch are a run when there are at least
// minRunRecords of them and they span at most runSpan times as many
// offsets; records without a topic (the scheduler's fires) never are, nor
// are records whose offsets lie at the ends of int64 (their span does not
// overflow into a small one). The runs are numbered from 1 in partition
// order, and a partition that has none has number 0.
func TestARunIsAPartitionsRecordsCloseTogether(t *testing.T) {
	routes := map[recordRef]int{}
	add := func(topic string, partition int32, offsets ...int64) {
		for _, o := range offsets {
			routes[recordRef{topic, partition, o}]++
		}
	}
	span := func(first, n, step int64) []int64 {
		var out []int64
		for k := range n {
			out = append(out, first+k*step)
		}
		return out
	}
	add("events", 3, span(100, minRunRecords, 1)...)                          // consecutive: a run
	add("events", 1, span(0, minRunRecords, runSpan)...)                      // every other offset: 31 offsets for 16 records, a run
	add("events", 2, span(0, minRunRecords-1, 1)...)                          // one too few
	add("events", 4, append(span(0, minRunRecords-1, 1), 2*minRunRecords)...) // 33 offsets for 16 records: too spread
	add("audit", 3, span(100, minRunRecords, 1)...)                           // another topic, same offsets: a run of its own
	add("", 0, 0)                                                             // fires
	for k := range int64(minRunRecords) {
		routes[recordRef{"", 0, k}]++
	}
	add("events", 5, append(span(math.MaxInt64-8, 8, 1), span(math.MinInt64, 8, 1)...)...) // the ends of int64
	s := &claimScratch{runNum: map[partitionRef]int64{}}
	runs := s.runsOf(routes)
	want := []run{
		{topic: "audit", partition: 3, first: 100, last: 100 + minRunRecords - 1, records: minRunRecords},
		{topic: "events", partition: 1, first: 0, last: (minRunRecords - 1) * runSpan, records: minRunRecords},
		{topic: "events", partition: 3, first: 100, last: 100 + minRunRecords - 1, records: minRunRecords},
	}
	if len(runs.list) != len(want) {
		t.Fatalf("runs %+v, want %+v", runs.list, want)
	}
	for k := range want {
		if runs.list[k] != want[k] {
			t.Errorf("run %d: %+v, want %+v", k+1, runs.list[k], want[k])
		}
	}
	for p, n := range map[partitionRef]int64{{"audit", 3}: 1, {"events", 1}: 2, {"events", 3}: 3, {"events", 2}: 0, {"events", 4}: 0, {"events", 5}: 0, {"", 0}: 0} {
		if got := runs.of(p.topic, p.partition); got != n {
			t.Errorf("%s/%d: run %d, want %d", p.topic, p.partition, got, n)
		}
	}
}
