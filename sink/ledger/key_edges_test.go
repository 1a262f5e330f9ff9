package ledger_test

import (
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"strings"
	"sync"
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

// argLog records the statements a pool sends, with their arguments.
type argLog struct {
	mu sync.Mutex
	q  []tracedQuery
}

type tracedQuery struct {
	sql  string
	args []any
}

func (s *argLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.mu.Lock()
	s.q = append(s.q, tracedQuery{d.SQL, d.Args})
	s.mu.Unlock()
	return ctx
}

func (s *argLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (s *argLog) take() []tracedQuery {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.q
	s.q = nil
	return q
}

func openArgTraced(t *testing.T) (*ledger.Postgres, *argLog) {
	t.Helper()
	pc, err := pgxpool.ParseConfig(open(t).Pool().Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	log := &argLog{}
	pc.ConnConfig.Tracer = log
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return ledger.NewFromPool(pool), log
}

// explain returns the plan of q on a connection of pool, with generic
// plans forced or not.
func explain(t *testing.T, pool *pgxpool.Pool, q tracedQuery, generic bool) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	mode := "auto"
	if generic {
		mode = "force_generic_plan"
	}
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = conn.Exec(ctx, "RESET plan_cache_mode") }()
	rows, err := conn.Query(ctx, "EXPLAIN "+q.sql, q.args...)
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", q.sql, err)
	}
	var plan []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, s)
	}
	rows.Close()
	if rows.Err() != nil {
		t.Fatalf("EXPLAIN %s: %v", q.sql, rows.Err())
	}
	return strings.Join(plan, "\n")
}

// fillLedger inserts n rows (a third each started, pending, dead_lettered,
// ended long ago) with random workflow IDs and analyzes the table.
func fillLedger(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset, state, run_id, started_at, updated_at)
		SELECT 'activity-a:fill-' || gen_random_uuid(), 'a', g::text, 'field', sha256(g::text::bytea), 'events', 0, g,
			(ARRAY['started', 'pending', 'dead_lettered'])[1 + g % 3], CASE WHEN g % 3 = 0 THEN 'run' END,
			CASE WHEN g % 3 = 0 THEN now() - interval '30 days' END, now() - interval '30 days'
		FROM generate_series(1, $1::int) g`, n); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE dedup_ledger`); err != nil {
		t.Fatal(err)
	}
}

