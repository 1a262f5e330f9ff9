package ledger

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"slices"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
)

// claimSQL claims the batch in one statement, one row per workflow ID.
// Rows already started in the statement's snapshot (every row of a replay)
// are answered from it and never written: no row lock, no WAL, no dead
// tuple. Every other ID is inserted, or, when its row exists, locked and
// read at its latest committed version (ON CONFLICT DO UPDATE waits for
// and sees a row another router committed after our snapshot, so a row
// started meanwhile is answered started, not re-driven). A pending or
// dead_lettered row with the same payload is re-claimed (attempts+1,
// pending). Rows are inserted in key order (ORDER BY, in SQL) so that two
// routers claiming overlapping batches lock in the same order and do not
// deadlock.
//
// The unique key is the column key, schemas.LedgerKey of the workflow ID
// (migration 00012), passed in by the caller: an ID whose key another
// ID's row holds (a collision) is neither inserted nor updated (the DO
// UPDATE's WHERE, and DISTINCT ON within the batch), so it comes back
// without a row (claim).
//
// The fence ($10 to $13: the batch's distinct fenced partitions, fence.go)
// is share-locked first; unless every one still holds, nothing is
// inserted or updated and the answer's last column (held) is false.
//
// A row is inserted with its record's Known ($14, $15: decide.Known,
// processor/known.go; NULL for none, and for a count the column cannot
// hold, which no router writes), which a replay reads to end the record
// without deciding it (knownSQL). Only the insert writes it, with the
// coordinates it belongs to: a re-claim keeps both.
//
// Each answer names its input by position (n, from 1), and carries the
// row's payload hash only when it differs from the input's (a conflict):
// the caller has the ID and the hash already, and reading them again
// would copy both for every row.
var claimSQL = `
WITH input AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::text[], $7::int4[], $8::int8[], $9::uuid[],
			$14::uuid[], $15::int4[])
		WITH ORDINALITY AS t(workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset, key,
			record_digest, record_intents, n)
), ` + fenceCTE(10) + `, held AS MATERIALIZED (
	SELECT count(*) = cardinality($13::int8[]) AS ok FROM fence
), cur AS MATERIALIZED (
	SELECT l.workflow_id, l.state, l.payload_hash, l.generation FROM dedup_ledger l
	WHERE ` + schemas.LedgerRowsOf("l", "$1", "$9") + ` AND l.state = 'started'
), up AS (
	INSERT INTO dedup_ledger AS l (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset, key,
		record_digest, record_intents)
	SELECT DISTINCT ON (i.key) i.workflow_id, i.activity_id, i.event_id, i.id_rule, i.payload_hash, i.topic, i.kafka_partition, i.kafka_offset, i.key,
		CASE WHEN i.record_intents BETWEEN 1 AND 32767 THEN i.record_digest END,
		CASE WHEN i.record_intents BETWEEN 1 AND 32767 THEN i.record_intents::int2 END
	FROM input i
	WHERE (SELECT ok FROM held) AND NOT EXISTS (SELECT FROM cur WHERE cur.workflow_id = i.workflow_id)
	ORDER BY i.key, i.workflow_id
	ON CONFLICT (key) DO UPDATE SET
		attempts = l.attempts + (l.state <> 'started' AND l.payload_hash = EXCLUDED.payload_hash)::int,
		state = CASE WHEN l.state = 'dead_lettered' AND l.payload_hash = EXCLUDED.payload_hash THEN 'pending' ELSE l.state END,
		updated_at = CASE WHEN l.state <> 'started' AND l.payload_hash = EXCLUDED.payload_hash THEN now() ELSE l.updated_at END
	WHERE l.workflow_id = EXCLUDED.workflow_id
	RETURNING l.workflow_id, (l.xmax = 0) AS inserted, l.state, l.payload_hash, l.generation
)
SELECT i.n, coalesce(up.inserted, false), coalesce(up.state, cur.state), nullif(coalesce(up.payload_hash, cur.payload_hash), i.payload_hash),
	coalesce(up.generation, cur.generation, 0), (SELECT ok FROM held)
FROM input i
LEFT JOIN up ON up.workflow_id = i.workflow_id
LEFT JOIN cur ON cur.workflow_id = i.workflow_id`

