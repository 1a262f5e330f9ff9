package ledger_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/sink/ledger"
)

// The tests of the replay's read of a batch with runs of records
// (startedByRangeSQL, startedread.go); the read's other tests are in
// claim_test.go.

// byKeySQL is what both replay reads stand for: each ID's row, found by
// its key, unless it is started with the ID's payload at generation 1.
var byKeySQL = `SELECT i.n, l.state, l.payload_hash, coalesce(l.generation, 0) FROM unnest($1::text[], $2::bytea[], $3::uuid[]) WITH ORDINALITY AS i(workflow_id, payload_hash, key, n)
LEFT JOIN dedup_ledger l ON ` + schemas.LedgerRowIs("l", "i.workflow_id", "i.key") + `
WHERE l.state IS DISTINCT FROM 'started' OR l.payload_hash <> i.payload_hash OR l.generation > 1`

// A batch read by its runs is answered as by a look-up of each ID by its
// key, on any ledger: rows started, pending, dead-lettered, re-run, under
// another key than their ID's, of another topic at the same offsets, of
// records the batch does not hold within its runs' offsets; IDs of the
// run's records and of others (a producer's retry at another offset, an
// ID never claimed, another payload), in a run or not, whatever the runs
// (a run's offsets need not hold all its IDs'). Random ledgers and
// batches, each answer compared row for row.
func TestReplayReadOfRunsAnswersAsEachIDsKeyLookUp(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(63, 1))
	type row struct {
		id, state, topic string
		part             int32
		off              int64
		hash             [32]byte
		gen              int
		key              [16]byte
	}
	var rows []row
	topics := []string{"events", "audit"}
	for _, topic := range topics {
		for part := range int32(3) {
			for off := range int64(120) {
				for r := range 1 + rng.IntN(3) {
					id := fmt.Sprintf("activity-r%d:%s-%d-%d", r, topic, part, off)
					x := row{id: id, state: "started", topic: topic, part: part, off: off, hash: sha256.Sum256([]byte(id)), gen: 1, key: schemas.LedgerKey(id)}
					switch rng.IntN(12) {
					case 0:
						x.state = "pending"
					case 1:
						x.state = "dead_lettered"
					case 2:
						x.gen = 2
					case 3:
						x.key = schemas.LedgerKey(id + "-not") // under another key
					case 4:
						x.off += 1000 // claimed by another record (a retry's)
					}
					rows = append(rows, x)
				}
			}
		}
	}
	for _, x := range rows {
		var runID, started any
		if x.state == "started" {
			runID, started = "r", "2026-12-06"
		}
		if _, err := l.Pool().Exec(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset, key, state, run_id, started_at, generation)
			VALUES ($1, 'a', $1, 'field', $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			x.id, x.hash[:], x.topic, x.part, x.off, x.key, x.state, runID, started, x.gen); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Pool().Exec(ctx, `VACUUM ANALYZE dedup_ledger`); err != nil {
		t.Fatal(err)
	}
	records := make([]readRow, len(rows))
	for i, x := range rows {
		records[i] = readRow{id: x.id, topic: x.topic, part: x.part, off: x.off % 1000, hash: x.hash} // its record's offset
	}
	for batch := range 40 {
		b := randomReadBatch(rng, records, 60, 600)
		want := readAnswers(t, l.Pool(), byKeySQL, b.keyArgs()...)
		got := readAnswers(t, l.Pool(), ledger.StartedByRangeSQL, b.runArgs()...)
		if !slices.Equal(got, want) {
			t.Fatalf("batch %d (%d IDs, %d runs): the read by runs answers %d rows, the key look-up %d\nby runs: %v\nby key:  %v",
				batch, len(b.ids), len(b.rts), len(got), len(want), got, want)
		}
	}
}

