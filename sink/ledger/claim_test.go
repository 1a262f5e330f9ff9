package ledger_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/url"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/sink/ledger"
)

func TestClaimLifecycle(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	e1 := intent("e1", "p1")

	want(t, claim(t, l, e1), decide.VerdictNew)
	// Claimed, not started: a crash happened; the redelivered record re-drives.
	want(t, claim(t, l, e1), decide.VerdictRedrive)
	if err := l.MarkStarted(ctx, []processor.Started{{WorkflowID: e1.WorkflowID, RunID: "run-1"}}); err != nil {
		t.Fatal(err)
	}
	want(t, claim(t, l, e1), decide.VerdictDuplicate)
	// Same ID, different payload: a conflict, recorded once per record.
	c := intent("e1", "p2")
	want(t, claim(t, l, c), decide.VerdictConflict)
	want(t, claim(t, l, c), decide.VerdictConflict)

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
	want(t, claim(t, l, intent("e1", "p1")), decide.VerdictNew)
	want(t, claim(t, l, intent("e1", "other")), decide.VerdictConflict)
	want(t, claim(t, l, intent("e1", "p1")), decide.VerdictRedrive)
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
		want(t, claim(t, l, started), decide.VerdictDuplicate) // all started
	}
	// The mode shows in the statements sent: the read of started rows
	// (WITH ORDINALITY) comes first after the replay only.
	sql.reset()
	defer func() {
		if read := sql.sent("LEFT JOIN LATERAL"); read != afterReplay {
			t.Fatalf("read of started rows sent: %v, want %v", read, afterReplay)
		}
	}()
	batch := []decide.Intent{
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
		decide.VerdictNew, decide.VerdictDuplicate, decide.VerdictRedrive, decide.VerdictConflict,
		decide.VerdictNew, decide.VerdictConflict, decide.VerdictNew, decide.VerdictConflict)
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
		a := make([]decide.Intent, n)
		b := make([]decide.Intent, n)
		for i := range a {
			a[i] = intent(fmt.Sprintf("r%d-e%d", r, i), "same")
			b[n-1-i] = a[i]
		}
		var wg sync.WaitGroup
		var va, vb []decide.Claimed
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
			for _, v := range []decide.Verdict{x, y} {
				switch v {
				case decide.VerdictNew:
					news++
				case decide.VerdictRedrive:
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
			want(t, claim(t, l, a, done), decide.VerdictNew, decide.VerdictNew)
			if err := l.MarkStarted(ctx, []processor.Started{{WorkflowID: done.WorkflowID, RunID: "r"}}); err != nil {
				t.Fatal(err)
			}
			if afterReplay {
				want(t, claim(t, l, done), decide.VerdictDuplicate)
			}
			want(t, claim(t, l, b, a, b), decide.VerdictConflict, decide.VerdictRedrive, decide.VerdictConflict)
			if err := l.MarkStarted(ctx, []processor.Started{{WorkflowID: a.WorkflowID, RunID: "r"}}); err != nil {
				t.Fatal(err)
			}
			want(t, claim(t, l, b, a), decide.VerdictConflict, decide.VerdictDuplicate)
			// Neither absent row nor conflict: the first copy of a new ID
			// claims it, later copies with its payload share its verdict.
			n1, n2 := intent("n", "1"), intent("n", "2")
			want(t, claim(t, l, n2, n1, n2), decide.VerdictNew, decide.VerdictConflict, decide.VerdictNew)
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
	want(t, claim(t, l, a), decide.VerdictNew)

	tx, err := l.Pool().Begin(ctx) // the other router's MarkStarted, not yet committed
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `UPDATE dedup_ledger SET state = 'started', run_id = 'r' WHERE workflow_id = $1`, a.WorkflowID); err != nil {
		t.Fatal(err)
	}
	got := make(chan []decide.Verdict, 1)
	go func() {
		cl, err := l.Claim(ctx, []decide.Intent{a})
		if err != nil || len(cl) != 1 {
			t.Error(cl, err)
			got <- nil
			return
		}
		got <- []decide.Verdict{cl[0].Verdict}
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
	want(t, <-got, decide.VerdictDuplicate)
}

// Conflicts are kept one row per workflow ID and distinct payload hash,
// with how many copies carried it and when the last was seen: copies of
// one conflicting payload from many records (a producer retrying it) add
// to one row's count instead of a row each; another payload is a row of
// its own; a redelivery of the last record counted is not counted again.
func TestClaimRecordsOneConflictRowPerPayloadHash(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	claim(t, l, intent("k", "original"))
	copyAt := func(payload string, offset int64) decide.Intent {
		in := intent("k", payload)
		in.Offset = offset
		return in
	}
	// In one batch and across batches.
	want(t, claim(t, l, copyAt("other", 10), copyAt("other", 11), copyAt("third", 12)),
		decide.VerdictConflict, decide.VerdictConflict, decide.VerdictConflict)
	for off := int64(13); off < 20; off++ {
		want(t, claim(t, l, copyAt("other", off)), decide.VerdictConflict)
	}
	want(t, claim(t, l, copyAt("other", 19)), decide.VerdictConflict) // offset 19 redelivered
	rows, err := l.Pool().Query(ctx, `SELECT payload_hash, copies, kafka_offset, last_seen_at >= detected_at FROM dedup_conflicts WHERE workflow_id = $1 ORDER BY copies`, intent("k", "").WorkflowID)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		hash    []byte
		copies  int64
		offset  int64
		ordered bool
	}
	var got []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.hash, &r.copies, &r.offset, &r.ordered); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	other, third := intent("k", "other").PayloadHash, intent("k", "third").PayloadHash
	if len(got) != 2 || string(got[0].hash) != string(third[:]) || got[0].copies != 1 ||
		string(got[1].hash) != string(other[:]) || got[1].copies != 9 || got[1].offset != 19 || !got[1].ordered {
		t.Fatalf("conflict rows %+v, want third (1 copy) and other (9 copies, last at offset 19)", got)
	}
	e, err := l.Lookup(ctx, []string{intent("k", "").WorkflowID})
	if err != nil {
		t.Fatal(err)
	}
	if le := e[intent("k", "").WorkflowID]; le.Conflicts != 10 || len(le.ConflictHashes) != 2 {
		t.Fatalf("lookup: %d conflicts, %d hashes, want 10 copies of 2 payloads", le.Conflicts, len(le.ConflictHashes))
	}
}

// A batch's IDs are looked up in the order of their ledger keys, whatever
// their order in the batch: in key order each probe of the key index
// descends next to the last, and the rows of a claimed batch (inserted in
// key order) are read in the order they lie in the heap. The claim
// (claimSQL) and the replay's read (startedSQL) both; the verdicts stay in
// the batch's order.
func TestClaimLooksTheBatchUpInKeyOrder(t *testing.T) {
	l, log := openTraced(t)
	ctx := context.Background()
	var batch []decide.Intent
	for i := range 64 {
		batch = append(batch, intent(fmt.Sprintf("e%02d", i), "p"))
	}
	keysSent := func(stmt string) [][16]byte {
		t.Helper()
		log.mu.Lock()
		defer log.mu.Unlock()
		for i, q := range log.sql {
			if !strings.Contains(q, stmt) {
				continue
			}
			for _, a := range log.args[i] {
				if ks, ok := a.([][16]byte); ok {
					return ks
				}
			}
			t.Fatalf("%s sent no keys: %v", stmt, log.args[i])
		}
		t.Fatalf("no statement with %q sent", stmt)
		return nil
	}
	inKeyOrder := func(stmt string) {
		t.Helper()
		ks := keysSent(stmt)
		if len(ks) != len(batch) {
			t.Fatalf("%s sent %d keys for %d IDs", stmt, len(ks), len(batch))
		}
		for i := 1; i < len(ks); i++ {
			if bytes.Compare(ks[i-1][:], ks[i][:]) >= 0 {
				t.Fatalf("%s sent keys out of order at %d: %x then %x", stmt, i, ks[i-1], ks[i])
			}
		}
	}
	verdicts := func(v []decide.Claimed, err error, w decide.Verdict) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range v {
			if c.Verdict != w {
				t.Fatalf("verdict %d (%s): %s, want %s", i, batch[i].WorkflowID, c.Verdict, w)
			}
		}
	}
	v, err := l.Claim(ctx, batch)
	verdicts(v, err, decide.VerdictNew)
	inKeyOrder("INSERT INTO dedup_ledger")
	var started []processor.Started
	for _, in := range batch {
		started = append(started, processor.Started{WorkflowID: in.WorkflowID, RunID: "r", Generation: 1})
	}
	if err := l.MarkStarted(ctx, started); err != nil {
		t.Fatal(err)
	}
	v, err = l.Claim(ctx, batch) // all started: the next claim reads first
	verdicts(v, err, decide.VerdictDuplicate)
	log.reset()
	v, err = l.Claim(ctx, batch)
	verdicts(v, err, decide.VerdictDuplicate)
	inKeyOrder("LEFT JOIN LATERAL")
}

// pauseAt holds a statement containing part until release is closed,
// after telling paused.
type pauseAt struct {
	part            string
	paused, release chan struct{}
}

func (p *pauseAt) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, p.part) {
		close(p.paused)
		<-p.release
	}
	return ctx
}

