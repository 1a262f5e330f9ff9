package ledger_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupio/dedup/internal/testsupport/pgbouncer"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/sink/ledger"
)

// The tests of the read of known records (knownSQL, known.go) and of the
// claim's write of a record's Known.

// knownIntents are a record's n intents at topic events, partition 1,
// offset off, each carrying the record's Known (digest d, n intents).
func knownIntents(off int64, n int, d byte) []decide.Intent {
	var ins []decide.Intent
	for j := range n {
		id := fmt.Sprintf("k%d-%d", off, j)
		in := intent(id, id)
		in.ActivityID = fmt.Sprintf("a%d", j)
		in.WorkflowID = fmt.Sprintf("activity-a%d:k%d", j, off)
		in.Offset = off
		in.Known = decide.Known{Digest: [16]byte{d}, Intents: int32(n)}
		ins = append(ins, in)
	}
	return ins
}

func knownOf(t *testing.T, l interface {
	Known(context.Context, []processor.KnownRecord, []int32) error
}, recs ...processor.KnownRecord) []int32 {
	t.Helper()
	known := make([]int32, len(recs))
	if err := l.Known(context.Background(), recs, known); err != nil {
		t.Fatal(err)
	}
	return known
}

func startAll(t *testing.T, l interface {
	MarkStarted(context.Context, []processor.Started) error
}, ins []decide.Intent) {
	t.Helper()
	var st []processor.Started
	for _, in := range ins {
		st = append(st, processor.Started{WorkflowID: in.WorkflowID, RunID: "r", Generation: 1})
	}
	if err := l.MarkStarted(context.Background(), st); err != nil {
		t.Fatal(err)
	}
}

// A record is known once every one of its intents' rows is started, each
// claimed by it with its digest; not while one is pending, nor under
// another digest, nor at other coordinates, nor when a row it counted was
// claimed by another record, nor when its rows carry no Known.
func TestARecordIsKnownOnlyWhenEveryRowOfItsIntentsIsStartedWithItsDigest(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	rec := func(off int64, d byte) processor.KnownRecord {
		return processor.KnownRecord{Topic: "events", Partition: 1, Offset: off, Digest: [16]byte{d}}
	}
	// 10: two intents, both started.
	a := knownIntents(10, 2, 1)
	// 11: two intents, one started, one pending.
	b := knownIntents(11, 2, 1)
	// 12: three intents, the first claimed before by another record (13).
	c := knownIntents(12, 3, 1)
	other := c[0]
	other.Offset, other.Known = 13, decide.Known{Digest: [16]byte{9}, Intents: 1}
	// 14: no Known written (a route that may run again).
	e := knownIntents(14, 1, 1)
	e[0].Known = decide.Known{}
	if _, err := l.Claim(ctx, []decide.Intent{other}); err != nil {
		t.Fatal(err)
	}
	all := append(append(append(append([]decide.Intent{}, a...), b...), c...), e...)
	if _, err := l.Claim(ctx, all); err != nil {
		t.Fatal(err)
	}
	startAll(t, l, append(append(append(append([]decide.Intent{}, a...), b[0]), c...), e...))
	got := knownOf(t, l, rec(10, 1), rec(11, 1), rec(12, 1), rec(13, 9), rec(14, 1), rec(10, 2), rec(15, 1),
		processor.KnownRecord{Topic: "audit", Partition: 1, Offset: 10, Digest: [16]byte{1}},
		processor.KnownRecord{Topic: "events", Partition: 2, Offset: 10, Digest: [16]byte{1}})
	want := []int32{2, 0, 0, 1, 0, 0, 0, 0, 0}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("known %v, want %v (10 started, 11 one pending, 12 a row another record's, 13 that record, 14 no Known, 10 another digest, 15 none, another topic, another partition)", got, want)
	}
	// The pending row started: 11 is known too.
	startAll(t, l, b[1:])
	if got := knownOf(t, l, rec(11, 1)); got[0] != 2 {
		t.Fatalf("11 after its second start: %v, want 2", got)
	}
	// A re-claim of a row keeps the Known it was inserted with: a copy
	// at another offset with another digest does not make it its own.
	cp := a[0]
	cp.Offset, cp.Known = 20, decide.Known{Digest: [16]byte{7}, Intents: 1}
	want2 := claim(t, l, cp)
	if want2[0] != decide.VerdictDuplicate {
		t.Fatalf("copy: %v", want2)
	}
	if got := knownOf(t, l, rec(10, 1), rec(20, 7)); fmt.Sprint(got) != "[2 0]" {
		t.Fatalf("after a copy's claim: %v, want [2 0]", got)
	}
}