// A replay's batch of polled records (a few partitions, each a run of
// consecutive offsets) is read by its runs, and its verdicts are each
// row's: duplicates, a re-drive of a pending row, a conflict, a new ID, a
// producer's retry found by its key. A batch of records scattered over
// the ledger (a claim of IDs in random order) is read one ID at a time.
func TestReplayReadsAPollsRecordsByTheirRunsAndScatteredOnesOneByOne(t *testing.T) {
	l, sql := openTraced(t)
	ctx := context.Background()
	var all []decide.Intent
	for part := range int32(3) {
		for off := range int64(400) {
			in := intent(fmt.Sprintf("e-%d-%d", part, off), "p")
			in.Partition, in.Offset = part, off
			all = append(all, in)
		}
	}
	var started []processor.Started
	for i := 0; i < len(all); i += 300 {
		claim(t, l, all[i:i+300]...)
	}
	for _, in := range all {
		started = append(started, processor.Started{WorkflowID: in.WorkflowID, RunID: "r", Generation: 1})
	}
	pending := all[1*400+30] // partition 1, offset 30: never marked
	started = slices.DeleteFunc(started, func(s processor.Started) bool { return s.WorkflowID == pending.WorkflowID })
	if err := l.MarkStarted(ctx, started); err != nil {
		t.Fatal(err)
	}
	want(t, claim(t, l, all[0]), decide.VerdictDuplicate) // a replay from here
	sql.reset()
	var batch []decide.Intent
	for part := range 3 {
		batch = append(batch, all[part*400+20:part*400+60]...)
	}
	conflict := all[2*400+40]
	conflict.PayloadHash[0]++
	fresh := intent("fresh", "f")
	fresh.Partition, fresh.Offset = 0, 45
	retry := all[0*400+300] // a producer's retry of an event at offset 300, read again at 50
	retry.Offset = 50
	batch = append(batch, conflict, fresh, retry)
	cl, err := l.Claim(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	if !sql.sent("FULL JOIN") {
		t.Fatalf("a poll's records were not read by their runs: %q", sql.sql)
	}
	for i, c := range cl {
		w := decide.VerdictDuplicate
		switch batch[i].WorkflowID {
		case pending.WorkflowID:
			w = decide.VerdictRedrive
		case conflict.WorkflowID:
			if batch[i].PayloadHash == conflict.PayloadHash {
				w = decide.VerdictConflict
			}
		case fresh.WorkflowID:
			w = decide.VerdictNew
		}
		if c.Verdict != w {
			t.Errorf("intent %d (%s at %d/%d): %s, want %s", i, batch[i].WorkflowID, batch[i].Partition, batch[i].Offset, c.Verdict, w)
		}
	}
	// Scattered: 40 records of each partition, 10 offsets apart.
	sql.reset()
	batch = batch[:0]
	for part := range 3 {
		for off := 0; off < 400; off += 10 {
			if in := all[part*400+off]; in.WorkflowID != pending.WorkflowID {
				batch = append(batch, in)
			}
		}
	}
	cl, err = l.Claim(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	if sql.sent("FULL JOIN") || !sql.sent("LEFT JOIN LATERAL") {
		t.Fatalf("records 10 offsets apart were read by runs: %q", sql.sql)
	}
	for i, c := range cl {
		if c.Verdict != decide.VerdictDuplicate {
			t.Errorf("intent %d (%s): %s, want a duplicate", i, batch[i].WorkflowID, c.Verdict)
		}
	}
}

// The read by runs is a hash (or merge) join of the batch and its runs'
// rows in a generic plan, planned with no element of the arrays (10 a
// piece, by PostgreSQL's estimate): a nested loop would scan every run for
// each ID. Each run's rows are read along dedup_ledger_by_record, and no
// row of the ledger outside the runs is read.
func TestReplayReadOfRunsJoinsByHashInAGenericPlan(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	if _, err := l.Pool().Exec(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset, key, state, run_id, started_at)
		SELECT 'activity-a:fill-' || g, 'a', g::text, 'field', sha256(g::text::bytea), 'events', g % 8, g / 8, dedup_ledger_key('activity-a:fill-' || g),
			'started', 'run', now() - interval '1 day'
		FROM generate_series(1, 100000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Pool().Exec(ctx, `VACUUM ANALYZE dedup_ledger`); err != nil {
		t.Fatal(err)
	}
	var idl, hl, kl, pl, ol, rl []string
	for g := 40000; g < 40800; g++ { // 100 records of each partition, offsets 5000 to 5099
		id := fmt.Sprintf("activity-a:fill-%d", g)
		h, k := sha256.Sum256([]byte(fmt.Sprint(g))), schemas.LedgerKey(id)
		idl, hl, kl = append(idl, "'"+id+"'"), append(hl, fmt.Sprintf(`'\x%x'::bytea`, h[:])), append(kl, fmt.Sprintf("'%x'::uuid", k[:]))
		pl, ol, rl = append(pl, fmt.Sprint(g%8)), append(ol, fmt.Sprintf("%d::int8", g/8)), append(rl, fmt.Sprintf("%d::int8", g%8+1))
	}
	conn, err := l.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	q := fmt.Sprintf(`SET plan_cache_mode = force_generic_plan; PREPARE runs(text[], bytea[], uuid[], text[], int4[], int8[], int8[], text[], int4[], int8[], int8[]) AS %s;
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE runs(ARRAY[%s], ARRAY[%s], ARRAY[%s], array_fill(''::text, ARRAY[%d]), ARRAY[%s], ARRAY[%s], ARRAY[%s],
	array_fill('events'::text, ARRAY[8]), ARRAY[0, 1, 2, 3, 4, 5, 6, 7], array_fill(5000::int8, ARRAY[8]), array_fill(5099::int8, ARRAY[8]));
DEALLOCATE runs; RESET plan_cache_mode`, ledger.StartedByRangeSQL, strings.Join(idl, ","), strings.Join(hl, ","), strings.Join(kl, ","), len(idl),
		strings.Join(pl, ","), strings.Join(ol, ","), strings.Join(rl, ","))
	res, err := conn.Conn().PgConn().Exec(ctx, q).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for _, r := range res[2].Rows {
		plan = append(plan, string(r[0]))
	}
	text := strings.Join(plan, "\n")
	if !strings.Contains(text, "Hash Full Join") && !strings.Contains(text, "Merge Full Join") {
		t.Errorf("the batch and its runs' rows are not joined by hash or merge:\n%s", text)
	}
	if !strings.Contains(text, "dedup_ledger_by_record") {
		t.Errorf("the runs are not read along dedup_ledger_by_record:\n%s", text)
	}
	for _, d := range ledgerScansDropping(plan) {
		t.Errorf("the read of the runs read other rows: %s\n%s", d, text)
	}
	if !strings.Contains(text, "rows=0 loops=1") {
		t.Errorf("the read of 800 started IDs answered rows:\n%s", text)
	}
}

// rootBuffers is the buffers (shared hit + read) an EXPLAIN (ANALYZE,
// BUFFERS) plan's top node counts: the whole statement's.
func rootBuffers(t *testing.T, plan []string) int {
	t.Helper()
	re := regexp.MustCompile(`Buffers: shared(?: hit=(\d+))?(?: read=(\d+))?`)
	for _, line := range plan {
		if m := re.FindStringSubmatch(line); m != nil {
			n := 0
			for _, s := range m[1:] {
				if s != "" {
					v, _ := strconv.Atoi(s)
					n += v
				}
			}
			return n
		}
	}
	t.Fatalf("no buffers in the plan:\n%s", strings.Join(plan, "\n"))
	return 0
}

// A replay of a partition from its first offset (a new consumer group,
// a topic read again from the start) is a run over partition 0 from offset
// 0, and every scheduler fire's row lies at partition 0, offset 0 (no
// topic) in dedup_ledger_by_record: the run's scan reads them all to
// answer its own records. The read by runs must cost no more than the
// look-up of each ID by its record it replaced, whatever the fires.
func TestAReplayReadOfRunsFromOffsetZeroDoesNotReadTheSchedulersFires(t *testing.T) {
	l, log := openTraced(t)
	ctx := context.Background()
	if _, err := l.Pool().Exec(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset, key, state, run_id, started_at)
		SELECT 'fire-' || g, 'a', g::text, 'schedule', sha256(g::text::bytea), '', 0, 0, dedup_ledger_key('fire-' || g), 'started', 'run', now()
		FROM generate_series(1, 300000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Pool().Exec(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset, key, state, run_id, started_at)
		SELECT 'activity-a:ev-' || g, 'a', 'ev-' || g, 'field', sha256('p'::bytea), 'events', 0, g, dedup_ledger_key('activity-a:ev-' || g), 'started', 'run', now()
		FROM generate_series(0, 999) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Pool().Exec(ctx, `VACUUM ANALYZE dedup_ledger`); err != nil {
		t.Fatal(err)
	}
	rec := func(off int) decide.Intent {
		in := intent(fmt.Sprintf("ev-%d", off), "p")
		in.Partition, in.Offset = 0, int64(off)
		return in
	}
	want(t, claim(t, l, rec(500)), decide.VerdictDuplicate) // replaying from here
	log.reset()
	var batch []decide.Intent
	for off := range 40 {
		batch = append(batch, rec(off))
	}
	want(t, claim(t, l, batch...), slices.Repeat([]decide.Verdict{decide.VerdictDuplicate}, len(batch))...)
	var args []any
	log.mu.Lock()
	for i, q := range log.sql {
		if strings.Contains(q, "FULL JOIN") {
			args = log.args[i]
		}
	}
	log.mu.Unlock()
	if args == nil {
		t.Fatal("the batch of 40 consecutive records was not read by its run")
	}
	conn, err := l.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	const explain = `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF) `
	byRuns := planOf(t, conn, explain+ledger.StartedByRangeSQL, args...)
	// The same IDs, each looked up by its record (startedSQL, as before runs).
	n := len(args[0].([]string))
	topics, parts, offs := make([]string, n), make([]int32, n), make([]int64, n)
	for j, id := range args[0].([]string) {
		var off int64
		if _, err := fmt.Sscanf(strings.TrimPrefix(id, "activity-a:ev-"), "%d", &off); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		topics[j], offs[j] = "events", off
	}
	byRecord := planOf(t, conn, explain+ledger.StartedSQL, args[0], args[1], args[2], topics, parts, offs)
	r, o := rootBuffers(t, byRuns), rootBuffers(t, byRecord)
	t.Logf("by runs: %d buffers; by record: %d", r, o)
	if r > o {
		t.Errorf("the read of 40 records by their run reads %d buffers, their look-up one by one %d:\nby runs:\n%s\nby record:\n%s",
			r, o, strings.Join(byRuns, "\n"), strings.Join(byRecord, "\n"))
	}
}

// readAnswer is a row of a read of started rows (startedSQL,
// startedByRangeSQL): the input's number, the row's state, payload hash
// and generation.
type readAnswer struct {
	n     int64
	state string
	hash  string
	gen   int
}

// readAnswers runs a read of started rows on pool with args, and returns
// its answer in the input's order.
func readAnswers(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) []readAnswer {
	t.Helper()
	r, err := pool.Query(context.Background(), sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []readAnswer
	for r.Next() {
		var a readAnswer
		var state *string
		var hash []byte
		if err := r.Scan(&a.n, &state, &hash, &a.gen); err != nil {
			t.Fatal(err)
		}
		if state != nil {
			a.state = *state
		}
		a.hash = fmt.Sprintf("%x", hash)
		out = append(out, a)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(out, func(a, b readAnswer) int { return int(a.n - b.n) })
	return out
}

// readRow is a record a random read batch may ask for: its ID, its
// record (topic, partition, offset) and its payload's hash.
type readRow struct {
	id, topic string
	part      int32
	off       int64
	hash      [32]byte
}

// readBatch is the arguments of a read of started rows: the IDs, each
// one's record as startedSQL takes it (bts, bps, bos: no topic for an ID
// looked up by its key or its run) and run (runOf, 0 for none), and the
// runs (rts, rps, rfs, rls: topic, partition, first and last offset).
type readBatch struct {
	ids, bts, rts        []string
	hashes               [][]byte
	keys                 [][16]byte
	bps, rps             []int32
	bos, runOf, rfs, rls []int64
}

// keyArgs are byKeySQL's arguments; runArgs startedByRangeSQL's.
func (b readBatch) keyArgs() []any { return []any{b.ids, b.hashes, b.keys} }
func (b readBatch) runArgs() []any {
	return []any{b.ids, b.hashes, b.keys, b.bts, b.bps, b.bos, b.runOf, b.rts, b.rps, b.rfs, b.rls}
}

// randomReadBatch is a random batch over rows: about two thirds of them,
// some with another payload, some at another offset (a producer's
// retry), some with an ID never claimed; most of a partition's in its
// run (a run per partition, its first offset under firstMax, at most
// lenMax offsets long, which need not hold its IDs' offsets), the rest
// looked up by their record or by their key.
func randomReadBatch(rng *rand.Rand, rows []readRow, firstMax, lenMax int) readBatch {
	var b readBatch
	runNum := map[string]int64{}
	for _, x := range rows {
		if rng.IntN(3) == 0 {
			continue
		}
		id, hash, off := x.id, x.hash, x.off
		switch rng.IntN(10) {
		case 0:
			hash[0]++ // another payload
		case 1:
			off += 500 // a producer's retry, at another offset
		case 2:
			id += "-fresh" // never claimed
		}
		b.ids, b.hashes, b.keys = append(b.ids, id), append(b.hashes, hash[:]), append(b.keys, schemas.LedgerKey(id))
		var run int64
		if rng.IntN(5) > 0 {
			p := fmt.Sprintf("%s/%d", x.topic, x.part)
			if run = runNum[p]; run == 0 {
				first := int64(rng.IntN(firstMax))
				b.rts, b.rps, b.rfs, b.rls = append(b.rts, x.topic), append(b.rps, x.part), append(b.rfs, first), append(b.rls, first+int64(rng.IntN(lenMax)))
				run = int64(len(b.rts))
				runNum[p] = run
			}
		}
		b.runOf = append(b.runOf, run)
		switch {
		case run > 0: // by its run, else its key
			b.bts, b.bps, b.bos = append(b.bts, ""), append(b.bps, x.part), append(b.bos, off)
		case rng.IntN(2) == 0: // by its record, else its key
			b.bts, b.bps, b.bos = append(b.bts, x.topic), append(b.bps, x.part), append(b.bos, off)
		default: // by its key
			b.bts, b.bps, b.bos = append(b.bts, ""), append(b.bps, 0), append(b.bos, 0)
		}
	}
	return b
}
