package eventid

import (
	"math/rand/v2"
	"testing"
)

// plainLenByBytes is plainLen's definition, one byte at a time.
func plainLenByBytes(b []byte) int {
	for i, c := range b {
		if c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			return i
		}
	}
	return len(b)
}

// TestPlainLenStopsAtTheFirstByteThatNeedsAttention puts every byte value
// at every position of a plain run (and after another stop byte, where the
// word trick's borrows land), for strings and byte slices alike.
func TestPlainLenStopsAtTheFirstByteThatNeedsAttention(t *testing.T) {
	for n := 0; n <= 24; n++ {
		for pos := 0; pos < n; pos++ {
			for c := 0; c < 256; c++ {
				b := make([]byte, n)
				for k := range b {
					b[k] = 'a' + byte(k%26)
				}
				b[pos] = byte(c)
				if pos+1 < n {
					b[pos+1] = 0 // a second stop right after the first
				}
				want := plainLenByBytes(b)
				if got := plainLen(b); got != want {
					t.Fatalf("plainLen(%q) = %d, want %d", b, got, want)
				}
				if got := plainLen(string(b)); got != want {
					t.Fatalf("plainLen(string %q) = %d, want %d", b, got, want)
				}
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, rng.IntN(40))
		for k := range b {
			b[k] = byte(0x20 + rng.IntN(0x60))
			if rng.IntN(30) == 0 {
				b[k] = byte(rng.IntN(256))
			}
		}
		if got, want := plainLen(b), plainLenByBytes(b); got != want {
			t.Fatalf("plainLen(%q) = %d, want %d", b, got, want)
		}
	}
}
