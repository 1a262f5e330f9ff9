package ingress

// A parser and serializer for RFC 8941 (Structured Field Values for HTTP)
// Items, and the Idempotency-Key rule built on them.
//
// The parser follows the algorithms of RFC 8941 §4.2 step by step (the
// comments name the steps), and is checked against the httpwg
// structured-field-tests corpus (testdata/sfv). It parses Items only: the
// ingress reads no List or Dictionary field. The Date and Display String
// types that RFC 9651 later added are not RFC 8941 bare items and fail to
// parse, as RFC 8941 requires.

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// sfKind is the type of a bare item (RFC 8941 §3.3).
type sfKind int

const (
	sfInteger sfKind = iota + 1 // §3.3.1
	sfDecimal                   // §3.3.2
	sfString                    // §3.3.3
	sfToken                     // §3.3.4
	sfByteSeq                   // §3.3.5
	sfBoolean                   // §3.3.6
)

func (k sfKind) String() string {
	switch k {
	case sfInteger:
		return "integer"
	case sfDecimal:
		return "decimal"
	case sfString:
		return "string"
	case sfToken:
		return "token"
	case sfByteSeq:
		return "byte sequence"
	case sfBoolean:
		return "boolean"
	}
	return "sfKind(" + strconv.Itoa(int(k)) + ")"
}

// article is "a" or "an", for messages that name a kind ("got an integer").
func (k sfKind) article() string {
	if k == sfInteger {
		return "an"
	}
	return "a"
}

// sfBareItem is a bare item; Kind says which field holds its value.
type sfBareItem struct {
	Kind sfKind
	// Str is the value of a string (unescaped) or a token.
	Str string
	// Int is the value of an integer, or of a decimal in thousandths
	// (1.5 is 1500): a decimal has at most three fractional digits
	// (§3.3.2), so thousandths hold it exactly, and a decimal that has
	// been parsed serializes back to the same digits.
	Int int64
	// Bytes is the value of a byte sequence (never nil for one).
	Bytes []byte
	// Bool is the value of a boolean.
	Bool bool
}

// sfParam is one parameter of an Item.
type sfParam struct {
	Key   string
	Value sfBareItem
}

// sfItem is an Item (RFC 8941 §3.3): a bare item and its parameters, in
// the order they first appeared (a repeated key keeps its first position
// and takes its last value, §4.2.3.2).
type sfItem struct {
	Bare   sfBareItem
	Params []sfParam
}

// sfvError is a parse failure: which algorithm of RFC 8941 failed, at
// which offset of the combined field value, and why.
type sfvError struct {
	Section string // "4.2.5"
	Offset  int    // 0-based, in the field lines joined with ", "
	Reason  string
}

var sfvSections = map[string]string{
	"4.2":     "Parsing Structured Fields",
	"4.2.3":   "Parsing an Item",
	"4.2.3.1": "Parsing a Bare Item",
	"4.2.3.2": "Parsing Parameters",
	"4.2.3.3": "Parsing a Key",
	"4.2.4":   "Parsing an Integer or Decimal",
	"4.2.5":   "Parsing a String",
	"4.2.6":   "Parsing a Token",
	"4.2.7":   "Parsing a Byte Sequence",
	"4.2.8":   "Parsing a Boolean",
}

func (e *sfvError) Error() string {
	return fmt.Sprintf("RFC 8941 §%s (%s), at offset %d: %s", e.Section, sfvSections[e.Section], e.Offset, e.Reason)
}

// parseSFVItem parses the field lines of an Item field (RFC 8941 §4.2
// with field_type "item"). The lines are combined first, joined with ", "
// as §4.2 and RFC 9110 §5.3 say, so two lines are one Item only when the
// comma falls inside a string (`"a` and `b"` are the string "a, b"), and
// otherwise fail to parse.
func parseSFVItem(lines []string) (sfItem, error) {
	it, _, err := parseItemField(strings.Join(lines, ", "))
	return it, err
}

// parseItemField is RFC 8941 §4.2 for an Item on the combined field value.
// bare is the text of the bare item as it was sent (for messages).
func parseItemField(field string) (it sfItem, bare string, err error) {
	// Step 1: the field value must be ASCII.
	if i := firstNonASCII(field); i >= 0 {
		return sfItem{}, "", &sfvError{"4.2", i, fmt.Sprintf("byte 0x%02x is not ASCII", field[i])}
	}
	p := &sfvParser{s: field}
	p.skipSP() // step 2
	start := p.i
	it, err = p.item() // step 3
	if err != nil {
		return sfItem{}, "", err
	}
	p.skipSP()     // step 4
	if !p.done() { // step 5
		return sfItem{}, "", p.fail("4.2", "%s after the Item: an Item is one bare item and its parameters", p.peekDesc())
	}
	return it, field[start:p.bareEnd], nil
}

// sfvParser holds the input string of §4.2's algorithms: i is how much of
// it has been consumed.
type sfvParser struct {
	s       string
	i       int
	bareEnd int // where the Item's bare item ended
}

