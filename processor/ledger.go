package processor

import "context"

// Ledger is what the router needs from the claim ledger. Both methods must
// be idempotent: the router retries them after transient errors.
type Ledger interface {
	// Claim returns one verdict per intent, in order.
	Claim(ctx context.Context, intents []Intent) ([]Verdict, error)
	// MarkStarted records that Temporal has the workflows.
	MarkStarted(ctx context.Context, started []Started) error
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
