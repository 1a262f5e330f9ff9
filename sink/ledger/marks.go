package ledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/schemas"
)

// MarkStarted moves rows from pending to started, and a started row to a
// re-run's newer generation, in one statement. A mark of an older
// generation than the row's (a slow router's) changes nothing, and so does
// a mark whose fence no longer holds: the others are written, and the
// error is a *processor.FencedError naming the stale fences.
func (p *Postgres) MarkStarted(ctx context.Context, started []processor.Started) (err error) {
	if len(started) == 0 {
		return nil
	}
	for _, s := range started {
		// The statement takes a generation as int4: one past it would be
		// another generation there than here.
		if s.Generation < math.MinInt32 || s.Generation > math.MaxInt32 {
			return fmt.Errorf("marking %s started: generation %d, want %d to %d (an int4)", s.WorkflowID, s.Generation, math.MinInt32, math.MaxInt32)
		}
	}
	// In key order, as the rows are locked (lk, below).
	ms := make([]mark, len(started))
	for i, s := range started {
		ms[i] = mark{s, keyOf(s.WorkflowID), i}
	}
	slices.SortFunc(ms, func(a, b mark) int { return bytes.Compare(a.key[:], b.key[:]) })
	f := fencesOf(len(ms), func(i int) processor.PartitionEpoch {
		s := &ms[i].s
		return processor.PartitionEpoch{Group: s.Fence.Group, Topic: s.Topic, Partition: s.Partition, Epoch: s.Fence.Epoch}
	})
	for i := range started {
		started[i].Recorded = false
	}
	// A re-run moves its row past generation 1: its copies are read
	// again (startedCache remembers generation 1 only), and a claim
	// that overlaps this mark in any part remembers nothing.
	ended := p.started.forgetReruns(started)
	defer func() { ended(err != nil) }()
	// The entries' columns and their fences, encoded by the ledger
	// (arrays.go) into a buffer kept for the next statement: pgx's own
	// encoding of the same arrays allocated about 0.8 KB an entry
	// (BenchmarkMarkStarted).
	size := 8*20 + f.encodedSize()
	for i := range ms {
		s := &ms[i].s
		size += 8*4 + len(s.WorkflowID) + len(s.RunID) + 4 + 16 + len(s.Fence.Group) + len(s.Topic) + 4 + 8
	}
	bp := p.encodeBuffer(size)
	defer p.keepEncodeBuffer(bp)
	var params [12][]byte
	*bp = encodeMarkParams(*bp, ms, (*[8][]byte)(params[:8]))
	*bp = f.encode(*bp, (*[4][]byte)(params[8:]))
	var (
		held     bool
		recorded []int64 // the ordinals (in ms, from 1) of the entries Recorded
	)
	// u holds the entries whose fence holds, with their ordinals. lk
	// locks their rows in key order (lockInKeyOrder) and reads each at its
	// latest committed version: a row another router moved after the
	// statement's snapshot is read as that router left it. up moves the
	// rows still to move (of several entries of one row, one is applied)
	// and answers the generations they now hold. An entry is Recorded when
	// its row was already started at its generation or a newer one when
	// lk read it (an earlier try whose answer was lost, another router's
	// mark), or up left it so.
	answers := 0
	args := func() []any { return markArgs(ms, f) }
	err = p.queryEncoded(ctx, jitOffSQL, "dedup_mark_started", markStartedSQL, markParamOIDs, params[:], args, func(cols [][]byte) error {
		if answers++; answers > 1 || len(cols) != 2 {
			return fmt.Errorf("an answer of %d rows of %d columns, want one of two", answers, len(cols))
		}
		held = boolCol(cols[0])
		var err error
		recorded, err = int8ArrayCol(cols[1], len(ms))
		return err
	})
	if err == nil && answers == 0 {
		err = errors.New("no answer")
	}
	if err != nil {
		return p.classify(fmt.Errorf("marking %d workflows started: %w", len(started), err))
	}
	setRecorded := func() {
		for _, n := range recorded { // each from 1 to len(ms) (int8ArrayCol)
			started[ms[n-1].at].Recorded = true
		}
	}
	if !held {
		err := p.fenced(ctx, f)
		if _, ok := processor.IsFenced(err); ok {
			setRecorded()
		}
		return p.classify(err)
	}
	setRecorded()
	return nil
}

