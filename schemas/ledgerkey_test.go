package schemas

import (
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

// The key and sum of a workflow ID of the usual length, as a claim takes
// them for each ID of its batch.
func BenchmarkLedgerKeySum(b *testing.B) {
	id := "activity-send-receipt:orders-0191b4a2-7c3e-7d2a-9b1c-0a1b2c3d4e5f"
	b.ReportAllocs()
	for b.Loop() {
		LedgerKeySum(id)
	}
}

// refLedgerKeySum is the rule as the package states it, written apart from
// LedgerKeySum: the SHA-256 of the ID's bytes as a heap copy, and the key
// its first 128 bits, or 48 bits of the trailing UUIDv7's (lowercase) or
// ULID's (uppercase) milliseconds and 80 bits of the sum.
func refLedgerKeySum(id string) (key [16]byte, sum [32]byte) {
	sum = sha256.Sum256([]byte(id))
	ms, ok := refTimeFirst(id)
	if !ok {
		copy(key[:], sum[:16])
		return key, sum
	}
	for i := range 6 {
		key[i] = byte(ms >> (8 * (5 - i)))
	}
	copy(key[6:], sum[:10])
	return key, sum
}

func refTimeFirst(id string) (uint64, bool) {
	isHex := func(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }
	if n := len(id); n >= 36 {
		u, ok := id[n-36:], true
		for i := range 36 {
			switch i {
			case 8, 13, 18, 23:
				ok = ok && u[i] == '-'
			case 14:
				ok = ok && u[i] == '7'
			case 19:
				ok = ok && strings.IndexByte("89ab", u[i]) >= 0
			default:
				ok = ok && isHex(u[i])
			}
		}
		if ok {
			var ms uint64
			for _, c := range []byte(u[:8] + u[9:13]) {
				v := strings.IndexByte("0123456789abcdef", c)
				ms = ms<<4 | uint64(v)
			}
			return ms, true
		}
	}
	if n := len(id); n >= 26 {
		u := id[n-26:]
		if u[0] < '0' || u[0] > '7' {
			return 0, false
		}
		var ms uint64
		for i := range 26 {
			v := strings.IndexByte("0123456789ABCDEFGHJKMNPQRSTVWXYZ", u[i])
			if v < 0 {
				return 0, false
			}
			if i < 10 {
				ms = ms<<5 | uint64(v)
			}
		}
		return ms, true
	}
	return 0, false
}

// ledgerKeyEdgeIDs are IDs at and around the stack buffer's 256 bytes:
// every length from 0 to 600 of random bytes (invalid UTF-8, NUL bytes),
// and IDs ending with a UUIDv7, a ULID, an almost-UUIDv7 and an
// almost-ULID whose total length is 200 to 320 bytes, with multibyte and
// NUL prefixes.
func ledgerKeyEdgeIDs(r *rand.Rand) []string {
	var ids []string
	for n := range 601 {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		ids = append(ids, string(b))
		ids = append(ids, strings.Repeat("\x00", n), strings.Repeat("\xff", n))
	}
	suffixes := []string{
		"0190a1b2-c3d4-7e5f-8a9b-0123456789ab",
		"ffffffff-ffff-7fff-bfff-ffffffffffff",
		"0190a1b2-c3d4-4e5f-8a9b-0123456789ab", // v4
		"0190A1B2-C3D4-7E5F-8A9B-0123456789AB", // upper case
		"01ARZ3NDEKTSV4RRFFQ69G5FAV",
		"7ZZZZZZZZZZZZZZZZZZZZZZZZZ",
		"81ARZ3NDEKTSV4RRFFQ69G5FAV",
		"01ARZ3NDEKTSV4RRFFQ69G5FAU",
		"01arz3ndektsv4rrffq69g5fav",
	}
	fills := []string{"x", "\x00", "é", "✓", "\xff", "\xc3"}
	for _, s := range suffixes {
		for total := 200; total <= 320; total++ {
			for _, f := range fills {
				p := "activity-a:" + strings.Repeat(f, total)
				if len(p)+len(s) < total {
					continue
				}
				ids = append(ids, p[:total-len(s)]+s)
			}
		}
	}
	return ids
}

// LedgerKeySum answers as the rule before the stack buffer did (a heap
// copy of the ID hashed) for every ID: random bytes of every length to 600,
// invalid UTF-8, NUL bytes, and time-first IDs whose length crosses the
// buffer's 256 bytes; LedgerKey is its key.
func TestLedgerKeySumIsTheReferenceRuleForEveryIDAroundTheBuffer(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 2))
	for _, id := range ledgerKeyEdgeIDs(r) {
		key, sum := LedgerKeySum(id)
		wk, ws := refLedgerKeySum(id)
		if key != wk || sum != ws {
			t.Fatalf("LedgerKeySum(%q) (%d bytes) = %x, %x; want %x, %x", id, len(id), key, sum, wk, ws)
		}
		if k := LedgerKey(id); k != wk {
			t.Fatalf("LedgerKey(%q) = %x, want %x", id, k, wk)
		}
	}
	// The time-first rule reached past the buffer: an ID of 300 bytes
	// ending with a UUIDv7 keeps its milliseconds first.
	id := strings.Repeat("z", 264) + "0190a1b2-c3d4-7e5f-8a9b-0123456789ab"
	if k := LedgerKey(id); k[0] != 0x01 || k[5] != 0xd4 {
		t.Fatalf("LedgerKey of a UUIDv7 ID of %d bytes = %x: not time first", len(id), k)
	}
}

