package processor_test

import (
	"testing"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/ledgertest"
)

// The router tests' fake ledger keeps the Ledger contract, as sink/ledger
// does (its TestLedgerContract): the suite is the same.
func TestFakeLedgerContract(t *testing.T) {
	ledgertest.Run(t, func(*testing.T) ledgertest.Subject {
		l, row := processor.NewFakeLedger()
		return ledgertest.Subject{Ledger: l, Row: row}
	})
}
