package processor

import (
	"github.com/dedupio/dedup/processor/decide"

	"context"
	"time"
)

// Ledger is what the router needs from the claim ledger. Its methods must
// be idempotent: the router retries them after transient errors.
// processor/ledgertest is this contract as a test suite, which every
// implementation runs (sink/ledger's, the router tests' fake).
type Ledger interface {
	// Claim returns one verdict per intent, in order, each by
	// ClaimVerdict's rule. It answers per workflow ID: a copy whose
	// payload differs from the one the ID was claimed with is
	// VerdictConflict; every other copy gets the ID's verdict (VerdictNew
	// when this call claimed it, VerdictRedrive while it is claimed and
	// not started, VerdictDuplicate once started), wherever it stands in
	// the batch. An unclaimed ID is claimed with the payload of its first
	// copy in the batch. Which copy starts is the router's business
	// (startPool.submit).
	//
	// A claim whose intents carry a Fence is written only while every
	// fenced partition's epoch is still the intent's, checked in each of
	// its statements and ordered against Own; the statement that finds one
	// moved writes nothing, and the error is a *FencedError naming the
	// partitions that moved. Nearly every claim is one statement, so
	// nothing of it is written; a claim of two (the rare re-claim of a
	// dead_lettered row by a copy that is not its ID's first in the
	// batch, the record of conflicts) keeps what its first statement
	// wrote before the new owner's bump, like a claim that landed just
	// before it: the caller claims the rest again and gets their rows'
	// verdicts.
	Claim(ctx context.Context, intents []decide.Intent) ([]Claimed, error)
	// MarkStarted records that Temporal has the workflows: a pending row
	// becomes started, and a started row moves to a newer generation's
	// run (a re-run); a mark of an older generation changes nothing, and
	// so does a mark whose fence no longer holds.
	MarkStarted(ctx context.Context, started []Started) error
	// MarkDeadLettered ends claims whose start Temporal refused for good
	// (their records were dead-lettered); a later claim of the same
	// payload re-claims them. A mark whose fence no longer holds changes
	// nothing.
	MarkDeadLettered(ctx context.Context, rows []DeadLettered) error
	// Own makes o.Member the owner of o.Parts for o.Group: it bumps each
	// partition's epoch and returns the new epochs, in order; 0 for a
	// partition a later generation than o.Generation holds (unless
	// o.Confirmed), which it does not take. The router calls it when it
	// is assigned partitions, before it claims any of their records; from
	// then on, claims and marks fenced with an older epoch change nothing.
	// It waits for the claims and marks in flight under the old epoch, so
	// each one either lands before the new owner's first claim or not at
	// all.
	Own(ctx context.Context, o Ownership) ([]int64, error)
}

// LedgerState is the state of a ledger row, stored as its text
// (dedup_ledger.state in sink/ledger, which names the type ledger.State).
// The Ledger's methods move a row between the states:
//
//	(no row) --Claim--> pending --MarkStarted--> started (never leaves; a re-run moves its generation)
//	pending --MarkDeadLettered--> dead_lettered --Claim with the row's payload--> pending
//
// It is declared here, beside the Ledger interface whose contract names
// the states, because the router's tests (their fake ledger) need the
// states and the verdict rule (ClaimVerdict), and processor does not
// import sink/ledger (the sink depends on the processor, not the reverse).
type LedgerState string

const (
	// LedgerPending is a row claimed and not started yet (a start in flight, or a
	// crash between claim and start): work in flight, which the next claim
	// re-drives.
	LedgerPending LedgerState = "pending"
	// LedgerStarted is a row whose workflow Temporal has the workflow (the run of the row's
	// generation); every later copy is a duplicate.
	LedgerStarted LedgerState = "started"
	// LedgerDeadLettered is a row Temporal refused to start: it refused the start for good and the
	// record went to the dead-letter topic; a claim with the row's payload
	// (the record replayed) claims it again.
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

// ClaimVerdict is the verdict rule of Ledger.Claim, for one copy of a
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

// DeadLetter identifies one dead-letter write: a record, and the workflow
// for per-workflow reasons (conflict, temporal_permanent), else "".
type DeadLetter struct {
	Topic      string
	Partition  int32
	Offset     int64
	WorkflowID string
	Reason     string
	Error      string
	DLQTopic   string
}

// DeadLetterLog remembers dead-letter writes, so that a redelivered record
// is not dead-lettered twice. A crash between the write and Record can
// still duplicate one: the log narrows that window to one record batch.
type DeadLetterLog interface {
	// Written returns, for each entry, whether it was recorded already.
	Written(ctx context.Context, dls []DeadLetter) ([]bool, error)
	// Record records written entries; recording one twice is a no-op.
	Record(ctx context.Context, dls []DeadLetter) error
}