// stored is what the ledger holds for one workflow ID after the claim.
type stored struct {
	found      bool   // answered (by the memory of started rows or a statement)
	inserted   bool   // this claim created the row
	state      State  // pending, started; dead_lettered only when the ID's first copy conflicted (else re-claimed: pending)
	hash       []byte // the payload hash the row was claimed with
	generation int    // of the claim (pending) or of the recorded run (started)
}

// Claim claims the intents and returns one verdict per intent, in order.
//
// The ledger answers per workflow ID, and every copy of an ID gets its
// row's answer: a copy whose payload differs from the row's is a conflict
// (recorded); every other copy gets the row's verdict (new when this claim
// inserted it, re-drive while it is pending, duplicate once started),
// whatever its position in the batch. An absent row is claimed with the
// payload of the first copy of its ID in the batch. Which of several copies
// starts the workflow is the router's decision (one start in flight per
// workflow ID), not the ledger's.
//
// While most of the previous batch was already started (a replay), a
// read-only statement first answers the rows started with the same payload
// (one lean round trip, nothing written) and only the rest go through
// claimSQL; otherwise claimSQL takes the whole batch. This is an
// optimisation only: both paths give the same verdicts. Another round trip
// happens only when a conflict must be recorded.
func (p *Postgres) Claim(ctx context.Context, intents []decide.Intent) ([]decide.Claimed, error) {
	v, err := p.claimBatch(ctx, intents)
	return v, p.classify(err)
}

func (p *Postgres) claimBatch(ctx context.Context, intents []decide.Intent) ([]decide.Claimed, error) {
	if len(intents) == 0 {
		return nil, nil
	}
	// first is, by intent, the position of the batch's first intent of
	// its workflow ID: the one that is claimed, whose answer every copy
	// gets (got, by that position).
	sc := getClaimScratch(len(intents), p.started != nil)
	defer sc.release()
	first, seen := sc.first, sc.seen
	keys := sc.keys // by intent; set for uniq's
	sums := sc.sums // the IDs' SHA-256, as keys, when p remembers started rows
	ps := sc.ps
	for i, in := range intents {
		f, ok := seen[in.WorkflowID]
		if ok {
			first[i] = f
		} else {
			seen[in.WorkflowID], first[i] = int32(i), int32(i)
			if sums != nil {
				keys[i], sums[i] = keySumOf(in.WorkflowID)
			} else {
				keys[i] = keyOf(in.WorkflowID)
			}
			ps = append(ps, probe{binary.BigEndian.Uint64(keys[i][:8]), binary.BigEndian.Uint64(keys[i][8:]), i})
		}
	}
	// The statements look the IDs up in the order given: in key order,
	// each probe of the key index descends next to the last one, and the
	// rows of one claimed batch (inserted in key order) are read in the
	// order they lie in the heap.
	slices.SortFunc(ps, probe.compare)
	uniq := sc.uniqOf(len(ps))
	for j, pr := range ps {
		uniq[j] = pr.at
	}
	got := sc.got // by first intent of an ID
	all := len(uniq)
	firsts := uniq
	fences := fencesOf(len(intents), func(i int) processor.PartitionEpoch {
		in := &intents[i]
		return processor.PartitionEpoch{Group: in.Fence.Group, Topic: in.Topic, Partition: in.Partition, Epoch: in.Fence.Epoch}
	})
	// Like a statement, the memory answers no cancelled claim.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	since := p.started.since()
	uniq = p.started.answer(intents, sums, uniq, got)
	remembered := all - len(uniq)
	if p.replaying.Load() && len(uniq) > 0 {
		var err error
		if uniq, err = p.answerStarted(ctx, sc, intents, keys, sums, since, uniq, got); err != nil {
			return nil, err
		}
	}
	if len(uniq) > 0 {
		if err := p.claim(ctx, intents, keys, sums, since, uniq, got, fences); err != nil {
			return nil, err
		}
	}
	started := 0
	for _, i := range firsts {
		if got[i].state == StateStarted {
			started++
		}
	}
	p.replaying.Store(2*started >= all)
	claimed, err := p.verdicts(ctx, intents, first, got, fences)
	if err == nil {
		p.rememberedHits.Add(uint64(remembered))
	}
	return claimed, err
}

