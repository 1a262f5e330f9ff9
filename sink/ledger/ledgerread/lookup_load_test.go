package ledgerread_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/sink/ledger"
	"github.com/dedupio/dedup/sink/ledger/ledgerread"
)

func claimAll(t *testing.T, l *ledger.Postgres, in []decide.Intent) []decide.Verdict {
	t.Helper()
	cl, err := l.Claim(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	v := make([]decide.Verdict, len(cl))
	for i, c := range cl {
		v[i] = c.Verdict
	}
	return v
}

// TestLookupStaysFlatUnderAMillionConflicts is the load test of issue 39's
// item 4 (docs/bench/conflicts.md holds its figures): a million
// conflicting requests through the real claim path (a thousand keys, each
// sent a thousand payloads other than its first, in claims of a thousand),
// then the lookup of a key without conflicts, of a key with a thousand,
// and, for comparison, the lookup query of the version before (its
// lateral scan of dedup_conflicts) on the same rows. It prints the
// latencies and asserts the plan, not a time: the lookup reads
// dedup_conflicts along its index, never the whole table. Skipped under
// -short (about two minutes on two cores).
func TestLookupStaysFlatUnderAMillionConflicts(t *testing.T) {
	if testing.Short() {
		t.Skip("a load test: a million conflicting claims")
	}
	const keys, payloads = 1000, 1000
	l, reader := migrated(t)
	ctx := context.Background()
	in := func(k, p int, off int64) decide.Intent {
		id := fmt.Sprintf("load-%d", k)
		return decide.Intent{WorkflowID: "activity-a:" + id, ActivityID: "a", EventID: id, IDRule: "field",
			PayloadHash: sha256.Sum256(fmt.Appendf(nil, "payload-%d", p)), Topic: "events", Partition: 0, Offset: off}
	}
	batch := make([]decide.Intent, keys)
	for k := range keys {
		batch[k] = in(k, 0, int64(k))
	}
	claimAll(t, l, batch)
	quiet := in(keys, 0, 0) // a key no conflicting copy is sent for
	claimAll(t, l, []decide.Intent{quiet})
	loud := in(0, 0, 0).WorkflowID

	lookup := func(id string) (median, p99 time.Duration) {
		const n = 400
		d := make([]time.Duration, n)
		for i := range d {
			t0 := time.Now()
			if _, err := reader.Lookup(ctx, []string{id}); err != nil {
				t.Fatal(err)
			}
			d[i] = time.Since(t0)
		}
		slices.Sort(d)
		return d[n/2], d[n*99/100]
	}
	m, p := lookup(quiet.WorkflowID)
	t.Logf("before: lookup of a key without conflicts: median %s, p99 %s (0 conflict rows)", m, p)

	t0 := time.Now()
	off := int64(keys)
	for p := 1; p <= payloads; p++ {
		for k := range keys {
			batch[k] = in(k, p, off)
			off++
		}
		for _, c := range claimAll(t, l, batch) {
			if c != decide.VerdictConflict {
				t.Fatalf("payload %d: verdict %s, want conflict", p, c)
			}
		}
	}
	var rows int64
	if err := l.Pool().QueryRow(ctx, `SELECT count(*) FROM dedup_conflicts`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d conflicting claims in %s: %d conflict rows", keys*payloads, time.Since(t0).Round(time.Second), rows)
	if _, err := l.Pool().Exec(ctx, `ANALYZE dedup_conflicts`); err != nil {
		t.Fatal(err)
	}
	m, p = lookup(quiet.WorkflowID)
	t.Logf("after: lookup of a key without conflicts: median %s, p99 %s", m, p)
	m, p = lookup(loud)
	t.Logf("after: lookup of a key with %d conflicting payloads: median %s, p99 %s", payloads, m, p)
	got, err := reader.Lookup(ctx, []string{loud})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("  its entry: %d copies over %d payload hashes (at most %d read)", got[loud].Conflicts, len(got[loud].ConflictHashes), ledgerread.MaxConflictHashes)

	// The version before's lookup on the same rows: its subquery by
	// workflow ID, which had no index to use.
	old := `SELECT l.workflow_id, c.n FROM dedup_ledger l CROSS JOIN LATERAL (
	SELECT count(*) AS n, array_agg(DISTINCT d.payload_hash ORDER BY d.payload_hash) AS hashes
	FROM dedup_conflicts d WHERE d.workflow_id || '' = l.workflow_id) c WHERE l.workflow_id = $1`
	d := make([]time.Duration, 20)
	for i := range d {
		t0 := time.Now()
		if _, err := l.Pool().Exec(ctx, old, quiet.WorkflowID); err != nil {
			t.Fatal(err)
		}
		d[i] = time.Since(t0)
	}
	slices.Sort(d)
	t.Logf("the lookup before migration 00014 (no index), same rows, key without conflicts: median %s of %d", d[len(d)/2], len(d))

	var plan strings.Builder
	r, err := l.Pool().Query(ctx, `EXPLAIN `+ledgerread.LookupSQL, []string{quiet.WorkflowID}, schemas.LedgerKeys([]string{quiet.WorkflowID}),
		[]string{quiet.WorkflowID}, [][]byte{make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		var line string
		if err := r.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan.String(), "dedup_conflicts_workflow") || !strings.Contains(plan.String(), "dedup_conflicts_by_hash") || strings.Contains(plan.String(), "Seq Scan on dedup_conflicts") {
		t.Fatalf("the lookup does not read dedup_conflicts along dedup_conflicts_workflow (the conflicts seen last) and dedup_conflicts_by_hash (the payload hash asked):\n%s", plan.String())
	}
}
