package ledger_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/sink/ledger"
)

// The ledger's unique key (migration 00012): the column key, computed by
// schemas.LedgerKey (Go) and, for rows written without it, by the SQL
// function dedup_ledger_key.

var (
	uuidv7Suffix = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	ulidSuffix   = regexp.MustCompile(`[0-7][0-9A-HJKMNP-TV-Z]{25}$`)
)

// wantKey is the digest, as the migration's comment states it: a workflow
// ID ending with a lowercase UUIDv7 or an uppercase ULID keeps its 48 bits
// of milliseconds first and 80 bits of the ID's SHA-256 after; any other
// ID is the first 128 bits of its SHA-256.
func wantKey(id string) string {
	h := sha256.Sum256([]byte(id))
	hx := hex.EncodeToString(h[:])
	if uuidv7Suffix.MatchString(id) {
		u := id[len(id)-36:]
		return uuid.MustParse(u[:8] + u[9:13] + hx[:20]).String()
	}
	if ulidSuffix.MatchString(id) {
		var ms uint64
		for _, c := range id[len(id)-26 : len(id)-16] {
			ms = ms<<5 | uint64(strings.IndexRune("0123456789ABCDEFGHJKMNPQRSTVWXYZ", c))
		}
		return uuid.MustParse(fmt.Sprintf("%012x", ms) + hx[:20]).String()
	}
	return uuid.MustParse(hx[:32]).String()
}

func TestLedgerKeyDigest(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	ids := []string{
		"activity-a:0190a1b2-c3d4-7e5f-8a9b-0123456789ab",       // UUIDv7: time first
		"activity-a:@acme/0190a1b2-c3d4-7e5f-8a9b-0123456789ab", // a tenant's
		"signal-totals:0190a1b2-c3d4-7e5f-bfff-0123456789ab",
		"activity-a:0190A1B2-C3D4-7E5F-8A9B-0123456789AB", // upper case: hashed whole
		"activity-a:0190a1b2-c3d4-4e5f-8a9b-0123456789ab", // UUIDv4
		"activity-a:0190a1b2-c3d4-7e5f-ca9b-0123456789ab", // variant 110: not RFC 9562
		"activity-a:0190a1b2-c3d4-7e5f-8a9b-0123456789ab-x",
		"activity-a:sha256-3f2a9c",
		`activity-a:back\slash\\and \x41`,
		"activity-a:héllo wörld ✓",
		"activity-a:01ARZ3NDEKTSV4RRFFQ69G5FAV", // ULID
		"activity-a:7ZZZZZZZZZZZZZZZZZZZZZZZZZ", // the last ULID
		"activity-a:01arz3ndektsv4rrffq69g5fav", // lower case: hashed whole
		"activity-a:81ARZ3NDEKTSV4RRFFQ69G5FAV", // past 48 bits
		"activity-a:01ARZ3NDEKTSV4RRFFQ69G5FAU", // U is not Crockford
		"7", "", "-7", "activity-crm:2026-11-26T04:00:00Z",
		// Longer than schemas.LedgerKeySum's stack buffer (256 bytes).
		"activity-a:" + strings.Repeat("z", 300) + "0190a1b2-c3d4-7e5f-8a9b-0123456789ab",
		strings.Repeat("w", 256), strings.Repeat("w", 257),
	}
	for _, id := range ids {
		var got string
		if err := l.Pool().QueryRow(ctx, `SELECT dedup_ledger_key($1)::text`, id).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if w := wantKey(id); got != w {
			t.Errorf("dedup_ledger_key(%q) = %s, want %s", id, got, w)
		}
		if g := uuid.UUID(schemas.LedgerKey(id)).String(); g != wantKey(id) {
			t.Errorf("schemas.LedgerKey(%q) = %s, want %s", id, g, wantKey(id))
		}
	}
	// Time-ordered IDs keep their order in the key.
	var ordered bool
	if err := l.Pool().QueryRow(ctx, `SELECT dedup_ledger_key('activity-a:0190a1b2-c3d4-7e5f-8a9b-ffffffffffff') < dedup_ledger_key('activity-b:0190a1b2-c3d5-7000-8000-000000000000')`).Scan(&ordered); err != nil {
		t.Fatal(err)
	}
	if !ordered {
		t.Error("a UUIDv7 one millisecond later sorts before in dedup_ledger_key")
	}
	if err := l.Pool().QueryRow(ctx, `SELECT dedup_ledger_key('activity-a:01ARZ3NDEKZZZZZZZZZZZZZZZZ') < dedup_ledger_key('activity-b:01ARZ3NDEM0000000000000000')`).Scan(&ordered); err != nil {
		t.Fatal(err)
	}
	if !ordered {
		t.Error("a ULID one millisecond later sorts before in dedup_ledger_key")
	}
}