// probe is a batch's first intent of one workflow ID: its ledger key, as
// two big-endian halves (PostgreSQL orders a uuid by its bytes), and its
// position in the batch.
type probe struct {
	hi, lo uint64
	at     int
}

// compare orders probes by key, then by position (IDs that share a key
// keep the batch's order).
func (a probe) compare(b probe) int {
	switch {
	case a.hi != b.hi:
		return cmp.Compare(a.hi, b.hi)
	case a.lo != b.lo:
		return cmp.Compare(a.lo, b.lo)
	}
	return cmp.Compare(a.at, b.at)
}

// claim runs claimSQL for the intents uniq and records the outcome in
// got. An ID that comes back without a row shares its digest with another
// ID: the other's row holds the key, or the other took its place in the
// batch's insert (DISTINCT ON keeps one ID per key, and it may not be the
// row's owner). Each such ID is claimed again alone, so that the owner of
// a row always gets its own row's answer; one still without a row after
// that is a conflict.
func (p *Postgres) claim(ctx context.Context, intents []decide.Intent, keys [][16]byte, sums [][32]byte, since startedSince, uniq []int, got []stored, f fenceArgs) error {
	if err := p.claimOnce(ctx, intents, keys, sums, since, uniq, got, f); err != nil {
		return err
	}
	for _, i := range uniq {
		if got[i].found {
			continue
		}
		if err := p.claimOnce(ctx, intents, keys, sums, since, []int{i}, got, f); err != nil {
			return err
		}
		if id := intents[i].WorkflowID; !got[i].found {
			// Another workflow ID's row holds this one's key:
			// a conflict with no hash of its own in the ledger, recorded
			// and dead-lettered, never started under the other's row.
			slog.Error("ledger: two workflow IDs share one ledger key; the second is a conflict", "workflow_id", id)
			got[i] = stored{found: true, state: StateStarted, hash: []byte{}}
		}
	}
	return nil
}

