// Package tenantsig is the proof that a record's tenant was asserted by
// dedup ingress: an HMAC-SHA256 signature, in the record header Header,
// over the tenant and the record as written (its key, its value and every
// header but the signature itself and the dedup-origin-* headers that
// `dedup dlq replay` adds). The keys come from a keyring file that only
// the ingress and the routers read (kafka.tenant_keys_file): the ingress
// signs with the first key, and every listed key verifies, so that a key
// is rotated without downtime (add the new key second, let every process
// read the file, move it first, remove the old one once no record signed
// with it can be read again). A producer that writes to Kafka directly
// holds no key, so it cannot write a record that a router takes as a
// tenant's (docs/security.md, Tenant identity).
//
// The package has no dependency on the decoder: eventid builds the
// message (what is signed) and asks a Keyring to sign or verify it.
package tenantsig

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"

	"github.com/dedupio/dedup/connect/secretfile"
)

// Header carries the signature: "v1;kid=<key id>;<base64url MAC, no
// padding>".
const Header = "dedup-tenant-sig"

// MinSecretBytes is the shortest key the keyring accepts (decoded): 256
// bits, HMAC-SHA256's block of security.
const MinSecretBytes = 32

// MaxKeyIDLength bounds a key ID.
const MaxKeyIDLength = 32

// ErrInvalid is in every error of Verify: the signature is missing,
// malformed, made with a key the keyring does not hold, or does not match
// the record.
var ErrInvalid = errors.New("invalid tenant signature")

// Keyring is the keys of the keyring file, read again when the file
// changes (secretfile.File: looked at every 100 ms as it is used, a change
// of what a stat tells or, at least once a second, of content); a re-read
// that fails keeps the last good keys (current). Safe for concurrent use.
//
// The file:
//
//	keys:
//	  - id: "2025-06"          # a-z, 0-9, '.', '_', '-'; at most 32 bytes
//	    secret: "base64..."    # standard base64 of at least 32 random bytes (openssl rand -base64 32)
//	  - id: "2025-01"
//	    secret: "..."
//
// The first key signs; every key verifies.
type Keyring struct {
	field string
	f     *secretfile.File

	mu      sync.Mutex
	content string // the file's content last parsed
	err     error  // its parse error, if any
	keys    *keys  // the last keys read successfully
	stale   string // the re-read error last logged ("": none)
}

type keys struct {
	signer string
	byID   map[string][]byte
}

// Load reads the keyring file at path once (an unreadable or invalid file
// is an error naming field, never a secret) and returns it for reading
// again.
func Load(field, path string) (*Keyring, error) {
	f, err := secretfile.NewFile(field, path)
	if err != nil {
		return nil, err
	}
	k := &Keyring{field: fmt.Sprintf("%s (%s)", field, path), f: f}
	if _, err := k.current(); err != nil {
		return nil, err
	}
	return k, nil
}

// Parse is a keyring of the file's content b, never read again (tests,
// and callers that hold the keys elsewhere).
func Parse(field string, b []byte) (*Keyring, error) {
	ks, err := parse(field, b)
	if err != nil {
		return nil, err
	}
	return &Keyring{field: field, keys: ks, content: string(b)}, nil
}

// current is the keys to sign and verify with, and the error of the file
// as it is now (nil when it is readable and valid). A file that became
// unreadable or invalid after a good read keeps its last good keys: a
// broken edit or a Secret unreadable for a moment is this deployment's
// fault, not the records', so it must not make every signed record
// forged_tenant (an invalid signature is the only forged one). Each such
// re-read error is logged once, and its recovery. Without a good read
// (Load's), keys is nil and nothing is signed or verified.
func (k *Keyring) current() (*keys, error) {
	if k.f == nil {
		return k.keys, nil
	}
	v, err := k.f.Get()
	k.mu.Lock()
	defer k.mu.Unlock()
	if err == nil {
		if v != k.content || (k.keys == nil && k.err == nil) {
			ks, perr := parse(k.field, []byte(v))
			k.content, k.err = v, perr
			if perr == nil {
				k.keys = ks
			}
		}
		err = k.err
	}
	switch {
	case err != nil && k.keys != nil && err.Error() != k.stale:
		k.stale = err.Error()
		slog.Warn("tenant keyring file unreadable or invalid: signing and verifying with the last keys read successfully until it is fixed", "error", err)
	case err == nil && k.stale != "":
		k.stale = ""
		slog.Info("tenant keyring file read again", "field", k.field)
	}
	if k.keys == nil && err != nil {
		return nil, err
	}
	return k.keys, err
}