// Every spelling of a lookup by workflow ID goes through the key's index.
func TestLedgerKeyLookupsUseTheIndex(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	conn, err := l.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET enable_seqscan = off; SET enable_bitmapscan = off`); err != nil {
		t.Fatal(err)
	}
	ids := []string{"activity-a:x", "activity-a:y"}
	for _, q := range []string{
		`SELECT * FROM dedup_ledger WHERE ` + schemas.LedgerRowsOf("", "$1", "$2"),
		`SELECT * FROM dedup_ledger l WHERE ` + schemas.LedgerRowsOf("l", "$1", "$2"),
		`SELECT * FROM unnest($1::text[], $2::uuid[]) u(w, k) JOIN dedup_ledger l ON ` + schemas.LedgerRowIs("l", "u.w", "u.k"),
	} {
		rows, err := conn.Query(ctx, `EXPLAIN `+q, ids, schemas.LedgerKeys(ids))
		if err != nil {
			t.Fatalf("%s: %v", q, err)
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
		if p := strings.Join(plan, "\n"); !strings.Contains(p, "using dedup_ledger_pkey") {
			t.Errorf("%s\ndoes not use the primary key (key):\n%s", q, p)
		}
	}
}

// Every row holds the key of its workflow ID: the routers' (Go) and the
// trigger's (SQL, a row inserted without one) agree.
func TestLedgerKeyOfEveryRow(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	var batch []decide.Intent
	for _, id := range []string{"0190a1b2-c3d4-7e5f-8a9b-0123456789ab", "01ARZ3NDEKTSV4RRFFQ69G5FAV", "héllo", `back\slash`, "x"} {
		batch = append(batch, intent(id, "p"))
	}
	want(t, claim(t, l, batch...), decide.VerdictNew, decide.VerdictNew, decide.VerdictNew, decide.VerdictNew, decide.VerdictNew)
	if _, err := l.Pool().Exec(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset)
		VALUES ('activity-a:by-hand', 'a', 'by-hand', 'field', '\x00', 'events', 0, 0)`); err != nil {
		t.Fatal(err)
	}
	var n, bad int
	if err := l.Pool().QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE key IS DISTINCT FROM dedup_ledger_key(workflow_id)) FROM dedup_ledger`).Scan(&n, &bad); err != nil {
		t.Fatal(err)
	}
	if n != 6 || bad != 0 {
		t.Fatalf("%d rows, %d of them with a key that is not dedup_ledger_key(workflow_id)", n, bad)
	}
	want(t, claim(t, l, intent("by-hand", "x")), decide.VerdictConflict) // found by its key: another payload
}

// Two workflow IDs with one key never share a row: the second is a
// conflict (recorded, never started), and no mark for it changes the
// first's row. The key is made constant here to force the collision that
// SHA-256 never gives.
func TestLedgerKeyCollisionIsAConflict(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	defer ledger.SetKeyFunc(func(string) [16]byte { return [16]byte{15: 1} })()
	a, b, c := intent("a", "p"), intent("b", "p"), intent("c", "p")
	want(t, claim(t, l, a), decide.VerdictNew)
	want(t, claim(t, l, b), decide.VerdictConflict)
	want(t, claim(t, l, b, a), decide.VerdictConflict, decide.VerdictRedrive)
	if err := l.MarkStarted(ctx, []processor.Started{{WorkflowID: b.WorkflowID, RunID: "rb", Generation: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := l.MarkDeadLettered(ctx, unfenced(b.WorkflowID)); err != nil {
		t.Fatal(err)
	}
	rows, err := l.Rows(ctx, []string{a.WorkflowID, b.WorkflowID, c.WorkflowID})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].WorkflowID != a.WorkflowID || rows[0].State != ledger.StatePending || rows[0].RunID != "" {
		t.Fatalf("rows %+v: want a's row alone, pending, untouched by b's marks", rows)
	}
	var conflicts int
	if err := l.Pool().QueryRow(ctx, `SELECT count(*) FROM dedup_conflicts WHERE workflow_id = $1`, b.WorkflowID).Scan(&conflicts); err != nil {
		t.Fatal(err)
	}
	if conflicts != 1 {
		t.Fatalf("%d conflicts recorded for b, want 1 (a redelivered record is one conflict)", conflicts)
	}
	if _, err := l.Pool().Exec(ctx, `DELETE FROM dedup_ledger`); err != nil {
		t.Fatal(err)
	}
	// Two new IDs of one batch sharing a key: the first in key order
	// (then ID order) gets the row.
	want(t, claim(t, l, c, b), decide.VerdictConflict, decide.VerdictNew)
}

// checkKeyIsThePrimaryKey: the primary key is on the column key, valid,
// and key is NOT NULL.
func checkKeyIsThePrimaryKey(t *testing.T, db *sql.DB) {
	t.Helper()
	var cols string
	var valid, notNull bool
	if err := db.QueryRowContext(context.Background(), `SELECT (SELECT string_agg(a.attname, ',') FROM pg_attribute a WHERE a.attrelid = x.indrelid AND a.attnum = ANY(x.indkey)),
		x.indisvalid, (SELECT attnotnull FROM pg_attribute WHERE attrelid = 'dedup_ledger'::regclass AND attname = 'key')
		FROM pg_constraint c JOIN pg_index x ON x.indexrelid = c.conindid WHERE c.conrelid = 'dedup_ledger'::regclass AND c.contype = 'p'`).Scan(&cols, &valid, &notNull); err != nil {
		t.Fatal(err)
	}
	if cols != "key" || !valid || !notNull {
		t.Fatalf("primary key on %q (valid %v), key NOT NULL %v: want a valid primary key on key", cols, valid, notNull)
	}
}

// provider runs the embedded migrations on url one by one.
func provider(t *testing.T, url string) (*goose.Provider, *sql.DB) {
	t.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	sub, err := fs.Sub(schemas.Migrations, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	prov, err := goose.NewProvider(goose.DialectPostgres, db, sub)
	if err != nil {
		t.Fatal(err)
	}
	return prov, db
}

// A populated ledger (every state) is converted while a router of the
// version before goes on claiming: every row, the old router's included,
// is found through the new key afterwards, no ID has two rows, and the
// old router's claims fail only once the primary key is gone (42P10:
// nothing written).
func TestMigrationConvertsAPopulatedLedgerOnline(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a ledger")
	}
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	prov, db := provider(t, url)
	if _, err := prov.UpTo(ctx, 11); err != nil {
		t.Fatal(err)
	}
	const rows = 200000
	if _, err := db.ExecContext(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset, state, run_id, started_at)
		SELECT 'activity-a:' || g, 'a', g::text, 'field', sha256(g::text::bytea), 'events', 0, g,
			(ARRAY['started', 'pending', 'dead_lettered'])[1 + g % 3], CASE WHEN g % 3 = 0 THEN 'run' END, CASE WHEN g % 3 = 0 THEN now() END
		FROM generate_series(1, $1::int) g`, rows); err != nil {
		t.Fatal(err)
	}

	// The old router: the claim of the version before (ON CONFLICT on
	// the primary key), of new IDs and of IDs the fill holds.
	old, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = old.Close(ctx) }()
	var (
		stop     atomic.Bool
		wg       sync.WaitGroup
		inserted atomic.Int64
		oldErr   error
		refused  int
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; !stop.Load(); n++ {
			tag, err := old.Exec(ctx, `INSERT INTO dedup_ledger AS l (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset)
				SELECT 'activity-a:' || g, 'a', g::text, 'field', sha256(g::text::bytea), 'events', 0, g FROM unnest($1::int8[]) g
				ON CONFLICT (workflow_id) DO UPDATE SET attempts = l.attempts`, []int64{int64(rows + 1 + n), int64(1 + n%rows)})
			var pe *pgconn.PgError
			switch {
			case errors.As(err, &pe) && pe.Code == "42P10":
				refused++ // the primary key is gone
			case err != nil:
				oldErr = err
				return
			case refused > 0:
				oldErr = fmt.Errorf("the old claim worked again after it was refused")
				return
			default:
				if tag.RowsAffected() != 2 {
					oldErr = fmt.Errorf("old claim: %d rows", tag.RowsAffected())
					return
				}
				inserted.Add(1)
			}
		}
	}()
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	stop.Store(true)
	wg.Wait()
	if oldErr != nil {
		t.Fatal(oldErr)
	}
	t.Logf("the old router claimed %d new IDs during the migration; refused %d times after it", inserted.Load(), refused)
	total := rows + int(inserted.Load())

	checkKeyIsThePrimaryKey(t, db)

	// Claim every ID again, with its payload, through the new key.
	cfg := ledger.DefaultConfig()
	cfg.URL = url
	l, err := ledger.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	counts := map[decide.Verdict]int{}
	for from := 1; from <= total+10; from += 1000 {
		var batch []decide.Intent
		for g := from; g < from+1000 && g <= total+10; g++ {
			s := strconv.Itoa(g)
			batch = append(batch, decide.Intent{WorkflowID: "activity-a:" + s, ActivityID: "a", EventID: s, IDRule: "field",
				PayloadHash: sha256.Sum256([]byte(s)), Topic: "events", Offset: int64(g)})
		}
		vs, err := l.Claim(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range vs {
			g, _ := strconv.Atoi(batch[i].EventID)
			want := decide.VerdictRedrive // pending, dead_lettered, and the old router's
			switch {
			case g > total:
				want = decide.VerdictNew
			case g <= rows && g%3 == 0:
				want = decide.VerdictDuplicate
			}
			if v.Verdict != want {
				t.Fatalf("%s: %s, want %s", batch[i].WorkflowID, v.Verdict, want)
			}
			counts[v.Verdict]++
		}
	}
	var n, distinct, bad int
	if err := db.QueryRowContext(ctx, `SELECT count(*), count(DISTINCT workflow_id), count(*) FILTER (WHERE key IS DISTINCT FROM dedup_ledger_key(workflow_id)) FROM dedup_ledger`).Scan(&n, &distinct, &bad); err != nil {
		t.Fatal(err)
	}
	if n != total+10 || distinct != n || bad != 0 {
		t.Fatalf("%d rows, %d workflow IDs, %d keys not dedup_ledger_key(workflow_id): want %d, %d, 0", n, distinct, bad, total+10, total+10)
	}
	t.Logf("verdicts after the migration: %v", counts)
}

