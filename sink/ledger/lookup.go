package ledger

import (
	"context"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/sink/ledger/ledgerread"
)

// Entry is what the ledger holds for one workflow ID: decide.LedgerEntry,
// which the producer client names too.
type Entry = decide.LedgerEntry

// Lookup reads the rows of workflowIDs in one read-only query (ledgerread's,
// the one copy of it); an ID the ledger does not know (never claimed, or
// purged) is absent from the map. It takes no lock and writes nothing: the
// producer client and the ingress use it to answer a producer (the same key
// again, another payload, a status), never to decide a start.
// payloadHashes, when given, are the hashes of the copies being sent, one
// per workflow ID (ledgerread.Lookup).
func (p *Postgres) Lookup(ctx context.Context, workflowIDs []string, payloadHashes ...[32]byte) (map[string]Entry, error) {
	out, err := ledgerread.Lookup(ctx, p.pool, workflowIDs, payloadHashes...)
	return out, p.classify(err)
}
