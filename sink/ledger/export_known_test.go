package ledger

import (
	"github.com/google/uuid"

	"github.com/dedupio/dedup/processor"
)

// KnownSQL is the replay's read of known records, for plan tests.
var KnownSQL = knownSQL

// KnownArgs are KnownSQL's arguments for records, as Known sends them,
// in plain types (for pgx's simple protocol: the uuids as text).
func KnownArgs(records []processor.KnownRecord) []any {
	runs, runOf := knownRuns(records)
	a := knownArgs(records, runOf, runs)
	digests := make([]string, len(records))
	for i, d := range a[1].(uuidArray) {
		digests[i] = uuid.UUID(d).String()
	}
	return []any{[]int64(a[0].(int8Array)), digests, []int64(a[2].(int8Array)), []string(a[3].(textArray)),
		[]int32(a[4].(int4Array)), []int64(a[5].(int8Array)), []int64(a[6].(int8Array))}
}