func (p *pauseAt) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A router re-claiming dead-lettered rows (a batch whose first copy of
// each ID conflicted, a later one matching: verdicts' revive statement)
// while another claims the same rows, on a small ledger: the revive's
// UPDATE (key = ANY AND workflow_id = ANY) scans the table and locks in
// heap order, the claim in key order, and the two deadlock (40P01),
// against the package doc ("its re-claim of dead-lettered rows ... lock
// ledger rows in key order"). P < M1 < Q by key; when the revive runs, the
// heap holds Q, M2, P (a third router's claims of M2 and P, between the
// first router's claim and its revive, moved them last). The revive takes
// Q, M2, P; the claim P, M1, Q.
func TestClaimAndReclaimOfDeadLetteredRowsLockInOneOrder(t *testing.T) {
	base := open(t)
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(base.Pool().Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	tr := &pauseAt{part: "UPDATE dedup_ledger SET state = 'pending'", paused: make(chan struct{}), release: make(chan struct{})}
	pc.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	a := ledger.NewFromPool(pool)
	in := func(n int, payload string) decide.Intent { return intent(fmt.Sprintf("revive-%d", n), payload) }
	key := func(n int) string { return wantKey(in(n, "p").WorkflowID) }
	p, m1, q := 0, -1, -1
	for n := 1; n < 100 && q < 0; n++ {
		switch {
		case m1 < 0 && key(n) > key(p):
			m1 = n
		case m1 >= 0 && key(n) > key(m1):
			q = n
		}
	}
	m2 := q + 1
	for _, n := range []int{q, m2, p, m1} {
		want(t, claim(t, base, in(n, "p")), decide.VerdictNew)
	}
	for _, n := range []int{q, m2, p} { // one at a time: the heap keeps Q, M2, P
		if err := base.MarkDeadLettered(ctx, unfenced(in(n, "p").WorkflowID)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := base.Pool().Exec(ctx, `ANALYZE dedup_ledger`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var reviveErr, claimErr error
	wg.Add(2)
	go func() { // claims (first copies conflict), then pauses before re-claiming P, M2, Q
		defer wg.Done()
		_, reviveErr = a.Claim(ctx, []decide.Intent{in(p, "x"), in(m2, "x"), in(q, "x"), in(p, "p"), in(m2, "p"), in(q, "p")})
	}()
	within(t, tr.paused, lockWaitPatience, "the revive statement")
	// A's claim wrote a new version of each of its rows (ON CONFLICT DO
	// UPDATE does, even when nothing changes), in key order; a third
	// router's copies of M2 and P (conflicts too) move them after Q.
	want(t, claim(t, base, in(m2, "x")), decide.VerdictConflict)
	want(t, claim(t, base, in(p, "x")), decide.VerdictConflict)
	side := sidePool(t, base.Pool().Config().ConnString())
	lockRow := func(id string) pgx.Tx { return holdRows(t, side, "dedup_ledger", id) }
	t1, t2 := lockRow(in(m1, "p").WorkflowID), lockRow(in(m2, "p").WorkflowID)
	claimed := make(chan struct{})
	go func() { // re-claims P, M1, Q in key order: takes P, waits for M1
		defer wg.Done()
		defer close(claimed)
		_, claimErr = base.Claim(ctx, []decide.Intent{in(q, "p"), in(m1, "p"), in(p, "p")})
	}()
	waitBlocked(t, side, "INSERT INTO dedup_ledger AS l")
	claimer := waiterOf(t, side, t1)
	close(tr.release) // the revive, in heap order: takes Q, waits for M2
	waitBlocked(t, side, "UPDATE dedup_ledger SET state = 'pending'")
	_ = t1.Rollback(ctx) // the claim takes M1, then waits for Q
	// (Locking in key order, the revive holds no row the claim takes
	// next: the claim ends.)
	waitMovedOn(t, side, claimer, "UPDATE dedup_ledger SET state = 'pending'", claimed)
	_ = t2.Rollback(ctx) // the revive takes M2, then waits for P
	wg.Wait()
	if reviveErr != nil || claimErr != nil {
		t.Fatalf("a re-claim of dead-lettered rows and a claim of the same rows: re-claim: %v; claim: %v\n(keys: P %s < M1 %s < Q %s)",
			reviveErr, claimErr, key(p), key(m1), key(q))
	}
}

// The replay's read (startedSQL) looks each ID's row up first by the
// record that carries it, then by its key: every verdict is the one the
// row gives, whichever look-up finds it. Records here have offsets of
// their own; a second route of one record shares its offset.
func TestReplayReadFindsEachRowByItsRecordOrItsKey(t *testing.T) {
	l, sql := openTraced(t)
	ctx := context.Background()
	at := func(in decide.Intent, topic string, part int32, off int64) decide.Intent {
		in.Topic, in.Partition, in.Offset = topic, part, off
		return in
	}
	started := at(intent("started", "s"), "events", 0, 10)
	secondRoute := at(intent("second-route", "s"), "events", 0, 10) // the same record, another workflow
	rerun := at(intent("rerun", "r"), "events", 0, 11)
	pending := at(intent("pending", "p"), "events", 0, 12)
	otherTopic := at(intent("other-topic", "o"), "audit", 0, 10) // the same partition and offset in another topic
	claim(t, l, started, secondRoute, rerun, pending, otherTopic)
	if err := l.MarkStarted(ctx, []processor.Started{
		{WorkflowID: started.WorkflowID, RunID: "r", Generation: 1},
		{WorkflowID: secondRoute.WorkflowID, RunID: "r", Generation: 1},
		{WorkflowID: otherTopic.WorkflowID, RunID: "r", Generation: 1},
	}); err != nil {
		t.Fatal(err)
	}
	// A re-run: the row records its second generation.
	if _, err := l.Pool().Exec(ctx, `UPDATE dedup_ledger SET state = 'started', run_id = 'r2', generation = 2 WHERE workflow_id = $1`, rerun.WorkflowID); err != nil {
		t.Fatal(err)
	}
	want(t, claim(t, l, started), decide.VerdictDuplicate) // all started: the next claim reads first
	sql.reset()
	batch := []decide.Intent{
		started, // its own record again: found by the record
		at(intent("started", "s"), "events", 3, 99), // a producer's retry, another offset: found by the key
		secondRoute, // the same record's other workflow
		at(intent("started", "x"), "events", 0, 10), // its own record, another payload: a conflict
		rerun,      // found by the record, generation 2
		pending,    // pending: not started, re-driven
		otherTopic, // found by the record in its own topic
		at(intent("fresh", "f"), "events", 0, 10), // a third route of the record, never claimed: new
	}
	cl, err := l.Claim(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	if !sql.sent("LEFT JOIN LATERAL") {
		t.Fatal("the replay's read was not sent")
	}
	wantV := []decide.Verdict{decide.VerdictDuplicate, decide.VerdictDuplicate, decide.VerdictDuplicate, decide.VerdictConflict,
		decide.VerdictDuplicate, decide.VerdictRedrive, decide.VerdictDuplicate, decide.VerdictNew}
	for i, c := range cl {
		if c.Verdict != wantV[i] {
			t.Errorf("intent %d (%s at %s/%d/%d): %s, want %s", i, batch[i].WorkflowID, batch[i].Topic, batch[i].Partition, batch[i].Offset, c.Verdict, wantV[i])
		}
	}
	if cl[4].Generation != 2 {
		t.Errorf("the re-run's duplicate carries generation %d, want 2", cl[4].Generation)
	}
}

// The replay's read finds a record's started row along
// dedup_ledger_by_record (migration 00015): its first look-up matches the
// index's columns and its predicate (state = 'started').
func TestReplayReadLooksRowsUpAlongTheRecordIndex(t *testing.T) {
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
	plan := planOf(t, conn, `EXPLAIN `+ledger.StartedSQL,
		[]string{"activity-a:e"}, [][]byte{{1}}, [][16]byte{{1}}, []string{"events"}, []int32{0}, []int64{10})
	text := strings.Join(plan, "\n")
	if !strings.Contains(text, "dedup_ledger_by_record") || !strings.Contains(text, "dedup_ledger_pkey") {
		t.Errorf("the replay's read does not look rows up by their record, then by their key:\n%s", text)
	}
}

// A claim without a record (the scheduler's fires: no topic, partition 0,
// offset 0, all alike) is looked up by its key alone: by its record it
// would read every other fire's row to find its own, one look-up after
// another, a replay of n fires reading n² rows.
func TestReplayReadLooksAClaimWithoutARecordUpByItsKeyAlone(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	var fires []decide.Intent
	var started []processor.Started
	for i := range 300 {
		in := intent(fmt.Sprintf("fire-%03d", i), "slot")
		in.Topic, in.Partition, in.Offset = "", 0, 0
		fires = append(fires, in)
		started = append(started, processor.Started{WorkflowID: in.WorkflowID, RunID: "r", Generation: 1})
	}
	claim(t, l, fires...)
	if err := l.MarkStarted(ctx, started); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Pool().Exec(ctx, `ANALYZE dedup_ledger`); err != nil {
		t.Fatal(err)
	}
	conn, err := l.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	f := fires[150]
	k := schemas.LedgerKey(f.WorkflowID)
	plan := planOf(t, conn, `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) `+ledger.StartedSQL,
		[]string{f.WorkflowID}, [][]byte{f.PayloadHash[:]}, [][16]byte{k}, []string{f.Topic}, []int32{f.Partition}, []int64{f.Offset})
	for _, d := range ledgerScansDropping(plan) {
		t.Errorf("looking one fire up read other rows: %s\n%s", d, strings.Join(plan, "\n"))
	}
}

// The replay's read looks a record's row up along the record index even
// when the planner's statistics are from before the rows were started (a
// ledger analyzed while its rows were pending: autovacuum has not caught
// up after a burst of marks). Another index that holds every started row
// then looks empty, hence free to scan, and a probe that went along it
// would read every started row for each ID of the batch.
func TestReplayReadGoesAlongTheRecordIndexWithStatisticsFromBeforeTheMarks(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	if _, err := l.Pool().Exec(ctx, `ALTER TABLE dedup_ledger SET (autovacuum_enabled = false)`); err != nil {
		t.Fatal(err)
	}
	var batch []decide.Intent
	var started []processor.Started
	for i := range 2000 {
		in := intent(fmt.Sprintf("e%04d", i), "p")
		in.Partition, in.Offset = int32(i%8), int64(i/8)
		batch = append(batch, in)
		started = append(started, processor.Started{WorkflowID: in.WorkflowID, RunID: "r", Generation: 1})
	}
	for i := 0; i < len(batch); i += 500 {
		claim(t, l, batch[i:i+500]...)
	}
	if _, err := l.Pool().Exec(ctx, `ANALYZE dedup_ledger`); err != nil { // every row pending
		t.Fatal(err)
	}
	if err := l.MarkStarted(ctx, started); err != nil {
		t.Fatal(err)
	}
	in := batch[1234]
	k := schemas.LedgerKey(in.WorkflowID)
	// pgx prepares the statement, and PostgreSQL may then run a generic
	// plan of it, planned without the batch's values.
	conn, err := l.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `PREPARE replay_read(text[], bytea[], uuid[], text[], int4[], int8[]) AS `+ledger.StartedSQL); err != nil {
		t.Fatal(err)
	}
	plan := planOf(t, conn, fmt.Sprintf(`EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE replay_read(
		ARRAY['%s'], ARRAY['\x%x'::bytea], ARRAY['%x'::uuid], ARRAY['%s'], ARRAY[%d], ARRAY[%d::int8])`,
		in.WorkflowID, in.PayloadHash[:], k[:], in.Topic, in.Partition, in.Offset))
	text := strings.Join(plan, "\n")
	if !strings.Contains(text, "dedup_ledger_by_record") {
		t.Errorf("the read of one replayed ID does not go along dedup_ledger_by_record:\n%s", text)
	}
	for _, d := range ledgerScansDropping(plan) {
		t.Errorf("the read of one replayed ID read other rows: %s\n%s", d, text)
	}
}

// planOf is EXPLAIN's answer to explain (an EXPLAIN statement), a line
// each.
func planOf(t *testing.T, conn *pgxpool.Conn, explain string, args ...any) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), explain, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}

// ledgerScansDropping names the scans of dedup_ledger in an EXPLAIN
// ANALYZE plan that read rows and dropped them (by a filter or a recheck),
// with how many. The statement's own WHERE, above the scans, is not one.
func ledgerScansDropping(plan []string) []string {
	removed := regexp.MustCompile(`Rows Removed by (Filter|Index Recheck): ([1-9]\d*)`)
	var out []string
	node := ""
	for _, line := range plan {
		if strings.Contains(line, "->") {
			node = strings.TrimSpace(line)
		}
		if m := removed.FindStringSubmatch(line); m != nil && strings.Contains(node, "on dedup_ledger") {
			out = append(out, fmt.Sprintf("%s rows dropped by %s", m[2], node))
		}
	}
	return out
}

// the replay's read and the claim answer one ledger state alike.
// A row of the workflow ID whose key column is not LedgerKey(ID) (an
// operator's INSERT with a key, a row restored or copied with its key, a
// key rule of another version) is not the ID's row for every other
// statement (key = $key AND workflow_id = $id): the claim inserts the ID's
// own row and answers new. The replay's first look-up compares the
// workflow ID only, finds that row by its record and answers duplicate:
// the verdict depends on whether the previous batch was a replay.
func TestReplayReadAnswersARowUnderAnotherKeyAsTheClaimDoes(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	x := intent("x", "p")
	x.Topic, x.Partition, x.Offset = "events", 0, 10
	other := schemas.LedgerKey("activity-a:not-x")
	if _, err := l.Pool().Exec(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset, key, state, run_id, started_at)
		VALUES ($1, 'a', 'x', 'field', $2, $3, $4, $5, $6, 'started', 'r', now())`,
		x.WorkflowID, x.PayloadHash[:], x.Topic, x.Partition, x.Offset, other); err != nil {
		t.Fatal(err)
	}
	// The replay's read and the key look-up it replaced, on that state.
	args := []any{[]string{x.WorkflowID}, [][]byte{x.PayloadHash[:]}, [][16]byte{schemas.LedgerKey(x.WorkflowID)},
		[]string{x.Topic}, []int32{x.Partition}, []int64{x.Offset}}
	count := func(sql string, args ...any) int {
		rows, err := l.Pool().Query(ctx, sql, args...)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			n++
		}
		rows.Close()
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
		return n
	}
	byKey := `SELECT i.n, l.state FROM unnest($1::text[], $2::bytea[], $3::uuid[]) WITH ORDINALITY AS i(workflow_id, payload_hash, key, n)
LEFT JOIN dedup_ledger l ON ` + schemas.LedgerRowIs("l", "i.workflow_id", "i.key") + `
WHERE l.state IS DISTINCT FROM 'started' OR l.payload_hash <> i.payload_hash OR l.generation > 1`
	newRows, oldRows := count(ledger.StartedSQL, args...), count(byKey, args[:3]...)
	if newRows != oldRows {
		t.Errorf("the replay's read answers %d rows to claim, the key look-up %d (0: a duplicate, 1: claimed)", newRows, oldRows)
	}
	// Through Claim: a ledger whose previous batch was a replay reads;
	// a fresh one claims.
	y := intent("y", "q")
	y.Topic, y.Partition, y.Offset = "events", 0, 11
	want(t, claim(t, l, y), decide.VerdictNew)
	if err := l.MarkStarted(ctx, []processor.Started{{WorkflowID: y.WorkflowID, RunID: "r", Generation: 1}}); err != nil {
		t.Fatal(err)
	}
	want(t, claim(t, l, y), decide.VerdictDuplicate) // replaying from here
	// The claim statement, which finds rows by key, answers new on this
	// state (the row under another key is not x's): so must a replay.
	if replayed := claim(t, l, x); replayed[0] != decide.VerdictNew {
		t.Errorf("one ledger state, two verdicts: %s after a replay, new otherwise", replayed[0])
	}
}

// At 300,000 rows (a third started, spread over 8
// partitions), analyzed, default settings, the replay's read of 500
// replayed records goes along dedup_ledger_by_record and the key, custom
// and generic plans; the figures (buffers, time) are logged beside the
// key look-up's, not asserted.
func TestReplayReadGoesByRecordThenKeyOnALargeAnalyzedLedger(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	if _, err := l.Pool().Exec(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset, key, state, run_id, started_at, updated_at)
		SELECT 'activity-a:fill-' || g, 'a', g::text, 'field', sha256(g::text::bytea), 'events', g % 8, g / 8, dedup_ledger_key('activity-a:fill-' || g),
			(ARRAY['started', 'pending', 'dead_lettered'])[1 + g % 3], CASE WHEN g % 3 = 0 THEN 'run' END,
			CASE WHEN g % 3 = 0 THEN now() - interval '1 day' END, now()
		FROM generate_series(1, 300000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Pool().Exec(ctx, `VACUUM ANALYZE dedup_ledger`); err != nil {
		t.Fatal(err)
	}
	var ids []string
	var hashes [][]byte
	var keys [][16]byte
	var topics []string
	var parts []int32
	var offs []int64
	for g := 150000; len(ids) < 500; g++ {
		if g%3 != 0 {
			continue
		}
		id := fmt.Sprintf("activity-a:fill-%d", g)
		h := sha256.Sum256([]byte(fmt.Sprint(g)))
		ids, hashes, keys = append(ids, id), append(hashes, h[:]), append(keys, schemas.LedgerKey(id))
		topics, parts, offs = append(topics, "events"), append(parts, int32(g%8)), append(offs, int64(g/8))
	}
	byKey := `SELECT i.n, l.state, l.payload_hash, coalesce(l.generation, 0) FROM unnest($1::text[], $2::bytea[], $3::uuid[]) WITH ORDINALITY AS i(workflow_id, payload_hash, key, n)
LEFT JOIN dedup_ledger l ON ` + schemas.LedgerRowIs("l", "i.workflow_id", "i.key") + `
WHERE l.state IS DISTINCT FROM 'started' OR l.payload_hash <> i.payload_hash OR l.generation > 1`
	explain := func(sql string, args ...any) string {
		conn, err := l.Pool().Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		rows, err := conn.Query(ctx, sql, args...)
		if err != nil {
			t.Errorf("%s: %v", sql, err)
			return ""
		}
		var plan []string
		for rows.Next() {
			var s string
			_ = rows.Scan(&s)
			plan = append(plan, s)
		}
		rows.Close()
		if rows.Err() != nil {
			t.Errorf("%s: %v", sql, rows.Err())
		}
		return strings.Join(plan, "\n")
	}
	t.Logf("record, custom:\n%s", explain(`EXPLAIN (ANALYZE, BUFFERS) `+ledger.StartedSQL, ids, hashes, keys, topics, parts, offs))
	t.Logf("key, custom:\n%s", explain(`EXPLAIN (ANALYZE, BUFFERS) `+byKey, ids, hashes, keys))
	custom := explain(`EXPLAIN `+ledger.StartedSQL, ids, hashes, keys, topics, parts, offs)
	var generic string
	{
		conn, err := l.Pool().Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var idl, hl, kl, pl, ol []string
		for j := range ids {
			idl, hl, kl = append(idl, "'"+ids[j]+"'"), append(hl, fmt.Sprintf(`'\x%x'::bytea`, hashes[j])), append(kl, fmt.Sprintf("'%x'::uuid", keys[j]))
			pl, ol = append(pl, fmt.Sprint(parts[j])), append(ol, fmt.Sprintf("%d::int8", offs[j]))
		}
		q := fmt.Sprintf(`SET plan_cache_mode = force_generic_plan; PREPARE probe(text[], bytea[], uuid[], text[], int4[], int8[]) AS %s;
EXPLAIN (ANALYZE, BUFFERS) EXECUTE probe(ARRAY[%s], ARRAY[%s], ARRAY[%s], array_fill('events'::text, ARRAY[%d]), ARRAY[%s], ARRAY[%s]);
DEALLOCATE probe; RESET plan_cache_mode`, ledger.StartedSQL, strings.Join(idl, ","), strings.Join(hl, ","), strings.Join(kl, ","), len(ids), strings.Join(pl, ","), strings.Join(ol, ","))
		res, err := conn.Conn().PgConn().Exec(ctx, q).ReadAll()
		conn.Release()
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, r := range res[2].Rows {
			lines = append(lines, string(r[0]))
		}
		generic = strings.Join(lines, "\n")
	}
	t.Logf("record, generic:\n%s", generic)
	for mode, text := range map[string]string{"custom": custom, "generic": generic} {
		if !strings.Contains(text, "dedup_ledger_by_record") || strings.Contains(text, "Seq Scan on dedup_ledger") {
			t.Errorf("%s: the replay's read does not go along dedup_ledger_by_record:\n%s", mode, text)
		}
	}
}

// On random ledgers (rows pending, started, dead-lettered,
// re-run, of 3 topics, 2 partitions, 4 offsets, IDs whose keys collide in
// a space of 12, every row's key its ID's), the replay's read returns
// exactly the rows the key look-up it replaced returns, for random batches
// (copies of an ID at other records, other payloads, absent IDs).
func TestReplayReadReturnsWhatTheKeyLookUpReturnsOnRandomLedgers(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(26, 26))
	keyOf := func(id string) [16]byte {
		var k [16]byte
		k[0] = byte(len(id)*7+int(id[len(id)-1])) % 12
		return k
	}
	byKey := `SELECT i.n, l.state, l.payload_hash, coalesce(l.generation, 0) FROM unnest($1::text[], $2::bytea[], $3::uuid[]) WITH ORDINALITY AS i(workflow_id, payload_hash, key, n)
LEFT JOIN dedup_ledger l ON ` + schemas.LedgerRowIs("l", "i.workflow_id", "i.key") + `
WHERE l.state IS DISTINCT FROM 'started' OR l.payload_hash <> i.payload_hash OR l.generation > 1`
	read := func(sql string, args ...any) []string {
		rows, err := l.Pool().Query(ctx, sql, args...)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for rows.Next() {
			var n int64
			var st *string
			var h []byte
			var g int
			if err := rows.Scan(&n, &st, &h, &g); err != nil {
				t.Fatal(err)
			}
			s := "<nil>"
			if st != nil {
				s = *st
			}
			out = append(out, fmt.Sprintf("%d/%s/%x/%d", n, s, h, g))
		}
		rows.Close()
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
		slices.Sort(out)
		return out
	}
	topics := []string{"events", "audit", ""}
	for round := range 150 {
		if _, err := l.Pool().Exec(ctx, `TRUNCATE dedup_ledger`); err != nil {
			t.Fatal(err)
		}
		for i := range 15 {
			id := fmt.Sprintf("w%d", rng.IntN(20))
			_ = i
			st := []string{"pending", "started", "started", "dead_lettered"}[rng.IntN(4)]
			var startedAt any
			if st == "started" {
				startedAt = time.Now()
			}
			if _, err := l.Pool().Exec(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset, key, state, run_id, started_at, generation)
				VALUES ($1, 'a', 'e', 'field', $2, $3, $4, $5, $6, $7, 'r', $8, $9) ON CONFLICT DO NOTHING`,
				id, []byte{byte(rng.IntN(2))}, topics[rng.IntN(3)], rng.IntN(2), rng.IntN(4), keyOf(id), st, startedAt, 1+rng.IntN(2)); err != nil {
				t.Fatal(err)
			}
		}
		var ids, ts []string
		var hs [][]byte
		var ks [][16]byte
		var ps []int32
		var os []int64
		seen := map[string]bool{}
		for range 12 {
			id := fmt.Sprintf("w%d", rng.IntN(22))
			if seen[id] {
				continue
			}
			seen[id] = true
			ids, hs, ks = append(ids, id), append(hs, []byte{byte(rng.IntN(2))}), append(ks, keyOf(id))
			ts, ps, os = append(ts, topics[rng.IntN(3)]), append(ps, int32(rng.IntN(2))), append(os, int64(rng.IntN(4)))
		}
		got, was := read(ledger.StartedSQL, ids, hs, ks, ts, ps, os), read(byKey, ids, hs, ks)
		if !slices.Equal(got, was) {
			t.Fatalf("round %d: the replay's read returns %v, the key look-up %v (batch %v at %v/%v/%v)", round, got, was, ids, ts, ps, os)
		}
	}
}