// claimOnce runs claimSQL once for the intents uniq; an ID without a row
// in its answer is left out of got.
// A fence that no longer holds fails it with a *processor.FencedError,
// nothing written.
//
// Its parameters are encoded by the ledger (arrays.go, encodeClaimParams)
// into a buffer kept for the next claim, as the replay's read's are: pgx's
// own encoding of the same arrays allocated about 1 KB a workflow
// (BenchmarkClaimByExecMode), most of a new event's claim.
func (p *Postgres) claimOnce(ctx context.Context, intents []decide.Intent, keys [][16]byte, sums [][32]byte, since startedSince, uniq []int, got []stored, f fenceArgs) error {
	n := len(uniq)
	size := 11*20 + f.encodedSize()
	for _, i := range uniq {
		in := &intents[i]
		size += 11*4 + 16 + 4 + len(in.WorkflowID) + len(in.ActivityID) + len(in.EventID) + len(in.IDRule) + len(in.PayloadHash) + len(in.Topic) + 4 + 8 + 16
	}
	bp := p.encodeBuffer(size)
	defer p.keepEncodeBuffer(bp)
	var params [15][]byte
	*bp = encodeClaimParams(*bp, intents, keys, uniq, (*[9][]byte)(params[:9]))
	*bp = f.encode(*bp, (*[4][]byte)(params[9:13]))
	*bp = encodeKnownParams(*bp, intents, uniq, (*[2][]byte)(params[13:]))
	held := true
	var seen []int // intents answered started with their payload, generation 1
	args := func() []any { return claimArgs(intents, keys, uniq, f) }
	err := p.queryEncoded(ctx, jitOffSQL, "dedup_claim", claimSQL, claimParamOIDs, params[:], args, func(cols [][]byte) error {
		if len(cols) != 6 {
			return fmt.Errorf("an answer of %d columns", len(cols))
		}
		if held = boolCol(cols[5]); !held {
			return errStopReading // every row says so; nothing was written
		}
		at, err := int8Col(cols[0])
		if err != nil {
			return err
		}
		j := int(at - 1)
		if j < 0 || j >= n {
			return fmt.Errorf("an answer for input %d", at)
		}
		var state stateColumn
		_ = state.ScanBytes(cols[2])
		if !state.valid {
			// Another workflow ID's row holds this one's digest: no row
			// of its own (claim).
			return nil
		}
		gen, err := intCol(cols[4])
		if err != nil {
			return err
		}
		s := stored{found: true, inserted: boolCol(cols[1]), state: state.s, generation: gen}
		in := &intents[uniq[j]]
		if h := cols[3]; h != nil { // another payload's row: a conflict
			s.hash = bytes.Clone(h)
		} else { // the row's payload is the input's
			s.hash = in.PayloadHash[:]
			if s.state == StateStarted && s.generation == 1 && !s.inserted {
				seen = append(seen, uniq[j])
			}
		}
		got[uniq[j]] = s
		return nil
	})
	if !held {
		// The fence's answer, whatever the rest of the answer met (pgx's
		// Rows, closed early, ignored it too).
		return p.fenced(ctx, f)
	}
	if err != nil {
		return fmt.Errorf("claiming %d intents: %w", n, err)
	}
	p.started.remember(intents, sums, seen, since)
	return nil
}

// claimParamOIDs are claimSQL's parameter types: the batch's nine columns
// and its fences.
var claimParamOIDs = append(append([]uint32{oidTextArray, oidTextArray, oidTextArray, oidTextArray, oidByteaArray, oidTextArray,
	oidInt4Array, oidInt8Array, oidUUIDArray}, fenceParamOIDs...), oidUUIDArray, oidInt4Array)

// encodeKnownParams appends claimSQL's last two parameters for the
// intents uniq to b: each one's record's digest and number of intents
// (decide.Known; zero for none).
func encodeKnownParams(b []byte, intents []decide.Intent, uniq []int, params *[2][]byte) []byte {
	n := len(uniq)
	in := func(j int) *decide.Intent { return &intents[uniq[j]] }
	b = appendArray(b, &params[0], n, oidUUID, func(b []byte, j int) []byte { return appendBytesElem(b, in(j).Known.Digest[:]) })
	return appendArray(b, &params[1], n, oidInt4, func(b []byte, j int) []byte { return appendInt4Elem(b, in(j).Known.Intents) })
}

// encodeClaimParams appends claimSQL's first nine parameters for the
// intents uniq to b (binary arrays: arrays.go) and points params at them.
func encodeClaimParams(b []byte, intents []decide.Intent, keys [][16]byte, uniq []int, params *[9][]byte) []byte {
	n := len(uniq)
	in := func(j int) *decide.Intent { return &intents[uniq[j]] }
	b = appendArray(b, &params[0], n, oidText, func(b []byte, j int) []byte { return appendTextElem(b, in(j).WorkflowID) })
	b = appendArray(b, &params[1], n, oidText, func(b []byte, j int) []byte { return appendTextElem(b, in(j).ActivityID) })
	b = appendArray(b, &params[2], n, oidText, func(b []byte, j int) []byte { return appendTextElem(b, in(j).EventID) })
	b = appendArray(b, &params[3], n, oidText, func(b []byte, j int) []byte { return appendTextElem(b, in(j).IDRule) })
	b = appendArray(b, &params[4], n, oidBytea, func(b []byte, j int) []byte { return appendBytesElem(b, in(j).PayloadHash[:]) })
	b = appendArray(b, &params[5], n, oidText, func(b []byte, j int) []byte { return appendTextElem(b, in(j).Topic) })
	b = appendArray(b, &params[6], n, oidInt4, func(b []byte, j int) []byte { return appendInt4Elem(b, in(j).Partition) })
	b = appendArray(b, &params[7], n, oidInt8, func(b []byte, j int) []byte { return appendInt8Elem(b, in(j).Offset) })
	return appendArray(b, &params[8], n, oidUUID, func(b []byte, j int) []byte { return appendBytesElem(b, keys[uniq[j]][:]) })
}

