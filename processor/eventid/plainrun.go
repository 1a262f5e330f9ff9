package eventid

import (
	"bytes"
	"math/bits"
)

// plainLen returns the length of the longest prefix of b whose bytes need
// no attention inside a JSON string: printable ASCII (0x20 to 0x7f) other
// than '"' and '\'. The string scanners skip such runs in one step and look
// byte by byte only at what ends one: a quote, an escape, a control
// character or the first byte of a non-ASCII character.
//
// It tests eight bytes at a time with the usual bit trick: for a word w,
// (w - 0x01..01*n) &^ w & 0x80..80 has the high bit of the first byte below
// n set (a borrow can only mark bytes after it, never before), so the
// lowest set bit names the first byte that ends the run.
func plainLen[T ~string | ~[]byte](b T) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; len(b)-i >= 8; i += 8 {
		c := b[i : i+8]
		w := uint64(c[0]) | uint64(c[1])<<8 | uint64(c[2])<<16 | uint64(c[3])<<24 |
			uint64(c[4])<<32 | uint64(c[5])<<40 | uint64(c[6])<<48 | uint64(c[7])<<56
		q := w ^ (ones * '"')
		e := w ^ (ones * '\\')
		stop := ((w-ones*0x20)&^w | (q-ones)&^q | (e-ones)&^e | w) & highs
		if stop != 0 {
			return i + bits.TrailingZeros64(stop)/8
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			return i
		}
	}
	return i
}

// plainDecimal is how ECMAScript prints the double a JSON number with a
// fraction and no exponent denotes (12.50, -0.125), without parsing it,
// when that is the token itself less its fraction's trailing zeros (and
// a point left bare): ok only for 15 significant digits or fewer, which a
// double tells apart (so no shorter string names the same double), and
// for magnitudes from 1e-6 (below it ECMAScript writes an exponent).
func plainDecimal(tok []byte) ([]byte, bool) {
	dot := bytes.IndexByte(tok, '.')
	if dot < 0 || bytes.ContainsAny(tok, "eE") {
		return nil, false
	}
	for tok[len(tok)-1] == '0' {
		tok = tok[:len(tok)-1]
	}
	if len(tok) == dot+1 {
		tok = tok[:dot]
	}
	first := -1 // the first significant digit
	for k, b := range tok {
		if '1' <= b && b <= '9' {
			first = k
			break
		}
	}
	switch {
	case first < 0:
		return []byte("0"), true // zero, or minus zero: ECMAScript prints 0
	case first > dot && first-dot > 6:
		return nil, false // below 1e-6
	}
	digits := len(tok) - first
	if first < dot && dot < len(tok) {
		digits-- // the point
	}
	return tok, digits <= 15
}