// mark is an entry of MarkStarted, with its row's key and its index in
// the entries given.
type mark struct {
	s   processor.Started
	key [16]byte
	at  int
}

// markParamOIDs are markStartedSQL's parameter types: the entries' eight
// columns and their fences.
var markParamOIDs = append([]uint32{oidTextArray, oidTextArray, oidInt4Array, oidUUIDArray, oidTextArray, oidTextArray,
	oidInt4Array, oidInt8Array}, fenceParamOIDs...)

// encodeMarkParams appends markStartedSQL's first eight parameters for
// the entries ms to b (binary arrays: arrays.go) and points params at
// them.
func encodeMarkParams(b []byte, ms []mark, params *[8][]byte) []byte {
	n := len(ms)
	m := func(i int) *processor.Started { return &ms[i].s }
	b = appendArray(b, &params[0], n, oidText, func(b []byte, i int) []byte { return appendTextElem(b, m(i).WorkflowID) })
	b = appendArray(b, &params[1], n, oidText, func(b []byte, i int) []byte { return appendTextElem(b, m(i).RunID) })
	b = appendArray(b, &params[2], n, oidInt4, func(b []byte, i int) []byte { return appendInt4Elem(b, int32(m(i).Generation)) })
	b = appendArray(b, &params[3], n, oidUUID, func(b []byte, i int) []byte { return appendBytesElem(b, ms[i].key[:]) })
	b = appendArray(b, &params[4], n, oidText, func(b []byte, i int) []byte { return appendTextElem(b, m(i).Fence.Group) })
	b = appendArray(b, &params[5], n, oidText, func(b []byte, i int) []byte { return appendTextElem(b, m(i).Topic) })
	b = appendArray(b, &params[6], n, oidInt4, func(b []byte, i int) []byte { return appendInt4Elem(b, m(i).Partition) })
	return appendArray(b, &params[7], n, oidInt8, func(b []byte, i int) []byte { return appendInt8Elem(b, m(i).Fence.Epoch) })
}

// markArgs are markStartedSQL's parameters as pgx's own Query would have
// been given them: what a pool's query tracer sees.
func markArgs(ms []mark, f fenceArgs) []any {
	n := len(ms)
	ids, runs, gens, keys := make(textArray, n), make(textArray, n), make(int4Array, n), make(uuidArray, n)
	groups, topics, parts, epochs := make(textArray, n), make(textArray, n), make(int4Array, n), make(int8Array, n)
	for i, m := range ms {
		ids[i], runs[i], gens[i], keys[i] = m.s.WorkflowID, m.s.RunID, int32(m.s.Generation), m.key
		groups[i], topics[i], parts[i], epochs[i] = m.s.Fence.Group, m.s.Topic, m.s.Partition, m.s.Fence.Epoch
	}
	return append([]any{ids, runs, gens, keys, groups, topics, parts, epochs}, f.args()...)
}

// MarkDeadLettered ends pending rows whose records were dead-lettered
// because Temporal refused their start for good: they are not work in
// flight any more. Replaying the record claims the row again. A row whose
// fence no longer holds is left as it is (the error names the fence).
func (p *Postgres) MarkDeadLettered(ctx context.Context, rows []processor.DeadLettered) error {
	if len(rows) == 0 {
		return nil
	}
	// In key order, as the rows are locked (lk, below).
	type mark struct {
		r   processor.DeadLettered
		key [16]byte
	}
	ms := make([]mark, len(rows))
	for i, r := range rows {
		ms[i] = mark{r, keyOf(r.WorkflowID)}
	}
	slices.SortFunc(ms, func(a, b mark) int { return bytes.Compare(a.key[:], b.key[:]) })
	n := len(ms)
	ids, keys, groups, topics, parts, epochs := make([]string, n), make([][16]byte, n), make([]string, n), make([]string, n), make([]int32, n), make([]int64, n)
	for i, m := range ms {
		ids[i], keys[i], groups[i], topics[i], parts[i], epochs[i] = m.r.WorkflowID, m.key, m.r.Fence.Group, m.r.Topic, m.r.Partition, m.r.Fence.Epoch
	}
	f := fencesOf(n, func(i int) processor.PartitionEpoch {
		return processor.PartitionEpoch{Group: groups[i], Topic: topics[i], Partition: parts[i], Epoch: epochs[i]}
	})
	var held bool
	err := p.pool.QueryRow(ctx, markDeadLetteredSQL, ids, keys, groups, topics, parts, epochs,
		f.groups, f.topics, f.parts, f.epochs).Scan(&held)
	if err != nil {
		return p.classify(fmt.Errorf("marking %d workflows dead-lettered: %w", n, err))
	}
	if !held {
		return p.classify(p.fenced(ctx, f))
	}
	return nil
}