// claimArgs are claimSQL's parameters as pgx's own Query would have been
// given them: what a pool's query tracer sees.
func claimArgs(intents []decide.Intent, keys [][16]byte, uniq []int, f fenceArgs) []any {
	n := len(uniq)
	wf, act, ev, rule, topic := make(textArray, n), make(textArray, n), make(textArray, n), make(textArray, n), make(textArray, n)
	hash, part, off, key := make(byteaArray, n), make(int4Array, n), make(int8Array, n), make(uuidArray, n)
	digest, count := make(uuidArray, n), make(int4Array, n)
	for j, i := range uniq {
		in := &intents[i]
		wf[j], act[j], ev[j], rule[j], topic[j] = in.WorkflowID, in.ActivityID, in.EventID, in.IDRule, in.Topic
		hash[j], part[j], off[j], key[j] = in.PayloadHash[:], in.Partition, in.Offset, keys[i]
		digest[j], count[j] = in.Known.Digest, in.Known.Intents
	}
	return append(append([]any{wf, act, ev, rule, hash, topic, part, off, key}, f.args()...), digest, count)
}

// verdicts turns what the ledger holds for each workflow ID (the claim
// statement's row answer, or the read of started rows) into one verdict
// per intent, by decide.ClaimVerdict, and records the conflicts and the
// re-claims the statement did not write.
func (p *Postgres) verdicts(ctx context.Context, intents []decide.Intent, first []int32, got []stored, f fenceArgs) ([]decide.Claimed, error) {
	verdicts := make([]decide.Claimed, len(intents))
	var conflicts []conflict
	var revive []string
	for i := range intents {
		in := &intents[i]
		s := got[first[i]]
		v, reclaims := decide.ClaimVerdict(s.state, string(s.hash) == string(in.PayloadHash[:]), s.inserted, s.generation)
		verdicts[i] = v
		switch {
		case v.Verdict == decide.VerdictConflict:
			conflicts = append(conflicts, conflict{in: in, ledgerHash: s.hash})
		case reclaims:
			// A dead_lettered row the upsert left alone: re-claimed by a
			// copy that was not the batch's first of its ID (the first
			// conflicted): rare, one more statement.
			revive = append(revive, in.WorkflowID)
			got[first[i]] = stored{found: true, state: StatePending, hash: s.hash, generation: s.generation}
		}
	}
	if len(revive) > 0 {
		// Under the batch's fence, like the claim: a zombie's revive
		// would leave the row pending with no owner.
		var held bool
		if err := p.pool.QueryRow(ctx, `WITH `+fenceCTE(3)+`, held AS MATERIALIZED (
	SELECT count(*) = cardinality($6::int8[]) AS ok FROM fence
), lk AS MATERIALIZED (
	SELECT l.key FROM dedup_ledger l
	WHERE `+schemas.LedgerRowsOf("l", "$1", "$2")+` AND l.state = 'dead_lettered' AND (SELECT ok FROM held)
	`+lockInKeyOrder+`
), up AS (
	UPDATE dedup_ledger SET state = 'pending', attempts = attempts + 1, updated_at = now()
	WHERE key IN (SELECT key FROM lk) AND `+schemas.LedgerRowsOf("", "$1", "$2")+` AND state = 'dead_lettered'
)
SELECT ok FROM held`, revive, keysOf(revive), f.groups, f.topics, f.parts, f.epochs).Scan(&held); err != nil {
			return nil, fmt.Errorf("re-claiming %d dead-lettered rows: %w", len(revive), err)
		}
		if !held {
			return nil, p.fenced(ctx, f)
		}
	}
	if len(conflicts) > 0 {
		if err := p.recordConflicts(ctx, conflicts, f); err != nil {
			return nil, err
		}
	}
	return verdicts, nil
}

