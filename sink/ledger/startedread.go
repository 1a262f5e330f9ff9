package ledger

import (
	"bytes"
	"context"
	"fmt"

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

// maxRoutesByRecord bounds the IDs of one record that the replay's read
// looks up by their record: each of them reads the record's rows until it
// meets its own (the routes squared, a record). The IDs of a record with
// more routes in the batch are looked up by key alone, as a claim without
// a record.
const maxRoutesByRecord = 4

// recordRef is the record an intent came from.
type recordRef struct {
	topic     string
	partition int32
	offset    int64
}

func recordOf(in *decide.Intent) recordRef { return recordRef{in.Topic, in.Partition, in.Offset} }

// answerStarted records in got the rows already started and returns the
// indexes of the intents left to claim. A started row never goes back to
// pending, so the read needs no lock.
func (p *Postgres) answerStarted(ctx context.Context, sc *claimScratch, intents []decide.Intent, keys [][16]byte, sums [][32]byte, since startedSince, uniq []int, got []stored) ([]int, error) {
	routes := sc.routes
	for _, i := range uniq {
		routes[recordOf(&intents[i])]++
	}
	byRecord := sc.byRecordOf(len(uniq)) // else no topic: looked up by key alone
	size := 6 * 20                       // the arrays' headers
	for j, i := range uniq {
		in := &intents[i]
		byRecord[j] = routes[recordOf(in)] <= maxRoutesByRecord
		size += 6*4 + len(in.WorkflowID) + len(in.PayloadHash) + 16 + len(in.Topic) + 4 + 8
	}
	bp := p.encodeBuffer(size)
	defer p.keepEncodeBuffer(bp)
	var params [6][]byte
	*bp = encodeStartedParams(*bp, intents, keys, uniq, byRecord, &params)
	answered := sc.answeredOf(len(uniq))
	var left []int // positions in uniq
	args := func() []any { return startedArgs(intents, keys, uniq, byRecord) }
	err := p.queryEncoded(ctx, "dedup_started_rows", startedSQL, startedParamOIDs, params[:], args, func(cols [][]byte) error {
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

// encodeStartedParams appends startedSQL's six parameters for the intents
// uniq to b (binary arrays: arrays.go) and points params at them. An ID
// not looked up by its record (byRecord false) is sent with no topic.
func encodeStartedParams(b []byte, intents []decide.Intent, keys [][16]byte, uniq []int, byRecord []bool, params *[6][]byte) []byte {
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
		if byRecord[j] {
			b = appendInt4Elem(b, intents[i].Partition)
		} else {
			b = appendInt4Elem(b, 0)
		}
	}
	param(4, at)
	at = len(b)
	b = arrayHeader(b, len(uniq), oidInt8)
	for j, i := range uniq {
		if byRecord[j] {
			b = appendInt8Elem(b, intents[i].Offset)
		} else {
			b = appendInt8Elem(b, 0)
		}
	}
	param(5, at)
	return b
}

// startedArgs are startedSQL's parameters as pgx's own Query would have
// been given them: what a pool's query tracer sees.
func startedArgs(intents []decide.Intent, keys [][16]byte, uniq []int, byRecord []bool) []any {
	ids, hashes, ks := make(textArray, len(uniq)), make(byteaArray, len(uniq)), make(uuidArray, len(uniq))
	topics, parts, offs := make(textArray, len(uniq)), make(int4Array, len(uniq)), make(int8Array, len(uniq))
	for j, i := range uniq {
		in := &intents[i]
		ids[j], hashes[j], ks[j] = in.WorkflowID, in.PayloadHash[:], keys[i]
		if byRecord[j] {
			topics[j], parts[j], offs[j] = in.Topic, in.Partition, in.Offset
		}
	}
	return []any{ids, hashes, ks, topics, parts, offs}
}
