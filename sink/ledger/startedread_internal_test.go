package ledger

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// twinIntent is the twin ledgers' intent of workflow ID id at a record.
func twinIntent(id, payload, topic string, part int32, off int64) decide.Intent {
	return decide.Intent{WorkflowID: id, ActivityID: "a", EventID: id, IDRule: "field", PayloadHash: sha256.Sum256([]byte(payload)),
		Topic: topic, Partition: part, Offset: off}
}

// ledgerRows is every row of l's ledger as a line, by workflow ID: what
// the twin ledgers compare after each batch.
func ledgerRows(t *testing.T, l *Postgres) string {
	t.Helper()
	var s string
	if err := l.pool.QueryRow(context.Background(), `SELECT coalesce(string_agg(format('%s %s %s %s %s %s/%s/%s', workflow_id, state, attempts, generation, encode(payload_hash, 'hex'), topic, kafka_partition, kafka_offset), E'\n' ORDER BY workflow_id, key), '') FROM dedup_ledger`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// markSomeStarted marks about half the intents of b that the claim
// answered new started, on each ledger.
func markSomeStarted(t *testing.T, rng *rand.Rand, b []decide.Intent, claimed []decide.Claimed, ledgers ...*Postgres) {
	t.Helper()
	var ms []processor.Started
	for i, c := range claimed {
		if c.Verdict == decide.VerdictNew && rng.IntN(2) == 0 {
			ms = append(ms, processor.Started{WorkflowID: b[i].WorkflowID, RunID: "r2", Generation: c.Generation})
		}
	}
	ms = slices.CompactFunc(ms, func(a, c processor.Started) bool { return a.WorkflowID == c.WorkflowID })
	for _, l := range ledgers {
		if err := l.MarkStarted(context.Background(), ms); err != nil {
			t.Fatal(err)
		}
	}
}

// sameVerdicts fails t unless each intent of batch b got the same
// verdict after the replay's read (got) as from the claim alone (want).
func sameVerdicts(t *testing.T, batch int, b []decide.Intent, got, want []decide.Claimed) {
	t.Helper()
	for i := range b {
		if got[i] != want[i] {
			t.Errorf("batch %d, intent %d (%s at %s/%d/%d): %+v after the replay's read, %+v from the claim alone",
				batch, i, b[i].WorkflowID, b[i].Topic, b[i].Partition, b[i].Offset, got[i], want[i])
		}
	}
	if t.Failed() {
		t.FailNow()
	}
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
	in := twinIntent
	dump := func(l *Postgres) string { return ledgerRows(t, l) }
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
		sameVerdicts(t, batch, b, got, wantV)
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
		markSomeStarted(t, rng, b, wantV, subject, control)
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

// planByRecordOnAFreshScratch is readPlanByRecord's plan for the batch, on
// a scratch no claim used, cloned.
func planByRecordOnAFreshScratch(intents []decide.Intent, uniq []int) ([]run, []int64, []bool) {
	s := &claimScratch{seen: map[string]int32{}, routes: map[recordRef]int{}, runNum: map[partitionRef]int64{}}
	runs, runOf, byRecord := s.readPlanByRecord(intents, uniq)
	return slices.Clone(runs), slices.Clone(runOf), slices.Clone(byRecord)
}

// adversarialBatch is a batch shaped to break a one-pass count: hundreds
// of partitions or a few, the same partition numbers in several topics
// whose names are equal strings at other addresses, the scheduler's fires
// (no topic) among them, a partition that appears, goes and comes back,
// several IDs of one record in a row or far apart, two polls one after
// the other (the second going on, or going back), offsets at the ends of
// int64; and its uniq: any subset of it, in any order, now and then with
// an index twice.
func adversarialBatch(rng *rand.Rand, round int) ([]decide.Intent, []int) {
	names := []string{"a", "b", "events"}
	topicOf := func() string {
		if rng.IntN(6) == 0 {
			return ""
		}
		// Equal in content, another address.
		return strings.Clone(names[rng.IntN(1+rng.IntN(len(names)))])
	}
	nparts := []int{1, 2, 3, 8, 300}[rng.IntN(5)]
	bases := []int64{0, 7, math.MaxInt64 - 40, math.MinInt64, math.MinInt64 + 3, math.MaxInt64 - 2*minRunRecords}
	base := bases[rng.IntN(len(bases))]
	steps := []int64{0, 1, 1, 1, 1, 1, 2, 3, 1 << 40}
	next := map[partitionRef]int64{}
	var intents []decide.Intent
	poll := func(records int) {
		// Partition by partition, or interleaved.
		stick := rng.IntN(3) == 0
		var p partitionRef
		for k := range records {
			if k == 0 || !stick || rng.IntN(30) == 0 {
				p = partitionRef{topicOf(), int32(rng.IntN(nparts))}
			}
			off, ok := next[partitionRef{strings.Clone(p.topic), p.partition}]
			if !ok {
				off = base + rng.Int64N(3)
			}
			step := steps[rng.IntN(len(steps))]
			if off > math.MaxInt64-step { // no overflow: stay at the end
				step = 0
			}
			next[p] = off + step
			topic, part := p.topic, p.partition
			if topic == "" {
				part, off = 0, 0
			}
			n := 1 + rng.IntN(1+rng.IntN(7))
			for r := range n {
				intents = append(intents, decide.Intent{WorkflowID: fmt.Sprintf("r%d-%d-%d", r, round, len(intents)), Topic: topic, Partition: part, Offset: off})
			}
		}
	}
	poll(rng.IntN(250))
	if rng.IntN(3) == 0 { // a second poll
		if rng.IntN(2) == 0 { // redelivered: some partitions from earlier
			for p, off := range next {
				if rng.IntN(2) == 0 {
					next[p] = off - rng.Int64N(4)
				}
			}
		}
		poll(rng.IntN(120))
	}
	if rng.IntN(4) == 0 && len(intents) > 2 {
		// A record's IDs far apart: an ID moved to the other end.
		k := rng.IntN(len(intents))
		x := intents[k]
		intents = append(slices.Delete(intents, k, k+1), x)
	}
	var uniq []int
	keep := 3 + rng.IntN(8)
	for i := range intents {
		if rng.IntN(10) < keep {
			uniq = append(uniq, i)
		}
	}
	switch rng.IntN(4) {
	case 0:
		rng.Shuffle(len(uniq), func(a, b int) { uniq[a], uniq[b] = uniq[b], uniq[a] })
	case 1:
		slices.Reverse(uniq)
	case 2:
		if len(uniq) > 0 {
			uniq = append(uniq, uniq[rng.IntN(len(uniq))])
		}
	}
	return intents, uniq
}

// readPlan's plan is readPlanByRecord's on any batch and uniq (see
// adversarialBatch), on scratches claims of other sizes and shapes used
// before, whether the batch is counted in one pass or by record.
func TestTheReadPlanIsTheReadPlanByRecordOnAnyBatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(65, 2))
	var inOrder, withRuns, mixed int
	for round := range 6000 {
		intents, uniq := adversarialBatch(rng, round)
		wantRuns, wantRunOf, wantByRecord := planByRecordOnAFreshScratch(intents, uniq)
		sc := getClaimScratch(len(intents), rng.IntN(2) == 0)
		runs, runOf, byRecord := sc.readPlan(intents, uniq)
		if !slices.Equal(runs, wantRuns) || !slices.Equal(runOf, wantRunOf) || !slices.Equal(byRecord, wantByRecord) {
			t.Fatalf("round %d (%d intents %v, uniq %v):\nruns %v\nwant %v\nrun of %v\nwant %v\nby record %v\nwant %v",
				round, len(intents), intents, uniq, runs, wantRuns, runOf, wantRunOf, byRecord, wantByRecord)
		}
		if len(runs) > 0 {
			withRuns++
			if slices.Contains(byRecord, true) {
				mixed++
			}
		}
		fresh := &claimScratch{runNum: map[partitionRef]int64{}}
		if _, ok := fresh.runsInOrder(intents, uniq); ok {
			inOrder++
		}
		sc.release()
	}
	t.Logf("of 6000 batches, %d in offset order, %d with runs, %d of them with IDs looked up by record", inOrder, withRuns, mixed)
	if inOrder < 1000 || withRuns < 1000 || mixed < 300 {
		t.Fatalf("of 6000 batches, %d in offset order, %d with runs, %d of them with IDs looked up by record", inOrder, withRuns, mixed)
	}
}

// readPlan's plan is readPlanByRecord's for a partition whose records lie
// at both ends of int64, in either order (in offset order its span is the
// whole of int64: no run; the other way round its offsets go back), next
// to a run from math.MinInt64 and one up to math.MaxInt64, in one topic and
// another of the same name at another address, with the scheduler's fires
// between every record, and a partition that comes back after the others.
func TestTheReadPlanAtTheEndsOfInt64IsTheReadPlanByRecord(t *testing.T) {
	span := func(topic string, part int32, first int64, n int) []decide.Intent {
		var out []decide.Intent
		for k := range n {
			out = append(out, decide.Intent{WorkflowID: fmt.Sprintf("%s-%d-%d", topic, part, first+int64(k)), Topic: topic, Partition: part, Offset: first + int64(k)},
				decide.Intent{WorkflowID: fmt.Sprintf("fire-%s-%d-%d", topic, part, k)})
		}
		return out
	}
	ends := append(span("events", 5, math.MinInt64, 8), span("events", 5, math.MaxInt64-7, 8)...)
	endsBack := append(span("events", 5, math.MaxInt64-7, 8), span("events", 5, math.MinInt64, 8)...)
	runs := append(span("events", 1, math.MinInt64, minRunRecords), span(strings.Clone("events"), 2, math.MaxInt64-minRunRecords+1, minRunRecords)...)
	comesBack := append(append(span("audit", 0, 0, 10), runs...), span("audit", 0, 10, 10)...)
	nruns := map[string]int{"ends": 0, "ends going back": 0, "ends and runs": 2, "comes back": 3, "all": 3}
	for name, b := range map[string][]decide.Intent{
		"ends":            ends,
		"ends going back": endsBack,
		"ends and runs":   append(slices.Clone(ends), runs...),
		"comes back":      comesBack,
		"all":             append(append(slices.Clone(comesBack), ends...), endsBack...),
	} {
		uniq := make([]int, len(b))
		for i := range uniq {
			uniq[len(uniq)-1-i] = i
		}
		wantRuns, wantRunOf, wantByRecord := planByRecordOnAFreshScratch(b, uniq)
		if len(wantRuns) != nruns[name] {
			t.Errorf("%s: %d runs by record, want %d", name, len(wantRuns), nruns[name])
		}
		sc := getClaimScratch(len(b), false)
		gotRuns, runOf, byRecord := sc.readPlan(b, uniq)
		if !slices.Equal(gotRuns, wantRuns) || !slices.Equal(runOf, wantRunOf) || !slices.Equal(byRecord, wantByRecord) {
			t.Errorf("%s: runs %v, want %v\nrun of %v\nwant %v\nby record %v\nwant %v", name, gotRuns, wantRuns, runOf, wantRunOf, byRecord, wantByRecord)
		}
		sc.release()
	}
}

// Claims on one handle run at once, each on a scratch of the pool that
// other claims, of other sizes and shapes, used before: each claim's plan
// is its own batch's (readPlanByRecord's on a fresh scratch), whether the
// claims before it were counted in one pass, bailed out of it half way
// (offsets that go back) or were larger than the pool keeps.
func TestTheReadPlansOfConcurrentClaimsAreEachTheirBatchs(t *testing.T) {
	const workers, rounds = 4, 800
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			rng := rand.New(rand.NewPCG(65, 100+uint64(w)))
			for round := range rounds {
				intents, uniq := adversarialBatch(rng, round)
				if rng.IntN(200) == 0 { // larger than the pool keeps
					for k := range maxScratchIntents + 1 {
						intents = append(intents, decide.Intent{WorkflowID: fmt.Sprint("big-", k), Topic: "big", Partition: int32(k % 3), Offset: int64(k / 3)})
						uniq = append(uniq, len(intents)-1)
					}
				}
				wantRuns, wantRunOf, wantByRecord := planByRecordOnAFreshScratch(intents, uniq)
				sc := getClaimScratch(len(intents), false)
				runs, runOf, byRecord := sc.readPlan(intents, uniq)
				if !slices.Equal(runs, wantRuns) || !slices.Equal(runOf, wantRunOf) || !slices.Equal(byRecord, wantByRecord) {
					sc.release()
					errs <- fmt.Errorf("worker %d round %d (%d intents): runs %v, want %v", w, round, len(intents), runs, wantRuns)
					return
				}
				runtime.Gosched()
				sc.release()
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkReadPlan is the client's cost of the replay read's plan, by
// readPlan (one pass in the batch's order when its offsets never go back)
// and by readPlanByRecord, of 1,000 IDs in key order (uniq), 1.25 a
// record, in batches of several shapes.
func BenchmarkReadPlan(b *testing.B) {
	shapes := []struct {
		name   string
		record func(rec int) (int32, int64)
		back   bool // the last record of the batch goes back one offset
		left   int  // uniq's IDs, when not all (the rest answered by the memory of started rows)
	}{
		{"poll", func(rec int) (int32, int64) { return int32(rec / 100 % 8), int64(rec) }, false, 0},
		{"interleaved_no_runs", func(rec int) (int32, int64) { return int32(rec % 8), int64(rec) }, false, 0},
		{"interleaved_runs", func(rec int) (int32, int64) { return int32(rec % 8), int64(rec / 8) }, false, 0},
		{"interleaved_runs_back_at_end", func(rec int) (int32, int64) { return int32(rec % 8), int64(rec / 8) }, true, 0},
		{"poll_back_at_end", func(rec int) (int32, int64) { return int32(rec / 100 % 8), int64(rec) }, true, 0},
		{"300_partitions", func(rec int) (int32, int64) { return int32(rec % 300), int64(rec) }, false, 0},
		{"poll_10_left", func(rec int) (int32, int64) { return int32(rec / 100 % 8), int64(rec) }, false, 10},
		{"interleaved_10_left", func(rec int) (int32, int64) { return int32(rec % 8), int64(rec) }, false, 10},
	}
	for _, sh := range shapes {
		var intents []decide.Intent
		for rec := 0; len(intents) < 1000; rec++ {
			p, o := sh.record(rec)
			for r := range 1 + min(rec%5/4, 1) {
				intents = append(intents, decide.Intent{WorkflowID: fmt.Sprintf("route%d-evt-%09d", r, rec), Topic: "events", Partition: p, Offset: o})
			}
		}
		intents = intents[:1000]
		if sh.back {
			intents[999].Offset = intents[999].Offset - 100
		}
		uniq := make([]int, len(intents))
		for i := range uniq {
			uniq[i] = i
		}
		rand.New(rand.NewPCG(1, 2)).Shuffle(len(uniq), func(a, c int) { uniq[a], uniq[c] = uniq[c], uniq[a] })
		if sh.left > 0 {
			uniq = uniq[:sh.left]
		}
		for _, how := range []string{"readPlan", "readPlanByRecord"} {
			b.Run(sh.name+"/"+how, func(b *testing.B) {
				for range b.N {
					sc := getClaimScratch(len(intents), false)
					if how == "readPlan" {
						sc.readPlan(intents, uniq)
					} else {
						sc.readPlanByRecord(intents, uniq)
					}
					sc.release()
				}
			})
		}
	}
}

// A replay's claim gives each intent the claim statement's verdict and
// generation on batches of the shapes a one-pass count could get wrong:
// the same partitions in two topics, records at the ends of int64,
// partitions interleaved record by record or partition by partition, a
// partition that goes and comes back, a second poll that goes on or goes
// back, an ID moved far from its record's others, the scheduler's fires
// among them, copies at other offsets and with other payloads. Two ledgers
// of the same rows, one reading started rows first, the other never.
func TestAReplaysClaimOfAnyPollGivesTheClaimStatementsVerdicts(t *testing.T) {
	subject, control := twinLedger(t), twinLedger(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(65, 3))
	type recT struct {
		topic string
		part  int32
		off   int64
	}
	bases := []int64{math.MinInt64, 0, math.MaxInt64 - 120}
	routesOf := map[recT]int{}
	var ids, topics, payloads, states []string
	var parts []int32
	var offs []int64
	var gens []int
	var keys [][16]byte
	for _, topic := range []string{"a", "b"} {
		for part := range int32(4) {
			for _, base := range bases {
				for k := range int64(100) {
					r := recT{topic, part, base + k}
					n := 1 + rng.IntN(3)
					if rng.IntN(20) == 0 {
						n = 6
					}
					routesOf[r] = n
					for x := range n {
						id := fmt.Sprintf("r%d:%s-%d-%d", x, topic, part, r.off)
						state, payload, gen, key, off := "started", "p", 1, schemas.LedgerKey(id), r.off
						switch rng.IntN(14) {
						case 0:
							state = "pending"
						case 1:
							state = "dead_lettered"
						case 2:
							gen = 2
						case 3:
							key = schemas.LedgerKey(id + "-not")
						case 4:
							off = base + 100 + k // at another offset, within the ends
						case 5:
							payload = "q"
						case 6:
							continue // never claimed
						}
						ids, topics, payloads, states = append(ids, id), append(topics, topic), append(payloads, payload), append(states, state)
						parts, offs, gens, keys = append(parts, part), append(offs, off), append(gens, gen), append(keys, key)
					}
				}
			}
		}
	}
	for g := range 50 {
		id := fmt.Sprintf("fire-%d", g)
		ids, topics, payloads, states = append(ids, id), append(topics, ""), append(payloads, "p"), append(states, "started")
		parts, offs, gens, keys = append(parts, 0), append(offs, 0), append(gens, 1), append(keys, schemas.LedgerKey(id))
	}
	hashes := make([][]byte, len(ids))
	for i, p := range payloads {
		h := sha256.Sum256([]byte(p))
		hashes[i] = h[:]
	}
	for _, l := range []*Postgres{subject, control} {
		if _, err := l.pool.Exec(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset, key, state, run_id, started_at, generation)
			SELECT id, 'a', id, 'field', h, t, p, o, k, s, CASE WHEN s = 'started' THEN 'r' END, CASE WHEN s = 'started' THEN now() END, g
			FROM unnest($1::text[], $2::bytea[], $3::text[], $4::int4[], $5::int8[], $6::uuid[], $7::text[], $8::int4[]) AS t(id, h, t, p, o, k, s, g)`,
			ids, hashes, topics, parts, offs, keys, states, gens); err != nil {
			t.Fatal(err)
		}
		if _, err := l.pool.Exec(ctx, `VACUUM ANALYZE dedup_ledger`); err != nil {
			t.Fatal(err)
		}
	}
	in := twinIntent
	dump := func(l *Postgres) string { return ledgerRows(t, l) }
	var inOrder, withRuns int
	for batch := range 120 {
		// Segments: a partition's records from an offset on.
		type seg struct {
			topic    string
			part     int32
			base, at int64
		}
		var segs []seg
		for range 1 + rng.IntN(4) {
			base := bases[rng.IntN(len(bases))]
			topic, part := []string{"a", "b"}[rng.IntN(2)], int32(rng.IntN(4))
			if slices.ContainsFunc(segs, func(s seg) bool { return s.topic == topic && s.part == part }) {
				continue
			}
			segs = append(segs, seg{topic: strings.Clone([]string{"a", "b"}[rng.IntN(2)]), part: int32(rng.IntN(4)), base: base, at: base + rng.Int64N(60)})
		}
		interleave, copies := rng.IntN(2) == 0, rng.IntN(3) == 0
		var b []decide.Intent
		polls := 1 + rng.IntN(2)
		for poll := range polls {
			if poll == 1 && rng.IntN(2) == 0 {
				for k := range segs { // redelivered: back a few records
					segs[k].at = max(segs[k].base, segs[k].at-rng.Int64N(5))
				}
			}
			for k := 0; k < 40*len(segs); k++ {
				s := &segs[k%len(segs)]
				if !interleave {
					s = &segs[k/40]
				}
				if rng.IntN(50) == 0 {
					continue // this partition's records later
				}
				off := s.at
				if off >= s.base+100 {
					continue
				}
				s.at++
				if rng.IntN(6) == 0 {
					continue // no route: a gap
				}
				r := recT{s.topic, s.part, off}
				n := routesOf[r]
				for x := range n {
					if n < 6 && rng.IntN(4) == 0 {
						continue
					}
					id := fmt.Sprintf("r%d:%s-%d-%d", x, r.topic, r.part, r.off)
					payload := "p"
					var later []decide.Intent
					switch rng.IntN(20) {
					case 0:
						payload = "q"
					case 1:
						id += "-fresh"
					case 2:
						if !copies {
							break
						}
						later = append(later, in(id, payload, r.topic, r.part, s.base+100+off-s.base))
					case 3:
						if !copies {
							break
						}
						later = append(later, in(id, "q", r.topic, r.part, off+1))
					}
					b = append(append(b, in(id, payload, r.topic, r.part, r.off)), later...)
				}
			}
		}
		for range rng.IntN(6) {
			b = append(b, in(fmt.Sprintf("fire-%d", rng.IntN(60)), "p", "", 0, 0))
		}
		if len(b) > 2 && rng.IntN(4) == 0 { // an ID far from its record's others
			k := rng.IntN(len(b))
			x := b[k]
			b = append(slices.Delete(b, k, k+1), x)
		}
		if len(b) == 0 {
			continue
		}
		{
			s := &claimScratch{runNum: map[partitionRef]int64{}}
			uniq := make([]int, len(b))
			for i := range uniq {
				uniq[i] = i
			}
			if runs, ok := s.runsInOrder(b, uniq); ok {
				inOrder++
				if len(runs) > 0 {
					withRuns++
				}
			}
		}
		subject.replaying.Store(true)
		control.replaying.Store(false)
		got, err := subject.Claim(ctx, b)
		if err != nil {
			t.Fatalf("batch %d: the replay's claim: %v", batch, err)
		}
		wantV, err := control.Claim(ctx, b)
		if err != nil {
			t.Fatalf("batch %d: the claim statement's: %v", batch, err)
		}
		sameVerdicts(t, batch, b, got, wantV)
		if g, w := dump(subject), dump(control); g != w {
			t.Fatalf("batch %d (%d intents): the ledgers differ after it", batch, len(b))
		}
		markSomeStarted(t, rng, b, wantV, subject, control)
	}
	t.Logf("of 120 batches, %d in offset order, %d of them with runs", inOrder, withRuns)
	if inOrder < 20 || withRuns < 20 {
		t.Fatalf("of 120 batches, %d in offset order, %d of them with runs", inOrder, withRuns)
	}
}

// Claims on one handle at once, replays all, of batches of several shapes
// (a poll's runs, partitions interleaved, a second poll that goes back,
// records scattered), some cancelled part way, each get the claim
// statement's verdicts: no claim's scratch holds another's plan.
func TestConcurrentReplayClaimsOnOneHandleGetTheClaimStatementsVerdicts(t *testing.T) {
	subject, control := twinLedger(t), twinLedger(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(65, 4))
	var ids, topics, payloads []string
	var parts []int32
	var offs []int64
	var gens []int
	var keys [][16]byte
	idOf := func(r int, topic string, part int32, off int64) string {
		return fmt.Sprintf("r%d:%s-%d-%d", r, topic, part, off)
	}
	for _, topic := range []string{"a", "b"} {
		for part := range int32(4) {
			for off := range int64(300) {
				for r := range 2 {
					id := idOf(r, topic, part, off)
					payload, gen := "p", 1
					switch rng.IntN(10) {
					case 0:
						gen = 2
					case 1:
						payload = "q"
					}
					ids, topics, payloads, parts, offs, gens, keys = append(ids, id), append(topics, topic), append(payloads, payload),
						append(parts, part), append(offs, off), append(gens, gen), append(keys, schemas.LedgerKey(id))
				}
			}
		}
	}
	hashes := make([][]byte, len(ids))
	for i, p := range payloads {
		h := sha256.Sum256([]byte(p))
		hashes[i] = h[:]
	}
	for _, l := range []*Postgres{subject, control} {
		if _, err := l.pool.Exec(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset, key, state, run_id, started_at, generation)
			SELECT id, 'a', id, 'field', h, t, p, o, k, 'started', 'r', now(), g
			FROM unnest($1::text[], $2::bytea[], $3::text[], $4::int4[], $5::int8[], $6::uuid[], $7::int4[]) AS t(id, h, t, p, o, k, g)`,
			ids, hashes, topics, parts, offs, keys, gens); err != nil {
			t.Fatal(err)
		}
		if _, err := l.pool.Exec(ctx, `VACUUM ANALYZE dedup_ledger`); err != nil {
			t.Fatal(err)
		}
	}
	in := func(r int, topic string, part int32, off int64) decide.Intent {
		id := idOf(r, topic, part, off)
		return decide.Intent{WorkflowID: id, ActivityID: "a", EventID: id, IDRule: "field", PayloadHash: sha256.Sum256([]byte("p")),
			Topic: topic, Partition: part, Offset: off}
	}
	var batches [][]decide.Intent
	for range 24 {
		var b []decide.Intent
		switch rng.IntN(4) {
		case 0: // a poll: partition by partition
			for _, part := range rng.Perm(4)[:1+rng.IntN(4)] {
				first := rng.Int64N(200)
				for off := first; off < first+1+rng.Int64N(100); off++ {
					b = append(b, in(0, "a", int32(part), off), in(1, "a", int32(part), off))
				}
			}
		case 1: // interleaved, record by record
			first := rng.Int64N(200)
			for off := first; off < first+60; off++ {
				for part := range int32(4) {
					b = append(b, in(rng.IntN(2), []string{"a", "b"}[rng.IntN(2)], part, off))
				}
			}
		case 2: // two polls, the second going back
			for _, first := range []int64{100, 90} {
				for off := first; off < first+40; off++ {
					b = append(b, in(0, "b", 2, off), in(1, "b", 2, off))
				}
			}
		case 3: // scattered
			for range 1 + rng.IntN(300) {
				b = append(b, in(rng.IntN(2), []string{"a", "b"}[rng.IntN(2)], int32(rng.IntN(4)), rng.Int64N(300)))
			}
		}
		batches = append(batches, b)
	}
	wants := make([][]decide.Claimed, len(batches))
	for k, b := range batches {
		control.replaying.Store(false)
		v, err := control.Claim(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		wants[k] = v
	}
	const workers, claims = 4, 40
	var cancelled atomic.Int64
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			rng := rand.New(rand.NewPCG(65, 200+uint64(w)))
			for c := range claims {
				k := rng.IntN(len(batches))
				cctx, cancel := context.WithCancel(ctx)
				if rng.IntN(4) == 0 {
					d := time.Duration(rng.IntN(3000)) * time.Microsecond
					go func() { time.Sleep(d); cancel() }()
				}
				subject.replaying.Store(true)
				got, err := subject.Claim(cctx, batches[k])
				cancel()
				if err != nil {
					if cctx.Err() != nil {
						cancelled.Add(1)
						continue
					}
					errs <- fmt.Errorf("worker %d claim %d: %w", w, c, err)
					return
				}
				for i := range got {
					if got[i] != wants[k][i] {
						errs <- fmt.Errorf("worker %d claim %d, batch %d, intent %d (%s): %+v, want %+v", w, c, k, i, batches[k][i].WorkflowID, got[i], wants[k][i])
						return
					}
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d of %d claims cancelled part way", cancelled.Load(), workers*claims)
}
