package processor

import (
	"context"

	"github.com/dedupio/dedup/processor/decide"
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
	Claim(ctx context.Context, intents []decide.Intent) ([]decide.Claimed, error)
	// MarkStarted records that Temporal has the workflows: a pending row
	// becomes started, and a started row moves to a newer generation's
	// run (a re-run); a mark of an older generation changes nothing, and
	// so does a mark whose fence no longer holds. It sets each entry's
	// Recorded: whether the row is started at the entry's generation or a
	// newer one after the call (also when it returns a *FencedError for
	// others; false for all on any other error).
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