// A ledger dominated by the scheduler's fires (200,000
// started rows at no topic, partition 0, offset 0) beside 100,000 rows of
// records, analyzed: a generic plan of the replay's read of 200 records
// and 200 fires still reads one row per ID (no row read and dropped).
func TestReplayReadReadsOneRowPerIDOnALedgerOfFires(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	if _, err := l.Pool().Exec(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset, key, state, run_id, started_at)
		SELECT 'fire-' || g, 'a', g::text, 'schedule', sha256(g::text::bytea), '', 0, 0, dedup_ledger_key('fire-' || g), 'started', 'run', now()
		FROM generate_series(1, 200000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Pool().Exec(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset, key, state, run_id, started_at)
		SELECT 'rec-' || g, 'a', g::text, 'field', sha256(g::text::bytea), 'events', g % 4, g / 4, dedup_ledger_key('rec-' || g), 'started', 'run', now()
		FROM generate_series(1, 100000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Pool().Exec(ctx, `VACUUM ANALYZE dedup_ledger`); err != nil {
		t.Fatal(err)
	}
	var idl, hl, kl, tl, pl, ol []string
	add := func(id string, g int, topic string, p, o int) {
		h := sha256.Sum256([]byte(fmt.Sprint(g)))
		k := schemas.LedgerKey(id)
		idl, hl, kl = append(idl, "'"+id+"'"), append(hl, fmt.Sprintf(`'\x%x'::bytea`, h[:])), append(kl, fmt.Sprintf("'%x'::uuid", k[:]))
		tl, pl, ol = append(tl, "'"+topic+"'"), append(pl, fmt.Sprint(p)), append(ol, fmt.Sprintf("%d::int8", o))
	}
	for g := 50000; g < 50200; g++ {
		add(fmt.Sprintf("rec-%d", g), g, "events", g%4, g/4)
		add(fmt.Sprintf("fire-%d", g), g, "", 0, 0)
	}
	conn, err := l.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	q := fmt.Sprintf(`SET plan_cache_mode = force_generic_plan; PREPARE probe(text[], bytea[], uuid[], text[], int4[], int8[]) AS %s;
EXPLAIN (ANALYZE, BUFFERS) EXECUTE probe(ARRAY[%s], ARRAY[%s], ARRAY[%s], ARRAY[%s], ARRAY[%s], ARRAY[%s]);
DEALLOCATE probe; RESET plan_cache_mode`, ledger.StartedSQL, strings.Join(idl, ","), strings.Join(hl, ","), strings.Join(kl, ","), strings.Join(tl, ","), strings.Join(pl, ","), strings.Join(ol, ","))
	res, err := conn.Conn().PgConn().Exec(ctx, q).ReadAll()
	conn.Release()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, r := range res[2].Rows {
		lines = append(lines, string(r[0]))
	}
	text := strings.Join(lines, "\n")
	t.Logf("generic:\n%s", text)
	if m := regexp.MustCompile(`Rows Removed by (Filter|Index Recheck): ([1-9]\d*)`).FindAllString(text, -1); len(m) > 1 {
		t.Errorf("rows read and dropped: %v\n%s", m, text)
	}
	if strings.Contains(text, "Seq Scan on dedup_ledger") {
		t.Errorf("a scan of the ledger:\n%s", text)
	}
}

// One record routed to many activities has one started row per route, all
// at the record's topic, partition and offset. Looked up by its record,
// each of its IDs would read the record's rows until it met its own (the
// routes squared, a record); a record with more than a few routes in the
// batch goes by key alone, one row per ID. (Found by the adversary of
// session 26, TestReplayReadReadsOneRowPerIDOfARecordRoutedToManyActivities
// on the statement alone; this one runs what Claim sends.)
func TestReplayReadLooksARecordOfManyRoutesUpByKey(t *testing.T) {
	l, log := openTraced(t)
	ctx := context.Background()
	if _, err := l.Pool().Exec(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset, key, state, run_id, started_at)
		SELECT 'activity-' || r || ':ev-' || g, r::text, 'ev-' || g, 'field', sha256(g::text::bytea), 'events', g % 4, g / 4, dedup_ledger_key('activity-' || r || ':ev-' || g), 'started', 'run', now()
		FROM generate_series(1, 400) g, generate_series(1, 300) r`); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Pool().Exec(ctx, `VACUUM ANALYZE dedup_ledger`); err != nil {
		t.Fatal(err)
	}
	record := func(g int) []decide.Intent {
		var out []decide.Intent
		for r := 1; r <= 300; r++ {
			id := fmt.Sprintf("ev-%d", g)
			out = append(out, decide.Intent{WorkflowID: fmt.Sprintf("activity-%d:%s", r, id), ActivityID: fmt.Sprint(r), EventID: id, IDRule: "field",
				PayloadHash: sha256.Sum256([]byte(fmt.Sprint(g))), Topic: "events", Partition: int32(g % 4), Offset: int64(g / 4)})
		}
		return out
	}
	want(t, claim(t, l, record(100)...), slices.Repeat([]decide.Verdict{decide.VerdictDuplicate}, 300)...) // replaying from here
	log.reset()
	batch := append(record(200), record(201)...)
	want(t, claim(t, l, batch...), slices.Repeat([]decide.Verdict{decide.VerdictDuplicate}, len(batch))...)
	var args []any
	log.mu.Lock()
	for i, q := range log.sql {
		if strings.Contains(q, "LEFT JOIN LATERAL") {
			args = log.args[i]
		}
	}
	log.mu.Unlock()
	if args == nil {
		t.Fatal("the replay's read was not sent")
	}
	conn, err := l.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	plan := planOf(t, conn, `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) `+ledger.StartedSQL, args...)
	if d := ledgerScansDropping(plan); len(d) > 0 {
		t.Errorf("the replay's read of %d IDs (2 records of 300 routes) reads rows of other IDs: %v\n%s", len(batch), d, strings.Join(plan, "\n"))
	}
}

// adversary 33: rows written by hand with odd values (an empty payload
// hash, a hash of another length, a state outside the CHECK once it is
// dropped) next to pending, started, re-run and dead_lettered rows and
// copies of one ID: every copy gets its row's verdict, and each conflict
// records the ledger's hash exactly as the row holds it; the same with
// the replay's read first (answerStarted, then claimSQL for the rest).
func TestClaimAnswersHandWrittenRowsAndRecordsTheLedgersHash(t *testing.T) {
	for _, afterReplay := range []bool{false, true} {
		t.Run(fmt.Sprintf("afterReplay=%v", afterReplay), func(t *testing.T) {
			l := open(t)
			ctx := context.Background()
			ids := []string{"empty", "short", "emptyS", "shortS", "pend", "dead", "run2", "odd", "warm"}
			var seed []decide.Intent
			for _, id := range ids {
				seed = append(seed, intent(id, "p"))
			}
			claim(t, l, seed...)
			wf := func(id string) string { return intent(id, "").WorkflowID }
			var st []processor.Started
			for _, id := range []string{"emptyS", "shortS", "run2", "warm"} {
				st = append(st, processor.Started{WorkflowID: wf(id), RunID: "r1", Generation: 1})
			}
			if err := l.MarkStarted(ctx, st); err != nil {
				t.Fatal(err)
			}
			if err := l.MarkStarted(ctx, []processor.Started{{WorkflowID: wf("run2"), RunID: "r2", Generation: 2}}); err != nil {
				t.Fatal(err)
			}
			if err := l.MarkDeadLettered(ctx, unfenced(wf("dead"))); err != nil {
				t.Fatal(err)
			}
			p := intent("x", "p").PayloadHash
			for _, q := range []struct {
				sql string
				arg []any
			}{
				{`UPDATE dedup_ledger SET payload_hash = '' WHERE workflow_id = ANY($1)`, []any{[]string{wf("empty"), wf("emptyS")}}},
				{`UPDATE dedup_ledger SET payload_hash = $2 WHERE workflow_id = ANY($1)`, []any{[]string{wf("short"), wf("shortS")}, p[:16]}},
				{`ALTER TABLE dedup_ledger DROP CONSTRAINT dedup_ledger_state_check`, nil},
				{`UPDATE dedup_ledger SET state = 'odd' WHERE workflow_id = $1`, []any{wf("odd")}},
			} {
				if _, err := l.Pool().Exec(ctx, q.sql, q.arg...); err != nil {
					t.Fatal(err)
				}
			}
			if afterReplay {
				want(t, claim(t, l, intent("warm", "p")), decide.VerdictDuplicate)
			}
			batch := []decide.Intent{
				intent("empty", "p"), intent("short", "p"), intent("emptyS", "p"), intent("shortS", "p"),
				intent("pend", "p"), intent("pend", "q"), intent("dead", "p"), intent("run2", "p"), intent("run2", "q"),
				intent("odd", "p"), intent("new", "p"), intent("new", "p"), intent("new", "x"), intent("warm", "p"),
			}
			cl, err := l.Claim(ctx, batch)
			if err != nil {
				t.Fatal(err)
			}
			c := decide.Claimed{Verdict: decide.VerdictConflict}
			wantC := []decide.Claimed{c, c, c, c,
				{Verdict: decide.VerdictRedrive, Generation: 1}, c, {Verdict: decide.VerdictRedrive, Generation: 1},
				{Verdict: decide.VerdictDuplicate, Generation: 2}, c,
				{Verdict: decide.VerdictRedrive, Generation: 1}, {Verdict: decide.VerdictNew, Generation: 1}, {Verdict: decide.VerdictNew, Generation: 1}, c,
				{Verdict: decide.VerdictDuplicate, Generation: 1}}
			if !slices.Equal(cl, wantC) {
				t.Fatalf("verdicts\n%v, want\n%v", cl, wantC)
			}
			rows, err := l.Pool().Query(ctx, `SELECT workflow_id, payload_hash, ledger_payload_hash FROM dedup_conflicts ORDER BY workflow_id`)
			if err != nil {
				t.Fatal(err)
			}
			gotL := map[string]string{}
			for rows.Next() {
				var id string
				var h, lh []byte
				if err := rows.Scan(&id, &h, &lh); err != nil {
					t.Fatal(err)
				}
				gotL[id] = fmt.Sprintf("%x", lh)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			hex := fmt.Sprintf("%x", p[:])
			wantL := map[string]string{wf("empty"): "", wf("emptyS"): "", wf("short"): hex[:32], wf("shortS"): hex[:32],
				wf("pend"): hex, wf("run2"): hex, wf("new"): hex}
			if !maps.Equal(gotL, wantL) {
				t.Fatalf("conflicts' ledger hashes\n%v, want\n%v", gotL, wantL)
			}
		})
	}
}

// adversary 33: the batch's memory is the caller's to reuse: a batch
// claimed, then the same slice overwritten with the next batch (other
// payloads of the same IDs, and new IDs) and claimed again; the second
// claim's conflicts record the ledger's hash (the first batch's
// payload), not the reused slice's.
func TestClaimOfAReusedBatchRecordsTheLedgersHash(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	batch := make([]decide.Intent, 40)
	for i := range batch {
		batch[i] = intent(fmt.Sprintf("r%02d", i%20), "one")
	}
	for _, v := range claim(t, l, batch...) {
		if v != decide.VerdictNew {
			t.Fatalf("first batch: %v", v)
		}
	}
	for i := range batch {
		batch[i] = intent(fmt.Sprintf("r%02d", i%20), fmt.Sprintf("two%d", i))
	}
	for _, v := range claim(t, l, batch...) {
		if v != decide.VerdictConflict {
			t.Fatalf("second batch: %v", v)
		}
	}
	for i := range batch {
		batch[i] = intent(fmt.Sprintf("r%02d", i%20), "three")
	}
	for _, v := range claim(t, l, batch...) {
		if v != decide.VerdictConflict {
			t.Fatalf("third batch: %v", v)
		}
	}
	one := intent("", "one").PayloadHash
	var bad int
	if err := l.Pool().QueryRow(ctx, `SELECT count(*) FILTER (WHERE ledger_payload_hash <> $1) + (count(*) <> 60)::int FROM dedup_conflicts`, one[:]).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	if bad != 0 {
		t.Fatalf("%d conflict rows wrong (want 60, each with the ledger's hash of \"one\")", bad)
	}
}

// adversary 33: the parameter arrays (params.go) send what the plain
// slices sent, in each exec mode the ledger uses: NULL for a nil slice,
// an empty array for an empty one, NULL elements of bytea, empty strings
// and bytes, text that needs quoting, and the ends of int4 and int8.
func TestParamArraysSendWhatPlainSlicesSent(t *testing.T) {
	url := open(t).Pool().Config().ConnString()
	values := []any{
		[]string(nil), []string{}, []string{"", "NULL", `a"b\c{,} `, "é"},
		[][]byte(nil), [][]byte{}, [][]byte{nil, {}, {0, 1, 255}},
		[][16]byte(nil), [][16]byte{}, [][16]byte{{}, {1, 2, 3, 15: 255}},
		[]int32(nil), []int32{}, []int32{-1 << 31, 0, 1<<31 - 1},
		[]int64(nil), []int64{}, []int64{-1 << 63, -1, 0, 1<<63 - 1},
	}
	casts := map[string]string{"[]string": "text[]", "[][]uint8": "bytea[]", "[][16]uint8": "uuid[]", "[]int32": "int4[]", "[]int64": "int8[]"}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec} {
		t.Run(mode.String(), func(t *testing.T) {
			pc, err := pgxpool.ParseConfig(url)
			if err != nil {
				t.Fatal(err)
			}
			pc.ConnConfig.DefaultQueryExecMode = mode
			pool, err := pgxpool.NewWithConfig(context.Background(), pc)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			for _, v := range values {
				q := fmt.Sprintf(`SELECT $1::%[1]s IS NULL, coalesce($1::%[1]s::text, 'null'), cardinality($1::%[1]s)`, casts[fmt.Sprintf("%T", v)])
				read := func(arg any) string {
					var isNull bool
					var text string
					var card *int
					if err := pool.QueryRow(context.Background(), q, arg).Scan(&isNull, &text, &card); err != nil {
						t.Fatalf("%T %v: %v", arg, arg, err)
					}
					c := "null"
					if card != nil {
						c = fmt.Sprint(*card)
					}
					return fmt.Sprintf("%v %s %s", isNull, text, c)
				}
				if plain, ours := read(v), read(ledger.ParamArray(v)); plain != ours {
					t.Errorf("%T %#v: plain sends %s, params.go %s", v, v, plain, ours)
				}
			}
		})
	}
}