func (p *sfvParser) done() bool { return p.i >= len(p.s) }

func (p *sfvParser) skipSP() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

// peekDesc describes the next character, or the end of the input.
func (p *sfvParser) peekDesc() string {
	if p.done() {
		return "the end of the value"
	}
	return fmt.Sprintf("%q", rune(p.s[p.i]))
}

func (p *sfvParser) fail(section, format string, args ...any) error {
	return &sfvError{Section: section, Offset: p.i, Reason: fmt.Sprintf(format, args...)}
}

// item is §4.2.3.
func (p *sfvParser) item() (sfItem, error) {
	bare, err := p.bareItem()
	if err != nil {
		return sfItem{}, err
	}
	p.bareEnd = p.i
	params, err := p.parameters()
	if err != nil {
		return sfItem{}, err
	}
	return sfItem{Bare: bare, Params: params}, nil
}

// bareItem is §4.2.3.1.
func (p *sfvParser) bareItem() (sfBareItem, error) {
	if p.done() {
		return sfBareItem{}, p.fail("4.2.3.1", "the value is empty: an Item needs a bare item")
	}
	switch c := p.s[p.i]; {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		s, err := p.str()
		return sfBareItem{Kind: sfString, Str: s}, err
	case isTokenStart(c):
		s, err := p.token()
		return sfBareItem{Kind: sfToken, Str: s}, err
	case c == ':':
		b, err := p.byteSeq()
		return sfBareItem{Kind: sfByteSeq, Bytes: b}, err
	case c == '?':
		b, err := p.boolean()
		return sfBareItem{Kind: sfBoolean, Bool: b}, err
	default:
		return sfBareItem{}, p.fail("4.2.3.1", "%s begins no bare item (a number begins with - or a digit, a string with \", a token with a letter or *, a byte sequence with :, a boolean with ?)", p.peekDesc())
	}
}

// parameters is §4.2.3.2.
func (p *sfvParser) parameters() ([]sfParam, error) {
	var params []sfParam
	for !p.done() {
		if p.s[p.i] != ';' {
			break
		}
		p.i++
		p.skipSP()
		key, err := p.key()
		if err != nil {
			return nil, err
		}
		value := sfBareItem{Kind: sfBoolean, Bool: true}
		if !p.done() && p.s[p.i] == '=' {
			p.i++
			if value, err = p.bareItem(); err != nil {
				return nil, err
			}
		}
		replaced := false
		for j := range params {
			if params[j].Key == key {
				params[j].Value = value
				replaced = true
				break
			}
		}
		if !replaced {
			params = append(params, sfParam{Key: key, Value: value})
		}
	}
	return params, nil
}

// key is §4.2.3.3.
func (p *sfvParser) key() (string, error) {
	if p.done() || !isKeyStart(p.s[p.i]) {
		return "", p.fail("4.2.3.3", "a key begins with a lowercase letter or *, not %s", p.peekDesc())
	}
	start := p.i
	for !p.done() && isKeyChar(p.s[p.i]) {
		p.i++
	}
	return p.s[start:p.i], nil
}

// number is §4.2.4.
func (p *sfvParser) number() (sfBareItem, error) {
	kind := sfInteger    // step 1
	neg := false         // step 2: sign
	var num []byte       // step 3: input_number
	if p.s[p.i] == '-' { // step 4
		p.i++
		neg = true
	}
	if p.done() { // step 5
		return sfBareItem{}, p.fail("4.2.4", "a number needs a digit after -")
	}
	if !isDigit(p.s[p.i]) { // step 6
		return sfBareItem{}, p.fail("4.2.4", "a number needs a digit, not %s", p.peekDesc())
	}
	for !p.done() { // step 7
		c := p.s[p.i]
		if isDigit(c) {
			num = append(num, c)
		} else if kind == sfInteger && c == '.' {
			if len(num) > 12 {
				return sfBareItem{}, p.fail("4.2.4", "a decimal has at most 12 integer digits")
			}
			num = append(num, c)
			kind = sfDecimal
		} else {
			break // step 7.4: c is not part of the number
		}
		p.i++
		if kind == sfInteger && len(num) > 15 {
			return sfBareItem{}, p.fail("4.2.4", "an integer has at most 15 digits")
		}
		if kind == sfDecimal && len(num) > 16 {
			return sfBareItem{}, p.fail("4.2.4", "a decimal has at most 16 characters")
		}
	}
	var v int64
	if kind == sfInteger { // step 8
		v, _ = strconv.ParseInt(string(num), 10, 64) // at most 15 digits
	} else { // step 9
		dot := strings.IndexByte(string(num), '.')
		frac := len(num) - dot - 1
		if frac == 0 {
			return sfBareItem{}, p.fail("4.2.4", "a decimal needs a digit after the .")
		}
		if frac > 3 {
			return sfBareItem{}, p.fail("4.2.4", "a decimal has at most 3 fractional digits")
		}
		ip, _ := strconv.ParseInt(string(num[:dot]), 10, 64) // at most 12 digits
		fp, _ := strconv.ParseInt(string(num[dot+1:]), 10, 64)
		for ; frac < 3; frac++ {
			fp *= 10
		}
		v = ip*1000 + fp
	}
	if neg {
		v = -v
	}
	return sfBareItem{Kind: kind, Int: v}, nil
}

