package ledger

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/dedupio/dedup/processor"
)

// knownSQL answers which of a replay's records the ledger knows
// (processor/known.go): those with as many started rows claimed by the
// record at its coordinates as the record had intents, each written with
// the record's digest and that count by the claim that inserted it
// (claimSQL, migration 00016). The records are read by runs ($4 to $7:
// topic, partition, first and last offset; each record's run is its $3),
// each one scan of dedup_ledger_by_record over its offsets, as the
// replay's read by runs does (startedByRangeSQL): a poll's records of a
// partition, close together, are one run (knownRuns), a record far from
// the others a run of its own, so that no scan reads more than twice its
// records' offsets. A row written without a digest (by the scheduler, for
// a record that may run again, by a binary from before 00016) makes its
// record unknown. Only the known records answer, each with its count.
// The runs' rows are read first, once (MATERIALIZED), and joined to the
// records by a FULL JOIN, so that it is a hash or merge join whatever the
// planner estimates of the arrays, as in startedByRangeSQL: a nested loop
// under the generic plan scanned every run for each record (a poll of
// 1,000 records read a million rows). The rows no record takes are
// dropped by a filter that is not strict (coalesce(x.n, 0) > 0), so that
// the join stays FULL. It runs with a generic plan (genericplan.go): the
// runs' offsets come from the input.
const knownSQL = `
WITH r AS MATERIALIZED (
	SELECT * FROM unnest($4::text[], $5::int4[], $6::int8[], $7::int8[]) WITH ORDINALITY AS r(topic, kafka_partition, first, last, run)
), l AS MATERIALIZED (
	SELECT r.run, l.kafka_offset, l.state, l.record_digest, l.record_intents FROM r
	CROSS JOIN LATERAL (SELECT l.kafka_offset, l.state, l.record_digest, l.record_intents FROM dedup_ledger l
		WHERE l.kafka_partition = r.kafka_partition AND l.kafka_offset >= r.first AND l.kafka_offset <= r.last AND l.topic = r.topic
			AND l.started_at IS NOT NULL OFFSET 0) l
)
SELECT x.n, min(x.record_intents)::int4
FROM (
	SELECT i.n, i.digest, l.state, l.record_digest, l.record_intents
	FROM unnest($1::int8[], $2::uuid[], $3::int8[]) WITH ORDINALITY AS i(kafka_offset, digest, run, n)
	FULL JOIN l ON l.run = i.run AND l.kafka_offset = i.kafka_offset
) x
WHERE coalesce(x.n, 0) > 0
GROUP BY x.n
HAVING bool_and(coalesce(x.state = 'started' AND x.record_digest = x.digest AND x.record_intents > 0, false))
	AND count(*) = min(x.record_intents) AND min(x.record_intents) = max(x.record_intents)`

// knownParamOIDs are knownSQL's parameter types.
var knownParamOIDs = []uint32{oidInt8Array, oidUUIDArray, oidInt8Array, oidTextArray, oidInt4Array, oidInt8Array, oidInt8Array}

// knownRuns are the runs knownSQL reads records by, and each record's run
// (from 1): each partition's records in offset order, a run growing while
// its offsets span at most runSpan times its records (readplan.go), so
// that a scan reads at most that many offsets' rows for its records; a
// record too far from the others is a run of its own.
func knownRuns(records []processor.KnownRecord) (runs []run, runOf []int64) {
	order := make([]int, len(records))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		x, y := &records[a], &records[b]
		if c := strings.Compare(x.Topic, y.Topic); c != 0 {
			return c
		}
		if c := cmp.Compare(x.Partition, y.Partition); c != 0 {
			return c
		}
		return cmp.Compare(x.Offset, y.Offset)
	})
	runOf = make([]int64, len(records))
	for _, i := range order {
		rec := &records[i]
		if n := len(runs); n > 0 {
			cur := &runs[n-1]
			if cur.topic == rec.Topic && cur.partition == rec.Partition && rec.Offset >= cur.first &&
				rec.Offset-cur.first < int64(runSpan*(cur.records+1)) {
				cur.last = max(cur.last, rec.Offset)
				cur.records++
				runOf[i] = int64(n)
				continue
			}
		}
		runs = append(runs, run{topic: rec.Topic, partition: rec.Partition, first: rec.Offset, last: rec.Offset, records: 1})
		runOf[i] = int64(len(runs))
	}
	return runs, runOf
}

