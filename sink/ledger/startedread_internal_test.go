package ledger

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
)

// A partition's records in a batch are a run when there are at least
// minRunRecords of them and they span at most runSpan times as many
// offsets; records without a topic (the scheduler's fires) never are, nor
// are records whose offsets lie at the ends of int64 (their span does not
// overflow into a small one). The runs are numbered from 1 in partition
// order, and a partition that has none has number 0.
func TestARunIsAPartitionsRecordsCloseTogether(t *testing.T) {
	routes := map[recordRef]int{}
	add := func(topic string, partition int32, offsets ...int64) {
		for _, o := range offsets {
			routes[recordRef{topic, partition, o}]++
		}
	}
	span := func(first, n, step int64) []int64 {
		var out []int64
		for k := range n {
			out = append(out, first+k*step)
		}
		return out
	}
	add("events", 3, span(100, minRunRecords, 1)...)                          // consecutive: a run
	add("events", 1, span(0, minRunRecords, runSpan)...)                      // every other offset: 31 offsets for 16 records, a run
	add("events", 2, span(0, minRunRecords-1, 1)...)                          // one too few
	add("events", 4, append(span(0, minRunRecords-1, 1), 2*minRunRecords)...) // 33 offsets for 16 records: too spread
	add("audit", 3, span(100, minRunRecords, 1)...)                           // another topic, same offsets: a run of its own
	add("", 0, 0)                                                             // fires
	for k := range int64(minRunRecords) {
		routes[recordRef{"", 0, k}]++
	}
	add("events", 5, append(span(math.MaxInt64-8, 8, 1), span(math.MinInt64, 8, 1)...)...) // the ends of int64
	s := &claimScratch{runNum: map[partitionRef]int64{}}
	runs := s.runsOf(routes)
	want := []run{
		{topic: "audit", partition: 3, first: 100, last: 100 + minRunRecords - 1, records: minRunRecords},
		{topic: "events", partition: 1, first: 0, last: (minRunRecords - 1) * runSpan, records: minRunRecords},
		{topic: "events", partition: 3, first: 100, last: 100 + minRunRecords - 1, records: minRunRecords},
	}
	if len(runs.list) != len(want) {
		t.Fatalf("runs %+v, want %+v", runs.list, want)
	}
	for k := range want {
		if runs.list[k] != want[k] {
			t.Errorf("run %d: %+v, want %+v", k+1, runs.list[k], want[k])
		}
	}
	for p, n := range map[partitionRef]int64{{"audit", 3}: 1, {"events", 1}: 2, {"events", 3}: 3, {"events", 2}: 0, {"events", 4}: 0, {"events", 5}: 0, {"", 0}: 0} {
		if got := runs.of(p.topic, p.partition); got != n {
			t.Errorf("%s/%d: run %d, want %d", p.topic, p.partition, got, n)
		}
	}
}

// twinLedger opens a ledger on a database of its own, remembering no
// started row (so that every verdict comes from a statement).
func twinLedger(t *testing.T, opts ...string) *Postgres {
	t.Helper()
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	if err := Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.URL = url
	for _, o := range opts {
		if strings.Contains(cfg.URL, "?") {
			cfg.URL += "&" + o
		} else {
			cfg.URL += "?" + o
		}
	}
	cfg.StartedCache = 0
	l, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	l.started = nil
	return l
}

// The verdicts of a claim whose read of started rows goes by runs are the
// claim statement's alone, on any ledger and batch: two ledgers of the
// same rows, one claiming every batch as a replay (the read first), the
// other never (the claim statement alone), give each intent the same
// verdict and generation, and end with the same rows. Random ledgers
// (started, pending, dead-lettered, re-run rows, rows under another key,
// at another offset, a record's several routes, fires) and batches (runs
// of a partition's records, some routes of each, copies of an ID at other
// offsets, other payloads, fresh IDs, fires, records of many routes).
func TestAReplayReadOfRunsGivesTheClaimStatementsVerdicts(t *testing.T) {
	replayTwins(t, 2)
}

