package eventid

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"
)

// A number is canonicalised exactly as jcs.Transform (ECMAScript's
// JSON.stringify) prints it, on the edges of the range printed without an
// exponent (1e-6 up to 1e21) and across random doubles: content IDs and
// payload hashes hash these bytes.
func TestCanonicalNumbersPrintAsECMAScriptDoes(t *testing.T) {
	toks := []string{"1e-6", "0.000001", "9.99999e-7", "1e21", "999999999999999900000", "1e20", "-1e-6", "-1e21",
		"5e-324", "1.7976931348623157e308", "0.1", "12.50", "-0.0", "1E2", "123456789012345678", "-2.5e-3", "1.0"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		f := math.Float64frombits(rng.Uint64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		toks = append(toks, strconv.FormatFloat(f, 'g', -1, 64))
	}
	for range 20000 {
		toks = append(toks, strconv.FormatFloat(rng.NormFloat64()*math.Pow(10, float64(rng.IntN(50)-25)), 'g', -1, 64))
	}
	// Decimals as producers write them (plainDecimal's shortcut and its
	// edges): up to 20 significant digits, leading and trailing zeros in
	// the fraction, signs.
	digits := func(n int, first byte) string {
		b := []byte{first}
		for range n - 1 {
			b = append(b, byte('0'+rng.IntN(10)))
		}
		return string(b)
	}
	for range 20000 {
		tok := "0"
		if rng.IntN(3) > 0 {
			tok = digits(1+rng.IntN(12), byte('1'+rng.IntN(9)))
		}
		tok += "." + strings.Repeat("0", rng.IntN(9)) + digits(1+rng.IntN(10), byte('0'+rng.IntN(10))) + strings.Repeat("0", rng.IntN(3))
		if rng.IntN(2) == 0 {
			tok = "-" + tok
		}
		toks = append(toks, tok)
	}
	toks = append(toks, "0.0", "-0.000", "0.0000010", "0.0000001", "0.00000099", "123456789012345.0", "1234567890123456.0",
		"12345678901234.5", "123456789012345.6", "0.123456789012345", "0.1234567890123456", "9007199254740993.0")
	for _, tok := range toks {
		want, werr := jcs.Transform([]byte(tok))
		got, gerr := canonical([]byte(tok))
		if string(got) != string(want) || (werr == nil) != (gerr == nil) {
			t.Fatalf("%s: canonical %q (%v), jcs %q (%v)", tok, got, gerr, want, werr)
		}
		var c canonWriter
		if fast, ok := c.fast([]byte(tok)); ok && string(fast) != string(want) {
			t.Fatalf("%s: fast path %q, jcs %q", tok, fast, want)
		}
	}
}