// Many goroutines take the key and sum of substrings of one big string
// (IDs sharing one backing array, overlapping, some past 256 bytes) at
// once: each answer is the reference's, with no data race (-race).
func TestLedgerKeySumOfSubstringsOfOneStringConcurrently(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 3))
	var sb strings.Builder
	for sb.Len() < 4096 {
		sb.WriteString("0190a1b2-c3d4-7e5f-8a9b-0123456789ab")
		sb.WriteByte(byte(r.IntN(256)))
		sb.WriteString("01ARZ3NDEKTSV4RRFFQ69G5FAV")
	}
	big := sb.String()
	type span struct{ i, j int }
	var spans []span
	for range 2000 {
		i := r.IntN(len(big))
		j := i + r.IntN(min(400, len(big)-i)+1)
		spans = append(spans, span{i, j})
	}
	want := make([][2]any, len(spans))
	for n, s := range spans {
		k, h := refLedgerKeySum(big[s.i:s.j])
		want[n] = [2]any{k, h}
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rep := range 20 {
				for n := range spans {
					s := spans[(n+g*97+rep)%len(spans)]
					k, h := LedgerKeySum(big[s.i:s.j])
					w := want[(n+g*97+rep)%len(spans)]
					if k != w[0].([16]byte) || h != w[1].([32]byte) {
						select {
						case errs <- fmt.Sprintf("LedgerKeySum(big[%d:%d]) = %x, %x; want %x, %x", s.i, s.j, k, h, w[0], w[1]):
						default:
						}
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// No ID of 256 bytes or less allocates, whatever its bytes and whether it
// ends with a time-first ID; LedgerKey neither.
func TestLedgerKeySumAllocatesNothingForAnyIDOf256BytesOrLess(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 4))
	for _, id := range ledgerKeyEdgeIDs(r) {
		if len(id) > 256 {
			continue
		}
		if n := testing.AllocsPerRun(5, func() { LedgerKeySum(id) }); n != 0 {
			t.Fatalf("LedgerKeySum of %q (%d bytes): %v allocations, want 0", id, len(id), n)
		}
		if n := testing.AllocsPerRun(5, func() { LedgerKey(id) }); n != 0 {
			t.Fatalf("LedgerKey of %q (%d bytes): %v allocations, want 0", id, len(id), n)
		}
	}
}
