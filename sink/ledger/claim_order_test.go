package ledger_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/sink/ledger"
)

// Claim looks a batch's IDs up in key order (claim.go); the verdicts are
// still one per intent, in the batch's order, each copy with its own ID's
// answer. The tests of this file hold that against batches whose order is
// not the key order: reversed, interleaved, with repeated copies.

// before is what the ledger holds for an ID before the batch.
type before int

const (
	absent before = iota
	pendingRow
	startedRow
	rerunRow // started, re-run: generation 2
	deadLetteredRow
)

func (b before) String() string {
	return [...]string{"absent", "pending", "started", "re-run", "dead_lettered"}[b]
}

// seedRows puts each ID's row (claimed with payload "p") in its state.
func seedRows(t *testing.T, l *ledger.Postgres, rows map[string]before) {
	t.Helper()
	ctx := context.Background()
	var batch []decide.Intent
	var st, rerun []processor.Started
	var dl []string
	for id, b := range rows {
		if b == absent {
			continue
		}
		batch = append(batch, intent(id, "p"))
		wf := intent(id, "p").WorkflowID
		switch b {
		case startedRow:
			st = append(st, processor.Started{WorkflowID: wf, RunID: "r1", Generation: 1})
		case rerunRow:
			st = append(st, processor.Started{WorkflowID: wf, RunID: "r1", Generation: 1})
			rerun = append(rerun, processor.Started{WorkflowID: wf, RunID: "r2", Generation: 2})
		case deadLetteredRow:
			dl = append(dl, wf)
		}
	}
	for _, v := range claim(t, l, batch...) {
		if v != decide.VerdictNew {
			t.Fatalf("seeding: %v, want every row new", v)
		}
	}
	for _, s := range [][]processor.Started{st, rerun} {
		if err := l.MarkStarted(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.MarkDeadLettered(ctx, unfenced(dl...)); err != nil {
		t.Fatal(err)
	}
}

// expected is the claim's answer to a copy with payload of an ID whose
// row was b before the batch and whose first copy in the batch carries
// first.
func expected(b before, first, payload string) decide.Claimed {
	switch {
	case b == absent && payload == first:
		return decide.Claimed{Verdict: decide.VerdictNew, Generation: 1}
	case b == absent || payload != "p":
		return decide.Claimed{Verdict: decide.VerdictConflict}
	case b == startedRow:
		return decide.Claimed{Verdict: decide.VerdictDuplicate, Generation: 1}
	case b == rerunRow:
		return decide.Claimed{Verdict: decide.VerdictDuplicate, Generation: 2}
	default: // pending, dead_lettered: re-claimed
		return decide.Claimed{Verdict: decide.VerdictRedrive, Generation: 1}
	}
}

// interleave orders the copies of ids (each ID's payloads in order): in
// reverse key order of the IDs, round by round (every ID's first copy,
// then every second copy, ...), or shuffled by seed (each ID's copies
// keeping their order).
func interleave(ids []string, copies map[string][]string, seed int64) []decide.Intent {
	ids = slices.Clone(ids)
	slices.SortFunc(ids, func(a, b string) int {
		ka, kb := schemas.LedgerKey(intent(a, "").WorkflowID), schemas.LedgerKey(intent(b, "").WorkflowID)
		return -bytes.Compare(ka[:], kb[:])
	})
	var order []string
	for round := 0; ; round++ {
		n := len(order)
		for _, id := range ids {
			if round < len(copies[id]) {
				order = append(order, id)
			}
		}
		if len(order) == n {
			break
		}
	}
	if seed != 0 {
		rand.New(rand.NewSource(seed)).Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	}
	next := map[string]int{}
	out := make([]decide.Intent, len(order))
	for i, id := range order {
		out[i] = intent(id, copies[id][next[id]])
		out[i].Offset = int64(i)
		next[id]++
	}
	return out
}

// A batch of every kind of row (absent, pending, started, re-run,
// dead_lettered) times every kind of copies (one, repeated, another
// payload, another payload first, a payload between two copies of the
// row's), in reverse key order and shuffled, on both of Claim's paths:
// each intent gets its own ID's verdict and generation, in the batch's
// order, and the rows end as the verdicts say.
func TestClaimAnswersEveryIntentInBatchOrderWhateverTheKeyOrder(t *testing.T) {
	patterns := [][]string{{"p"}, {"p", "p"}, {"x"}, {"x", "p"}, {"p", "x", "p"}, {"x", "y", "x"}}
	for _, afterReplay := range []bool{false, true} {
		for _, seed := range []int64{0, 1, 2} {
			t.Run(fmt.Sprintf("after_replay=%v/seed=%d", afterReplay, seed), func(t *testing.T) {
				l, sql := openTraced(t)
				ctx := context.Background()
				rows := map[string]before{}
				copies := map[string][]string{}
				var ids []string
				for b := absent; b <= deadLetteredRow; b++ {
					for k, pat := range patterns {
						id := fmt.Sprintf("%s-%d", b, k)
						ids, rows[id], copies[id] = append(ids, id), b, pat
					}
				}
				rows["warm"] = startedRow
				seedRows(t, l, rows)
				if afterReplay {
					want(t, claim(t, l, intent("warm", "p")), decide.VerdictDuplicate)
				} else {
					want(t, claim(t, l, intent("cold", "p")), decide.VerdictNew)
				}
				batch := interleave(ids, copies, seed)
				sql.reset()
				got, err := l.Claim(ctx, batch)
				if err != nil {
					t.Fatal(err)
				}
				if read := sql.sent("LEFT JOIN LATERAL"); read != afterReplay {
					t.Fatalf("read of started rows sent: %v, want %v", read, afterReplay)
				}
				if len(got) != len(batch) {
					t.Fatalf("%d verdicts for %d intents", len(got), len(batch))
				}
				for i, in := range batch {
					id := in.EventID
					w := expected(rows[id], copies[id][0], payloadOf(in, copies[id]))
					if got[i] != w {
						t.Errorf("intent %d (%s, row %s, copies %v): %+v, want %+v", i, id, rows[id], copies[id], got[i], w)
					}
				}
				checkRowsAfter(t, l, rows, copies)
			})
		}
	}
}

// payloadOf is which of payloads in carries.
func payloadOf(in decide.Intent, payloads []string) string {
	for _, p := range payloads {
		if intent("", p).PayloadHash == in.PayloadHash {
			return p
		}
	}
	return "?"
}

// checkRowsAfter: an absent ID's row holds its first copy's payload,
// pending; a dead_lettered row with a copy of its payload is pending
// again, one without stays dead_lettered; started rows stay started.
func checkRowsAfter(t *testing.T, l *ledger.Postgres, rows map[string]before, copies map[string][]string) {
	t.Helper()
	for id, b := range rows {
		if id == "warm" {
			continue
		}
		in := intent(id, "")
		r, err := l.Rows(context.Background(), []string{in.WorkflowID})
		if err != nil {
			t.Fatal(err)
		}
		if len(r) != 1 {
			t.Errorf("%s: %d rows", id, len(r))
			continue
		}
		wantHash, wantState := intent(id, "p").PayloadHash, ledger.StatePending
		switch {
		case b == absent:
			wantHash = intent(id, copies[id][0]).PayloadHash
		case b == startedRow || b == rerunRow:
			wantState = ledger.StateStarted
		case b == deadLetteredRow && !slices.Contains(copies[id], "p"):
			wantState = ledger.StateDeadLettered
		}
		if r[0].State != wantState || !bytes.Equal(r[0].PayloadHash, wantHash[:]) {
			t.Errorf("%s (row %s, copies %v): row %s, payload kept %v; want %s", id, b, copies[id], r[0].State,
				bytes.Equal(r[0].PayloadHash, wantHash[:]), wantState)
		}
	}
}

// collidingKeys makes the ledger's key of each ID of keys (by the
// suffix intent gives it) that one byte, every other ID its real key.
func collidingKeys(t *testing.T, keys map[string]byte) {
	restore := ledger.SetKeyFunc(func(wf string) [16]byte {
		if b, ok := keys[strings.TrimPrefix(wf, intent("", "").WorkflowID)]; ok {
			return [16]byte{0: b, 15: 1}
		}
		return schemas.LedgerKey(wf)
	})
	t.Cleanup(restore)
}

// IDs sharing a key (forced collisions) in a batch whose order is neither
// the key order nor the IDs' order, on both of Claim's paths: the row's
// owner always gets its own row's answer (duplicate, re-run generation,
// re-drive, a revive through its second copy), every other ID of the key
// a conflict, recorded, its copies included; of new IDs sharing an absent
// key, the smallest ID gets the row. No row changes owner.
func TestClaimUnderCollisionsGivesTheOwnerItsRowWhateverTheBatchOrder(t *testing.T) {
	for _, afterReplay := range []bool{false, true} {
		t.Run(fmt.Sprintf("after_replay=%v", afterReplay), func(t *testing.T) {
			collidingKeys(t, map[string]byte{
				"a1": 0x50, "o1": 0x50, "z1": 0x50, // o1 started
				"a2": 0x40, "o2": 0x40, // o2 pending
				"m3": 0x30, "z3": 0x30, "b3": 0x30, // absent
				"a4": 0x20, "o4": 0x20, // o4 dead_lettered
				"a5": 0x10, "o5": 0x10, // o5 re-run
				"a7": 0x70, "o7": 0x70, // o7 pending, not in the batch
			})
			l, sql := openTraced(t)
			ctx := context.Background()
			seedRows(t, l, map[string]before{"o1": startedRow, "o2": pendingRow, "o4": deadLetteredRow,
				"o5": rerunRow, "o7": pendingRow, "warm": startedRow})
			if afterReplay {
				want(t, claim(t, l, intent("warm", "p")), decide.VerdictDuplicate)
			} else {
				want(t, claim(t, l, intent("cold", "p")), decide.VerdictNew)
			}
			at := func(id, payload string, off int64) decide.Intent {
				in := intent(id, payload)
				in.Offset = off
				return in
			}
			batch := []decide.Intent{
				at("a7", "p", 1), at("z1", "p", 2), at("o1", "p", 3), at("m3", "p", 4), at("a2", "p", 5),
				at("a1", "p", 6), at("z3", "p", 7), at("o4", "x", 8), at("a5", "p", 9), at("o2", "p", 10),
				at("b3", "p", 11), at("a4", "p", 12), at("o5", "p", 13), at("o4", "p", 14), at("z1", "p", 15),
				at("b3", "p", 16), at("o1", "p", 17),
			}
			conflict := decide.Claimed{Verdict: decide.VerdictConflict}
			wantV := []decide.Claimed{
				conflict, conflict, {Verdict: decide.VerdictDuplicate, Generation: 1}, conflict, conflict,
				conflict, conflict, conflict, conflict, {Verdict: decide.VerdictRedrive, Generation: 1},
				{Verdict: decide.VerdictNew, Generation: 1}, conflict, {Verdict: decide.VerdictDuplicate, Generation: 2},
				{Verdict: decide.VerdictRedrive, Generation: 1}, conflict,
				{Verdict: decide.VerdictNew, Generation: 1}, {Verdict: decide.VerdictDuplicate, Generation: 1},
			}
			sql.reset()
			got, err := l.Claim(ctx, batch)
			if err != nil {
				t.Fatal(err)
			}
			if read := sql.sent("LEFT JOIN LATERAL"); read != afterReplay {
				t.Fatalf("read of started rows sent: %v, want %v", read, afterReplay)
			}
			for i := range batch {
				if i >= len(got) || got[i] != wantV[i] {
					t.Errorf("intent %d (%s): %v, want %+v", i, batch[i].EventID, got, wantV[i])
				}
			}
			checkOwners(t, l, map[string]ledger.State{"o1": ledger.StateStarted, "o2": ledger.StatePending,
				"b3": ledger.StatePending, "o4": ledger.StatePending, "o5": ledger.StateStarted, "o7": ledger.StatePending})
			checkConflicts(t, l, map[string]int{"a1": 1, "z1": 2, "a2": 1, "m3": 1, "z3": 1, "a4": 1, "o4": 1, "a5": 1, "a7": 1})
		})
	}
}

// checkOwners: the ledger holds exactly these IDs' rows, in these states.
func checkOwners(t *testing.T, l *ledger.Postgres, owners map[string]ledger.State) {
	t.Helper()
	rows, err := l.Pool().Query(context.Background(), `SELECT workflow_id, state FROM dedup_ledger`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]ledger.State{}
	for rows.Next() {
		var id string
		var s ledger.State
		if err := rows.Scan(&id, &s); err != nil {
			t.Fatal(err)
		}
		got[strings.TrimPrefix(id, intent("", "").WorkflowID)] = s
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	delete(got, "warm")
	delete(got, "cold")
	if !maps.Equal(got, owners) {
		t.Errorf("ledger rows %v, want %v", got, owners)
	}
}

// checkConflicts: the conflicts recorded, copies by ID, are these.
func checkConflicts(t *testing.T, l *ledger.Postgres, copies map[string]int) {
	t.Helper()
	rows, err := l.Pool().Query(context.Background(), `SELECT workflow_id, sum(copies)::int FROM dedup_conflicts GROUP BY workflow_id`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		got[strings.TrimPrefix(id, intent("", "").WorkflowID)] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, copies) {
		t.Errorf("conflicts recorded (copies by ID) %v, want %v", got, copies)
	}
}

// The edges of the ordering: an empty batch sends nothing and answers
// nothing; a batch of one is answered on both paths; a mixed batch whose
// partition moved (its fence stale), answered partly by the replay's read,
// is refused whole and writes nothing: no row inserted or re-claimed, no
// conflict recorded.
func TestClaimOfAnEmptyOneOrFencedBatch(t *testing.T) {
	l, sql := openTraced(t)
	ctx := context.Background()
	sql.reset()
	if v, err := l.Claim(ctx, nil); err != nil || v != nil {
		t.Fatalf("empty batch: %v, %v", v, err)
	}
	if sql.sent("") {
		t.Fatal("an empty batch sent a statement")
	}
	p := processor.PartitionRef{Topic: "events", Partition: 1}
	own := func(member string) decide.Fence {
		e, err := l.Own(ctx, processor.Ownership{Group: "g", Member: member, Parts: []processor.PartitionRef{p}})
		if err != nil {
			t.Fatal(err)
		}
		return decide.Fence{Group: "g", Epoch: e[0]}
	}
	old := own("zombie")
	fenced := func(id, payload string) decide.Intent {
		in := intent(id, payload)
		in.Fence = old
		return in
	}
	seedRows(t, l, map[string]before{"s1": startedRow, "s2": rerunRow, "d": deadLetteredRow, "q": pendingRow})
	want(t, claim(t, l, fenced("one", "p")), decide.VerdictNew)
	want(t, claim(t, l, fenced("one", "p")), decide.VerdictRedrive)
	want(t, claim(t, l, fenced("s1", "p"), fenced("s2", "p")), decide.VerdictDuplicate, decide.VerdictDuplicate)
	sql.reset()
	if v, err := l.Claim(ctx, []decide.Intent{fenced("s2", "p")}); err != nil || v[0] != (decide.Claimed{Verdict: decide.VerdictDuplicate, Generation: 2}) {
		t.Fatalf("a batch of one re-run row after a replay: %v, %v", v, err)
	}
	if !sql.sent("LEFT JOIN LATERAL") {
		t.Fatal("the replay's read was not sent")
	}
	own("owner")
	batch := []decide.Intent{fenced("s2", "p"), fenced("new", "p"), fenced("s1", "x"), fenced("d", "x"),
		fenced("d", "p"), fenced("q", "p"), fenced("s1", "p")}
	v, err := l.Claim(ctx, batch)
	if _, ok := processor.IsFenced(err); !ok {
		t.Fatalf("a zombie's mixed batch: %v, %v; want the fence's refusal", v, err)
	}
	var rows, conflicts, attempts int
	var state string
	if err := l.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM dedup_ledger), (SELECT count(*) FROM dedup_conflicts),
	(SELECT attempts FROM dedup_ledger WHERE workflow_id = $1), (SELECT state FROM dedup_ledger WHERE workflow_id = $2)`,
		intent("q", "").WorkflowID, intent("d", "").WorkflowID).Scan(&rows, &conflicts, &attempts, &state); err != nil {
		t.Fatal(err)
	}
	if rows != 5 || conflicts != 0 || attempts != 1 || state != string(ledger.StateDeadLettered) {
		t.Fatalf("after the refused batch: %d rows (want 5), %d conflicts (want 0), pending row's attempts %d (want 1), "+
			"dead-lettered row %s", rows, conflicts, attempts, state)
	}
}

// The claim sends its IDs in PostgreSQL's uuid order (bytewise), and IDs
// that share a key in the batch's order: keys that differ only in the low
// half, in the top bit of either half (an unsigned comparison, not a
// signed one), by one in the last byte, and equal keys, shuffled.
func TestClaimSendsItsKeysInPostgresUUIDOrder(t *testing.T) {
	k := func(hi, lo uint64) (b [16]byte) {
		for i := 0; i < 8; i++ {
			b[i], b[8+i] = byte(hi>>(56-8*i)), byte(lo>>(56-8*i))
		}
		return b
	}
	keys := map[string][16]byte{
		"lo-0": k(1, 0), "lo-1": k(1, 1), "lo-top": k(1, 1<<63), "lo-max": k(1, ^uint64(0)),
		"hi-top": k(1<<63, 0), "hi-7f": k(1<<63-1, ^uint64(0)), "hi-max": k(^uint64(0), 0), "zero": k(0, 0),
		"same-c": k(5, 5), "same-a": k(5, 5), "same-b": k(5, 5), "hi-top-lo-top": k(1<<63, 1<<63),
	}
	restore := ledger.SetKeyFunc(func(id string) [16]byte { return keys[strings.TrimPrefix(id, "activity-a:")] })
	defer restore()
	l, log := openTraced(t)
	ids := slices.Sorted(maps.Keys(keys))
	rand.New(rand.NewSource(7)).Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	batch := make([]decide.Intent, len(ids))
	for i, id := range ids {
		batch[i] = intent(id, "p")
	}
	if _, err := l.Claim(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	var sentIDs []string
	var sentKeys [][16]byte
	for i, q := range log.sql {
		if strings.Contains(q, "INSERT INTO dedup_ledger AS l") {
			sentIDs, sentKeys = log.args[i][0].([]string), log.args[i][8].([][16]byte)
			break
		}
	}
	if len(sentKeys) != len(ids) {
		t.Fatalf("the claim sent %d keys for %d IDs", len(sentKeys), len(ids))
	}
	var pgOrder []int64
	if err := l.Pool().QueryRow(context.Background(), `SELECT array_agg(n ORDER BY k, n) FROM unnest($1::uuid[]) WITH ORDINALITY AS t(k, n)`,
		sentKeys).Scan(&pgOrder); err != nil {
		t.Fatal(err)
	}
	for i, n := range pgOrder {
		if n != int64(i+1) {
			t.Fatalf("the claim sent its IDs in the order %v; PostgreSQL orders their keys %v", sentIDs, pgOrder)
		}
	}
	var same []string
	for _, id := range sentIDs {
		if strings.HasPrefix(id, "activity-a:same-") {
			same = append(same, id)
		}
	}
	var inBatch []string
	for _, in := range batch {
		if strings.HasPrefix(in.WorkflowID, "activity-a:same-") {
			inBatch = append(inBatch, in.WorkflowID)
		}
	}
	if !slices.Equal(same, inBatch) {
		t.Errorf("IDs sharing one key sent in the order %v, the batch's is %v", same, inBatch)
	}
}
