package bench

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dedupio/dedup/internal/testsupport/pgcluster"
)

// TestLedgerScaleAndRetentionSmall runs the ledger-size stages at small
// sizes on a throwaway PostgreSQL (or DATABASE_URL): every claim gets its
// verdict at each size, and the retention comparison removes the same
// day of rows both ways, with PostgreSQL refusing a workflow_id-only key
// on the partitioned ledger and a second claim there inserting a second
// row. The timings are printed, not asserted.
func TestLedgerScaleAndRetentionSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e := ledgerEnv(ctx, t)

	const claims = 2000
	pts, err := e.LedgerScale(ctx, []int{10000, 50000}, claims, false)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(pts, "", "  ")
	t.Logf("ledger scale: %s", b)
	if len(pts) != 2 || pts[0].New.N != claims || pts[1].Duplicate.N != claims || pts[1].Scattered.N != claims || pts[1].Retry.N != claims {
		t.Fatalf("want 2 points of %d claims each way", claims)
	}
	for _, pt := range pts {
		// A new row writes at least its heap tuple and index entry; a
		// duplicate claim of a started row writes nothing of its own (the
		// WAL position is the cluster's: leave room for other writers).
		if pt.NewWAL < 100 || pt.DupWAL >= pt.NewWAL/2 {
			t.Errorf("%d rows: WAL per new row %.0f B, per duplicate %.0f B", pt.Rows, pt.NewWAL, pt.DupWAL)
		}
	}
	if pts[1].TableMiB <= pts[0].TableMiB {
		t.Errorf("the table did not grow from %d to %d rows: %.1f MiB, then %.1f", pts[0].Rows, pts[1].Rows, pts[0].TableMiB, pts[1].TableMiB)
	}

	// Time-ordered IDs: the same verdicts (claimAll checks each). The
	// test cluster writes no full-page images (full_page_writes off), so
	// the WAL they save is the benchmark's to show, not this test's.
	ord, err := e.LedgerScale(ctx, []int{10000, 50000}, claims, true)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = json.MarshalIndent(ord, "", "  ")
	t.Logf("ledger scale, ordered IDs: %s", b)
	if len(ord) != 2 || ord[1].New.N != claims || ord[1].Duplicate.N != claims {
		t.Fatalf("ordered IDs: want 2 points of %d claims each way", claims)
	}

	const rows, days = 50000, 7
	r, err := e.RetentionCost(ctx, rows, days)
	b, _ = json.MarshalIndent(r, "", "  ")
	t.Logf("retention cost: %s", b)
	if err != nil {
		t.Fatal(err)
	}
	// The oldest day is a seventh of the rows: the purge may take a few
	// more (rows that aged past the cut-off while the test ran).
	day := int64(rows / days)
	if r.DropPartition.Rows < day || r.DropPartition.Rows > day+1 || r.Delete.Rows < day || r.Delete.Rows > day+rows/100 {
		t.Errorf("removed %d rows by DELETE and %d by dropping the partition, want about %d each", r.Delete.Rows, r.DropPartition.Rows, day)
	}
	if r.Delete.TableAfter != r.Delete.TableBefore || r.DropPartition.TableAfter >= r.DropPartition.TableBefore {
		t.Errorf("heap bytes: DELETE %d -> %d (want unchanged), DROP %d -> %d (want smaller)",
			r.Delete.TableBefore, r.Delete.TableAfter, r.DropPartition.TableBefore, r.DropPartition.TableAfter)
	}
	if r.Delete.WALBytes <= r.DropPartition.WALBytes {
		t.Errorf("WAL: DELETE %d bytes, DROP %d, want DELETE's larger", r.Delete.WALBytes, r.DropPartition.WALBytes)
	}
	// PostgreSQL: a unique key on a partitioned table must contain the
	// partition key (feature_not_supported), so the claim's conflict
	// target has no index (invalid_column_reference), and a second claim
	// of one workflow ID at another time is a second row.
	if !strings.HasPrefix(r.UniqueWorkflowIDError, "0A000") || !strings.HasPrefix(r.OnConflictError, "42P10") || r.RowsAfterTwoClaims != 2 {
		t.Errorf("partitioned ledger: key %q, ON CONFLICT %q, %d rows after two claims; want 0A000, 42P10, 2",
			r.UniqueWorkflowIDError, r.OnConflictError, r.RowsAfterTwoClaims)
	}
}