// adversary 33: IDs whose keys collide (ledger.SetKeyFunc) next to copies
// of one ID: the owner of the row gets its row's verdict, its other
// payload a conflict recorded with the row's hash, the ID without a row
// a conflict recorded with an empty ledger hash; the same after a replay
// (the read of started rows first).
func TestClaimUnderCollisionsRecordsTheLedgersHash(t *testing.T) {
	for _, afterReplay := range []bool{false, true} {
		t.Run(fmt.Sprintf("afterReplay=%v", afterReplay), func(t *testing.T) {
			restore := ledger.SetKeyFunc(func(id string) [16]byte {
				if strings.HasPrefix(id, "activity-a:c") {
					return [16]byte{1}
				}
				return schemas.LedgerKey(id)
			})
			defer restore()
			l := open(t)
			ctx := context.Background()
			wf := func(id string) string { return intent(id, "").WorkflowID }
			want(t, claim(t, l, intent("c1", "p"), intent("w", "p")), decide.VerdictNew, decide.VerdictNew)
			if err := l.MarkStarted(ctx, []processor.Started{{WorkflowID: wf("c1"), RunID: "r", Generation: 1}, {WorkflowID: wf("w"), RunID: "r", Generation: 1}}); err != nil {
				t.Fatal(err)
			}
			if afterReplay {
				want(t, claim(t, l, intent("w", "p")), decide.VerdictDuplicate)
			}
			want(t, claim(t, l, intent("c2", "p"), intent("c1", "p"), intent("c1", "q"), intent("n", "p"), intent("c3", "x")),
				decide.VerdictConflict, decide.VerdictDuplicate, decide.VerdictConflict, decide.VerdictNew, decide.VerdictConflict)
			rows, err := l.Pool().Query(ctx, `SELECT workflow_id, ledger_payload_hash FROM dedup_conflicts`)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for rows.Next() {
				var id string
				var lh []byte
				if err := rows.Scan(&id, &lh); err != nil {
					t.Fatal(err)
				}
				got[id] = fmt.Sprintf("%x", lh)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			p := intent("", "p").PayloadHash
			wantL := map[string]string{wf("c2"): "", wf("c1"): fmt.Sprintf("%x", p[:]), wf("c3"): ""}
			if !maps.Equal(got, wantL) {
				t.Fatalf("conflicts' ledger hashes %v, want %v", got, wantL)
			}
		})
	}
}

// The replay's read runs as a statement prepared once on each connection
// (arrays.go). A server that no longer has it (DEALLOCATE, DISCARD ALL)
// answers 26000; the read prepares it again and runs once more, so the
// claim answers: a connection never fails on a statement the server
// forgot (before the retry, that claim failed with a permanent error
// naming postgres.pooler, and the router stopped).
func TestTheReplaysReadPreparesItsStatementAgainOnceTheServerForgotIt(t *testing.T) {
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(open(t).Pool().Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 1 // the DEALLOCATE below reaches the read's connection
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	l := ledger.NewFromPool(pool)
	a, b := intent("a", "p"), intent("b", "p")
	for _, in := range []decide.Intent{a, b} {
		markedStarted(t, l, in)
	}
	want(t, claim(t, l, a, b), decide.VerdictDuplicate, decide.VerdictDuplicate) // now replaying
	want(t, claim(t, l, a, b), decide.VerdictDuplicate, decide.VerdictDuplicate) // the read, prepared
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE name = 'dedup_started_rows'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the read's statement prepared %d times (%v), want 1", n, err)
	}
	if _, err := pool.Exec(ctx, `DEALLOCATE dedup_started_rows`); err != nil {
		t.Fatal(err)
	}
	want(t, claim(t, l, a, b), decide.VerdictDuplicate, decide.VerdictDuplicate)
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE name = 'dedup_started_rows'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("after the server forgot it, the read's statement prepared %d times (%v), want 1", n, err)
	}
	want(t, claim(t, l, a, b), decide.VerdictDuplicate, decide.VerdictDuplicate)
}

