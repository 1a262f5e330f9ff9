package schemas

import (
	"crypto/sha256"
	"strings"
	"testing"
)

// The sum is the SHA-256 of the whole ID, and the key its first 128 bits
// (an ID that ends with no time-first ID), at every length around the
// stack buffer's 256 bytes and past it (sink/ledger's TestLedgerKeyDigest
// holds the key to the SQL function).
func TestLedgerKeySumIsTheSHA256OfTheWholeIDAtAnyLength(t *testing.T) {
	for n := range 600 {
		id := strings.Repeat("x", n)
		key, sum := LedgerKeySum(id)
		want := sha256.Sum256([]byte(id))
		if sum != want || [16]byte(want[:16]) != key {
			t.Fatalf("LedgerKeySum of an ID of %d bytes: key %x, sum %x; want %x", n, key, sum, want)
		}
	}
}

// A claim takes the key and sum of every ID of its batch: an ID of up to
// 256 bytes (workflow IDs are about 65) costs no allocation.
func TestLedgerKeySumAllocatesNothingForAnIDOf256BytesOrLess(t *testing.T) {
	for _, id := range []string{"activity-send-receipt:orders-0191b4a2-7c3e-7d2a-9b1c-0a1b2c3d4e5f", strings.Repeat("y", 256)} {
		if n := testing.AllocsPerRun(100, func() { LedgerKeySum(id) }); n != 0 {
			t.Errorf("LedgerKeySum of an ID of %d bytes: %v allocations, want 0", len(id), n)
		}
	}
}

func BenchmarkLedgerKeySum(b *testing.B) {
	id := "activity-send-receipt:orders-0191b4a2-7c3e-7d2a-9b1c-0a1b2c3d4e5f"
	b.ReportAllocs()
	for b.Loop() {
		LedgerKeySum(id)
	}
}
