package ledger

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
)

// startedSQL returns the rows of the batch that are not started with the
// same payload: absent (state NULL), pending, or started with another
// payload (a conflict); and the duplicates that were re-run (generation >
// 1, so that their verdict carries it). The rest, nearly every row of a
// replay, are duplicates of generation 1 and cost no row in the answer.
//
// Each ID's row is looked for first by the record that carries it ($4 to
// $6: topic, partition, offset), along dedup_ledger_by_record (migration
// 00015): a replay reads records again in offset order, and their rows
// lie on a few leaves of that index and next to each other in the heap,
// where the key's leaves are random ones. A row claimed by another record
// of the same ID (a producer's retry, a pending row) is not there, and is
// found by its key. Either way it is the row a look-up by key finds: the
// first look-up compares the key too (a row whose key is not its ID's,
// written by hand or restored from elsewhere, is found by neither), as
// "(l.key = i.key) IS TRUE", which no index serves, so that PostgreSQL
// does not take the key's unique index for the first look-up as well;
// LIMIT 1 runs the second only when the first found nothing. The first look-up names started rows by started_at (the
// index's predicate), not by state, so that it can go along no other
// index: dedup_ledger_started holds every started row, and with
// statistics from before the marks a scan of it looked cheap. A claim
// without a record (the scheduler's fires: no topic, every one at
// partition 0, offset 0) is looked up by its key alone: by its record it
// would read every other fire's row to find its own.
var startedSQL = `
SELECT i.n, l.state, l.payload_hash, coalesce(l.generation, 0)
FROM unnest($1::text[], $2::bytea[], $3::uuid[], $4::text[], $5::int4[], $6::int8[]) WITH ORDINALITY
	AS i(workflow_id, payload_hash, key, topic, kafka_partition, kafka_offset, n)
LEFT JOIN LATERAL (
	(SELECT l.state, l.payload_hash, l.generation FROM dedup_ledger l
	WHERE i.topic <> '' AND l.kafka_partition = i.kafka_partition AND l.kafka_offset = i.kafka_offset AND l.topic = i.topic
		AND l.started_at IS NOT NULL AND l.workflow_id = i.workflow_id AND (l.key = i.key) IS TRUE)
	UNION ALL
	(SELECT l.state, l.payload_hash, l.generation FROM dedup_ledger l WHERE ` + schemas.LedgerRowIs("l", "i.workflow_id", "i.key") + `)
	LIMIT 1
) l ON true
WHERE l.state IS DISTINCT FROM 'started' OR l.payload_hash <> i.payload_hash OR l.generation > 1`

// startedByRangeSQL is startedSQL for a batch that holds runs of a
// partition's records, as a replay's polls do: the started rows of each
// run are read by one scan of dedup_ledger_by_record over its offsets
// ($8 to $11: topic, partition, first and last offset; an ID's run is its
// $7, 0 for none), and each ID of a run takes the row of its own record,
// workflow ID and key among them, if any. One scan of the run's leaves and
// heap pages replaces a descent of the index per ID (a replay's batch of
// 2,286 IDs in eight runs: 666 buffers read against 9,414, and about half
// the statement's time). An ID of a run that is not there (claimed by
// another record, pending) is looked up by its key; an ID of no run as in
// startedSQL. It is a FULL JOIN so that it is a hash or merge join
// whatever the planner estimates of the arrays (a generic plan counts 10
// elements in each): a nested loop would scan every run's rows for each ID.
// The rows of a run no ID of the batch takes (coalesce(x.n, 0) = 0: a
// filter that is not strict, so that the join stays FULL) are dropped.
var startedByRangeSQL = `
SELECT x.n, coalesce(x.b_state, k.state), coalesce(x.b_hash, k.payload_hash), coalesce(x.b_generation, k.generation, 0)
FROM (
	SELECT i.n, i.workflow_id, i.payload_hash, i.key, i.topic, i.kafka_partition, i.kafka_offset,
		b.key AS b_key, b.state AS b_state, b.payload_hash AS b_hash, b.generation AS b_generation
	FROM unnest($1::text[], $2::bytea[], $3::uuid[], $4::text[], $5::int4[], $6::int8[], $7::int8[]) WITH ORDINALITY
		AS i(workflow_id, payload_hash, key, topic, kafka_partition, kafka_offset, run, n)
	FULL JOIN (
		SELECT r.n AS run, l.kafka_offset, l.workflow_id, l.key, l.state, l.payload_hash, l.generation
		FROM unnest($8::text[], $9::int4[], $10::int8[], $11::int8[]) WITH ORDINALITY AS r(topic, kafka_partition, first, last, n)
		CROSS JOIN LATERAL (SELECT l.kafka_offset, l.workflow_id, l.key, l.state, l.payload_hash, l.generation FROM dedup_ledger l
			WHERE l.kafka_partition = r.kafka_partition AND l.kafka_offset >= r.first AND l.kafka_offset <= r.last AND l.topic = r.topic
				AND l.started_at IS NOT NULL OFFSET 0) l
	) b ON b.run = i.run AND b.kafka_offset = i.kafka_offset AND b.workflow_id = i.workflow_id AND b.key = i.key
) x
LEFT JOIN LATERAL (
	(SELECT l.state, l.payload_hash, l.generation FROM dedup_ledger l
	WHERE x.b_key IS NULL AND x.topic <> '' AND l.kafka_partition = x.kafka_partition AND l.kafka_offset = x.kafka_offset AND l.topic = x.topic
		AND l.started_at IS NOT NULL AND l.workflow_id = x.workflow_id AND (l.key = x.key) IS TRUE)
	UNION ALL
	(SELECT l.state, l.payload_hash, l.generation FROM dedup_ledger l WHERE x.b_key IS NULL AND ` + schemas.LedgerRowIs("l", "x.workflow_id", "x.key") + `)
	LIMIT 1
) k ON true
WHERE coalesce(x.n, 0) > 0
	AND (coalesce(x.b_state, k.state) IS DISTINCT FROM 'started' OR coalesce(x.b_hash, k.payload_hash) <> x.payload_hash OR coalesce(x.b_generation, k.generation) > 1)`