// str is §4.2.5.
func (p *sfvParser) str() (string, error) {
	if p.done() || p.s[p.i] != '"' {
		return "", p.fail("4.2.5", "a string begins with \"")
	}
	p.i++
	var b strings.Builder
	for !p.done() {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.done() {
				return "", p.fail("4.2.5", "the value ends inside an escape")
			}
			next := p.s[p.i]
			if next != '"' && next != '\\' {
				return "", p.fail("4.2.5", `a string escapes only \" and \\, not \%c`, next)
			}
			p.i++
			b.WriteByte(next)
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			p.i--
			return "", p.fail("4.2.5", "a string holds printable ASCII only (0x20-0x7E), not %s", p.peekDesc())
		default:
			b.WriteByte(c)
		}
	}
	return "", p.fail("4.2.5", "the value ends before the string's closing \"")
}

// token is §4.2.6.
func (p *sfvParser) token() (string, error) {
	if p.done() || !isTokenStart(p.s[p.i]) {
		return "", p.fail("4.2.6", "a token begins with a letter or *, not %s", p.peekDesc())
	}
	start := p.i
	for !p.done() && isTokenChar(p.s[p.i]) {
		p.i++
	}
	return p.s[start:p.i], nil
}

// byteSeq is §4.2.7. Content is either padded as RFC 4648 §4 has it or not
// padded at all (step 7 synthesizes the padding; §4.2.7 asks parsers not
// to fail on missing padding), and non-zero pad bits are accepted, as
// §4.2.7 asks too.
func (p *sfvParser) byteSeq() ([]byte, error) {
	if p.done() || p.s[p.i] != ':' { // step 1
		return nil, p.fail("4.2.7", "a byte sequence begins with :")
	}
	p.i++                                    // step 2
	end := strings.IndexByte(p.s[p.i:], ':') // step 3
	if end < 0 {
		return nil, p.fail("4.2.7", "the value ends before the byte sequence's closing :")
	}
	content := p.s[p.i : p.i+end]       // step 4
	for j := 0; j < len(content); j++ { // step 6
		if !isBase64(content[j]) {
			p.i += j
			return nil, p.fail("4.2.7", "%s is not base64 (A-Z a-z 0-9 + / =)", p.peekDesc())
		}
	}
	enc := base64.RawStdEncoding // step 7
	if strings.Contains(content, "=") {
		enc = base64.StdEncoding
	}
	b, err := enc.DecodeString(content)
	if err != nil {
		return nil, p.fail("4.2.7", "the content is not base64: %v", err)
	}
	p.i += end + 1 // step 5
	if b == nil {
		b = []byte{}
	}
	return b, nil
}

// boolean is §4.2.8.
func (p *sfvParser) boolean() (bool, error) {
	if p.done() || p.s[p.i] != '?' {
		return false, p.fail("4.2.8", "a boolean begins with ?")
	}
	p.i++
	if !p.done() {
		switch p.s[p.i] {
		case '1':
			p.i++
			return true, nil
		case '0':
			p.i++
			return false, nil
		}
	}
	return false, p.fail("4.2.8", "a boolean is ?1 or ?0, not ? followed by %s", p.peekDesc())
}

// firstNonASCII is the offset of the first byte of s that is not ASCII,
// or -1.
func firstNonASCII(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return i
		}
	}
	return -1
}

func isDigit(c byte) bool   { return '0' <= c && c <= '9' }
func isLCAlpha(c byte) bool { return 'a' <= c && c <= 'z' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || 'A' <= c && c <= 'Z' }

// isKeyStart and isKeyChar: key = ( lcalpha / "*" ) *( lcalpha / DIGIT /
// "_" / "-" / "." / "*" ) (§3.1.2).
func isKeyStart(c byte) bool { return isLCAlpha(c) || c == '*' }

func isKeyChar(c byte) bool {
	return isLCAlpha(c) || isDigit(c) || c == '_' || c == '-' || c == '.' || c == '*'
}

// isTokenStart and isTokenChar: sf-token = ( ALPHA / "*" ) *( tchar / ":" /
// "/" ) (§3.3.4).
func isTokenStart(c byte) bool { return isAlpha(c) || c == '*' }
func isTokenChar(c byte) bool  { return isTchar(c) || c == ':' || c == '/' }

// isBase64 is the alphabet of §4.2.7 step 6: ALPHA, DIGIT, "+", "/", "=".
func isBase64(c byte) bool {
	return isAlpha(c) || isDigit(c) || c == '+' || c == '/' || c == '='
}

// isTchar is RFC 9110's tchar.
func isTchar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// §3.3.1
