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
