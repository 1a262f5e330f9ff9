package processor

import (
	"math/rand/v2"
	"testing"
)

func TestTrackerCommitsOnlyTheContiguousPrefix(t *testing.T) {
	tr := newTracker()
	recs := make([]*record, 6)
	for i, off := range []int64{10, 11, 12, 15, 16, 17} { // a gap (compaction) after 12
		recs[i] = &record{offset: off, epoch: 3}
		tr.add(recs[i])
	}
	if tr.next != -1 {
		t.Fatal("next set before anything finished")
	}
	if tr.finish(recs[1]) || tr.finish(recs[2]) || tr.next != -1 {
		t.Fatalf("committable past an unfinished record: next=%d", tr.next)
	}
	if !tr.finish(recs[0]) || tr.next != 13 || tr.nextEpoch != 3 {
		t.Fatalf("next=%d, want 13", tr.next)
	}
	tr.finish(recs[5])
	if tr.next != 13 {
		t.Fatalf("next=%d, want 13 while 15 and 16 run", tr.next)
	}
	tr.finish(recs[3])
	tr.finish(recs[4])
	if tr.next != 18 || tr.outstanding() != 0 {
		t.Fatalf("next=%d outstanding=%d, want 18 and 0", tr.next, tr.outstanding())
	}
}

// Random finishing orders over many records: next is always one past the
// largest offset whose predecessors are all finished.
func TestTrackerRandomOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 50; round++ {
		tr := newTracker()
		n := 3000
		recs := make([]*record, n)
		for i := range recs {
			recs[i] = &record{offset: int64(i)}
			tr.add(recs[i])
		}
		done := make([]bool, n)
		p := 0
		for _, i := range rng.Perm(n) {
			tr.finish(recs[i])
			done[i] = true
			for p < n && done[p] {
				p++
			}
			want := int64(p)
			if p == 0 {
				want = -1
			}
			if tr.next != want {
				t.Fatalf("round %d: next=%d, want %d", round, tr.next, want)
			}
		}
	}
}