// answerStarted records in got the rows already started and returns the
// indexes of the intents left to claim. A started row never goes back to
// pending, so the read needs no lock. A batch with runs of records is read
// by startedByRangeSQL, any other by startedSQL: both answer as a look-up
// of each ID by its key (TestReplayReadOfRunsAnswersAsEachIDsKeyLookUp).
func (p *Postgres) answerStarted(ctx context.Context, sc *claimScratch, intents []decide.Intent, keys [][16]byte, sums [][32]byte, since startedSince, uniq []int, got []stored) ([]int, error) {
	runs, runOf, byRecord := sc.readPlan(intents, uniq)
	size := 7*20 + len(runs)*(4*4+8+4+8+8) + 4*20 // the arrays' headers and the runs
	for _, i := range uniq {
		in := &intents[i]
		size += 7*4 + len(in.WorkflowID) + len(in.PayloadHash) + 16 + len(in.Topic) + 4 + 8 + 8
	}
	bp := p.encodeBuffer(size)
	defer p.keepEncodeBuffer(bp)
	var params [11][]byte
	*bp = encodeStartedParams(*bp, intents, keys, uniq, byRecord, runOf, &params)
	settings, name, sql, oids, n := jitOffSQL, "dedup_started_rows", startedSQL, startedParamOIDs, 6
	if len(runs) > 0 {
		*bp = encodeRuns(*bp, runOf, runs, &params)
		settings, name, sql, oids, n = genericPlanSQL, "dedup_started_by_range", startedByRangeSQL, startedByRangeParamOIDs, 11
	}
	answered := sc.answeredOf(len(uniq))
	var left []int // positions in uniq
	args := func() []any { return startedArgs(intents, keys, uniq, byRecord, runOf, runs, n) }
	err := p.queryEncoded(ctx, settings, name, sql, oids, params[:n], args, func(cols [][]byte) error {
		if len(cols) != 4 {
			return fmt.Errorf("an answer of %d columns", len(cols))
		}
		n, err := int8Col(cols[0])
		if err != nil {
			return err
		}
		j := int(n - 1)
		if j < 0 || j >= len(uniq) {
			return fmt.Errorf("an answer for input %d of %d", n, len(uniq))
		}
		var state stateColumn
		_ = state.ScanBytes(cols[1])
		gen, err := intCol(cols[3])
		if err != nil {
			return err
		}
		answered[j] = true
		if state.valid && state.s == StateStarted { // with another payload, or re-run
			got[uniq[j]] = stored{found: true, state: state.s, hash: bytes.Clone(cols[2]), generation: gen}
			return nil
		}
		left = append(left, j)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading %d workflow IDs: %w", len(uniq), err)
	}
	seen := sc.seenAt[:0] // intents answered started with their payload, generation 1
	defer func() { sc.seenAt = seen[:0] }()
	for j, ok := range answered {
		if !ok {
			got[uniq[j]] = stored{found: true, state: StateStarted, hash: intents[uniq[j]].PayloadHash[:], generation: 1}
			seen = append(seen, uniq[j])
		}
	}
	p.started.remember(intents, sums, seen, since)
	todo := make([]int, len(left))
	for k, j := range left {
		todo[k] = uniq[j]
	}
	return todo, nil
}

// startedParamOIDs are startedSQL's parameter types.
var startedParamOIDs = []uint32{oidTextArray, oidByteaArray, oidUUIDArray, oidTextArray, oidInt4Array, oidInt8Array}

// startedByRangeParamOIDs are startedByRangeSQL's: startedSQL's, each ID's
// run, and the runs.
var startedByRangeParamOIDs = append(slices.Clip(startedParamOIDs), oidInt8Array, oidTextArray, oidInt4Array, oidInt8Array, oidInt8Array)

// encodeStartedParams appends startedSQL's six parameters for the intents
// uniq to b (binary arrays: arrays.go) and points params at them. An ID
// not looked up by its record (byRecord false) is sent with no topic; one
// of a run (runOf) with its partition and offset, which its run's rows are
// matched on.
func encodeStartedParams(b []byte, intents []decide.Intent, keys [][16]byte, uniq []int, byRecord []bool, runOf []int64, params *[11][]byte) []byte {
	param := func(k, at int) { params[k] = b[at:len(b):len(b)] }
	at := len(b)
	b = arrayHeader(b, len(uniq), oidText)
	for _, i := range uniq {
		b = appendTextElem(b, intents[i].WorkflowID)
	}
	param(0, at)
	at = len(b)
	b = arrayHeader(b, len(uniq), oidBytea)
	for _, i := range uniq {
		b = appendBytesElem(b, intents[i].PayloadHash[:])
	}
	param(1, at)
	at = len(b)
	b = arrayHeader(b, len(uniq), oidUUID)
	for _, i := range uniq {
		b = appendBytesElem(b, keys[i][:])
	}
	param(2, at)
	at = len(b)
	b = arrayHeader(b, len(uniq), oidText)
	for j, i := range uniq {
		if byRecord[j] {
			b = appendTextElem(b, intents[i].Topic)
		} else {
			b = appendTextElem(b, "")
		}
	}
	param(3, at)
	at = len(b)
	b = arrayHeader(b, len(uniq), oidInt4)
	for j, i := range uniq {
		if byRecord[j] || runOf[j] > 0 {
			b = appendInt4Elem(b, intents[i].Partition)
		} else {
			b = appendInt4Elem(b, 0)
		}
	}
	param(4, at)
	at = len(b)
	b = arrayHeader(b, len(uniq), oidInt8)
	for j, i := range uniq {
		if byRecord[j] || runOf[j] > 0 {
			b = appendInt8Elem(b, intents[i].Offset)
		} else {
			b = appendInt8Elem(b, 0)
		}
	}
	param(5, at)
	return b
}

// encodeRuns appends startedByRangeSQL's five parameters past startedSQL's
// to b: each ID's run (0: none), and the runs.
func encodeRuns(b []byte, runOf []int64, runs []run, params *[11][]byte) []byte {
	param := func(k, at int) { params[k] = b[at:len(b):len(b)] }
	at := len(b)
	b = arrayHeader(b, len(runOf), oidInt8)
	for _, r := range runOf {
		b = appendInt8Elem(b, r)
	}
	param(6, at)
	at = len(b)
	b = arrayHeader(b, len(runs), oidText)
	for _, r := range runs {
		b = appendTextElem(b, r.topic)
	}
	param(7, at)
	at = len(b)
	b = arrayHeader(b, len(runs), oidInt4)
	for _, r := range runs {
		b = appendInt4Elem(b, r.partition)
	}
	param(8, at)
	at = len(b)
	b = arrayHeader(b, len(runs), oidInt8)
	for _, r := range runs {
		b = appendInt8Elem(b, r.first)
	}
	param(9, at)
	at = len(b)
	b = arrayHeader(b, len(runs), oidInt8)
	for _, r := range runs {
		b = appendInt8Elem(b, r.last)
	}
	param(10, at)
	return b
}

// startedArgs are the read's n parameters (startedSQL's 6,
// startedByRangeSQL's 11) as pgx's own Query would have been given them:
// what a pool's query tracer sees.
func startedArgs(intents []decide.Intent, keys [][16]byte, uniq []int, byRecord []bool, runOf []int64, runs []run, n int) []any {
	ids, hashes, ks := make(textArray, len(uniq)), make(byteaArray, len(uniq)), make(uuidArray, len(uniq))
	topics, parts, offs := make(textArray, len(uniq)), make(int4Array, len(uniq)), make(int8Array, len(uniq))
	for j, i := range uniq {
		in := &intents[i]
		ids[j], hashes[j], ks[j] = in.WorkflowID, in.PayloadHash[:], keys[i]
		if byRecord[j] {
			topics[j] = in.Topic
		}
		if byRecord[j] || runOf[j] > 0 {
			parts[j], offs[j] = in.Partition, in.Offset
		}
	}
	args := []any{ids, hashes, ks, topics, parts, offs}
	if n == 6 {
		return args
	}
	rts, rps, rfs, rls := make(textArray, len(runs)), make(int4Array, len(runs)), make(int8Array, len(runs)), make(int8Array, len(runs))
	for k, r := range runs {
		rts[k], rps[k], rfs[k], rls[k] = r.topic, r.partition, r.first, r.last
	}
	return append(args, int8Array(slices.Clone(runOf)), rts, rps, rfs, rls)
}