// lockInKeyOrder ends a SELECT that joins dedup_ledger as l: it locks the
// rows it returns in key order (the sort comes before the lock), as the
// claim's upsert does (claimSQL's ORDER BY). An UPDATE of the same rows
// that reads them from that SELECT waits for no row: it locks nothing
// itself, whatever order its plan reads the table in (on a small ledger, a
// sequential scan reads it in the heap's order). Without it, a mark and a
// claim of the same rows by two routers could each hold a row the other
// waits for (a deadlock, 40P01).
const lockInKeyOrder = `ORDER BY l.key FOR NO KEY UPDATE OF l`

// markStartedSQL is MarkStarted's statement: $1–$8 the entries in key
// order, $9–$12 their fences (fenceArgs). Built once: a mark is sent
// every starts.mark_interval, and pgx finds its prepared statement by
// this text.
var markStartedSQL = `
WITH ` + fenceCTE(9) + `, u AS MATERIALIZED (
	SELECT * FROM unnest($1::text[], $2::text[], $3::int4[], $4::uuid[], $5::text[], $6::text[], $7::int4[], $8::int8[])
		WITH ORDINALITY AS u(workflow_id, run_id, generation, key, consumer_group, topic, kafka_partition, epoch, n)
	WHERE u.epoch = 0 OR EXISTS (SELECT FROM fence WHERE (fence.consumer_group, fence.topic, fence.kafka_partition, fence.epoch) =
		(u.consumer_group, u.topic, u.kafka_partition, u.epoch))
), lk AS MATERIALIZED (
	SELECT u.*, l.state AS row_state, l.generation AS row_generation
	FROM u JOIN dedup_ledger l ON ` + schemas.LedgerRowIs("l", "u.workflow_id", "u.key") + `
	` + lockInKeyOrder + `
), up AS (
	UPDATE dedup_ledger l SET state = 'started', run_id = NULLIF(u.run_id, ''), generation = greatest(l.generation, u.generation),
		started_at = now(), updated_at = now()
	FROM lk u
	WHERE ` + schemas.LedgerRowIs("l", "u.workflow_id", "u.key") + ` AND (l.state = 'pending' OR (l.state = 'started' AND l.generation < u.generation))
	RETURNING l.workflow_id, l.generation
)
SELECT count(*) = cardinality($12::int8[]),
	coalesce((SELECT array_agg(r.n) FROM (
		SELECT lk.n FROM lk WHERE lk.row_state = 'started' AND lk.row_generation >= lk.generation
		UNION
		SELECT u.n FROM u JOIN up ON up.workflow_id = u.workflow_id AND up.generation >= u.generation) r), '{}')
FROM fence`

// markDeadLetteredSQL is MarkDeadLettered's statement: $1–$6 the rows in
// key order, $7–$10 their fences.
var markDeadLetteredSQL = `
WITH ` + fenceCTE(7) + `, lk AS MATERIALIZED (
	SELECT u.workflow_id, u.key
	FROM unnest($1::text[], $2::uuid[], $3::text[], $4::text[], $5::int4[], $6::int8[])
		AS u(workflow_id, key, consumer_group, topic, kafka_partition, epoch)
	JOIN dedup_ledger l ON ` + schemas.LedgerRowIs("l", "u.workflow_id", "u.key") + `
	WHERE l.state = 'pending'
		AND (u.epoch = 0 OR EXISTS (SELECT FROM fence WHERE (fence.consumer_group, fence.topic, fence.kafka_partition, fence.epoch) =
			(u.consumer_group, u.topic, u.kafka_partition, u.epoch)))
	` + lockInKeyOrder + `
), up AS (
	UPDATE dedup_ledger l SET state = 'dead_lettered', updated_at = now()
	FROM lk u
	WHERE ` + schemas.LedgerRowIs("l", "u.workflow_id", "u.key") + ` AND l.state = 'pending'
)
SELECT count(*) = cardinality($10::int8[]) FROM fence`