// Every statement by workflow ID, at 300,000 rows, analyzed: no
// sequential scan of dedup_ledger (custom and generic plans). Held.
func TestLedgerKeyPlansAtScale(t *testing.T) {
	l, log := openArgTraced(t)
	ctx := context.Background()
	fillLedger(t, l.Pool(), 300000)
	var ids []string
	rows, err := l.Pool().Query(ctx, `SELECT workflow_id FROM dedup_ledger TABLESAMPLE SYSTEM (5) LIMIT 1000`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		ids = append(ids, s)
	}
	rows.Close()
	log.take()
	var batch []decide.Intent
	for i := 0; i < 1000; i++ {
		in := intent(fmt.Sprintf("new-%d", i), "p")
		batch = append(batch, in)
	}
	if _, err := l.Claim(ctx, batch); err != nil {
		t.Fatal(err)
	}
	var st []processor.Started
	for i := 0; i < 512; i++ {
		st = append(st, processor.Started{WorkflowID: batch[i].WorkflowID, RunID: "r", Generation: 1})
	}
	if err := l.MarkStarted(ctx, st); err != nil {
		t.Fatal(err)
	}
	if err := l.MarkDeadLettered(ctx, unfenced(ids[:512]...)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Claim(ctx, batch); err != nil { // replaying: answerStarted
		t.Fatal(err)
	}
	if _, err := l.Claim(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Rows(ctx, ids); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Lookup(ctx, ids); err != nil {
		t.Fatal(err)
	}
	qs := log.take()
	qs = append(qs,
		tracedQuery{`SELECT (SELECT max(l.generation) FROM dedup_ledger l WHERE ` + schemas.LedgerRowIs("l", "$1::text", "$2::uuid") + `)`, []any{ids[0], schemas.LedgerKey(ids[0])}},
	)
	for s, q := range ledger.PurgeStatements {
		_ = s
		qs = append(qs, tracedQuery{q, []any{24 * time.Hour, 10000, time.Time{}}})
	}
	for _, q := range qs {
		if !strings.Contains(q.sql, "dedup_ledger") {
			continue
		}
		for _, g := range []bool{false, true} {
			if p := explain(t, l.Pool(), q, g); strings.Contains(p, "Seq Scan on dedup_ledger") {
				t.Errorf("generic=%v\n%s\n---\n%s", g, q.sql, p)
			}
		}
	}
}

// The claim locks a batch's rows in dedup_ledger_key order (claimSQL's
// ORDER BY i.key); MarkStarted still sorts its IDs by workflow ID ("like
// Claim, so that routers lock rows in one order") and its UPDATE ... FROM
// unnest locks them in that order. Since migration 00012 the two orders
// differ, so a router claiming (re-driving) rows while another router
// marks the same rows started deadlock: PostgreSQL aborts one of them
// (40P01). Before the change both statements locked in workflow ID order.
// The blockers below only pace the two statements so that each takes its
// first row before the other takes its last; no blocker is in the cycle.
func TestLedgerKeyClaimAndMarkStartedLockInDifferentOrders(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	// An index-sized ledger, so that MarkStarted's plan is what it is in
	// production: a nested loop over unnest probing dedup_ledger_key.
	fillLedger(t, l.Pool(), 20000)

	wf := func(n int) string { return intent(fmt.Sprintf("dl-%d", n), "p").WorkflowID }
	key := func(n int) string { return wantKey(wf(n)) }
	// X < Y by workflow ID, key(Y) < key(W) < key(X); W2 between X and Y
	// by workflow ID.
	var x, y, w, w2 = -1, -1, -1, -1
search:
	for a := 0; a < 200; a++ {
		for b := 0; b < 200; b++ {
			if wf(a) >= wf(b) || key(b) >= key(a) {
				continue
			}
			wi, w2i := -1, -1
			for c := 0; c < 400; c++ {
				if c == a || c == b {
					continue
				}
				if wi < 0 && key(b) < key(c) && key(c) < key(a) {
					wi = c
				} else if w2i < 0 && wf(a) < wf(c) && wf(c) < wf(b) && (key(b) >= key(c) || key(c) >= key(a)) {
					w2i = c
				}
			}
			if wi >= 0 && w2i >= 0 {
				x, y, w, w2 = a, b, wi, w2i
				break search
			}
		}
	}
	if x < 0 {
		t.Fatal("no IDs found")
	}
	in := func(n int) decide.Intent { return intent(fmt.Sprintf("dl-%d", n), "p") }
	want(t, claim(t, l, in(x), in(y), in(w), in(w2)), decide.VerdictNew, decide.VerdictNew, decide.VerdictNew, decide.VerdictNew)
	if _, err := l.Pool().Exec(ctx, `ANALYZE dedup_ledger`); err != nil {
		t.Fatal(err)
	}

	side := sidePool(t, l.Pool().Config().ConnString())
	lockRow := func(id string) pgx.Tx { return holdRows(t, side, "dedup_ledger", id) }
	t1, t2 := lockRow(wf(w)), lockRow(wf(w2))

	var wg sync.WaitGroup
	var claimErr, markErr error
	wg.Add(2)
	claimed := make(chan struct{})
	go func() { // router A re-drives Y, W, X (locks Y, waits for W)
		defer wg.Done()
		defer close(claimed)
		_, claimErr = l.Claim(ctx, []decide.Intent{in(x), in(y), in(w)})
	}()
	waitBlocked(t, side, "INSERT INTO dedup_ledger AS l")
	a := waiterOf(t, side, t1)
	go func() { // router B marks X, W2, Y started (locks X, waits for W2)
		defer wg.Done()
		markErr = l.MarkStarted(ctx, []processor.Started{{WorkflowID: wf(y), RunID: "r", Generation: 1}, {WorkflowID: wf(x), RunID: "r", Generation: 1}, {WorkflowID: wf(w2), RunID: "r", Generation: 1}})
	}()
	waitBlocked(t, side, "UPDATE dedup_ledger l SET state = 'started'")
	_ = t1.Rollback(ctx) // A takes W, then waits for X (B's)
	// (B locking in key order, it holds no row A takes next: A ends.)
	waitMovedOn(t, side, a, "UPDATE dedup_ledger l SET state = 'started'", claimed)
	_ = t2.Rollback(ctx) // B takes W2, then waits for Y (A's)
	wg.Wait()
	if claimErr != nil || markErr != nil {
		t.Fatalf("a claim and a mark of the same rows by two routers: claim: %v; MarkStarted: %v\n"+
			"(claim locks in key order: key(%s)=%s < key(%s)=%s; MarkStarted in workflow ID order: %s < %s)",
			claimErr, markErr, wf(y), key(y), wf(x), key(x), wf(x), wf(y))
	}
}

// The Down of 00012 is not re-runnable: its first run, stopped after it
// put the primary key back (here DROP FUNCTION refuses, because an
// operator's view uses dedup_ledger_key; an interrupted DROP INDEX
// CONCURRENTLY or a crash stops it at the same place), leaves goose at
// version 12, and every later run fails at ADD CONSTRAINT ... PRIMARY KEY
// (55000 "index dedup_ledger_pkey is already associated with a constraint"), unlike the Up, which is written to be run
// again after a partial run.
func TestLedgerKeyDownMigrationRerunAfterPartialRun(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	prov, db := provider(t, url)
	if _, err := prov.DownTo(ctx, 12); err != nil { // the migrations after 00012
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE VIEW ops_ledger_keys AS SELECT workflow_id, dedup_ledger_key(workflow_id) AS key FROM dedup_ledger`); err != nil {
		t.Fatal(err)
	}
	if _, err := prov.Down(ctx); err == nil {
		t.Fatal("Down dropped a function a view depends on")
	} else {
		t.Logf("first Down (partial): %v", err)
	}
	if _, err := db.ExecContext(ctx, `DROP VIEW ops_ledger_keys`); err != nil {
		t.Fatal(err)
	}
	if _, err := prov.Down(ctx); err != nil {
		t.Fatalf("Down again, once what stopped it is gone: %v", err)
	}
	v, err := prov.GetDBVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v != 11 {
		t.Fatalf("version %d after Down, want 11", v)
	}
}

// Down to 11 and Up again keeps every row and one row per workflow ID.
func TestLedgerKeyDownAndUpKeepTheLedger(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	cfg := ledger.DefaultConfig()
	cfg.URL = url
	l, err := ledger.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var batch []decide.Intent
	for i := 0; i < 500; i++ {
		batch = append(batch, intent(fmt.Sprintf("du-%d", i), "p"))
	}
	if _, err := l.Claim(ctx, batch); err != nil {
		t.Fatal(err)
	}
	l.Pool().Reset()
	prov, db := provider(t, url)
	if _, err := prov.DownTo(ctx, 11); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset)
		VALUES ('activity-a:du-0', 'a', 'x', 'field', '\x00', 'events', 0, 0)`); err == nil {
		t.Fatal("after Down, a second row for one workflow ID was inserted")
	}
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	l.Pool().Reset()
	vs, err := l.Claim(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vs {
		if v.Verdict != decide.VerdictRedrive {
			t.Fatalf("%s after Down and Up: %s, want redrive", batch[i].WorkflowID, v.Verdict)
		}
	}
	var n, d int
	if err := db.QueryRowContext(ctx, `SELECT count(*), count(DISTINCT workflow_id) FROM dedup_ledger`).Scan(&n, &d); err != nil {
		t.Fatal(err)
	}
	if n != 500 || d != 500 {
		t.Fatalf("%d rows, %d IDs, want 500", n, d)
	}
}

// A ledger in a database of another encoding: the key of a non-ASCII ID
// is the same in every session, and every lookup finds the row.
func TestLedgerKeyNonUTF8Databases(t *testing.T) {
	ctx := context.Background()
	c := pgtest.Cluster(t)
	admin, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = admin.Close(ctx) }()
	for i, enc := range []string{"SQL_ASCII", "LATIN1"} {
		name := fmt.Sprintf("adv_enc_%d_%d", i, time.Now().UnixNano())
		if _, err := admin.Exec(ctx, fmt.Sprintf(`CREATE DATABASE %s ENCODING '%s' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0`, name, enc)); err != nil {
			t.Fatal(err)
		}
		url := c.DatabaseURL(name)
		if err := ledger.Migrate(ctx, url); err != nil {
			t.Fatalf("%s: %v", enc, err)
		}
		cfg := ledger.DefaultConfig()
		cfg.URL = url
		l, err := ledger.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ids := []string{"héllo wörld", `back\slash \101`, "Ünïcödé:0190a1b2-c3d4-7e5f-8a9b-0123456789ab", "é:01ARZ3NDEKTSV4RRFFQ69G5FAV", "ÿ"}
		var batch []decide.Intent
		for _, id := range ids {
			batch = append(batch, intent(id, "p"))
		}
		want(t, claim(t, l, batch...), decide.VerdictNew, decide.VerdictNew, decide.VerdictNew, decide.VerdictNew, decide.VerdictNew)
		l.Pool().Reset()
		want(t, claim(t, l, batch...), decide.VerdictRedrive, decide.VerdictRedrive, decide.VerdictRedrive, decide.VerdictRedrive, decide.VerdictRedrive)
		var wfs []string
		for _, in := range batch {
			wfs = append(wfs, in.WorkflowID)
		}
		got, err := l.Lookup(ctx, wfs)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := l.Rows(ctx, wfs)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(ids) || len(rows) != len(ids) {
			t.Errorf("%s: Lookup found %d, Rows %d of %d", enc, len(got), len(rows), len(ids))
		}
		var bad int
		if err := l.Pool().QueryRow(ctx, `SELECT count(*) FROM dedup_ledger WHERE dedup_ledger_key(workflow_id) IS DISTINCT FROM dedup_ledger_key(workflow_id || '')`).Scan(&bad); err != nil {
			t.Fatal(err)
		}
		if bad != 0 {
			t.Errorf("%s: %d keys differ", enc, bad)
		}
		if enc == "SQL_ASCII" {
			for _, id := range wfs {
				var k string
				if err := l.Pool().QueryRow(ctx, `SELECT dedup_ledger_key($1)::text`, id).Scan(&k); err != nil {
					t.Fatal(err)
				}
				if k != wantKey(id) {
					t.Errorf("%s: key(%q) = %s, want %s", enc, id, k, wantKey(id))
				}
			}
		}
		l.Close()
	}
}

// Odd workflow IDs: the SQL digest is the one the migration states
// (key_test.go's wantKey), and each ID claims and finds its own row.
func TestLedgerKeyOddIDs(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	long := strings.Repeat("x", 100000)
	ids := []string{
		"A:0190A1B2-C3D4-7E5F-8A9B-0123456789AB", // uppercase UUIDv7
		"a:0190a1b2-c3d4-7e5f-8a9b-0123456789Ab", // mixed case
		"a:01arz3ndektsv4rrffq69g5fav",           // lowercase ULID
		"a:01ARZ3NDEKTSV4RRFFQ69G5FAI",           // I
		"a:01ARZ3NDEKTSV4RRFFQ69G5FAL",           // L
		"a:01ARZ3NDEKTSV4RRFFQ69G5FAO",           // O
		"a:81ARZ3NDEKTSV4RRFFQ69G5FAV",           // first char 8
		"a:91ARZ3NDEKTSV4RRFFQ69G5FAV",           // 9
		"01ARZ3NDEKTSV4RRFFQ69G5FAV",             // bare ULID, 26 chars
		"1ARZ3NDEKTSV4RRFFQ69G5FAV",              // 25 chars
		"0190a1b2-c3d4-7e5f-8a9b-0123456789ab",   // bare UUIDv7, 36
		"190a1b2-c3d4-7e5f-8a9b-0123456789ab",    // 35
		"a:0190a1b2-c3d4-7e5f-8a9b-0123456789ab\n",
		"a:01ARZ3NDEKTSV4RRFFQ69G5FAV\n",
		"a:01ARZ3NDEKTSV4RRFFQ69G5FAV ",
		"é0190a1b2-c3d4-7e5f-8a9b-0123456789ab",
		"ü01ARZ3NDEKTSV4RRFFQ69G5FAV",
		"a:00000000000000000000000000", // digits only: a "ULID" of time 0
		"a:00000000-0000-7000-8000-000000000000",
		"a:ffffffff-ffff-7fff-bfff-ffffffffffff",
		"a:0190a1b2-c3d4-7e5f-8a9b-0123456789ab0190a1b2-c3d4-7e5f-8a9b-0123456789ab",
		`\`, `\\`, `\000`, `\x00`, "\\'", "'", "%", "_", "\t", " ", "😀", "e\u0301", "é", "İ", "ß", "SS",
		long, long + "0190a1b2-c3d4-7e5f-8a9b-0123456789ab", long + "01ARZ3NDEKTSV4RRFFQ69G5FAV",
		"activity-a:X", "activity-a:x",
	}
	for _, id := range ids {
		var got string
		if err := l.Pool().QueryRow(ctx, `SELECT dedup_ledger_key($1)::text`, id).Scan(&got); err != nil {
			t.Fatalf("%q: %v", id, err)
		}
		if w := wantKey(id); got != w {
			t.Errorf("dedup_ledger_key(%q) = %s, want %s", id, got, w)
		}
	}
	var batch []decide.Intent
	var wfs []string
	for i, id := range ids {
		in := intent("", fmt.Sprint(i))
		in.WorkflowID = id
		batch = append(batch, in)
		wfs = append(wfs, id)
	}
	for _, v := range claim(t, l, batch...) {
		if v != decide.VerdictNew {
			t.Fatalf("verdict %s for a new odd ID", v)
		}
	}
	got, err := l.Lookup(ctx, wfs)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := l.Rows(ctx, wfs)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ids) || len(rows) != len(ids) {
		t.Fatalf("Lookup %d, Rows %d, want %d", len(got), len(rows), len(ids))
	}
	for _, v := range claim(t, l, batch...) {
		if v != decide.VerdictRedrive {
			t.Fatalf("verdict %s for an odd ID claimed again", v)
		}
	}
}

// Two routers (two pools) claim, mark and re-claim overlapping batches
// under forced digest collisions (the key is the ID's last character:
// ten keys for sixty IDs). Every key has one row, an ID is New at most
// once, an ID with no row is a conflict, and a row's marks are its own
// ID's.
func TestLedgerKeyTwoRoutersUnderCollisions(t *testing.T) {
	l1 := open(t)
	ctx := context.Background()
	defer ledger.SetKeyFunc(func(id string) [16]byte { return md5.Sum([]byte(id[len(id)-1:])) })()
	l2 := ledger.NewFromPool(func() *pgxpool.Pool {
		p, err := pgxpool.New(ctx, l1.Pool().Config().ConnString())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}())
	var (
		mu   sync.Mutex
		news = map[string]int{}
		errs []error
		wg   sync.WaitGroup
	)
	router := func(l *ledger.Postgres, seed int) {
		defer wg.Done()
		for it := 0; it < 150; it++ {
			var batch []decide.Intent
			for j := 0; j < 12; j++ {
				n := (seed*7919 + it*31 + j*17) % 60
				batch = append(batch, intent(fmt.Sprintf("c-%d", n), "p"))
			}
			vs, err := l.Claim(ctx, batch)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				continue
			}
			var st []processor.Started
			var dl []string
			for i, v := range vs {
				id := batch[i].WorkflowID
				switch v.Verdict {
				case decide.VerdictNew:
					mu.Lock()
					news[id]++
					mu.Unlock()
					if it%3 == 0 {
						dl = append(dl, id)
					} else {
						st = append(st, processor.Started{WorkflowID: id, RunID: "run-" + id, Generation: 1})
					}
				case decide.VerdictRedrive:
					st = append(st, processor.Started{WorkflowID: id, RunID: "run-" + id, Generation: 1})
				case decide.VerdictConflict:
					dl = append(dl, id)
				}
			}
			if err := l.MarkStarted(ctx, st); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			if err := l.MarkDeadLettered(ctx, unfenced(dl...)); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}
	}
	wg.Add(2)
	go router(l1, 1)
	go router(l2, 2)
	wg.Wait()
	for _, err := range errs {
		t.Errorf("router error: %v", err)
	}
	for id, n := range news {
		if n > 1 {
			t.Errorf("%s: New %d times", id, n)
		}
	}
	var bad int
	if err := l1.Pool().QueryRow(ctx, `SELECT count(*) FROM dedup_ledger WHERE state = 'started' AND run_id <> 'run-' || workflow_id`).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	if bad != 0 {
		t.Errorf("%d started rows carry another ID's run", bad)
	}
	var rows, keys int
	if err := l1.Pool().QueryRow(ctx, `SELECT count(*), count(DISTINCT right(workflow_id, 1)) FROM dedup_ledger`).Scan(&rows, &keys); err != nil {
		t.Fatal(err)
	}
	if rows != keys {
		t.Errorf("%d rows for %d keys", rows, keys)
	}
	t.Logf("%d rows, %d IDs were New once", rows, len(news))
}

// The row's own ID loses its row to a colliding ID of the same batch: the
// claim's DISTINCT ON (key) keeps the batch's smallest workflow ID of each
// key and drops the others before ON CONFLICT looks at the row. When the
// row's owner ("b", pending) sorts after the colliding ID ("a"), "a" is
// tried against b's row (no row: conflict) and "b" was never tried: b is
// answered a conflict too, recorded, dead-lettered, and its pending row
// never started, though its record is the one the row was claimed for.
// (key_test.go's collision test only has the owner sorting first.)
func TestLedgerKeyCollisionInBatchTakesTheOwnersRow(t *testing.T) {
	l := open(t)
	defer ledger.SetKeyFunc(func(string) [16]byte { return [16]byte{15: 1} })()
	a, b := intent("a", "p"), intent("b", "p")
	want(t, claim(t, l, b), decide.VerdictNew) // b's row, pending (its start failed, the router re-drives)
	want(t, claim(t, l, b), decide.VerdictRedrive)
	// The same record of b again, in a batch with a colliding new ID.
	want(t, claim(t, l, a, b), decide.VerdictConflict, decide.VerdictRedrive)
}

// Three Migrate calls at once on a populated ledger at version 11 (replicas
// starting together): all succeed, and the ledger ends with the key.
func TestLedgerKeyConcurrentMigrate(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	prov, db := provider(t, url)
	if _, err := prov.UpTo(ctx, 11); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset)
		SELECT 'activity-a:' || g, 'a', g::text, 'field', sha256(g::text::bytea), 'events', 0, g FROM generate_series(1, 50000) g`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = ledger.Migrate(ctx, url) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	checkKeyIsThePrimaryKey(t, db)
}

// grants.sql is "the one list of dedup's privileges" and exact for
// tables, but says nothing of the function every statement by workflow
// ID now calls: the roles reach dedup_ledger_key only through PUBLIC's
// default EXECUTE. In a database whose owner's new functions are not
// executable by PUBLIC (ALTER DEFAULT PRIVILEGES ... REVOKE EXECUTE ON
// FUNCTIONS FROM PUBLIC, a common hardening step), the router's claim
// and the ingress's lookup are refused (42501, permanent: the router
// stops) after migration 00012, and nothing in grants.sql gives EXECUTE.
func TestLedgerKeyRolesWithoutPublicExecute(t *testing.T) {
	ctx := deadline(t, 2*time.Minute)
	admin := pgtest.NewDatabase(t)
	if err := ledger.ApplyRoles(ctx, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := connect(t, admin).Exec(ctx, `ALTER DEFAULT PRIVILEGES FOR ROLE dedup_owner REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC`); err != nil {
		t.Fatal(err)
	}
	if err := ledger.Migrate(ctx, pgtest.NewLogin(t, admin, "dedup_owner", "dedup_owner")); err != nil {
		t.Fatal(err)
	}
	router := openAs(t, pgtest.NewLogin(t, admin, "", "dedup_router"))
	if _, err := router.Claim(ctx, []decide.Intent{intent("e1", "A")}); err != nil {
		t.Errorf("router claim: %v", err)
	}
	ingress := openAs(t, pgtest.NewLogin(t, admin, "", "dedup_ingress"))
	if _, err := ingress.Lookup(ctx, []string{"activity-a:e1"}); err != nil {
		t.Errorf("ingress lookup: %v", err)
	}
}

// The migration's "brief exclusive lock" (DROP CONSTRAINT) is taken with
// no lock_timeout: behind any transaction that has read dedup_ledger and
// stays open (an operator's psql session, a backup), it waits, and every
// statement on dedup_ledger queues behind it: the worker's fence and the
// ingress's lookups stop too, for as long as that transaction lasts.
func TestLedgerKeyMigrationExclusiveLockQueuesReaders(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	prov, db := provider(t, url)
	if _, err := prov.UpTo(ctx, 11); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset)
		SELECT 'activity-a:' || g, 'a', g::text, 'field', sha256(g::text::bytea), 'events', 0, g FROM generate_series(1, 1000) g`); err != nil {
		t.Fatal(err)
	}
	side := sidePool(t, url)
	reader := held(t, side, pgx.TxOptions{}) // idle in transaction after one read
	if _, err := reader.Exec(ctx, `SELECT count(*) FROM dedup_ledger`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ledger.Migrate(t.Context(), url) }()
	waitBlocked(t, side, "dedup_ledger_ddl") // each DDL statement that takes a strong lock
	// The worker's fence (any reader of the ledger) now.
	qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var g *int
	start := time.Now()
	err := side.QueryRow(qctx, `SELECT max(generation) FROM dedup_ledger WHERE workflow_id = $1`, "activity-a:1").Scan(&g)
	waited := time.Since(start)
	_ = reader.Rollback(ctx)
	if merr := within(t, done, 2*time.Minute, "Migrate after the reader's rollback"); merr != nil {
		t.Fatal(merr)
	}
	if err != nil {
		t.Fatalf("a one-row read of dedup_ledger during the migration: %v after %s (queued behind the migration's ACCESS EXCLUSIVE, which waits without lock_timeout for an idle transaction)", err, waited.Round(time.Millisecond))
	}
}

// A workflow ID or topic that is no text of the database (a NUL, bytes
// that are no UTF-8) is refused by the replay's read with the SQLSTATE
// the claim statement refuses it with: the read's own arrays carry the
// bytes as pgx sent them, and the server checks them alike. No verdict
// comes back for such a batch on either path.
func TestLedgerKeyReplayReadRefusesBytesThatAreNoTextAsTheClaimDoes(t *testing.T) {
	for _, bad := range []struct{ what, id, topic string }{
		{"NUL in the ID", "a\x00b", "events"},
		{"invalid UTF-8 in the ID", "a\xffb", "events"},
		{"NUL in the topic", "ok", "ev\x00ents"},
		{"invalid UTF-8 in the topic", "ok", "ev\xc3ents"},
	} {
		t.Run(bad.what, func(t *testing.T) {
			code := func(replay bool) string {
				pc, err := pgxpool.ParseConfig(open(t).Pool().Config().ConnString())
				if err != nil {
					t.Fatal(err)
				}
				pool, err := pgxpool.NewWithConfig(context.Background(), pc)
				if err != nil {
					t.Fatal(err)
				}
				defer pool.Close()
				l := ledger.NewFromPool(pool) // no memory: a replay's claim reads
				good := intent("good", "p")
				want(t, claim(t, l, good), decide.VerdictNew)
				if err := l.MarkStarted(context.Background(), []processor.Started{{WorkflowID: good.WorkflowID, RunID: "r", Generation: 1}}); err != nil {
					t.Fatal(err)
				}
				if replay {
					want(t, claim(t, l, good), decide.VerdictDuplicate) // a replay from here
				}
				odd := intent("", "p")
				odd.WorkflowID, odd.Topic = bad.id, bad.topic
				v, err := l.Claim(context.Background(), []decide.Intent{good, odd})
				var pgErr *pgconn.PgError
				if !errors.As(err, &pgErr) {
					t.Fatalf("replay %v: verdicts %v, error %v: want the server's refusal", replay, v, err)
				}
				if !processor.IsPermanent(err) {
					t.Errorf("replay %v: %v is not permanent", replay, err)
				}
				return pgErr.Code
			}
			if byClaim, byRead := code(false), code(true); byClaim != byRead {
				t.Fatalf("the claim statement refuses it with SQLSTATE %s, the replay's read with %s", byClaim, byRead)
			}
		})
	}
}
