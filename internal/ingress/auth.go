package ingress

import (
	"crypto/sha256"
	"crypto/subtle"
	"strings"

	"github.com/dedupio/dedup/internal/secret"
)

// Tokens are the bearer tokens that may call the API, from a file (one a
// line; blank lines and # comments ignored), read again when it changes.
type Tokens struct{ f *secret.File }

// LoadTokens reads the file once: a missing or empty file, or one without
// a token, is a start-up error naming key.
func LoadTokens(key, path string) (*Tokens, error) {
	f, err := secret.NewFile(key, path)
	if err != nil {
		return nil, err
	}
	t := &Tokens{f: f}
	if _, err := t.list(); err != nil {
		return nil, err
	}
	return t, nil
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
