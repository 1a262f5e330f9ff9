package ledger_test

import (
	"context"
	"testing"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
)

// An error that waiting does not fix (here: the table is gone, as with a
// missing migration or permission) is marked permanent, so the router
// stops with it instead of reporting PostgreSQL down forever.
func TestPermanentErrorsAreMarked(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	if _, err := l.Pool().Exec(ctx, `ALTER TABLE dedup_ledger RENAME TO dedup_ledger_gone`); err != nil {
		t.Fatal(err)
	}
	_, err := l.Claim(ctx, []decide.Intent{intent("e1", "A")})
	if err == nil || !processor.IsPermanent(err) {
		t.Fatalf("claim on a missing table: %v, want a permanent error", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Claim(cctx, []decide.Intent{intent("e1", "A")}); err == nil || processor.IsPermanent(err) {
		t.Fatalf("claim with a cancelled context: %v, want a non-permanent error", err)
	}
}