// An interrupted build leaves an INVALID index (a router's start
// cancelled mid-build): the next run drops it, builds it again and swaps
// the primary key, with every row's key right.
func TestMigrationRebuildsAnInvalidIndex(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	prov, db := provider(t, url)
	if _, err := prov.UpTo(ctx, 11); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset)
		SELECT 'activity-a:' || g, 'a', g::text, 'field', sha256(g::text::bytea), 'events', 0, g FROM generate_series(1, 1000) g;
		ALTER TABLE dedup_ledger ADD COLUMN key uuid;
		CREATE UNIQUE INDEX dedup_ledger_key ON dedup_ledger (key);
		UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'dedup_ledger_key'::regclass`); err != nil {
		t.Fatal(err)
	}
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatalf("Migrate over an invalid index: %v", err)
	}
	checkKeyIsThePrimaryKey(t, db)
	var bad int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM dedup_ledger WHERE key IS DISTINCT FROM dedup_ledger_key(workflow_id)`).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	if bad != 0 {
		t.Fatalf("%d rows without their key", bad)
	}
}

// TestMigrationAtScale measures migration 00012 on a ledger of
// $DEDUP_MIGRATION_ROWS rows (skipped without it; docs/runbook.md quotes
// its figures): how long the conversion takes, the WAL it writes, and the
// heap before and after. It asserts only that every row ends with its key.
func TestMigrationAtScale(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("DEDUP_MIGRATION_ROWS"))
	if n <= 0 {
		t.Skip("set DEDUP_MIGRATION_ROWS to measure")
	}
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	prov, db := provider(t, url)
	if _, err := prov.UpTo(ctx, 11); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset, state, run_id, started_at)
		SELECT 'activity-order-confirmation:' || e, 'order-confirmation', e, 'field', sha256(g::text::bytea), 'events', g % 12, g, 'started', md5('run' || g)::uuid::text, now()
		FROM generate_series(1, $1::int) g, LATERAL (SELECT md5(g::text)::uuid::text AS e) x`, n); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`VACUUM ANALYZE dedup_ledger`, `CHECKPOINT`} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	var heap0 int64
	var lsn0 string
	if err := db.QueryRowContext(ctx, `SELECT pg_relation_size('dedup_ledger'), pg_current_wal_lsn()::text`).Scan(&heap0, &lsn0); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	var heap1, wal int64
	if err := db.QueryRowContext(ctx, `SELECT pg_relation_size('dedup_ledger'), pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::int8`, lsn0).Scan(&heap1, &wal); err != nil {
		t.Fatal(err)
	}
	vacuum := time.Now()
	if _, err := db.ExecContext(ctx, `VACUUM dedup_ledger`); err != nil {
		t.Fatal(err)
	}
	var bad int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM dedup_ledger TABLESAMPLE SYSTEM (1) WHERE key IS DISTINCT FROM dedup_ledger_key(workflow_id)`).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	if bad != 0 {
		t.Fatalf("%d sampled rows without their key", bad)
	}
	checkKeyIsThePrimaryKey(t, db)
	t.Logf("migration 00012 on %d rows: %s, %.0f MiB of WAL (%.0f B a row); heap %.0f -> %.0f MiB; VACUUM after: %s",
		n, took.Round(time.Second), float64(wal)/(1<<20), float64(wal)/float64(n), float64(heap0)/(1<<20), float64(heap1)/(1<<20), time.Since(vacuum).Round(time.Second))
}

