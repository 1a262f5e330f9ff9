package ledger

import (
	"slices"
	"sync"
)

// claimScratch is a claim's working memory, by intent and by workflow ID,
// kept for the next claim (claimScratches): a replay's claim of 1,000 IDs
// made 0.23 MB of it anew every batch (BenchmarkClaimStartedRows: 0.35 MB
// a claim, 0.12 MB since). Each claim gets it zeroed, and nothing of it
// outlives the claim (Claim's verdicts are a slice of their own):
// TestAClaimGetsNoAnswerOfTheClaimBeforeIt.
type claimScratch struct {
	first   []int32
	seen    map[string]int32
	keys    [][16]byte
	sums    [][32]byte // sumsBuf, or nil when the handle remembers no started rows
	sumsBuf [][32]byte
	ps      []probe
	uniq    []int
	got     []stored
	// The read of started rows' (startedread.go).
	routes   map[recordRef]int
	byRecord []bool
	answered []bool
	seenAt   []int
	runOf    []int64
	runs     []run
	runNum   map[partitionRef]int64
	// runsInOrder's: by intent, whether in uniq and its partition in
	// runs; by partition, its run; the partitions in order; the runs.
	inUniq  []bool
	partOf  []int32
	partRun []int64
	order   []int
	kept    []run
}

var claimScratches = sync.Pool{New: func() any {
	return &claimScratch{seen: make(map[string]int32), routes: make(map[recordRef]int), runNum: make(map[partitionRef]int64)}
}}

// maxScratchIntents bounds the claims whose scratch is kept: a map keeps
// the room it grew to, so the scratch of a larger claim is let go.
const maxScratchIntents = 1 << 14

// getClaimScratch is a scratch for a claim of n intents, its slices n
// long (ps and seenAt empty, sums nil unless withSums) and zeroed, its
// maps empty.
func getClaimScratch(n int, withSums bool) *claimScratch {
	s := claimScratches.Get().(*claimScratch)
	s.first = zeroed(s.first, n)
	s.keys = zeroed(s.keys, n)
	s.sumsBuf = zeroed(s.sumsBuf, n)
	s.sums = nil
	if withSums {
		s.sums = s.sumsBuf
	}
	s.ps = slices.Grow(s.ps[:0], n)
	s.got = zeroed(s.got, n)
	return s
}

// uniqOf, byRecordOf and answeredOf are the scratch's slices of n zeroed
// elements.
func (s *claimScratch) uniqOf(n int) []int { s.uniq = zeroed(s.uniq, n); return s.uniq }
func (s *claimScratch) byRecordOf(n int) []bool {
	s.byRecord = zeroed(s.byRecord, n)
	return s.byRecord
}
func (s *claimScratch) runOfOf(n int) []int64 { s.runOf = zeroed(s.runOf, n); return s.runOf }
func (s *claimScratch) answeredOf(n int) []bool {
	s.answered = zeroed(s.answered, n)
	return s.answered
}

// release keeps s for the next claim, its maps emptied and the payload
// hashes got points at let go, unless the claim was larger than
// maxScratchIntents.
func (s *claimScratch) release() {
	if cap(s.first) > maxScratchIntents || len(s.seen) > maxScratchIntents || len(s.routes) > maxScratchIntents || len(s.runNum) > maxScratchIntents {
		return
	}
	clear(s.seen)
	clear(s.routes)
	clear(s.runNum)
	clear(s.runs)
	s.runs = s.runs[:0]
	clear(s.kept)
	s.kept = s.kept[:0]
	clear(s.got)
	claimScratches.Put(s)
}

// zeroed is b resized to n elements, all zero, in b's array when it has
// room.
func zeroed[E any](b []E, n int) []E {
	if cap(b) < n {
		return make([]E, n)
	}
	b = b[:n]
	clear(b)
	return b
}