// A record's rows read known across a poll's partitions and offsets, far
// apart or not, and the read answers nothing for no record.
func TestKnownReadsEachPartitionsRecordsOfAPoll(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	var ins []decide.Intent
	var recs []processor.KnownRecord
	var want []int32
	for part := range int32(3) {
		for _, off := range []int64{5, 6, 7, 900, 100000} {
			n := 1 + int(off%3)
			for _, in := range knownIntents(off, n, byte(part+1)) {
				in.Partition = part
				in.WorkflowID = fmt.Sprintf("%s-p%d", in.WorkflowID, part)
				ins = append(ins, in)
			}
			recs = append(recs, processor.KnownRecord{Topic: "events", Partition: part, Offset: off, Digest: [16]byte{byte(part + 1)}})
			want = append(want, int32(n))
		}
	}
	if _, err := l.Claim(ctx, ins); err != nil {
		t.Fatal(err)
	}
	startAll(t, l, ins)
	if got := knownOf(t, l, recs...); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("known %v, want %v", got, want)
	}
	if got := knownOf(t, l); len(got) != 0 {
		t.Fatalf("no record: %v", got)
	}
}

// The read of known records answers through PgBouncer in transaction
// pooling (an unnamed statement every time, its generic plan setting its
// transaction's own) and in each exec mode the ledger takes, again and
// again: the same records known.
func TestKnownAnswersThroughATransactionPoolerAndInEveryExecMode(t *testing.T) {
	ctx := context.Background()
	check := func(t *testing.T, l *ledger.Postgres) {
		ins := append(knownIntents(30, 2, 5), knownIntents(31, 1, 5)...)
		if _, err := l.Claim(ctx, ins); err != nil {
			t.Fatal(err)
		}
		startAll(t, l, ins)
		recs := []processor.KnownRecord{{Topic: "events", Partition: 1, Offset: 30, Digest: [16]byte{5}},
			{Topic: "events", Partition: 1, Offset: 31, Digest: [16]byte{5}}, {Topic: "events", Partition: 1, Offset: 32, Digest: [16]byte{5}}}
		for range 8 {
			if got := knownOf(t, l, recs...); fmt.Sprint(got) != "[2 1 0]" {
				t.Fatalf("known %v, want [2 1 0]", got)
			}
		}
	}
	t.Run("pgbouncer transaction", func(t *testing.T) { check(t, openPooled(t, pgbouncer.Transaction, 1)[0]) })
	for _, mode := range []string{"cache_statement", "cache_describe", "describe_exec"} {
		t.Run(mode, func(t *testing.T) {
			l := openInExecMode(t, mode)
			check(t, l)
		})
	}
}

// decide.Known's Intents is an int32 and decide.Intent.Known is public:
// a Ledger caller (another module's router, a tool filling a ledger as
// the benchmark's prefill does) may claim a record of more intents than
// record_intents (int2) holds. Such a record cannot be known, but the
// claim of its intents (and of the other records of the batch) must
// still happen: the claim is what the exactly-once start rests on, the
// Known only a shortcut of a later replay.
func TestAClaimWhoseKnownHoldsMoreIntentsThanTheColumnStillClaimsTheBatch(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	other := intent("other", "other")
	other.Offset = 6
	big := intent("big", "big")
	big.Known = decide.Known{Digest: [16]byte{1}, Intents: 1 << 15} // 32768: an int32, not an int2
	cl, err := l.Claim(ctx, []decide.Intent{other, big})
	if err != nil {
		t.Fatalf("the claim of a batch with a record of %d intents failed: %v", big.Known.Intents, err)
	}
	for i, c := range cl {
		if c.Verdict != decide.VerdictNew {
			t.Errorf("intent %d: %v, want new", i, c.Verdict)
		}
	}
}