// dedup_ledger_key agrees with schemas.LedgerKey for IDs at and around
// LedgerKeySum's stack buffer of 256 bytes: every length from 200 to 320
// bytes, multibyte characters straddling byte 256, with and without a
// trailing UUIDv7 or ULID (and their near misses).
func TestLedgerKeyDigestAgreesAroundTheStackBuffer(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	suffixes := []string{"", "0190a1b2-c3d4-7e5f-8a9b-0123456789ab", "0190a1b2-c3d4-4e5f-8a9b-0123456789ab",
		"01ARZ3NDEKTSV4RRFFQ69G5FAV", "7ZZZZZZZZZZZZZZZZZZZZZZZZZ", "01ARZ3NDEKTSV4RRFFQ69G5FAU"}
	var ids []string
	for _, s := range suffixes {
		for _, f := range []string{"x", "é", "✓", "😀"} {
			for total := 200; total <= 320; total++ {
				var b strings.Builder
				for _, r := range strings.Repeat(f, total) {
					if b.Len()+len(string(r))+len(s) > total {
						break
					}
					b.WriteRune(r)
				}
				ids = append(ids, b.String()+s)
			}
		}
	}
	rows, err := l.Pool().Query(ctx, `SELECT dedup_ledger_key(w)::text FROM unnest($1::text[]) WITH ORDINALITY u(w, n) ORDER BY n`, ids)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ids) {
		t.Fatalf("%d keys for %d IDs", len(got), len(ids))
	}
	for i, id := range ids {
		if g := uuid.UUID(schemas.LedgerKey(id)).String(); g != got[i] || g != wantKey(id) {
			t.Errorf("ID of %d bytes %q: schemas.LedgerKey %s, dedup_ledger_key %s, want %s", len(id), id, g, got[i], wantKey(id))
		}
	}
}
