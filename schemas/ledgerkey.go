package schemas

import (
	"crypto/sha256"
	"fmt"
)

// The ledger's unique key (migration 00012_ledger_key.sql): the column
// dedup_ledger.key, a 16-byte digest of the workflow ID, instead of the
// workflow ID's text (about 65 bytes). LedgerKey is the digest; the SQL
// function dedup_ledger_key is the same rule for the rows a migration or a
// plain INSERT writes without it (TestLedgerKeyDigest holds the two
// together). A statement finds a row by its key and then checks the
// workflow ID itself, so two IDs that share a digest never read or change
// each other's row: LedgerRowsOf and LedgerRowIs are the only spellings of
// that lookup, and every statement on dedup_ledger by workflow ID uses one.

// LedgerKey is the ledger's key of a workflow ID: the first 128 bits of
// the SHA-256 of its UTF-8 bytes; but an ID that ends with a time-first ID
// keeps that ID's 48 bits of Unix milliseconds first, and 80 bits of the
// SHA-256 after, so that time-ordered IDs land on the newest pages of the
// key's index. Time-first IDs: a UUIDv7 in lowercase canonical form
// (RFC 9562), a ULID in uppercase Crockford base32.
func LedgerKey(workflowID string) [16]byte {
	k, _ := LedgerKeySum(workflowID)
	return k
}

// LedgerKeySum is LedgerKey and the SHA-256 of the ID it was taken from,
// for one hash of the ID where a caller needs both.
func LedgerKeySum(workflowID string) (key [16]byte, sum [32]byte) {
	// The ID's bytes in a buffer on the stack when they fit: a claim
	// hashes every ID of its batch, and []byte(workflowID) copies to the
	// heap past 32 bytes.
	var buf [256]byte
	h := sha256.Sum256(append(buf[:0], workflowID...))
	var k [16]byte
	if ms, ok := timeFirst(workflowID); ok {
		for i := range 6 {
			k[i] = byte(ms >> (40 - 8*i))
		}
		copy(k[6:], h[:10])
		return k, h
	}
	copy(k[:], h[:16])
	return k, h
}

// LedgerKeys is LedgerKey of each ID, in order.
func LedgerKeys(workflowIDs []string) [][16]byte {
	out := make([][16]byte, len(workflowIDs))
	for i, id := range workflowIDs {
		out[i] = LedgerKey(id)
	}
	return out
}

// timeFirst is the 48-bit Unix millisecond time that id ends with, if it
// ends with a UUIDv7 (lowercase) or a ULID (uppercase).
func timeFirst(id string) (uint64, bool) {
	if n := len(id); n >= 36 {
		if ms, ok := uuidv7Time(id[n-36:]); ok {
			return ms, true
		}
	}
	if n := len(id); n >= 26 {
		return ulidTime(id[n-26:])
	}
	return 0, false
}

func uuidv7Time(u string) (uint64, bool) {
	var ms uint64
	for i := 0; i < 36; i++ {
		c := u[i]
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return 0, false
			}
			continue
		case i == 14 && c != '7':
			return 0, false
		case i == 19 && c != '8' && c != '9' && c != 'a' && c != 'b':
			return 0, false
		}
		v, ok := lowerHex(c)
		if !ok {
			return 0, false
		}
		if i < 13 {
			ms = ms<<4 | uint64(v)
		}
	}
	return ms, true
}

func lowerHex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// crockford is the ULID alphabet (Crockford's base32, upper case).
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

func ulidTime(u string) (uint64, bool) {
	if u[0] < '0' || u[0] > '7' {
		return 0, false
	}
	var ms uint64
	for i := 0; i < 26; i++ {
		v := -1
		for j := 0; j < len(crockford); j++ {
			if crockford[j] == u[i] {
				v = j
				break
			}
		}
		if v < 0 {
			return 0, false
		}
		if i < 10 {
			ms = ms<<5 | uint64(v)
		}
	}
	return ms, true
}

// LedgerRowsOf is the predicate that selects the dedup_ledger rows (of the
// table alias alias, "" for none) of the workflow IDs in the text[]
// parameter ids, whose LedgerKeys are the uuid[] parameter keys (e.g.
// LedgerRowsOf("l", "$1", "$2")).
func LedgerRowsOf(alias, ids, keys string) string {
	if alias != "" {
		alias += "."
	}
	return fmt.Sprintf(`%[1]skey = ANY(%[3]s::uuid[]) AND %[1]sworkflow_id = ANY(%[2]s::text[])`, alias, ids, keys)
}

// LedgerRowIs is the join condition of the dedup_ledger row of alias
// alias with the workflow ID expression id and its key expression key
// (columns of another relation of the statement, or parameters).
func LedgerRowIs(alias, id, key string) string {
	return fmt.Sprintf(`%[1]s.key = %[3]s AND %[1]s.workflow_id = %[2]s`, alias, id, key)
}
