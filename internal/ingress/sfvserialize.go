package ingress

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// Serializing an Item (RFC 8941 §4.1): the canonical form of a parsed
// field, for the messages that show the field that would be accepted.

// serialize is RFC 8941 §4.1.3 (Serializing an Item). It fails for a value
// §4.1 cannot serialize: an integer or decimal out of range, a string that
// is not printable ASCII, a token or key that is not one.
func (it sfItem) serialize() (string, error) {
	var b strings.Builder
	if err := it.Bare.appendTo(&b); err != nil {
		return "", err
	}
	for _, prm := range it.Params { // §4.1.1.2
		b.WriteByte(';')
		if err := appendKey(&b, prm.Key); err != nil {
			return "", err
		}
		if prm.Value.Kind == sfBoolean && prm.Value.Bool {
			continue
		}
		b.WriteByte('=')
		if err := prm.Value.appendTo(&b); err != nil {
			return "", err
		}
	}
	return b.String(), nil
}

const sfMaxInteger = 999_999_999_999_999

// appendTo is §4.1.3.1 (Serializing a Bare Item).
func (v sfBareItem) appendTo(b *strings.Builder) error {
	switch v.Kind {
	case sfInteger: // §4.1.4
		if v.Int < -sfMaxInteger || v.Int > sfMaxInteger {
			return fmt.Errorf("serializing integer %d: RFC 8941 §4.1.4 allows at most 15 digits", v.Int)
		}
		b.WriteString(strconv.FormatInt(v.Int, 10))
	case sfDecimal: // §4.1.5
		if v.Int < -sfMaxInteger || v.Int > sfMaxInteger {
			return fmt.Errorf("serializing decimal %d/1000: RFC 8941 §4.1.5 allows at most 12 integer digits", v.Int)
		}
		abs := v.Int
		if abs < 0 {
			b.WriteByte('-')
			abs = -abs
		}
		b.WriteString(strconv.FormatInt(abs/1000, 10))
		b.WriteByte('.')
		frac := fmt.Sprintf("%03d", abs%1000)
		if frac = strings.TrimRight(frac, "0"); frac == "" {
			frac = "0"
		}
		b.WriteString(frac)
	case sfString: // §4.1.6
		for i := 0; i < len(v.Str); i++ {
			if c := v.Str[i]; c < 0x20 || c > 0x7e {
				return fmt.Errorf("serializing a string: byte 0x%02x at offset %d is not printable ASCII (RFC 8941 §4.1.6)", c, i)
			}
		}
		b.WriteByte('"')
		for i := 0; i < len(v.Str); i++ {
			if c := v.Str[i]; c == '"' || c == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(v.Str[i])
		}
		b.WriteByte('"')
	case sfToken: // §4.1.7
		if v.Str == "" || !isTokenStart(v.Str[0]) {
			return fmt.Errorf("serializing token %q: a token begins with a letter or * (RFC 8941 §4.1.7)", v.Str)
		}
		for i := 0; i < len(v.Str); i++ {
			if c := v.Str[i]; !isTokenChar(c) {
				return fmt.Errorf("serializing token %q: byte 0x%02x at offset %d is not a token character (RFC 8941 §4.1.7)", v.Str, c, i)
			}
		}
		b.WriteString(v.Str)
	case sfByteSeq: // §4.1.8
		b.WriteByte(':')
		b.WriteString(base64.StdEncoding.EncodeToString(v.Bytes))
		b.WriteByte(':')
	case sfBoolean: // §4.1.9
		if v.Bool {
			b.WriteString("?1")
		} else {
			b.WriteString("?0")
		}
	default:
		return fmt.Errorf("serializing a bare item of unknown kind %v", v.Kind)
	}
	return nil
}

// appendKey is §4.1.1.3 (Serializing a Key).
func appendKey(b *strings.Builder, key string) error {
	if key == "" || !isKeyStart(key[0]) {
		return fmt.Errorf("serializing key %q: a key begins with a lowercase letter or * (RFC 8941 §4.1.1.3)", key)
	}
	for i := 0; i < len(key); i++ {
		if !isKeyChar(key[i]) {
			return fmt.Errorf("serializing key %q: byte 0x%02x at offset %d is not a key character (RFC 8941 §4.1.1.3)", key, key[i], i)
		}
	}
	b.WriteString(key)
	return nil
}
