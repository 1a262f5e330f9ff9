package ledger_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/sink/ledger"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func open(t *testing.T) *ledger.Postgres {
	t.Helper()
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	// Migrations are idempotent: a second run (every start runs them) is a no-op.
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	cfg := ledger.DefaultConfig()
	cfg.URL = url
	l, err := ledger.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// sqlLog records the statements a pool sends.
type sqlLog struct {
	mu  sync.Mutex
	sql []string
}

func (s *sqlLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.mu.Lock()
	s.sql = append(s.sql, d.SQL)
	s.mu.Unlock()
	return ctx
}
func (s *sqlLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (s *sqlLog) sent(part string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range s.sql {
		if strings.Contains(q, part) {
			return true
		}
	}
	return false
}

// openTraced is open with a pool that records its statements in the
// returned log.
func openTraced(t *testing.T) (*ledger.Postgres, *sqlLog) {
	t.Helper()
	pc, err := pgxpool.ParseConfig(open(t).Pool().Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	log := &sqlLog{}
	pc.ConnConfig.Tracer = log
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return ledger.NewFromPool(pool), log
}

func (s *sqlLog) reset() {
	s.mu.Lock()
	s.sql = nil
	s.mu.Unlock()
}

func intent(id, payload string) processor.Intent {
	return processor.Intent{
		WorkflowID: "activity-a:" + id, ActivityID: "a", EventID: id, IDRule: "field",
		PayloadHash: sha256.Sum256([]byte(payload)), Topic: "events", Partition: 1, Offset: 7,
	}
}

func claim(t *testing.T, l *ledger.Postgres, in ...processor.Intent) []processor.Verdict {
	t.Helper()
	cl, err := l.Claim(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if len(cl) != len(in) {
		t.Fatalf("%d verdicts for %d intents", len(cl), len(in))
	}
	v := make([]processor.Verdict, len(cl))
	for i, c := range cl {
		v[i] = c.Verdict
	}
	return v
}

func want(t *testing.T, got []processor.Verdict, want ...processor.Verdict) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("verdicts %v, want %v", got, want)
	}
}

func TestClaimLifecycle(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	e1 := intent("e1", "p1")

	want(t, claim(t, l, e1), processor.VerdictNew)
	// Claimed, not started: a crash happened; the redelivered record re-drives.
	want(t, claim(t, l, e1), processor.VerdictRedrive)
	if err := l.MarkStarted(ctx, []processor.Started{{WorkflowID: e1.WorkflowID, RunID: "run-1"}}); err != nil {
		t.Fatal(err)
	}
	want(t, claim(t, l, e1), processor.VerdictDuplicate)
	// Same ID, different payload: a conflict, recorded once per record.
	c := intent("e1", "p2")
	want(t, claim(t, l, c), processor.VerdictConflict)
	want(t, claim(t, l, c), processor.VerdictConflict)

	var state, run string
	var attempts int
	var hash []byte
	err := l.Pool().QueryRow(ctx, `SELECT state, run_id, attempts, payload_hash FROM dedup_ledger WHERE workflow_id = $1`, e1.WorkflowID).Scan(&state, &run, &attempts, &hash)
	if err != nil {
		t.Fatal(err)
	}
	if state != "started" || run != "run-1" || attempts != 2 || string(hash) != string(e1.PayloadHash[:]) {
		t.Fatalf("row: state=%s run=%s attempts=%d, hash kept=%v", state, run, attempts, string(hash) == string(e1.PayloadHash[:]))
	}
	counts, err := l.Count(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if counts != (ledger.Counts{Started: 1, Conflicts: 1}) {
		t.Fatalf("counts %+v", counts)
	}
}

func TestClaimPendingConflictIsNotRedriven(t *testing.T) {
	l := open(t)
	want(t, claim(t, l, intent("e1", "p1")), processor.VerdictNew)
	want(t, claim(t, l, intent("e1", "other")), processor.VerdictConflict)
	want(t, claim(t, l, intent("e1", "p1")), processor.VerdictRedrive)
}

// The mixed batch, claimed in both of Claim's modes: straight through the
// upsert (the previous batch was mostly new), and after the read of
// started rows (the previous batch was mostly started, as in a replay).
func TestClaimMixedBatch(t *testing.T) {
	for _, afterReplay := range []bool{false, true} {
		t.Run(fmt.Sprintf("after_replay=%v", afterReplay), func(t *testing.T) { claimMixedBatch(t, afterReplay) })
	}
}

func claimMixedBatch(t *testing.T, afterReplay bool) {
	l, sql := openTraced(t)
	ctx := context.Background()
	started, pending := intent("started", "s"), intent("pending", "p")
	claim(t, l, started, pending)
	if err := l.MarkStarted(ctx, []processor.Started{{WorkflowID: started.WorkflowID, RunID: "r"}}); err != nil {
		t.Fatal(err)
	}
	if afterReplay {
		want(t, claim(t, l, started), processor.VerdictDuplicate) // all started
	}
	// The mode shows in the statements sent: the read of started rows
	// (WITH ORDINALITY) comes first after the replay only.
	sql.reset()
	defer func() {
		if read := sql.sent("WITH ORDINALITY"); read != afterReplay {
			t.Fatalf("read of started rows sent: %v, want %v", read, afterReplay)
		}
	}()
	batch := []processor.Intent{
		intent("fresh", "f"),       // new
		started,                    // duplicate of a started row
		pending,                    // re-drive
		intent("started", "s2"),    // conflict with a started row
		intent("fresh", "f"),       // same batch, same payload: the row's verdict (the router coalesces)
		intent("fresh", "f2"),      // same batch, other payload: conflict
		intent("fresh2", "x"),      // new
		intent("pending", "p-bad"), // conflict with a pending row
	}
	want(t, claim(t, l, batch...),
		processor.VerdictNew, processor.VerdictDuplicate, processor.VerdictRedrive, processor.VerdictConflict,
		processor.VerdictNew, processor.VerdictConflict, processor.VerdictNew, processor.VerdictConflict)
	counts, err := l.Count(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if counts != (ledger.Counts{Pending: 3, Started: 1, Conflicts: 3}) {
		t.Fatalf("counts %+v", counts)
	}
}

// Two connections claim the same 500 IDs at once, in opposite orders, many
// times: every ID gets exactly one VerdictNew, and no claim fails (no
// deadlock: rows are locked in workflow ID order).
func TestConcurrentClaimsGiveExactlyOneNew(t *testing.T) {
	l1 := open(t)
	// A second pool on the same database: a second router.
	cfg := ledger.DefaultConfig()
	cfg.URL = l1.Pool().Config().ConnString()
	l2, err := ledger.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()

	const rounds, n = 20, 500
	for r := 0; r < rounds; r++ {
		a := make([]processor.Intent, n)
		b := make([]processor.Intent, n)
		for i := range a {
			a[i] = intent(fmt.Sprintf("r%d-e%d", r, i), "same")
			b[n-1-i] = a[i]
		}
		var wg sync.WaitGroup
		var va, vb []processor.Claimed
		var ea, eb error
		wg.Add(2)
		go func() { defer wg.Done(); va, ea = l1.Claim(context.Background(), a) }()
		go func() { defer wg.Done(); vb, eb = l2.Claim(context.Background(), b) }()
		wg.Wait()
		if ea != nil || eb != nil {
			t.Fatalf("round %d: %v / %v", r, ea, eb)
		}
		for i := range a {
			x, y := va[i].Verdict, vb[n-1-i].Verdict
			news := 0
			for _, v := range []processor.Verdict{x, y} {
				switch v {
				case processor.VerdictNew:
					news++
				case processor.VerdictRedrive:
				default:
					t.Fatalf("round %d id %d: unexpected verdict %v", r, i, v)
				}
			}
			if news != 1 {
				t.Fatalf("round %d id %d: %v and %v, want exactly one new", r, i, x, y)
			}
		}
	}
}

func TestDeadLetterLog(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	a := processor.DeadLetter{Topic: "events", Partition: 1, Offset: 10, Reason: "undecodable", Error: "x", DLQTopic: "events.dlq"}
	b := a
	b.WorkflowID, b.Reason = "activity-a:e1", "conflict" // same record, another workflow: another entry
	c := a
	c.Offset = 11
	got, err := l.Written(ctx, []processor.DeadLetter{a, b, c})
	if err != nil || fmt.Sprint(got) != "[false false false]" {
		t.Fatalf("before: %v %v", got, err)
	}
	if err := l.Record(ctx, []processor.DeadLetter{a, b}); err != nil {
		t.Fatal(err)
	}
	if err := l.Record(ctx, []processor.DeadLetter{a}); err != nil { // a redelivery records again: no-op
		t.Fatal(err)
	}
	got, err = l.Written(ctx, []processor.DeadLetter{c, b, a})
	if err != nil || fmt.Sprint(got) != "[false true true]" {
		t.Fatalf("after: %v %v", got, err)
	}
}

func TestPurgeKeepsPendingAndRecentRows(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	old, recent, pending := intent("old", "a"), intent("recent", "b"), intent("pending-old", "c")
	claim(t, l, old, recent, pending)
	if err := l.MarkStarted(ctx, []processor.Started{{WorkflowID: old.WorkflowID, RunID: "r1"}, {WorkflowID: recent.WorkflowID, RunID: "r2"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Pool().Exec(ctx, `UPDATE dedup_ledger SET started_at = now() - interval '48 hours', claimed_at = now() - interval '48 hours' WHERE workflow_id IN ($1, $2)`, old.WorkflowID, pending.WorkflowID); err != nil {
		t.Fatal(err)
	}
	n, err := l.Purge(ctx, 24*time.Hour, 1)
	if err != nil || n != 1 {
		t.Fatalf("purged %d (%v), want 1", n, err)
	}
	counts, _ := l.Count(ctx)
	if counts != (ledger.Counts{Pending: 1, Started: 1}) {
		t.Fatalf("after purge %+v, want the pending and the recent row", counts)
	}
	// A purged ID is new again: the ledger forgot it (Temporal's retention is the guard left).
	want(t, claim(t, l, old), processor.VerdictNew)
}

// The event-loss hole: a pending row (a crash between claim and start) is
// redelivered in a batch where a conflicting copy of the event (read from
// another partition) comes before the original. The original must be
// re-driven, not skipped as a duplicate of the conflicting copy; the same
// when the row is started (the original is a duplicate, the copy a
// conflict), in both claim modes.
func TestClaimConflictBeforeOriginal(t *testing.T) {
	for _, afterReplay := range []bool{false, true} {
		t.Run(fmt.Sprintf("after_replay=%v", afterReplay), func(t *testing.T) {
			l := open(t)
			ctx := context.Background()
			a, b := intent("e1", "A"), intent("e1", "B")
			b.Partition = 2
			done := intent("done", "d")
			want(t, claim(t, l, a, done), processor.VerdictNew, processor.VerdictNew)
			if err := l.MarkStarted(ctx, []processor.Started{{WorkflowID: done.WorkflowID, RunID: "r"}}); err != nil {
				t.Fatal(err)
			}
			if afterReplay {
				want(t, claim(t, l, done), processor.VerdictDuplicate)
			}
			want(t, claim(t, l, b, a, b), processor.VerdictConflict, processor.VerdictRedrive, processor.VerdictConflict)
			if err := l.MarkStarted(ctx, []processor.Started{{WorkflowID: a.WorkflowID, RunID: "r"}}); err != nil {
				t.Fatal(err)
			}
			want(t, claim(t, l, b, a), processor.VerdictConflict, processor.VerdictDuplicate)
			// Neither absent row nor conflict: the first copy of a new ID
			// claims it, later copies with its payload share its verdict.
			n1, n2 := intent("n", "1"), intent("n", "2")
			want(t, claim(t, l, n2, n1, n2), processor.VerdictNew, processor.VerdictConflict, processor.VerdictNew)
		})
	}
}

// A row started by another router after this claim's snapshot was taken
// (the claim waits on that router's row lock) is a duplicate, not a
// re-drive: re-driving it would call Temporal again, and under an allow_*
// reuse policy could start a second execution.
func TestClaimSeesRowStartedAfterItsSnapshot(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	a := intent("e1", "A")
	want(t, claim(t, l, a), processor.VerdictNew)

	tx, err := l.Pool().Begin(ctx) // the other router's MarkStarted, not yet committed
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `UPDATE dedup_ledger SET state = 'started', run_id = 'r' WHERE workflow_id = $1`, a.WorkflowID); err != nil {
		t.Fatal(err)
	}
	got := make(chan []processor.Verdict, 1)
	go func() {
		cl, err := l.Claim(ctx, []processor.Intent{a})
		if err != nil || len(cl) != 1 {
			t.Error(cl, err)
			got <- nil
			return
		}
		got <- []processor.Verdict{cl[0].Verdict}
	}()
	// Wait until the claim is blocked on the row lock: its snapshot is
	// taken and says pending.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int
		if err := l.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%INSERT INTO dedup_ledger%'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the claim never waited on the row lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	want(t, <-got, processor.VerdictDuplicate)
}

// A row whose record was dead-lettered (Temporal refused its start for
// good) ends dead_lettered, not pending forever; replaying the record
// (dlq replay after the cause is fixed) claims it again.
func TestDeadLetteredRowEndsAndCanBeReclaimed(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	a, other := intent("e1", "A"), intent("e1", "other")
	want(t, claim(t, l, a), processor.VerdictNew)
	if err := l.MarkDeadLettered(ctx, []string{a.WorkflowID}); err != nil {
		t.Fatal(err)
	}
	counts, err := l.Count(ctx)
	if err != nil || counts != (ledger.Counts{DeadLettered: 1}) {
		t.Fatalf("counts %+v (%v), want one dead_lettered row", counts, err)
	}
	want(t, claim(t, l, other, a), processor.VerdictConflict, processor.VerdictRedrive)
	if counts, _ = l.Count(ctx); counts != (ledger.Counts{Pending: 1, Conflicts: 1}) {
		t.Fatalf("counts %+v, want the row pending again", counts)
	}
}

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

// Routers and workers that start together on an empty database all run
// the migrations at once: none may fail (goose serialises them with a
// PostgreSQL advisory lock).
func TestMigrateConcurrently(t *testing.T) {
	for round := 0; round < 10; round++ {
		url := pgtest.NewDatabase(t)
		var wg sync.WaitGroup
		errs := make(chan error, 6)
		for i := 0; i < 6; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); errs <- ledger.Migrate(context.Background(), url) }()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}

// An error that waiting does not fix (here: the table is gone, as with a
// missing migration or permission) is marked permanent, so the router
// stops with it instead of reporting PostgreSQL down forever.
func TestPermanentErrorsAreMarked(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	if _, err := l.Pool().Exec(ctx, `ALTER TABLE dedup_ledger RENAME TO dedup_ledger_gone`); err != nil {
		t.Fatal(err)
	}
	_, err := l.Claim(ctx, []processor.Intent{intent("e1", "A")})
	if err == nil || !processor.IsPermanent(err) {
		t.Fatalf("claim on a missing table: %v, want a permanent error", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Claim(cctx, []processor.Intent{intent("e1", "A")}); err == nil || processor.IsPermanent(err) {
		t.Fatalf("claim with a cancelled context: %v, want a non-permanent error", err)
	}
}

// A re-run is recorded after its start: MarkStarted moves a started row to
// the newer generation's run, and a mark of an older generation (a slow
// router's) changes nothing. A duplicate's verdict carries the recorded
// generation, which the router's re-run starts after.
func TestMarkStartedMovesToNewerGenerationsOnly(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	a := intent("e1", "A")
	claim(t, l, a)
	mark := func(run string, gen int) {
		t.Helper()
		if err := l.MarkStarted(ctx, []processor.Started{{WorkflowID: a.WorkflowID, RunID: run, Generation: gen}}); err != nil {
			t.Fatal(err)
		}
	}
	row := func() (string, int) {
		t.Helper()
		var run string
		var gen int
		if err := l.Pool().QueryRow(ctx, `SELECT coalesce(run_id, ''), generation FROM dedup_ledger WHERE workflow_id = $1`, a.WorkflowID).Scan(&run, &gen); err != nil {
			t.Fatal(err)
		}
		return run, gen
	}
	mark("run-1", 1)
	if cl, err := l.Claim(ctx, []processor.Intent{a}); err != nil || cl[0] != (processor.Claimed{Verdict: processor.VerdictDuplicate, Generation: 1}) {
		t.Fatalf("claim after start: %+v %v, want a duplicate of generation 1", cl, err)
	}
	mark("run-3", 3)
	mark("run-2", 2) // late: an older generation's mark
	mark("run-3b", 3)
	if run, gen := row(); run != "run-3" || gen != 3 {
		t.Fatalf("row after marks of generations 3, 2, 3: run %q generation %d, want run-3 generation 3", run, gen)
	}
	if cl, err := l.Claim(ctx, []processor.Intent{a}); err != nil || cl[0] != (processor.Claimed{Verdict: processor.VerdictDuplicate, Generation: 3}) {
		t.Fatalf("claim after the re-run: %+v %v, want a duplicate of generation 3", cl, err)
	}
}

// The purge walks the rows it deletes oldest first, in batches: rows that
// share one end time (a mark batch sets one started_at) across several
// batches all go, dead-lettered rows go by when they were dead-lettered,
// and nothing newer than the horizon or pending goes.
func TestPurgeInBatchesAlongTheEndTime(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	var started []processor.Started
	var all []processor.Intent
	for i := range 25 {
		in := intent(fmt.Sprint("old-", i), "p")
		all = append(all, in)
		started = append(started, processor.Started{WorkflowID: in.WorkflowID, RunID: "r"})
	}
	for i := range 5 {
		in := intent(fmt.Sprint("new-", i), "p")
		all = append(all, in)
		started = append(started, processor.Started{WorkflowID: in.WorkflowID, RunID: "r"})
	}
	dead, deadNew, pending := intent("dead", "p"), intent("dead-new", "p"), intent("pending", "p")
	all = append(all, dead, deadNew, pending)
	claim(t, l, all...)
	if err := l.MarkStarted(ctx, started); err != nil {
		t.Fatal(err)
	}
	if err := l.MarkDeadLettered(ctx, []string{dead.WorkflowID, deadNew.WorkflowID}); err != nil {
		t.Fatal(err)
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := l.Pool().Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	// 20 old rows share one end time, 5 have older ones of their own.
	exec(`UPDATE dedup_ledger SET started_at = now() - interval '48 hours' WHERE workflow_id LIKE 'activity-%:old-%'`)
	exec(`UPDATE dedup_ledger SET started_at = now() - interval '72 hours' - (substr(event_id, 5)::int * interval '1 minute')
		WHERE event_id IN ('old-0', 'old-1', 'old-2', 'old-3', 'old-4')`)
	exec(`UPDATE dedup_ledger SET updated_at = now() - interval '48 hours' WHERE event_id IN ('dead', 'pending')`)
	n, err := l.Purge(ctx, 24*time.Hour, 7)
	if err != nil || n != 26 {
		t.Fatalf("purged %d (%v), want the 25 old started rows and the old dead-lettered one", n, err)
	}
	counts, _ := l.Count(ctx)
	if counts != (ledger.Counts{Pending: 1, Started: 5, DeadLettered: 1}) {
		t.Fatalf("after the purge %+v, want the pending row, the 5 recent started rows and the recent dead-lettered one", counts)
	}
	if n, err := l.Purge(ctx, 24*time.Hour, 7); err != nil || n != 0 {
		t.Fatalf("a second purge deleted %d (%v)", n, err)
	}
}

// Each purge batch finds its victims along a partial index, never by
// scanning the ledger (which made a day's purge of a 50M-row ledger
// hundreds of full scans). The planner prefers a scan of a table this
// small, so sequential scans are priced out, as a big ledger prices them.
func TestPurgeBatchesUseTheEndTimeIndexes(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	conn, err := l.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	for state, index := range map[string]string{"started": "dedup_ledger_started", "dead_lettered": "dedup_ledger_dead_lettered"} {
		rows, err := conn.Query(ctx, `EXPLAIN `+ledger.PurgeStatements[state], "24 hours", 1000, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		rows.Close()
		text := strings.Join(plan, "\n")
		if !strings.Contains(text, index) || strings.Contains(text, "Seq Scan") {
			t.Errorf("purging %s rows does not read them along %s:\n%s", state, index, text)
		}
	}
}