type conflict struct {
	in         *decide.Intent
	ledgerHash []byte
}

// recordConflictsSQL records conflicts one row per workflow ID and
// payload hash (migration 00014): a new payload inserts its row, a payload
// recorded already adds its copies to the row's count and moves the row's
// last_seen_at and coordinates to the newest record. A redelivery of the
// record the row counted last is not counted again. The input holds one
// entry per (workflow ID, payload hash): ON CONFLICT cannot touch one row
// twice in a statement. The rows are written in that key's order (ORDER
// BY), whatever the batch's: two routers recording the same conflicts in
// orders of their own would each lock a row the other waits for.
//
// Under the batch's fence ($9 to $12), like the claim: a router that lost
// the partition records nothing (a batch answered by the read-only
// statement of started rows meets the fence here first).
var recordConflictsSQL = `
WITH ` + fenceCTE(9) + `, held AS MATERIALIZED (
	SELECT count(*) = cardinality($12::int8[]) AS ok FROM fence
), ins AS (
INSERT INTO dedup_conflicts AS c (workflow_id, event_id, payload_hash, ledger_payload_hash, topic, kafka_partition, kafka_offset, copies, last_seen_at)
SELECT t.*, now() FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bytea[], $5::text[], $6::int4[], $7::int8[], $8::int8[])
	AS t(workflow_id, event_id, payload_hash, ledger_payload_hash, topic, kafka_partition, kafka_offset, copies)
WHERE (SELECT ok FROM held)
ORDER BY t.workflow_id, t.payload_hash
ON CONFLICT (workflow_id, payload_hash) WHERE last_seen_at IS NOT NULL DO UPDATE SET
	copies = c.copies + EXCLUDED.copies,
	last_seen_at = now(),
	event_id = EXCLUDED.event_id,
	ledger_payload_hash = EXCLUDED.ledger_payload_hash,
	topic = EXCLUDED.topic, kafka_partition = EXCLUDED.kafka_partition, kafka_offset = EXCLUDED.kafka_offset
WHERE (c.topic, c.kafka_partition, c.kafka_offset) IS DISTINCT FROM (EXCLUDED.topic, EXCLUDED.kafka_partition, EXCLUDED.kafka_offset)
)
SELECT ok FROM held`

func (p *Postgres) recordConflicts(ctx context.Context, cs []conflict, f fenceArgs) error {
	type key struct{ wf, hash string }
	at := make(map[key]int, len(cs))
	var (
		wf, ev, topic []string
		h, lh         [][]byte
		part          []int32
		off, copies   []int64
	)
	for _, c := range cs {
		k := key{c.in.WorkflowID, string(c.in.PayloadHash[:])}
		i, ok := at[k]
		if !ok {
			i = len(wf)
			at[k] = i
			wf, ev, topic = append(wf, c.in.WorkflowID), append(ev, c.in.EventID), append(topic, c.in.Topic)
			h, lh = append(h, c.in.PayloadHash[:]), append(lh, c.ledgerHash)
			part, off, copies = append(part, c.in.Partition), append(off, c.in.Offset), append(copies, 0)
		}
		// The batch's copies of one payload: counted together, the row
		// at the newest record's coordinates.
		copies[i]++
		topic[i], part[i], off[i] = c.in.Topic, c.in.Partition, c.in.Offset
	}
	var held bool
	if err := p.pool.QueryRow(ctx, recordConflictsSQL, wf, ev, h, lh, topic, part, off, copies,
		f.groups, f.topics, f.parts, f.epochs).Scan(&held); err != nil {
		return fmt.Errorf("recording %d conflicts: %w", len(cs), err)
	}
	if !held {
		return p.fenced(ctx, f)
	}
	return nil
}
