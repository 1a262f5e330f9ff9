package ingress

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"strings"

	"github.com/dedupio/dedup/internal/secret"
)

// Tokens are the bearer tokens that may call the API, from a file (one a
// line; blank lines and # comments ignored), read again when it changes.
type Tokens struct{ f *secret.File }

// MinTokenBytes is the shortest bearer token LoadTokens accepts: 16 bytes
// (128 bits when random) make guessing hopeless.
const MinTokenBytes = 16

// LoadTokens reads the file once: a missing or empty file, one without a
// token (only blank lines and comments), or one with a token shorter than
// MinTokenBytes is a start-up error naming key (and the token's line,
// never the token).
func LoadTokens(key, path string) (*Tokens, error) {
	f, err := secret.NewFile(key, path)
	if err != nil {
		return nil, err
	}
	v, err := f.Get()
	if err != nil {
		return nil, err
	}
	n := 0
	for i, line := range strings.Split(v, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if len(line) < MinTokenBytes {
			return nil, fmt.Errorf("%s: %s line %d: a token of %d bytes, want at least %d (e.g. openssl rand -hex 32)", key, path, i+1, len(line), MinTokenBytes)
		}
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("%s: %s holds no token (only blank lines and comments): add one a line, or leave %s empty for no authentication", key, path, key)
	}
	return &Tokens{f: f}, nil
}

func (t *Tokens) list() ([]string, error) {
	v, err := t.f.Get()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(v, "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return out, nil
}

// allowed reports whether the Authorization header carries one of the
// tokens (compared in constant time, over their hashes so that lengths do
// not leak either). An unreadable file allows nobody.
func (t *Tokens) allowed(authorization string) bool {
	scheme, tok, ok := strings.Cut(authorization, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return false
	}
	list, err := t.list()
	if err != nil {
		return false
	}
	got := sha256.Sum256([]byte(tok))
	match := 0
	for _, want := range list {
		w := sha256.Sum256([]byte(want))
		match |= subtle.ConstantTimeCompare(got[:], w[:])
	}
	return match == 1
}