// The read of known records scans each partition's started rows from the
// poll's first offset to its last, whatever lies between. The replay's
// read of started rows reads a partition's records as one scan only when
// their offsets span at most runSpan (2) times as many offsets as there
// are records (readplan.go), so that a scan reads a bounded number of
// rows a record. A poll of a compacted topic (or a transactional one)
// skips offsets the ledger still holds rows of: here two records, the
// offsets between them all compacted away, their 100,000 rows started.
// Known must not read the rows of every offset in between.
func TestKnownReadsNoMoreRowsThanItsRecordsOwnWhenTheirOffsetsAreFarApart(t *testing.T) {
	l := open(t)
	const n = 100000
	conn := knownRowsAt(t, l, n)
	// Two records: offset 0 and offset n+1.
	far := []processor.KnownRecord{{Topic: "events", Partition: 1, Offset: 0, Digest: [16]byte{15: 2}},
		{Topic: "events", Partition: 1, Offset: n + 1, Digest: [16]byte{15: 2}}}
	plan := planOf(t, conn, `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) `+ledger.KnownSQL, ledger.KnownArgs(far)...)
	read := 0
	rowsRe := regexp.MustCompile(`actual rows=(\d+)`)
	for _, line := range plan {
		if !strings.Contains(line, "dedup_ledger") {
			continue
		}
		if m := rowsRe.FindStringSubmatch(line); m != nil {
			k, _ := strconv.Atoi(m[1])
			read = max(read, k)
		}
	}
	if read > 100 {
		t.Fatalf("the read of 2 records' known rows read %d rows of dedup_ledger:\n%s", read, strings.Join(plan, "\n"))
	}
}

// A poll's records of one partition are read by one scan of their rows
// (knownSQL's doc: "the rows of each partition's records are read by one
// scan"), under the generic plan the ledger runs it with: a poll of 1,000
// consecutive known records reads about 1,000 rows, not a scan of them
// all for each record (a million).
func TestKnownReadsAPartitionsRecordsRowsOnceUnderTheGenericPlan(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	const n = 1000
	conn := knownRowsAt(t, l, n)
	known := make([]processor.KnownRecord, n)
	for i := range n {
		known[i] = processor.KnownRecord{Topic: "events", Partition: 1, Offset: int64(i + 1), Digest: [16]byte{15: 1}}
	}
	start := time.Now()
	if got := knownOf(t, l, known...); got[0] != 1 || got[n-1] != 1 {
		t.Fatalf("known %v..., want every record known", got[:3])
	}
	t.Logf("Known of %d consecutive records: %v", n, time.Since(start))
	for _, mode := range []string{"force_generic_plan"} { // genericPlanSQL's, with which Known runs it
		if _, err := conn.Exec(ctx, `SET plan_cache_mode = `+mode); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `PREPARE known_probe(int8[], uuid[], int8[], text[], int4[], int8[], int8[]) AS `+ledger.KnownSQL); err != nil {
			t.Fatal(err)
		}
		// EXECUTE takes no parameters of the statement around it: pgx
		// writes the arguments into its text (the simple protocol).
		plan := planOf(t, conn, `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE known_probe($1, $2, $3, $4, $5, $6, $7)`,
			append([]any{pgx.QueryExecModeSimpleProtocol}, ledger.KnownArgs(known)...)...)
		read := 0
		rowsRe := regexp.MustCompile(`actual rows=(\d+) loops=(\d+)`)
		for _, line := range plan {
			if !strings.Contains(line, "on dedup_ledger") {
				continue
			}
			if m := rowsRe.FindStringSubmatch(line); m != nil {
				r, _ := strconv.Atoi(m[1])
				loops, _ := strconv.Atoi(m[2])
				read += r * loops
			}
		}
		if read > 2*n {
			t.Errorf("%s: the read of %d consecutive records read %d rows of dedup_ledger:\n%s", mode, n, read, strings.Join(plan, "\n"))
		}
	}
}

// knownRowsAt fills l with n started rows of topic events, partition 1, at
// offsets 1 to n, one intent each, known under the digest {15: 1}, and
// returns a connection of l's pool, released when the test ends.
func knownRowsAt(t *testing.T, l *ledger.Postgres, n int) *pgxpool.Conn {
	t.Helper()
	ctx := context.Background()
	if _, err := l.Pool().Exec(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic,
		kafka_partition, kafka_offset, key, state, started_at, record_digest, record_intents)
	SELECT 'activity-a:e'||g, 'a', 'e'||g, 'field', '\x00'::bytea, 'events', 1, g, md5('activity-a:e'||g)::uuid, 'started', now(),
		'00000000-0000-0000-0000-000000000001'::uuid, 1
	FROM generate_series(1, $1::int) g`, n); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Pool().Exec(ctx, `ANALYZE dedup_ledger`); err != nil {
		t.Fatal(err)
	}
	conn, err := l.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	return conn
}