// Check reports whether the keyring file, as it is now, is readable and
// valid (Sign and Verify use the last good keys meanwhile).
func (k *Keyring) Check() error {
	_, err := k.current()
	return err
}

type file struct {
	Keys []struct {
		ID     string `yaml:"id"`
		Secret string `yaml:"secret"`
	} `yaml:"keys"`
}

func parse(field string, b []byte) (*keys, error) {
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		// yaml's errors may quote a value: never show it (a secret).
		return nil, fmt.Errorf("%s: not a keyring (YAML: keys: [{id, secret}])", field)
	}
	if len(f.Keys) == 0 {
		return nil, fmt.Errorf("%s: holds no key: add keys: [{id: ..., secret: ...}] (openssl rand -base64 32)", field)
	}
	ks := &keys{signer: f.Keys[0].ID, byID: make(map[string][]byte, len(f.Keys))}
	for i, e := range f.Keys {
		if err := validID(e.ID); err != nil {
			return nil, fmt.Errorf("%s: keys[%d].id: %w", field, i, err)
		}
		if _, dup := ks.byID[e.ID]; dup {
			return nil, fmt.Errorf("%s: keys[%d].id: %q is listed before: a key ID names one key", field, i, e.ID)
		}
		secret, err := base64.StdEncoding.DecodeString(strings.TrimSpace(e.Secret))
		switch {
		case e.Secret == "":
			return nil, fmt.Errorf("%s: keys[%d] (id %q): secret: missing", field, i, e.ID)
		case err != nil:
			return nil, fmt.Errorf("%s: keys[%d] (id %q): secret: not standard base64 (openssl rand -base64 32)", field, i, e.ID)
		case len(secret) < MinSecretBytes:
			return nil, fmt.Errorf("%s: keys[%d] (id %q): secret: %d bytes, want at least %d (openssl rand -base64 32)", field, i, e.ID, len(secret), MinSecretBytes)
		}
		ks.byID[e.ID] = secret
	}
	return ks, nil
}

func validID(id string) error {
	if id == "" || len(id) > MaxKeyIDLength {
		return fmt.Errorf("want 1 to %d bytes", MaxKeyIDLength)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '.' && c != '_' && c != '-' {
			return fmt.Errorf("byte %d: want a-z, 0-9, '.', '_', '-'", i)
		}
	}
	return nil
}

const prefix = "v1;kid="

// Sign is the Header value of msg, signed with the first key.
func (k *Keyring) Sign(msg []byte) (string, error) {
	ks, err := k.current()
	if ks == nil {
		return "", fmt.Errorf("signing a tenant's record: %w", err)
	}
	return prefix + ks.signer + ";" + base64.RawURLEncoding.EncodeToString(mac(ks.byID[ks.signer], msg)), nil
}

// Verify checks that value, a Header value, signs msg with a key of the
// keyring (the last keys read successfully, while the file is broken).
// Its errors wrap ErrInvalid, except when the keyring has no keys at all.
func (k *Keyring) Verify(value string, msg []byte) error {
	rest, ok := strings.CutPrefix(value, prefix)
	if !ok {
		return fmt.Errorf("%w: %s does not start with %q", ErrInvalid, Header, prefix)
	}
	kid, sig, ok := strings.Cut(rest, ";")
	if !ok || validID(kid) != nil {
		return fmt.Errorf("%w: %s has no valid key ID", ErrInvalid, Header)
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || len(got) != sha256.Size {
		return fmt.Errorf("%w: %s: the MAC is not %d bytes of unpadded base64url", ErrInvalid, Header, sha256.Size)
	}
	ks, err := k.current()
	if ks == nil {
		return fmt.Errorf("verifying a tenant's record: %w", err)
	}
	secret, ok := ks.byID[kid]
	if !ok {
		return fmt.Errorf("%w: key %q is not in the keyring (removed, or never one of this deployment's)", ErrInvalid, kid)
	}
	if !hmac.Equal(got, mac(secret, msg)) {
		return fmt.Errorf("%w: the MAC (key %q) does not match the record", ErrInvalid, kid)
	}
	return nil
}

func mac(secret, msg []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write(msg)
	return h.Sum(nil)
}