// silentServer is a TCP proxy to a PostgreSQL server that, once armed,
// passes the server's messages up to the ReadyForQuery after an error of
// SQLSTATE code, and from then on nothing more from the server: a server
// that hangs, or a network that drops its packets, right after that
// answer. What the client sends always goes through. close ends every
// connection it proxies.
type silentServer struct {
	url    string
	code   string
	armed  atomic.Bool
	silent chan struct{} // closed when the server falls silent
	once   sync.Once
	ln     net.Listener
	mu     sync.Mutex
	conns  []net.Conn
}

func newSilentServer(t *testing.T, serverURL, code string) *silentServer {
	t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.Host = ln.Addr().String()
	q := u.Query()
	q.Set("sslmode", "disable") // the proxy reads the server's messages
	u.RawQuery = q.Encode()
	p := &silentServer{url: u.String(), code: code, ln: ln, silent: make(chan struct{})}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
			go p.serverToClient(s, c)
		}
	}()
	return p
}

// serverToClient passes the server's messages (a type byte, a length)
// until the server falls silent, and reads and drops them after.
func (p *silentServer) serverToClient(s, c net.Conn) {
	defer func() { _ = c.Close() }()
	r := bufio.NewReader(s)
	errored, silent := false, false
	for {
		head := make([]byte, 5)
		if _, err := io.ReadFull(r, head); err != nil {
			return
		}
		body := make([]byte, int(binary.BigEndian.Uint32(head[1:]))-4)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		if silent {
			continue
		}
		if _, err := c.Write(append(head, body...)); err != nil {
			return
		}
		switch {
		case head[0] == 'E' && p.armed.Load() && bytes.Contains(body, []byte("C"+p.code+"\x00")):
			errored = true
		case head[0] == 'Z' && errored:
			silent = true
			p.once.Do(func() { close(p.silent) })
		}
	}
}

func (p *silentServer) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

// A claim ends by its context's deadline, whatever the server does: here
// the replay's read finds its prepared statement gone from the session
// (SQLSTATE 26000: a DEALLOCATE ALL or DISCARD ALL on it, a pooler), and
// the server then answers nothing more (a hung server, a network that
// drops its packets). The router's claimer waits on that claim: one that
// outlives its deadline stalls every partition of the router, with
// nothing reported, for as long as the kernel keeps the connection.
// pgx's own Query deallocates a statement it found stale on the next
// query, under that query's context.
func TestAClaimEndsByItsDeadlineWhenTheServerFallsSilentAfterTheReplayReadsStatementWentMissing(t *testing.T) {
	url := pgtest.NewDatabase(t)
	if err := ledger.Migrate(context.Background(), url); err != nil {
		t.Fatal(err)
	}
	px := newSilentServer(t, url, "26000")
	pc, err := pgxpool.ParseConfig(px.url)
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 1 // one session: the one whose statement goes
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	t.Cleanup(px.close) // before pool.Close: frees a claim still waiting on the server
	l := ledger.NewFromPool(pool)
	ctx := deadline(t, time.Minute)
	in := intent("silent-0", "p")
	want(t, claim(t, l, in), decide.VerdictNew)
	if err := l.MarkStarted(ctx, []processor.Started{{WorkflowID: in.WorkflowID, RunID: "r", Generation: 1}}); err != nil {
		t.Fatal(err)
	}
	want(t, claim(t, l, in), decide.VerdictDuplicate) // the claim statement's answer: a replay from here
	want(t, claim(t, l, in), decide.VerdictDuplicate) // the replay's read: its statement prepared on the session
	if _, err := pool.Exec(ctx, `DEALLOCATE ALL`); err != nil {
		t.Fatal(err)
	}
	px.armed.Store(true)

	const patience = 2 * time.Second
	cctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := l.Claim(cctx, []decide.Intent{in})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the claim succeeded on a session without its statement, the server silent")
		}
		t.Logf("the claim returned after %s: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(patience + 8*time.Second):
		silent := false
		select {
		case <-px.silent:
			silent = true
		default:
		}
		t.Fatalf("the claim has not returned %s after its %s deadline (the server fell silent after SQLSTATE 26000: %v)",
			8*time.Second, patience, silent)
	}
}

// A migration that changed a column the replay's read returns fails the
// read's first run (0A000, a cached plan), and the read prepares its
// statement again under the claim's context; a server that then falls
// silent (a failover, a network that drops its packets) between the two
// runs must not hold the claim past its deadline, and the error it ends
// with is transient (the router retries; nothing is permanent about a
// silent server).
func TestAClaimEndsByItsDeadlineWhenTheServerFallsSilentBetweenTheReplayReadsTwoRuns(t *testing.T) {
	url := pgtest.NewDatabase(t)
	if err := ledger.Migrate(context.Background(), url); err != nil {
		t.Fatal(err)
	}
	px := newSilentServer(t, url, "0A000")
	pc, err := pgxpool.ParseConfig(px.url)
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	t.Cleanup(px.close)
	l := ledger.NewFromPool(pool)
	in := intent("silent-migrated-0", "p")
	replaying(t, l, in)
	side := sidePool(t, url)
	if _, err := side.Exec(deadline(t, time.Minute), `ALTER TABLE dedup_ledger ALTER COLUMN generation TYPE bigint`); err != nil {
		t.Fatal(err)
	}
	px.armed.Store(true)
	const patience = 2 * time.Second
	cctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := l.Claim(cctx, []decide.Intent{in})
		done <- err
	}()
	select {
	case err := <-done:
		select {
		case <-px.silent:
		default:
			t.Fatalf("the server never answered 0A000 (the claim returned %v): the read's plan was not stale", err)
		}
		if err == nil || processor.IsPermanent(err) {
			t.Fatalf("the claim whose server fell silent between the read's two runs: %v (permanent: %v), want a transient error", err, processor.IsPermanent(err))
		}
	case <-time.After(patience + 8*time.Second):
		t.Fatalf("the claim has not returned %s after its %s deadline (the server fell silent after the read's 0A000)", 8*time.Second, patience)
	}
}

