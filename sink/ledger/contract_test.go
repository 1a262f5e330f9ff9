package ledger_test

import (
	"context"
	"testing"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/ledgertest"
)

// The PostgreSQL ledger keeps the Ledger contract; it is the reference
// the router tests' fake (processor's TestFakeLedgerContract) follows.
func TestLedgerContract(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T) ledgertest.Subject {
		l := open(t)
		return ledgertest.Subject{Ledger: l, Row: func(ctx context.Context, id string) (decide.LedgerState, string, bool, error) {
			rows, err := l.Lookup(ctx, []string{id})
			e, ok := rows[id]
			return e.State, e.RunID, ok, err
		}}
	})
}
