package ledger

import (
	"time"

	"github.com/dedupio/dedup/schemas"
)

// PurgeStatements are the purge's batch statements, for plan tests.
var PurgeStatements = map[State]string{StateStarted: purgeStarted, StateDeadLettered: purgeDeadLettered}

// SetKeyFunc makes the ledger compute its keys with f (a test forces
// collisions with it) until the returned restore is called.
func SetKeyFunc(f func(string) [16]byte) (restore func()) {
	old, oldSum := keyOf, keySumOf
	keyOf = f
	keySumOf = func(id string) ([16]byte, [32]byte) {
		_, sum := schemas.LedgerKeySum(id)
		return f(id), sum
	}
	return func() { keyOf, keySumOf = old, oldSum }
}

// StartedSQL is the replay's read of started rows, for plan tests.
var StartedSQL = startedSQL

// StartedByRangeSQL is the replay's read of a batch with runs of records,
// for plan tests.
var StartedByRangeSQL = startedByRangeSQL

// PlainArg is a statement argument as a plain Go slice when it is one of
// the ledger's parameter arrays (params.go), else a itself: tests read what
// a statement sent, and send it again, with the slices' own types.
func PlainArg(a any) any {
	switch v := a.(type) {
	case textArray:
		return []string(v)
	case byteaArray:
		return [][]byte(v)
	case uuidArray:
		return [][16]byte(v)
	case int4Array:
		return []int32(v)
	case int8Array:
		return []int64(v)
	}
	return a
}

// ParamArray is PlainArg's inverse: a plain Go slice as the ledger's
// parameter array type (params.go), else a itself (adversary 33).
func ParamArray(a any) any {
	switch v := a.(type) {
	case []string:
		return textArray(v)
	case [][]byte:
		return byteaArray(v)
	case [][16]byte:
		return uuidArray(v)
	case []int32:
		return int4Array(v)
	case []int64:
		return int8Array(v)
	}
	return a
}

// RememberStartedAt is RememberStarted with the cache's clock now (a test
// moves time past startedMaxAge with it).
func (p *Postgres) RememberStartedAt(entries int, now func() time.Time) *Postgres {
	p.started = newStartedCache(entries, now)
	return p
}

// StartedMaxAge is how long a remembered started row answers its copies.
const StartedMaxAge = startedMaxAge

// SetKeySumFunc makes the ledger compute the IDs' SHA-256 (the memory of
// started rows' key) with f, their ledger keys as before, until the
// returned restore is called: a test makes IDs share bytes of it.
func SetKeySumFunc(f func(string) [32]byte) (restore func()) {
	old := keySumOf
	keySumOf = func(id string) ([16]byte, [32]byte) {
		k, _ := old(id)
		return k, f(id)
	}
	return func() { keySumOf = old }
}

// ClaimSQL and MarkStartedSQL are the claim's and the mark's statements,
// for tests that find them in the server's plans.
var ClaimSQL, MarkStartedSQL = claimSQL, markStartedSQL
