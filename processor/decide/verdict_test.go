package decide

import (
	"testing"
)

// The verdict rule, row by row: the state matters only once the payload
// is the row's and this claim did not insert the row.
func TestClaimVerdict(t *testing.T) {
	cases := []struct {
		state              LedgerState
		sameHash, inserted bool
		want               Claimed
		reclaims           bool
	}{
		{LedgerPending, true, true, Claimed{Verdict: VerdictNew, Generation: 1}, false},
		{LedgerPending, false, true, Claimed{Verdict: VerdictConflict}, false}, // a later copy of the batch, another payload
		{LedgerPending, true, false, Claimed{Verdict: VerdictRedrive, Generation: 2}, false},
		{LedgerPending, false, false, Claimed{Verdict: VerdictConflict}, false},
		{LedgerStarted, true, false, Claimed{Verdict: VerdictDuplicate, Generation: 2}, false},
		{LedgerStarted, false, false, Claimed{Verdict: VerdictConflict}, false},
		{LedgerDeadLettered, true, false, Claimed{Verdict: VerdictRedrive, Generation: 2}, true},
		{LedgerDeadLettered, false, false, Claimed{Verdict: VerdictConflict}, false},
	}
	for _, c := range cases {
		got, reclaims := ClaimVerdict(c.state, c.sameHash, c.inserted, 2)
		if got != c.want || reclaims != c.reclaims {
			t.Errorf("ClaimVerdict(%s, sameHash=%v, inserted=%v, 2) = %+v, reclaims %v; want %+v, %v",
				c.state, c.sameHash, c.inserted, got, reclaims, c.want, c.reclaims)
		}
	}
}