// Likewise when the read's prepared statement runs its generic plan.
func TestAReplayReadOfRunsGivesTheClaimStatementsVerdictsInAGenericPlan(t *testing.T) {
	replayTwins(t, 4, "options=-c%20plan_cache_mode%3Dforce_generic_plan")
}

// Likewise when IDs share keys (ledger.SetKeyFunc): each "-fresh" ID has
// its base ID's key, so that its claim finds the other ID's row.
func TestAReplayReadOfRunsGivesTheClaimStatementsVerdictsWhenKeysCollide(t *testing.T) {
	defer SetKeyFunc(func(id string) [16]byte { return schemas.LedgerKey(strings.TrimSuffix(id, "-fresh")) })()
	replayTwins(t, 3)
}

func replayTwins(t *testing.T, seed uint64, subjectOpts ...string) {
	subject, control := twinLedger(t, subjectOpts...), twinLedger(t)
	ctx := context.Background()
	var mode string
	if err := subject.pool.QueryRow(ctx, `SHOW plan_cache_mode`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	t.Logf("the replaying ledger's plan_cache_mode: %s", mode)
	rng := rand.New(rand.NewPCG(63, seed))
	type rowT struct {
		id, state, topic string
		part             int32
		off              int64
		payload          string
		gen              int
		key              [16]byte
	}
	var rows []rowT
	routesOf := map[string]int{}
	for _, topic := range []string{"events", "audit"} {
		for part := range int32(3) {
			for off := range int64(200) {
				n := 1 + rng.IntN(3)
				if rng.IntN(20) == 0 {
					n = 6
				}
				routesOf[fmt.Sprintf("%s/%d/%d", topic, part, off)] = n
				for r := range n {
					id := fmt.Sprintf("activity-r%d:%s-%d-%d", r, topic, part, off)
					x := rowT{id: id, state: "started", topic: topic, part: part, off: off, payload: "p", gen: 1, key: schemas.LedgerKey(id)}
					switch rng.IntN(14) {
					case 0:
						x.state = "pending"
					case 1:
						x.state = "dead_lettered"
					case 2:
						x.gen = 2
					case 3:
						x.key = schemas.LedgerKey(id + "-not")
					case 4:
						x.off += 1000
					case 5:
						x.payload = "q"
					case 6:
						continue // never claimed
					}
					rows = append(rows, x)
				}
			}
		}
	}
	for g := range 100 {
		id := fmt.Sprintf("activity-f:fire-%d", g)
		rows = append(rows, rowT{id: id, state: "started", payload: "p", gen: 1, key: schemas.LedgerKey(id)})
	}
	for _, l := range []*Postgres{subject, control} {
		for _, x := range rows {
			var runID, startedAt any
			if x.state == "started" {
				runID, startedAt = "r", "2026-12-06"
			}
			h := sha256.Sum256([]byte(x.payload))
			if _, err := l.pool.Exec(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset, key, state, run_id, started_at, generation)
				VALUES ($1, 'a', $1, 'field', $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
				x.id, h[:], x.topic, x.part, x.off, x.key, x.state, runID, startedAt, x.gen); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := l.pool.Exec(ctx, `VACUUM ANALYZE dedup_ledger`); err != nil {
			t.Fatal(err)
		}
	}
	in := func(id, payload, topic string, part int32, off int64) decide.Intent {
		return decide.Intent{WorkflowID: id, ActivityID: "a", EventID: id, IDRule: "field", PayloadHash: sha256.Sum256([]byte(payload)),
			Topic: topic, Partition: part, Offset: off}
	}
	dump := func(l *Postgres) string {
		var s string
		if err := l.pool.QueryRow(ctx, `SELECT coalesce(string_agg(format('%s %s %s %s %s %s/%s/%s', workflow_id, state, attempts, generation, encode(payload_hash, 'hex'), topic, kafka_partition, kafka_offset), E'\n' ORDER BY workflow_id, key), '') FROM dedup_ledger`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	ranByRuns := 0
	for batch := range 150 {
		var b []decide.Intent
		topic := []string{"events", "audit"}[rng.IntN(2)]
		for range 1 + rng.IntN(3) {
			part := int32(rng.IntN(3))
			first := int64(rng.IntN(150))
			n := int64(30 + rng.IntN(60))
			for off := first; off < first+n && off < 200; off++ {
				if rng.IntN(6) == 0 {
					continue // no route: a gap
				}
				routes := routesOf[fmt.Sprintf("%s/%d/%d", topic, part, off)]
				for r := range routes {
					if routes < 6 && rng.IntN(4) == 0 {
						continue // this route answered elsewhere
					}
					id := fmt.Sprintf("activity-r%d:%s-%d-%d", r, topic, part, off)
					payload := "p"
					var later []decide.Intent
					switch rng.IntN(20) {
					case 0:
						payload = "q"
					case 1:
						id += "-fresh"
					case 2:
						later = append(later, in(id, payload, topic, part, off+1000)) // another copy at another offset
					case 3:
						later = append(later, in(id, "q", topic, part, off+500)) // a copy with another payload
					}
					b = append(append(b, in(id, payload, topic, part, off)), later...)
				}
			}
		}
		for range rng.IntN(8) {
			b = append(b, in(fmt.Sprintf("activity-f:fire-%d", rng.IntN(120)), "p", "", 0, 0))
		}
		if rng.IntN(6) == 0 {
			rng.Shuffle(len(b), func(i, j int) { b[i], b[j] = b[j], b[i] })
		}
		subject.replaying.Store(true)
		control.replaying.Store(false)
		got, err := subject.Claim(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		wantV, err := control.Claim(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		for i := range b {
			if got[i] != wantV[i] {
				t.Errorf("batch %d, intent %d (%s at %s/%d/%d): %+v after the replay's read, %+v from the claim alone",
					batch, i, b[i].WorkflowID, b[i].Topic, b[i].Partition, b[i].Offset, got[i], wantV[i])
			}
		}
		if t.Failed() {
			t.FailNow()
		}
		if g, w := dump(subject), dump(control); g != w {
			gl, wl := strings.Split(g, "\n"), strings.Split(w, "\n")
			var diff []string
			for k := 0; k < max(len(gl), len(wl)); k++ {
				if k >= len(gl) || k >= len(wl) || gl[k] != wl[k] {
					diff = append(diff, fmt.Sprintf("replayed: %q\nclaimed:  %q", gl[min(k, len(gl)-1)], wl[min(k, len(wl)-1)]))
				}
			}
			t.Fatalf("batch %d (%d intents): the ledgers differ after it:\n%s", batch, len(b), strings.Join(diff[:min(len(diff), 6)], "\n"))
		}
		// Mark a few of the claimed ones started, on both.
		var ms []processor.Started
		for i, c := range wantV {
			if c.Verdict == decide.VerdictNew && rng.IntN(2) == 0 {
				ms = append(ms, processor.Started{WorkflowID: b[i].WorkflowID, RunID: "r2", Generation: c.Generation})
			}
		}
		ms = slices.CompactFunc(ms, func(a, c processor.Started) bool { return a.WorkflowID == c.WorkflowID })
		for _, l := range []*Postgres{subject, control} {
			if err := l.MarkStarted(ctx, ms); err != nil {
				t.Fatal(err)
			}
		}
		if len(subject.claimRunsSeen(b)) > 0 {
			ranByRuns++
		}
	}
	if ranByRuns == 0 {
		t.Fatal("no batch had a run")
	}
	t.Logf("%d of 150 batches had runs", ranByRuns)
}

// claimRunsSeen is the runs the replay's read would give b.
func (p *Postgres) claimRunsSeen(b []decide.Intent) []run {
	s := &claimScratch{runNum: map[partitionRef]int64{}}
	routes := map[recordRef]int{}
	seen := map[string]bool{}
	for i := range b {
		if !seen[b[i].WorkflowID] {
			seen[b[i].WorkflowID] = true
			routes[recordOf(&b[i])]++
		}
	}
	return slices.Clone(s.runsOf(routes).list)
}

// The read's plan counted in one pass over a batch whose partitions'
// offsets never go back (readPlan's runsInOrder) is the plan counted by
// record (readPlanByRecord): the same runs, each ID's run and whether it
// is looked up by its record, on random batches of one to three topics
// and records without one (the scheduler's fires), partitions
// interleaved or not, a record's IDs together or apart, copies of an ID
// left out of uniq, uniq in any order, offsets close together, far apart
// or at the ends of int64, on one scratch claim after claim; and a batch
// whose offsets go back is counted by record.
func TestTheReadPlanInOffsetOrderIsTheReadPlanByRecord(t *testing.T) {
	rng := rand.New(rand.NewPCG(65, 1))
	topics := []string{"a", "b", "events", ""}
	inOrder, mixed := 0, 0
	for round := range 3000 {
		var intents []decide.Intent
		next := map[partitionRef]int64{}
		span := []int64{1, 1, 2, 3, 50}[rng.IntN(5)]
		base := []int64{0, 1000, math.MaxInt64 - 5000, math.MinInt64}[rng.IntN(4)]
		records := rng.IntN(200)
		backwards := rng.IntN(8) == 0
		for range records {
			topic := topics[rng.IntN(1+rng.IntN(len(topics)))]
			part := int32(rng.IntN(1 + rng.IntN(4)))
			p := partitionRef{topic, part}
			off, ok := next[p]
			if !ok {
				off = base
			}
			if topic == "" {
				part, off = 0, 0
			}
			next[p] = off + 1 + rng.Int64N(span)
			if backwards && rng.IntN(20) == 0 {
				off -= 2
			}
			routes := 1 + rng.IntN(1+rng.IntN(6))
			for r := range routes {
				in := decide.Intent{WorkflowID: fmt.Sprintf("r%d-%d-%d", r, round, len(intents)), Topic: topic, Partition: part, Offset: off}
				intents = append(intents, in)
			}
		}
		// A record's IDs apart: swap neighbours now and then.
		for k := 0; k+1 < len(intents); k++ {
			if rng.IntN(10) == 0 && intents[k].Topic == intents[k+1].Topic && intents[k].Partition == intents[k+1].Partition && intents[k].Offset == intents[k+1].Offset {
				continue
			}
			if rng.IntN(30) == 0 {
				intents[k], intents[k+1] = intents[k+1], intents[k]
			}
		}
		// uniq: the IDs that are not copies, in any order.
		var uniq []int
		for i := range intents {
			if rng.IntN(10) > 0 {
				uniq = append(uniq, i)
			}
		}
		rng.Shuffle(len(uniq), func(a, b int) { uniq[a], uniq[b] = uniq[b], uniq[a] })

		sc := getClaimScratch(len(intents), false)
		wantRuns, wantRunOf, wantByRecord := sc.readPlanByRecord(intents, uniq)
		wantRuns, wantRunOf, wantByRecord = slices.Clone(wantRuns), slices.Clone(wantRunOf), slices.Clone(wantByRecord)
		sc.release()
		sc = getClaimScratch(len(intents), false)
		_, ordered := sc.runsInOrder(intents, uniq)
		runs, runOf, byRecord := sc.readPlan(intents, uniq)
		if ordered {
			inOrder++
			if len(runs) > 0 && slices.Contains(byRecord, true) {
				mixed++
			}
		}
		if !slices.Equal(runs, wantRuns) || !slices.Equal(runOf, wantRunOf) || !slices.Equal(byRecord, wantByRecord) {
			t.Fatalf("round %d (in offset order %v, %d intents, uniq %v):\nruns %v\nby record %v\nrun of %v\nby record: %v\nwant run of %v\nwant by record %v",
				round, ordered, len(intents), uniq, runs, wantRuns, runOf, byRecord, wantRunOf, wantByRecord)
		}
		sc.release()
	}
	if inOrder < 1000 || mixed < 100 {
		t.Fatalf("of 3000 batches, %d were in offset order, %d of them with runs and IDs looked up by record", inOrder, mixed)
	}
}