// Replaying says whether most of the last claim's workflow IDs were
// started already (processor.KnownLedger).
func (p *Postgres) Replaying() bool { return p.replaying.Load() }

// Known sets known[i] to records[i]'s number of intents when the ledger
// knows the record: as many started rows claimed by it at its coordinates,
// each with its digest (knownSQL); else 0. It reads only.
func (p *Postgres) Known(ctx context.Context, records []processor.KnownRecord, known []int32) error {
	if len(known) != len(records) {
		return fmt.Errorf("ledger: Known of %d records with %d answers", len(records), len(known))
	}
	clear(known)
	n := len(records)
	if n == 0 {
		return nil
	}
	runs, runOf := knownRuns(records)
	size := 7*20 + n*(3*4+8+16+8) // the arrays' headers and the records
	for _, r := range runs {
		size += 4*4 + len(r.topic) + 4 + 8 + 8
	}
	bp := p.encodeBuffer(size)
	defer p.keepEncodeBuffer(bp)
	var params [7][]byte
	*bp = encodeKnownRecords(*bp, records, runOf, runs, &params)
	args := func() []any { return knownArgs(records, runOf, runs) }
	err := p.queryEncoded(ctx, genericPlanSQL, "dedup_known_records", knownSQL, knownParamOIDs, params[:], args, func(cols [][]byte) error {
		if len(cols) != 2 {
			return fmt.Errorf("an answer of %d columns", len(cols))
		}
		at, err := int8Col(cols[0])
		if err != nil {
			return err
		}
		k, err := intCol(cols[1])
		if err != nil {
			return err
		}
		if at < 1 || int(at) > n || k < 1 {
			return fmt.Errorf("an answer for record %d of %d intents", at, k)
		}
		known[at-1] = int32(k)
		return nil
	})
	if err != nil {
		clear(known)
		return p.classify(fmt.Errorf("reading %d known records: %w", n, err))
	}
	return nil
}

// encodeKnownRecords appends knownSQL's parameters for records, their
// runs (runOf) and the runs to b (binary arrays: arrays.go) and points
// params at them.
func encodeKnownRecords(b []byte, records []processor.KnownRecord, runOf []int64, runs []run, params *[7][]byte) []byte {
	n := len(records)
	b = appendArray(b, &params[0], n, oidInt8, func(b []byte, i int) []byte { return appendInt8Elem(b, records[i].Offset) })
	b = appendArray(b, &params[1], n, oidUUID, func(b []byte, i int) []byte { return appendBytesElem(b, records[i].Digest[:]) })
	b = appendArray(b, &params[2], n, oidInt8, func(b []byte, i int) []byte { return appendInt8Elem(b, runOf[i]) })
	m := len(runs)
	b = appendArray(b, &params[3], m, oidText, func(b []byte, i int) []byte { return appendTextElem(b, runs[i].topic) })
	b = appendArray(b, &params[4], m, oidInt4, func(b []byte, i int) []byte { return appendInt4Elem(b, runs[i].partition) })
	b = appendArray(b, &params[5], m, oidInt8, func(b []byte, i int) []byte { return appendInt8Elem(b, runs[i].first) })
	return appendArray(b, &params[6], m, oidInt8, func(b []byte, i int) []byte { return appendInt8Elem(b, runs[i].last) })
}

// knownArgs are knownSQL's parameters as pgx's own Query would have been
// given them: what a pool's query tracer sees.
func knownArgs(records []processor.KnownRecord, runOf []int64, runs []run) []any {
	n, m := len(records), len(runs)
	off, digest := make(int8Array, n), make(uuidArray, n)
	for i := range records {
		off[i], digest[i] = records[i].Offset, records[i].Digest
	}
	topic, part, first, last := make(textArray, m), make(int4Array, m), make(int8Array, m), make(int8Array, m)
	for i, r := range runs {
		topic[i], part[i], first[i], last[i] = r.topic, r.partition, r.first, r.last
	}
	return []any{off, digest, int8Array(runOf), topic, part, first, last}
}