// prepareLog counts the prepares a pool's tracer is told of (pgx's
// PrepareTracer), by statement name and SQL.
type prepareLog struct {
	mu    sync.Mutex
	names []string
	sql   []string
}

func (p *prepareLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (p *prepareLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (p *prepareLog) TracePrepareStart(ctx context.Context, _ *pgx.Conn, d pgx.TracePrepareStartData) context.Context {
	p.mu.Lock()
	p.names, p.sql = append(p.names, d.Name), append(p.sql, d.SQL)
	p.mu.Unlock()
	return ctx
}
func (p *prepareLog) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

func (p *prepareLog) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.names
	p.names, p.sql = nil, nil
	return n
}

// takeSQL counts the prepares of statements that contain sub since the
// last take.
func (p *prepareLog) takeSQL(sub string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, s := range p.sql {
		if strings.Contains(s, sub) {
			n++
		}
	}
	p.names, p.sql = nil, nil
	return n
}

// A pool's tracer (NewFromPool) sees the replay's read as pgx's Query
// shows a statement its session has prepared already: a query, and no
// prepare, claim after claim. (pgx's tracelog logs each prepare it is
// told of at info level, the whole statement in it: a line per claim of a
// replay, where pgx's own path logs one per session.)
func TestAPoolsTracerSeesNoPrepareOfTheReplayReadsStatementOnceItsSessionHasIt(t *testing.T) {
	pc, err := pgxpool.ParseConfig(open(t).Pool().Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 1 // one session: each statement prepared once
	log := &prepareLog{}
	pc.ConnConfig.Tracer = log
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	l := ledger.NewFromPool(pool)
	in := intent("traced-0", "p")
	want(t, claim(t, l, in), decide.VerdictNew)
	if err := l.MarkStarted(context.Background(), []processor.Started{{WorkflowID: in.WorkflowID, RunID: "r", Generation: 1}}); err != nil {
		t.Fatal(err)
	}
	want(t, claim(t, l, in), decide.VerdictDuplicate) // the claim statement's answer: a replay from here
	want(t, claim(t, l, in), decide.VerdictDuplicate) // the replay's read, prepared on the session
	log.take()
	for range 5 {
		want(t, claim(t, l, in), decide.VerdictDuplicate) // the replay's read again
	}
	if names := log.take(); len(names) != 0 {
		t.Fatalf("five replay reads on a session that has their statement: the tracer was told of %d prepares %q, want none", len(names), names)
	}
}

// Routers' replay reads run at once, each encoding its arrays into a
// buffer of one handle's pool (Postgres.encodeBuffers) and reading its answer
// on its own session: batches of IDs of lengths that differ per router
// (buffers of other sizes), each with copies of the same payload and of
// another one. Every claim gets its own batch's verdicts: the copies of
// the row's payload duplicates, the others conflicts, round after round.
// Run it with -race too: the buffers are shared by every claim.
func TestConcurrentReplayReadsGiveEachBatchItsOwnVerdicts(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx := deadline(t, 2*time.Minute)
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	const routers, ids, rounds = 4, 40, 25
	type router struct {
		l     *ledger.Postgres
		batch []decide.Intent
		want  []decide.Verdict
	}
	// One handle for all: its buffers (Postgres.encodeBuffers) are shared
	// by every claim.
	cfg := ledger.DefaultConfig()
	cfg.URL = url
	cfg.StartedCache = 0 // every claim reads
	l, err := ledger.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	rs := make([]router, routers)
	for r := range rs {
		var first []decide.Intent
		var started []processor.Started
		for i := range ids {
			in := intent(fmt.Sprintf("r%d-%s-%d", r, strings.Repeat("x", 1+r*r*97%300), i), fmt.Sprintf("payload %d/%d", r, i))
			in.Offset = int64(i)
			first = append(first, in)
			started = append(started, processor.Started{WorkflowID: in.WorkflowID, RunID: "run", Generation: 1})
		}
		want(t, claim(t, l, first...), slices.Repeat([]decide.Verdict{decide.VerdictNew}, ids)...)
		if err := l.MarkStarted(ctx, started); err != nil {
			t.Fatal(err)
		}
		batch := slices.Clone(first)
		wants := slices.Repeat([]decide.Verdict{decide.VerdictDuplicate}, ids)
		for i := 0; i < ids; i += 3 {
			same, other := first[i], first[i]
			other.PayloadHash = sha256.Sum256([]byte(fmt.Sprintf("another payload %d/%d", r, i)))
			batch = append(batch, same, other)
			wants = append(wants, decide.VerdictDuplicate, decide.VerdictConflict)
		}
		want(t, claim(t, l, batch...), wants...) // the claim statement's answer: a replay from here
		rs[r] = router{l: l, batch: batch, want: wants}
	}
	var wg sync.WaitGroup
	errs := make(chan error, routers)
	for r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range rounds {
				cl, err := rs[r].l.Claim(ctx, rs[r].batch)
				if err != nil {
					errs <- fmt.Errorf("router %d, round %d: %w", r, round, err)
					return
				}
				for i, c := range cl {
					if c.Verdict != rs[r].want[i] {
						errs <- fmt.Errorf("router %d, round %d, intent %d (%s): %s, want %s", r, round, i, rs[r].batch[i].WorkflowID, c.Verdict, rs[r].want[i])
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// The replay's read answers alike in each exec mode a pool given to
// NewFromPool may use to run the ledger (pgx's default, named statements;
// CacheDescribe, which postgres.pooler: transaction sets; DescribeExec):
// a copy of a started row with its payload is a duplicate, with another
// payload a conflict, a pending row is re-driven, an absent one new. A
// tracer of the pool sees the read as a query with its six arrays.
func TestReplayReadAnswersAlikeInEachExecMode(t *testing.T) {
	url := open(t).Pool().Config().ConnString()
	for i, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec} {
		t.Run(mode.String(), func(t *testing.T) {
			pc, err := pgxpool.ParseConfig(url)
			if err != nil {
				t.Fatal(err)
			}
			pc.ConnConfig.DefaultQueryExecMode = mode
			log := &sqlLog{}
			pc.ConnConfig.Tracer = log
			pool, err := pgxpool.NewWithConfig(context.Background(), pc)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			l := ledger.NewFromPool(pool)
			ctx := deadline(t, time.Minute)
			id := func(s string) string { return fmt.Sprintf("m%d-%s", i, s) }
			a, b, c, d := intent(id("a"), "p"), intent(id("b"), "p"), intent(id("c"), "p"), intent(id("d"), "p")
			b.Offset, c.Offset, d.Offset = 8, 9, 10
			want(t, claim(t, l, a, b, c), decide.VerdictNew, decide.VerdictNew, decide.VerdictNew)
			if err := l.MarkStarted(ctx, []processor.Started{{WorkflowID: a.WorkflowID, RunID: "r", Generation: 1}, {WorkflowID: b.WorkflowID, RunID: "r", Generation: 1}}); err != nil {
				t.Fatal(err)
			}
			want(t, claim(t, l, a, b), decide.VerdictDuplicate, decide.VerdictDuplicate) // the claim statement's answer: a replay from here
			other := b
			other.PayloadHash = sha256.Sum256([]byte("q"))
			log.reset()
			for range 3 { // the statement prepared, then taken as it is
				want(t, claim(t, l, a, other, c, d, a, b),
					decide.VerdictDuplicate, decide.VerdictConflict, decide.VerdictRedrive, decide.VerdictNew, decide.VerdictDuplicate, decide.VerdictDuplicate)
				d.Offset += 100
				// another absent row each time, and a replay again
				d.WorkflowID += "'"
				want(t, claim(t, l, a, b), decide.VerdictDuplicate, decide.VerdictDuplicate)
			}
			reads := 0
			log.mu.Lock()
			for k, q := range log.sql {
				if q == ledger.StartedSQL {
					reads++
					if len(log.args[k]) != 6 {
						t.Errorf("the tracer saw the read with %d arguments, want 6", len(log.args[k]))
					}
				}
			}
			log.mu.Unlock()
			if reads != 6 {
				t.Errorf("the tracer saw %d replay reads, want 6", reads)
			}
		})
	}
}

// onePooled is a ledger (NewFromPool: no memory of started rows, every
// claim of a replay reads) on a pool of one session, and the pool.
func onePooled(t *testing.T) (*ledger.Postgres, *pgxpool.Pool, string) {
	t.Helper()
	url := open(t).Pool().Config().ConnString()
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return ledger.NewFromPool(pool), pool, url
}

// replaying claims in as new, marks it started and claims it twice: a
// replay from then on, the replay's read's statement prepared.
func replaying(t *testing.T, l *ledger.Postgres, in decide.Intent) {
	t.Helper()
	want(t, claim(t, l, in), decide.VerdictNew)
	if err := l.MarkStarted(context.Background(), []processor.Started{{WorkflowID: in.WorkflowID, RunID: "r", Generation: 1}}); err != nil {
		t.Fatal(err)
	}
	want(t, claim(t, l, in), decide.VerdictDuplicate)
	want(t, claim(t, l, in), decide.VerdictDuplicate)
}

// A session that lost the replay's read's statement (DISCARD ALL)
// answers that claim's read with SQLSTATE 26000; the read prepares the
// statement again and runs once more, so the claim answers (arrays.go).
func TestReplayReadPreparesItsStatementAgainAfterTheSessionLostIt(t *testing.T) {
	l, pool, _ := onePooled(t)
	in := intent("discarded-0", "p")
	replaying(t, l, in)
	ctx := deadline(t, time.Minute)
	if _, err := pool.Exec(ctx, `DISCARD ALL`); err != nil {
		t.Fatal(err)
	}
	want(t, claim(t, l, in), decide.VerdictDuplicate)
	want(t, claim(t, l, in), decide.VerdictDuplicate)
}

// A claim cancelled while the replay's read waits on the server (for a
// lock on the ledger that an operator's transaction holds) returns
// context.Canceled at once; its session is closed, not given back to
// the pool in the middle of a statement; and once the lock goes the next
// claim answers as the ledger says.
func TestAClaimCancelledDuringTheReplayReadLeavesThePoolServing(t *testing.T) {
	l, pool, url := onePooled(t)
	in := intent("cancelled-read-0", "p")
	replaying(t, l, in)
	side := sidePool(t, url)
	tx := held(t, side, pgx.TxOptions{})
	if _, err := tx.Exec(context.Background(), `LOCK TABLE dedup_ledger IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := l.Claim(ctx, []decide.Intent{in})
		done <- err
	}()
	waitBlockedHere(t, side, "LEFT JOIN LATERAL")
	cancel()
	if err := within(t, done, 10*time.Second, "the cancelled claim"); !errors.Is(err, context.Canceled) {
		t.Fatalf("the claim cancelled during the replay's read: %v, want context.Canceled", err)
	}
	if err := tx.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The pool destroys a session given back closed in the background
	// (puddle's Destroy): it leaves the pool within a bound, not at once.
	for end := time.Now().Add(5 * time.Second); pool.Stat().AcquiredConns() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d sessions still acquired 5s after the cancelled claim returned", pool.Stat().AcquiredConns())
		}
	}
	want(t, claim(t, l, in), decide.VerdictDuplicate)
	want(t, claim(t, l, in, intent("cancelled-read-1", "p")), decide.VerdictDuplicate, decide.VerdictNew)
}

// pgx's DeallocateAll releases a session's prepared statements and empties
// pgx's caches of them together, so that every query after it prepares
// its statement again and answers (pgx's advice after a schema change).
// A user of NewFromPool who runs it on a pooled session gets the same
// from the replay's read: the next claim answers its verdicts, and no
// error says a transaction pooler shares the session (there is none).
func TestAClaimAfterPgxsDeallocateAllOnItsSessionAnswers(t *testing.T) {
	l, pool, _ := onePooled(t)
	in := intent("deallocated-all-0", "p")
	replaying(t, l, in)
	ctx := deadline(t, time.Minute)
	var n int
	if err := pool.QueryRow(ctx, `SELECT $1::int`, 7).Scan(&n); err != nil { // a statement of pgx's cache
		t.Fatal(err)
	}
	if err := pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error { return c.Conn().DeallocateAll(ctx) }); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT $1::int`, 7).Scan(&n); err != nil || n != 7 {
		t.Fatalf("pgx's own cached statement after DeallocateAll: %d, %v", n, err)
	}
	got, err := l.Claim(ctx, []decide.Intent{in})
	if err != nil {
		t.Fatalf("the claim after pgx's DeallocateAll on its session: %v (permanent: %v), want its verdict", err, processor.IsPermanent(err))
	}
	if len(got) != 1 || got[0].Verdict != decide.VerdictDuplicate {
		t.Fatalf("the claim after pgx's DeallocateAll: %+v, want one duplicate", got)
	}
}

// A migration that changes the type of a column the replay's read
// returns (here generation to bigint: an ALTER TABLE dedup_ledger by
// `dedup migrate` under running routers) leaves the read's prepared plan
// unfit: the server answers SQLSTATE 0A000 "cached plan must not change
// result type", and the next read prepares the statement again and
// answers (arrays.go). An error that the next try heals is transient
// (errors.go: a permanent ledger error ends the router): the migration
// must not stop the routers that run through it.
func TestAClaimWhoseReadsPlanAMigrationChangedIsRetriedAndThenAnswers(t *testing.T) {
	l, _, url := onePooled(t)
	in := intent("migrated-0", "p")
	replaying(t, l, in)
	ctx := deadline(t, time.Minute)
	side := sidePool(t, url)
	if _, err := side.Exec(ctx, `ALTER TABLE dedup_ledger ALTER COLUMN generation TYPE bigint`); err != nil {
		t.Fatal(err)
	}
	_, err := l.Claim(ctx, []decide.Intent{in})
	if err != nil && processor.IsPermanent(err) {
		t.Fatalf("the claim whose read's plan the migration changed: %v, permanent (the router ends), want a transient error or its verdict", err)
	}
	want(t, claim(t, l, in), decide.VerdictDuplicate)
}

// A pool's tracer is told of a prepare of the replay's read only when the
// read prepares it (pgx's Conn.Prepare deallocates a statement it left
// behind before it tells the tracer anything). Here the read's statement
// went stale (DISCARD ALL, then a preparation that met a held lock) and
// the session then died before the next read: that read's deallocation
// fails, no statement is parsed, and the tracer must hear of no prepare.
func TestAPoolsTracerHearsOfNoPrepareWhenTheStaleReadsDeallocationFails(t *testing.T) {
	url := open(t).Pool().Config().ConnString()
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 1 // one session: the one that dies
	pc.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	log := &prepareLog{}
	pc.ConnConfig.Tracer = log
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	l := ledger.NewFromPool(pool)
	in := intent("stale-dead-0", "p")
	replaying(t, l, in)
	ctx := deadline(t, time.Minute)
	var pid int
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	// The statement lost, and its preparation again failing on a held
	// lock: the claim fails, its entry stale.
	if _, err := pool.Exec(ctx, `DISCARD ALL`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SET lock_timeout = '200ms'`); err != nil {
		t.Fatal(err)
	}
	side := sidePool(t, url)
	tx := held(t, side, pgx.TxOptions{})
	if _, err := tx.Exec(ctx, `LOCK TABLE dedup_ledger IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Claim(ctx, []decide.Intent{in}); err == nil {
		t.Fatal("the claim whose read could not be prepared again answered")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := side.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var n int
		if err := side.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the session outlived its termination")
		}
	}
	log.take()
	_, err = l.Claim(ctx, []decide.Intent{in})
	if err == nil {
		t.Fatal("the claim on a dead session answered")
	}
	if names := log.take(); len(names) != 0 {
		t.Fatalf("a read whose deallocation of its stale statement failed (%v) prepared nothing: the tracer was told of %d prepares %q, want none", err, len(names), names)
	}
}

// A read whose preparation fails (here its lock on the ledger times out:
// an operator's ACCESS EXCLUSIVE lock, a session's lock_timeout) fails
// with the server's error, transient, and leaves nothing behind that a
// later read trips on: once the lock goes, the next claim prepares the
// statement and answers. Likewise a read whose plan a migration changed
// (0A000) is answered by the claim after it.
func TestAReadWhosePreparationFailedOrWentStaleIsAnsweredByTheNextClaim(t *testing.T) {
	l, pool, url := onePooled(t)
	in := intent("prepare-failed-0", "p")
	replaying(t, l, in)
	ctx := deadline(t, time.Minute)
	if _, err := pool.Exec(ctx, `DEALLOCATE dedup_started_rows`); err != nil {
		t.Fatal(err)
	}
	want(t, claim(t, l, in), decide.VerdictDuplicate) // prepared again, run once more
	// Lost again, and this time its preparation meets a held lock.
	if _, err := pool.Exec(ctx, `DEALLOCATE dedup_started_rows`); err != nil {
		t.Fatal(err)
	}
	var pgErr *pgconn.PgError
	if _, err := pool.Exec(ctx, `SET lock_timeout = '200ms'`); err != nil {
		t.Fatal(err)
	}
	side := sidePool(t, url)
	tx := held(t, side, pgx.TxOptions{})
	if _, err := tx.Exec(ctx, `LOCK TABLE dedup_ledger IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	_, err := l.Claim(ctx, []decide.Intent{in})
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" || processor.IsPermanent(err) {
		t.Fatalf("the claim whose read's preparation met a held lock: %v, want a transient SQLSTATE 55P03", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	want(t, claim(t, l, in), decide.VerdictDuplicate)
	want(t, claim(t, l, in), decide.VerdictDuplicate)
	if _, err := side.Exec(ctx, `ALTER TABLE dedup_ledger ALTER COLUMN generation TYPE bigint`); err != nil {
		t.Fatal(err)
	}
	want(t, claim(t, l, in), decide.VerdictDuplicate) // 0A000, prepared again, run once more
	want(t, claim(t, l, in), decide.VerdictDuplicate)
}

// A claim's working memory is kept for the next claim (scratch.go); a
// claim gets none of the answers of the claims before it, larger or
// smaller, on the read of started rows or the claim statement, with the
// memory of started rows or without. On one P, so that every claim takes
// the memory the last one left.
func TestAClaimGetsNoAnswerOfTheClaimBeforeIt(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for _, remember := range []bool{false, true} {
		t.Run(fmt.Sprintf("started_cache=%v", remember), func(t *testing.T) {
			url := pgtest.NewDatabase(t)
			ctx := deadline(t, 2*time.Minute)
			if err := ledger.Migrate(ctx, url); err != nil {
				t.Fatal(err)
			}
			cfg := ledger.DefaultConfig()
			cfg.URL = url
			if !remember {
				cfg.StartedCache = 0
			}
			l, err := ledger.Open(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(l.Close)
			batch := func(prefix string, n int, payload string) []decide.Intent {
				in := make([]decide.Intent, n)
				for i := range in {
					in[i] = intent(fmt.Sprintf("%s-%d", prefix, i), payload)
					in[i].Offset = int64(i)
				}
				return in
			}
			a := batch("a", 60, "p")
			want(t, claim(t, l, a...), slices.Repeat([]decide.Verdict{decide.VerdictNew}, 60)...)
			started := make([]processor.Started, len(a))
			for i, in := range a {
				started[i] = processor.Started{WorkflowID: in.WorkflowID, RunID: "r", Generation: 1}
			}
			if err := l.MarkStarted(ctx, started); err != nil {
				t.Fatal(err)
			}
			dups := slices.Repeat([]decide.Verdict{decide.VerdictDuplicate}, 60)
			want(t, claim(t, l, a...), dups...) // the claim statement's answer: a replay from here
			want(t, claim(t, l, a...), dups...) // the read's (or the memory's)
			// The read answers the new IDs of a batch most of which is
			// started, then none of the next batch's.
			e := append(slices.Clone(a[:40]), batch("e", 20, "p")...)
			want(t, claim(t, l, e...), append(slices.Repeat([]decide.Verdict{decide.VerdictDuplicate}, 40),
				slices.Repeat([]decide.Verdict{decide.VerdictNew}, 20)...)...)
			want(t, claim(t, l, a...), dups...)
			// Fewer IDs, none in the ledger, where the last claim's
			// answers were all started.
			b := batch("b", 30, "p")
			want(t, claim(t, l, b...), slices.Repeat([]decide.Verdict{decide.VerdictNew}, 30)...)
			// More IDs: b's pending rows, then new ones past the last
			// claim's length.
			c := append(slices.Clone(b), batch("c", 50, "p")...)
			want(t, claim(t, l, c...), append(slices.Repeat([]decide.Verdict{decide.VerdictRedrive}, 30),
				slices.Repeat([]decide.Verdict{decide.VerdictNew}, 50)...)...)
			// a's started rows again, every other one with another
			// payload, and one copy of each in the batch twice.
			d := slices.Clone(a[:20])
			var wants []decide.Verdict
			for i := range d {
				wants = append(wants, decide.VerdictDuplicate)
				if i%2 == 1 {
					d[i].PayloadHash = sha256.Sum256([]byte("q"))
					wants[i] = decide.VerdictConflict
				}
			}
			d = append(d, d[:5]...)
			wants = append(wants, wants[:5]...)
			want(t, claim(t, l, d...), wants...)
			want(t, claim(t, l, a[:3]...), dups[:3]...)
		})
	}
}

// A session that lost the claim's own statement (DISCARD ALL between two
// claims on it) answers the next claim's statement with SQLSTATE 26000
// before it runs any of it: the claim prepares the statement again and
// runs it once more (arrays.go), and that one run is the only one that
// writes: the pending row's re-drive counts one attempt, not two, and a
// dead-lettered row is re-claimed once.
func TestAReClaimAfterDiscardAllOnItsSessionCountsOneAttempt(t *testing.T) {
	l, pool, url := onePooled(t)
	side := sidePool(t, url)
	ctx := deadline(t, time.Minute)
	a, d := intent("discard-redrive", "p"), intent("discard-dead", "q")
	want(t, claim(t, l, a, d), decide.VerdictNew, decide.VerdictNew) // the claim's statement, prepared on the one session
	if err := l.MarkDeadLettered(ctx, []processor.DeadLettered{{WorkflowID: d.WorkflowID, Topic: d.Topic, Partition: d.Partition}}); err != nil {
		t.Fatal(err)
	}
	attempts := func(id string) (n int, state string) {
		t.Helper()
		if err := side.QueryRow(ctx, `SELECT attempts, state FROM dedup_ledger WHERE workflow_id = $1`, id).Scan(&n, &state); err != nil {
			t.Fatal(err)
		}
		return n, state
	}
	for round := 2; round <= 3; round++ {
		if _, err := pool.Exec(ctx, `DISCARD ALL`); err != nil {
			t.Fatal(err)
		}
		got, err := l.Claim(ctx, []decide.Intent{a, d})
		if err != nil {
			t.Fatalf("round %d: the claim after DISCARD ALL on its session: %v (permanent: %v), want its verdicts", round, err, processor.IsPermanent(err))
		}
		if got[0].Verdict != decide.VerdictRedrive || got[1].Verdict != decide.VerdictRedrive {
			t.Fatalf("round %d: verdicts %s, %s, want re-drives", round, got[0].Verdict, got[1].Verdict)
		}
		if n, st := attempts(a.WorkflowID); n != round || st != "pending" {
			t.Fatalf("round %d: the pending row's attempts %d (%s), want %d (pending): the re-drive was applied %d times", round, n, st, round, n-round+1)
		}
	}
	if n, st := attempts(d.WorkflowID); n != 3 || st != "pending" {
		t.Fatalf("the dead-lettered row re-claimed twice: attempts %d (%s), want 3 (pending)", n, st)
	}
}

// Routers' claims and marks of new rows run at once on one handle, each
// encoding its parameters into a buffer of that handle's
// (Postgres.encodeBuffers) and reading its answer on its own session:
// batches of IDs whose lengths differ per router (one past the buffers'
// bound), each with a copy of another payload (a conflict, whose ledger
// hash the claim records), marked started and then re-run. Every claim
// gets its own batch's verdicts, every mark Records its own entries, and
// every conflict row names the hash its ledger row holds. Run it with
// -race too: the buffers are shared by every statement.
func TestConcurrentClaimsAndMarksGiveEachBatchItsOwnAnswers(t *testing.T) {
	l := open(t)
	ctx := deadline(t, 3*time.Minute)
	const routers, ids, rounds = 4, 12, 6
	var wg sync.WaitGroup
	errs := make(chan error, routers)
	for r := range routers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pad := strings.Repeat("y", 1+r*r*331%2000)
			if r == routers-1 {
				pad = strings.Repeat("z", 400<<10) // a batch of 12 IDs of 400 KiB: past the buffers' 4 MiB bound
			}
			var prev []processor.Started
			for round := range rounds {
				var batch []decide.Intent
				var wants []decide.Verdict
				for i := range ids {
					in := intent(fmt.Sprintf("r%d-%d-%d-%s", r, round, i, pad), fmt.Sprintf("payload %d/%d/%d", r, round, i))
					in.Offset = int64(round*ids + i)
					batch = append(batch, in)
					wants = append(wants, decide.VerdictNew)
				}
				if r != routers-1 { // (a conflict row's ID is indexed: not 400 KiB)
					other := batch[round%ids]
					other.PayloadHash = sha256.Sum256([]byte(fmt.Sprintf("another payload %d/%d", r, round)))
					batch = append(batch, other)
					wants = append(wants, decide.VerdictConflict)
				}
				cl, err := l.Claim(ctx, batch)
				if err != nil {
					errs <- fmt.Errorf("router %d, round %d: claim: %w", r, round, err)
					return
				}
				for i, c := range cl {
					if c.Verdict != wants[i] {
						errs <- fmt.Errorf("router %d, round %d, intent %d: %s, want %s", r, round, i, c.Verdict, wants[i])
						return
					}
				}
				st := make([]processor.Started, 0, ids+len(prev))
				for i := range ids {
					st = append(st, processor.Started{WorkflowID: batch[i].WorkflowID, RunID: fmt.Sprintf("run-%d-%d-%d", r, round, i), Generation: 1})
				}
				for _, p := range prev { // the last round's rows, re-run
					p.Generation, p.RunID = p.Generation+1, p.RunID+"+"
					st = append(st, p)
				}
				if err := l.MarkStarted(ctx, st); err != nil {
					errs <- fmt.Errorf("router %d, round %d: mark: %w", r, round, err)
					return
				}
				for i, s := range st {
					if !s.Recorded {
						errs <- fmt.Errorf("router %d, round %d: mark entry %d (generation %d) not Recorded", r, round, i, s.Generation)
						return
					}
				}
				prev = st[:ids]
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var bad, conflicts, gen2 int
	if err := l.Pool().QueryRow(ctx, `SELECT
	(SELECT count(*) FROM dedup_conflicts c JOIN dedup_ledger l USING (workflow_id) WHERE c.ledger_payload_hash IS DISTINCT FROM l.payload_hash),
	(SELECT count(*) FROM dedup_conflicts),
	(SELECT count(*) FROM dedup_ledger WHERE generation = 2 AND state = 'started')`).Scan(&bad, &conflicts, &gen2); err != nil {
		t.Fatal(err)
	}
	if conflicts != (routers-1)*rounds || bad != 0 {
		t.Errorf("%d conflict rows (want %d), %d of them naming a hash their ledger row does not hold", conflicts, (routers-1)*rounds, bad)
	}
	if gen2 != routers*(rounds-1)*ids {
		t.Errorf("%d rows re-run to generation 2, want %d", gen2, routers*(rounds-1)*ids)
	}
}

// A pool's tracer that also hears prepares (pgx's PrepareTracer: pgx's
// tracelog logs each) is told of the claim's and the mark's statements
// as pgx's own Query told it in the exec modes that describe a statement
// before they run it unnamed: CacheDescribe (what postgres.pooler:
// transaction sets) describes it once a session, DescribeExec every time,
// each as a prepare of the unnamed statement.
func TestAPoolsTracerHearsOfTheClaimsAndMarksDescribesAsPgxToldIt(t *testing.T) {
	url := open(t).Pool().Config().ConnString()
	for _, c := range []struct {
		mode pgx.QueryExecMode
		want int // unnamed prepares of the claim's and the mark's statements, over three claims and marks
	}{{pgx.QueryExecModeCacheDescribe, 2}, {pgx.QueryExecModeDescribeExec, 6}} {
		t.Run(c.mode.String(), func(t *testing.T) {
			pc, err := pgxpool.ParseConfig(url)
			if err != nil {
				t.Fatal(err)
			}
			pc.MaxConns = 1
			pc.ConnConfig.DefaultQueryExecMode = c.mode
			log := &prepareLog{}
			pc.ConnConfig.Tracer = log
			pool, err := pgxpool.NewWithConfig(context.Background(), pc)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			l := ledger.NewFromPool(pool)
			for i := range 3 {
				in := intent(fmt.Sprintf("described-%s-%d", c.mode, i), "p")
				want(t, claim(t, l, in), decide.VerdictNew)
				if err := l.MarkStarted(context.Background(), []processor.Started{{WorkflowID: in.WorkflowID, RunID: "r", Generation: 1}}); err != nil {
					t.Fatal(err)
				}
			}
			if names := log.take(); len(names) != c.want {
				t.Fatalf("three claims and marks in %s: the tracer was told of %d prepares %q, want %d unnamed ones (pgx's Query's describes)", c.mode, len(names), names, c.want)
			}
		})
	}
}

// describingSession is a pool of one session on a new ledger in
// CacheDescribe (what postgres.pooler: transaction sets), waiting at most
// 200ms for a lock, whose tracer is the log returned.
func describingSession(t *testing.T, ctx context.Context) (*pgxpool.Pool, *prepareLog) {
	t.Helper()
	pc, err := pgxpool.ParseConfig(open(t).Pool().Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 1 // one session
	pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	pc.ConnConfig.RuntimeParams["lock_timeout"] = "200ms"
	log := &prepareLog{}
	pc.ConnConfig.Tracer = log
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, log
}

// claims counts the prepares of the claim's statement since the last take.
func (p *prepareLog) claims() int { return p.takeSQL("INSERT INTO dedup_ledger") }

// In CacheDescribe (what postgres.pooler: transaction sets) pgx's own
// Query forgets a statement's description on its session when a run of it
// fails (pgx's Rows.Close invalidates its description cache entry), and
// describes it again on the next run: a pool's tracer hears a prepare of
// the claim's statement once more after a claim that failed (here: its
// lock_timeout, waiting on a row another transaction holds), as pgx's
// Query told it.
func TestAPoolsTracerHearsTheClaimDescribedAgainAfterAFailedClaimInCacheDescribe(t *testing.T) {
	ctx := deadline(t, time.Minute)
	pool, log := describingSession(t, ctx)
	url := pool.Config().ConnString()
	l := ledger.NewFromPool(pool)
	in := intent("redescribed", "p")
	want(t, claim(t, l, in), decide.VerdictNew)
	if n := log.claims(); n != 1 {
		t.Fatalf("the first claim: %d describes of its statement, want 1", n)
	}
	other, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Close(context.Background()) }()
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT FROM dedup_ledger WHERE workflow_id = $1 FOR UPDATE`, in.WorkflowID); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Claim(ctx, []decide.Intent{in}); err == nil {
		t.Fatal("a claim of a row another transaction holds succeeded within lock_timeout")
	} else if !ledger.Transient(err) {
		t.Fatalf("the claim's lock_timeout: %v, want a transient error", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	log.claims()
	want(t, claim(t, l, in), decide.VerdictRedrive)
	if n := log.claims(); n != 1 {
		t.Errorf("the claim after a failed one on the same session: the tracer heard %d describes of its statement, want 1 (pgx's Query forgot the description when the run failed)", n)
	}
}

// In CacheDescribe a describe of the claim's statement that fails (its
// lock_timeout against a migration's ACCESS EXCLUSIVE lock) fails the
// claim with a transient error, leaves the session usable, and is not
// remembered as done: the next claim on that session describes the
// statement again (the tracer hears it, as pgx's Query told it) and
// claims.
func TestAFailedDescribeOfTheClaimIsTransientAndDescribedAgainOnTheNextClaim(t *testing.T) {
	ctx := deadline(t, time.Minute)
	pool, log := describingSession(t, ctx)
	url := pool.Config().ConnString()
	var pid int
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	l := ledger.NewFromPool(pool)
	other, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Close(context.Background()) }()
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE dedup_ledger IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	in := intent("describe-locked", "p")
	_, err = l.Claim(ctx, []decide.Intent{in})
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "55P03" || !ledger.Transient(err) {
		t.Fatalf("a claim whose describe meets the lock: %v, want a transient lock_timeout (55P03)", err)
	}
	if n := log.claims(); n != 1 {
		t.Errorf("the claim whose describe failed: %d describes heard, want 1", n)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	want(t, claim(t, l, in), decide.VerdictNew)
	if n := log.claims(); n != 1 {
		t.Errorf("the claim after a failed describe: %d describes heard, want 1 (described again)", n)
	}
	var again int
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&again); err != nil || again != pid {
		t.Errorf("the session after the failed describe: backend %d (%v), want the same %d", again, err, pid)
	}
}
