package decide

import (
	"fmt"
	"time"
)

// Verdict is the ledger's answer to a claim.
type Verdict uint8

const (
	// VerdictNew is the first claim of this workflow ID; start it.
	VerdictNew Verdict = iota + 1
	// VerdictRedrive is a row claimed before but never marked started (a crash
	// between claim and start, or a start still in flight elsewhere); start
	// it again: the deterministic workflow ID makes that safe.
	VerdictRedrive
	// VerdictDuplicate is a row already started; skip it (under an allow_*
	// reuse policy, ask Temporal whether its last run may run again). A
	// copy of an ID claimed earlier in the same batch is not a duplicate:
	// every copy gets the ID's verdict (ClaimVerdict).
	VerdictDuplicate
	// VerdictConflict is an ID claimed with a different payload; never
	// start it, keep it for inspection.
	VerdictConflict
)

func (v Verdict) String() string {
	switch v {
	case VerdictNew:
		return "new"
	case VerdictRedrive:
		return "redrive"
	case VerdictDuplicate:
		return "duplicate"
	case VerdictConflict:
		return "conflict"
	}
	return fmt.Sprintf("verdict(%d)", uint8(v))
}

// Claimed is the ledger's answer for one intent.
type Claimed struct {
	Verdict Verdict
	// Generation is the run the claim is for, with VerdictNew (1) and
	// VerdictRedrive: the starter derives the start's request ID from it.
	// With VerdictDuplicate it is the generation of the recorded run (a
	// re-run starts a later one).
	Generation int
}

// LedgerState is the state of a ledger row, stored as its text
// (dedup_ledger.state in sink/ledger, which names the type ledger.State).
// processor.Ledger's methods move a row between the states:
//
//	(no row) --Claim--> pending --MarkStarted--> started (never leaves; a re-run moves its generation)
//	pending --MarkDeadLettered--> dead_lettered --Claim with the row's payload--> pending
//
// It is declared here, beside the verdict rule (ClaimVerdict) that reads
// it, because every ledger (sink/ledger, the router tests' fake) and
// every reader of one (the operators' tools, the producer client) needs
// the states, and none of them may import another.
type LedgerState string

const (
	// LedgerPending is a row claimed and not started yet (a start in
	// flight, or a crash between claim and start): the next claim
	// re-drives it.
	LedgerPending LedgerState = "pending"
	// LedgerStarted is a row whose workflow Temporal has (the run of the
	// row's generation); every later copy is a duplicate.
	LedgerStarted LedgerState = "started"
	// LedgerDeadLettered is a row whose start Temporal refused for good:
	// its record went to the dead-letter topic; a claim with the row's
	// payload (the record replayed) claims it again.
	LedgerDeadLettered LedgerState = "dead_lettered"
)

// LedgerEntry is what a ledger holds for one workflow ID, as its readers
// see it (sink/ledger's Lookup, the read-only sink/ledger/ledgerread, the
// producer client's LedgerReader). It is declared here, beside
// LedgerState, so that the ledger and the client name one type without
// importing each other; sink/ledger calls it ledger.Entry.
type LedgerEntry struct {
	WorkflowID string
	EventID    string
	IDRule     string
	// State is pending (claimed, not started yet), started or
	// dead_lettered.
	State       LedgerState
	PayloadHash [32]byte
	// RunID is the Temporal run the row was marked started with (the
	// latest generation's); empty before.
	RunID      string
	Generation int
	// Topic, Partition and Offset are where the claiming record was read.
	Topic     string
	Partition int32
	Offset    int64
	ClaimedAt time.Time
	UpdatedAt time.Time
	// Conflicts counts the copies with another payload recorded for this
	// workflow ID (dedup_conflicts: a row per distinct payload with its
	// count of copies), over the payloads seen last, at most
	// ledgerread.MaxConflictHashes of them.
	Conflicts int64
	// ConflictHashes are the distinct payload hashes of those copies, in
	// byte order: a copy whose hash is among them is a conflict the
	// routers have recorded already.
	ConflictHashes [][32]byte
}

// ClaimVerdict is the verdict rule of processor.Ledger.Claim, for one copy of a
// workflow ID: what the ledger holds for the ID when the claim reaches it
// (the row's state, whether the copy's payload hash equals the row's,
// whether this claim inserted the row, the row's generation) decides the
// copy's answer:
//
//   - another payload than the row's: VerdictConflict (generation 0); the
//     row is not touched, whatever its state;
//   - a row this claim inserted (with the payload of the ID's first copy
//     in the batch): VerdictNew, generation 1, for every copy;
//   - a started row: VerdictDuplicate, with the row's generation (the
//     recorded run; a re-run under an allow_* policy starts a later one);
//   - a pending row: VerdictRedrive, with the row's generation;
//   - a dead_lettered row: VerdictRedrive too, and reclaims is true: the
//     copy claims the row again, which the ledger must write back to
//     pending.
//
// It is the one place of the rule: the ledgers (sink/ledger interprets its
// claim statement's row answer with it; the router tests' fake) and every
// reader that predicts or restates a claim's answer (dedup explain, the
// forecast of dedup offsets reset, the producer client) call it. A
// prediction for an ID the ledger does not know passes inserted = true:
// the claim would insert it. The reuse policy is not an input: no ledger
// sees it; it changes what the router does with a duplicate (it asks
// Temporal whether the last run may run again), not the verdict.
func ClaimVerdict(state LedgerState, sameHash, inserted bool, generation int) (c Claimed, reclaims bool) {
	switch {
	case !sameHash:
		return Claimed{Verdict: VerdictConflict}, false
	case inserted:
		return Claimed{Verdict: VerdictNew, Generation: 1}, false
	case state == LedgerStarted:
		return Claimed{Verdict: VerdictDuplicate, Generation: generation}, false
	default: // pending: claimed before and not started (yet); or dead_lettered
		return Claimed{Verdict: VerdictRedrive, Generation: generation}, state == LedgerDeadLettered
	}
}
