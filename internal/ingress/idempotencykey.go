package ingress

import (
	"errors"
	"fmt"
	"strings"
)

// The Idempotency-Key field (draft-ietf-httpapi-idempotency-key-header):
// an RFC 8941 Item whose bare item is a String.

// maxIdempotencyKeyLen bounds an Idempotency-Key's value, in bytes (after
// unescaping). The draft sets no limit; 255 holds a UUID, a ULID or a
// hash with room to spare, and keeps keys cheap to store and index.
const maxIdempotencyKeyLen = 255

// keyExample is the form an Idempotency-Key takes, for messages.
const keyExample = `Idempotency-Key: "order-123"`

// parseIdempotencyKey reads the Idempotency-Key field lines of a request
// (http.Header.Values) as draft-ietf-httpapi-idempotency-key-header-07
// defines the field: an Item Structured Field (RFC 8941) whose bare item
// is a String. Parameters are allowed and ignored. It returns the
// string's value: non-empty, printable ASCII, at most
// maxIdempotencyKeyLen bytes. Anything else is an error whose message
// names the rule and, where it can, shows the field that would be
// accepted.
func parseIdempotencyKey(lines []string) (string, error) {
	switch len(lines) {
	case 0:
		return "", errors.New("no Idempotency-Key field")
	case 1:
	default:
		// The draft: "Clients MUST NOT include more than one
		// Idempotency-Key header field in the same request." Combined as
		// RFC 8941 §4.2 says, two lines are not one Item, except for a
		// string split at a comma (`"a` and `b"`), which is refused too:
		// one key, one line.
		return "", fmt.Errorf("Idempotency-Key must be one sf-string (RFC 8941 §3.3.3), got %d field lines: send the key once, as in %s", len(lines), keyExample)
	}
	it, bare, err := parseItemField(lines[0])
	if err != nil {
		switch text := strings.Trim(lines[0], " "); {
		case firstNonASCII(text) >= 0:
			return "", fmt.Errorf("Idempotency-Key must be an sf-string (RFC 8941 §3.3.3), which holds printable ASCII only: %w", err)
		case strings.HasPrefix(text, `"`):
			return "", fmt.Errorf("Idempotency-Key must be an sf-string (RFC 8941 §3.3.3): %w", err)
		default:
			return "", fmt.Errorf("Idempotency-Key must be an sf-string (RFC 8941 §3.3.3), got text that is not a Structured Field Item (%w): quote it, as in %s", err, quotedExample(text))
		}
	}
	if it.Bare.Kind != sfString {
		return "", fmt.Errorf("Idempotency-Key must be an sf-string (RFC 8941 §3.3.3), got %s %v: quote it, as in %s", it.Bare.Kind.article(), it.Bare.Kind, quotedExample(bare))
	}
	switch key := it.Bare.Str; {
	case key == "":
		return "", fmt.Errorf(`Idempotency-Key is the empty string (""): a key needs at least one character, as in %s`, keyExample)
	case len(key) > maxIdempotencyKeyLen:
		return "", fmt.Errorf("Idempotency-Key is %d bytes long, over the limit of %d bytes", len(key), maxIdempotencyKeyLen)
	default:
		return key, nil
	}
}

// quotedExample is the Idempotency-Key field that carries text as a
// string, or keyExample when text would not make a valid key (too long,
// not printable ASCII, or already holding quotes or backslashes, which
// suggests a broken string rather than a missing one).
func quotedExample(text string) string {
	if text == "" || len(text) > maxIdempotencyKeyLen || strings.ContainsAny(text, `"\`) {
		return keyExample
	}
	s, err := sfItem{Bare: sfBareItem{Kind: sfString, Str: text}}.serialize()
	if err != nil {
		return keyExample
	}
	return "Idempotency-Key: " + s
}
