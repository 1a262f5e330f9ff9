package ledger_test

import (
	"context"
	"testing"
	"time"
)

// Pending rows that nobody re-drives are visible: how old the oldest is,
// and how many are older than the alerting age.
func TestPendingStats(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	claim(t, l, intent("fresh", "a"), intent("stale", "b"), intent("staler", "c"))
	if _, err := l.Pool().Exec(ctx, `UPDATE dedup_ledger SET updated_at = now() - interval '1 hour' WHERE event_id = 'stale';
		UPDATE dedup_ledger SET updated_at = now() - interval '2 hours' WHERE event_id = 'staler'`); err != nil {
		t.Fatal(err)
	}
	st, err := l.PendingStats(ctx, 30*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if st.Stale != 2 || st.Oldest < 2*time.Hour-time.Minute || st.Oldest > 2*time.Hour+time.Minute {
		t.Fatalf("pending stats %+v, want 2 stale, oldest about 2h", st)
	}
}
