package processor

import (
	"context"

	"github.com/dedupio/dedup/processor/decide"
)

// A copy whose start was marked while its claim was in progress ends as
// that start's waiter (startPool.marked): the claimer brackets each claim
// (claimBegins, claimEnds), the marker notes the starts whose marks left
// their rows started (markedStarted), and submitClaimed ends such a copy
// instead of starting it again.

// submitClaimed submits the start of a copy the claimer claimed (verdict
// new or re-drive: its claim inserted the row or read it pending), as
// submit does, unless a start of the workflow here was marked since the
// claim began, its mark left the row started, and it left the pool
// (marked). The copy then ends as that start's waiter would have
// (started): the row was started after the copy's read. Nothing is
// submitted. Under one lock with the in-flight map, so that no start
// leaves the pool between the two looks.
func (s *startPool) submitClaimed(ctx context.Context, rec *record, req decide.StartRequest) (waits, started bool) {
	s.mu.Lock()
	if waits, gone := s.joinLocked(rec, req, false); waits {
		s.mu.Unlock()
		if gone {
			s.end(rec, false)
		}
		return true, false
	}
	if _, ok := s.marked[req.WorkflowID]; ok {
		s.mu.Unlock()
		return false, true
	}
	j := &job{rec: rec, req: req}
	s.starting[req.WorkflowID] = j
	s.mu.Unlock()
	s.enqueue(ctx, j)
	return false, false
}

// claimBegins opens a claim's window for marked: the claimer calls it
// before it asks the ledger; claimEnds closes it, after the dispatch.
func (s *startPool) claimBegins() {
	s.mu.Lock()
	s.claiming = true
	s.mu.Unlock()
}

func (s *startPool) claimEnds() {
	s.mu.Lock()
	s.claiming = false
	clear(s.marked)
	s.mu.Unlock()
}

// markedStarted notes, before j leaves the pool (done), that its mark left
// its row started (Started.Recorded), if a claim is in progress (marked).
func (s *startPool) markedStarted(j *job) {
	s.mu.Lock()
	if s.claiming && s.starting[j.req.WorkflowID] == j {
		s.marked[j.req.WorkflowID] = struct{}{}
	}
	s.mu.Unlock()
}