// TestTheScaleStagesRecordsLieAsATopicsDo: in each batch the stage
// claims, every partition's records are a run of consecutive offsets, as
// in a router's poll, so that its replay is read as a router's is (one
// scan a run); and no two intents share a record.
func TestTheScaleStagesRecordsLieAsATopicsDo(t *testing.T) {
	const first = 1_000_000
	in := uuidIntents(1, 3*ClaimBatch, false, first)
	seen := map[[2]int64]bool{}
	for b := 0; b < len(in); b += ClaimBatch {
		lo, hi, n := map[int32]int64{}, map[int32]int64{}, map[int32]int64{}
		for _, x := range in[b : b+ClaimBatch] {
			rec := [2]int64{int64(x.Partition), x.Offset}
			if seen[rec] {
				t.Fatalf("two intents at partition %d offset %d", x.Partition, x.Offset)
			}
			seen[rec] = true
			if x.Offset < first {
				t.Fatalf("offset %d before the first %d", x.Offset, first)
			}
			if _, ok := lo[x.Partition]; !ok {
				lo[x.Partition] = x.Offset
			}
			lo[x.Partition], hi[x.Partition] = min(lo[x.Partition], x.Offset), max(hi[x.Partition], x.Offset)
			n[x.Partition]++
		}
		if len(n) != 12 {
			t.Fatalf("batch %d: %d partitions, want 12", b/ClaimBatch, len(n))
		}
		for p, c := range n {
			if c < 16 || hi[p]-lo[p]+1 != c {
				t.Errorf("batch %d, partition %d: %d records over offsets %d to %d, want a run of 16 or more consecutive ones", b/ClaimBatch, p, c, lo[p], hi[p])
			}
		}
	}
}

// TestOrderedFillAndIntents checks the ledger-scale stage's time-ordered
// IDs are what it says: UUIDv7s of the row's claim time, in the fill
// (SQL) as in the claims (Go), sorting as they were written.
func TestOrderedFillAndIntents(t *testing.T) {
	in := uuidIntents(1, 50, true, 0)
	for i, x := range in {
		if len(x.EventID) != 36 || x.EventID[14] != '7' || !strings.ContainsRune("89ab", rune(x.EventID[19])) {
			t.Fatalf("intent %d: %q is not a UUIDv7", i, x.EventID)
		}
		if i > 0 && x.EventID[:13] < in[i-1].EventID[:13] {
			t.Fatalf("intent %d: %q sorts before %q", i, x.EventID, in[i-1].EventID)
		}
	}
	ms, err := strconv.ParseInt(strings.ReplaceAll(in[0].EventID[:13], "-", ""), 16, 64)
	if err != nil || time.Since(time.UnixMilli(ms)).Abs() > time.Minute {
		t.Fatalf("%q: timestamp %d (%v), want about now", in[0].EventID, ms, err)
	}
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := ledgerEnv(ctx, t)
	pool, _, url, err := e.database(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer e.dropDatabase(ctx, pool, url)
	t0 := time.Now()
	if err := fillLedger(ctx, pool, "dedup_ledger", 0, 1000, 1000, t0, time.Hour, true, true); err != nil {
		t.Fatal(err)
	}
	// Every row's ID carries its claim time's milliseconds, version 7 and
	// variant 10, and sorting by ID is sorting by claim time.
	var wrongTime, outOfOrder int
	if err := pool.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE lpad(to_hex(floor(extract(epoch FROM claimed_at) * 1000)::bigint), 12, '0') <> replace(left(event_id, 13), '-', '')
	OR substr(event_id, 15, 1) <> '7' OR substr(event_id, 20, 1) NOT IN ('8', '9', 'a', 'b') OR length(event_id) <> 36),
	count(*) FILTER (WHERE claimed_at < prev)
FROM (SELECT event_id, claimed_at, lag(claimed_at) OVER (ORDER BY event_id) AS prev FROM dedup_ledger) x`).Scan(&wrongTime, &outOfOrder); err != nil {
		t.Fatal(err)
	}
	if wrongTime != 0 || outOfOrder != 0 {
		t.Errorf("ordered fill: %d rows whose ID is not the UUIDv7 of their claim time, %d out of order", wrongTime, outOfOrder)
	}
}

// ledgerEnv is an Env on DATABASE_URL, or on a throwaway PostgreSQL
// stopped when the test ends.
func ledgerEnv(ctx context.Context, t *testing.T) *Env {
	// A database of its own per stage either way (on DATABASE_URL's
	// server too): the stages fill and check the whole ledger.
	in := &Infra{DatabaseURL: os.Getenv("DATABASE_URL"), CreateDatabases: true}
	if in.DatabaseURL == "" {
		pg, err := pgcluster.Start(ctx, pgcluster.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pg.Stop() })
		in.DatabaseURL, in.CreateDatabases = pg.URL(), true
	}
	return &Env{In: in, Log: slog.New(slog.DiscardHandler)}
}
